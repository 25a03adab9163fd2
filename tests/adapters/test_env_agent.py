"""``arise_env_agent`` (recipe/arise/adapters/env_agent.py) through its real verl base
(``AgentLoopBase``: verl's Continuous Token builder for a Qwen3 template), with a scripted server
manager and a fake text environment: the token/mask layout of an episode, invalid actions, a hung
or crashing environment, the turn budget, the skill in the first user turn."""

import asyncio
import json
import shutil
import threading
import time
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from skill_layer_host import build_loop

import recipe.arise.adapters.env_agent as env_agent_module
import recipe.arise.adapters.skill_layer as skill_layer_module
from recipe.arise.adapters.env_agent import ARISEEnvAgentLoop, env_spec
from recipe.arise.core import env_prompts
from recipe.arise.core.skill import load_seed_skills
from recipe.arise.envs.base import ENVS, Step
from recipe.arise.envs.runner import EnvPool

TASK = env_prompts.task_prompt("Take the key.")
MESSAGES = [{"role": "user", "content": TASK}]
FIRST = "You are in a room. A key is here."
ADMISSIBLE = ["look", "take key"]
CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(load_seed_skills(), start=1)]


class FakeEnv:
    """A one-room game: ``take key`` wins; ``hang`` blocks every step, ``crash`` raises."""

    instances: list = []

    live = 0  # environments not yet closed
    peak = 0

    def __init__(self, hang=False, crash=False, slow_s=0.0):
        self.hang, self.crash, self.actions, self.closed, self.slow_s = hang, crash, [], False, slow_s
        FakeEnv.live += 1
        FakeEnv.peak = max(FakeEnv.peak, FakeEnv.live)
        self.release = threading.Event()
        FakeEnv.instances.append(self)

    def reset(self, game):
        assert game == {"seed": 7}
        return "Take the key.", Step(FIRST, admissible=ADMISSIBLE)

    def step(self, action):
        self.actions.append(action)
        time.sleep(self.slow_s)
        if self.hang:
            self.release.wait(30)
        if self.crash:
            raise RuntimeError("the engine died")
        if action == "take key":
            return Step("You take the key. You won!", done=True, won=True, admissible=[])
        if action == "look":
            return Step("A room with a key.", admissible=ADMISSIBLE)
        return Step("You can't do that.", admissible=ADMISSIBLE)

    def task_type(self, game):
        return "keys"

    def close(self):
        if not self.closed:
            FakeEnv.live -= 1
        self.closed = True


@pytest.fixture(autouse=True)
def fake_env(monkeypatch):
    FakeEnv.instances, FakeEnv.live, FakeEnv.peak = [], 0, 0
    monkeypatch.setitem(ENVS, "fake", lambda **options: FakeEnv(**options))
    pool = EnvPool()
    monkeypatch.setattr(env_agent_module, "POOL", pool)  # each test starts its own environments
    yield
    for env in FakeEnv.instances:
        env.release.set()
    pool.close_all()  # a real environment's JVM too


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from recipe.arise.cpu.tiny import build_tokenizer

    corpus = [TASK, FIRST, "Action: take key look", env_prompts.INVALID_REPLY, *(text for _, text in CACHE)]
    return build_tokenizer(tmp_path_factory.mktemp("tok"), corpus)


class Server:
    """verl's server manager: the generation requests get ``replies`` in turn (the last repeated); a
    scoring request (``prompt_logprobs``) gets -1 per token. Records the generation prompts."""

    def __init__(self, tokenizer, replies):
        eos = [tokenizer.eos_token_id]
        self.replies = [tokenizer.encode(r, add_special_tokens=False) + eos for r in replies]
        self.generation, self.params = [], []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        if sampling_params.get("prompt_logprobs") is not None:
            rows = [[-1.0] for _ in range(len(prompt_ids) - 1)] + [[0.0]]
            return SimpleNamespace(token_ids=[0], log_probs=None, extra_fields={"prompt_logprobs": rows})
        self.generation.append(list(prompt_ids))
        self.params.append(dict(sampling_params))
        reply = self.replies[min(len(self.generation) - 1, len(self.replies) - 1)]
        return SimpleNamespace(token_ids=list(reply), log_probs=None, num_preempted=0, extra_fields={})


def trainer_config(
    max_turns=4, response_length=512, step_timeout_s=5.0, enable=False, prompt_length=1024, episode_s=20.0, live=16
):
    multi_turn = {"max_assistant_turns": max_turns, "max_user_turns": None}
    rollout = {"n": 2, "val_kwargs": {"n": 1}, "prompt_length": prompt_length, "response_length": response_length}
    rollout["multi_turn"] = multi_turn
    selection = {"epsilon": 0.0, "use_gate": False, "control_share": 0.0, "max_skill_tokens": 1000}
    arise = {"enable": enable, "phase1_steps": 0, "selection": selection}
    arise["env"] = {"step_timeout_s": step_timeout_s, "episode_timeout_s": episode_s, "max_live": live}
    return OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "arise": arise})


def extra_info(name="fake", game=None, **options):
    env = {"name": name, "game": game or {"seed": 7}, "options": options}
    return {"env": json.dumps(env), "task_type": "keys", "question": "Take the key."}


def play(tokenizer, replies, config=None, info=None):
    server = Server(tokenizer, replies)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}

    async def go():
        loop = build_loop(ARISEEnvAgentLoop, tokenizer, server, config or trainer_config())
        kwargs = {"raw_prompt": MESSAGES, "uid": "q", "session_id": 1, "global_steps": 3}
        return loop, await loop.run(params, extra_info=info or extra_info(), **kwargs)

    loop, output = asyncio.run(go())
    return loop, output, server


def runs(mask):
    """[(mask value, run length)] of consecutive equal mask entries."""
    out = []
    for m in mask:
        if out and out[-1][0] == m:
            out[-1][1] += 1
        else:
            out.append([m, 1])
    return [tuple(r) for r in out]


def test_an_episode_won_in_two_turns_lays_out_prompt_actions_and_observations(tokenizer):
    replies = ["I look first.\nAction: look", "Action: take key"]
    loop, output, server = play(tokenizer, replies)
    episode = output.extra_fields["env"]
    assert episode["won"] is True and episode["turns"] == 2 and episode["stop"] == "done"
    assert episode["invalid_actions"] == 0 and episode["failed"] is None and episode["task_type"] == "keys"
    assert episode["transcript"].split("\n") == [
        f"OBSERVATION: {FIRST}",
        "ACTION: look",
        "OBSERVATION: A room with a key.",
        "ACTION: take key",
        "OBSERVATION: You take the key. You won!",
    ]
    assert FakeEnv.instances[0].actions == ["look", "take key"]
    # the prompt: the row's user turn with the first observation (and the admissible actions)
    first_user = env_prompts.first_turn(TASK, FIRST, ADMISSIBLE)
    expected_prompt = loop.continuous_token_builder.build_initial_tokens([{"role": "user", "content": first_user}])
    assert output.prompt_ids == expected_prompt == server.generation[0]
    # the response, token by token: reply 1 (mask 1), the observation turn (mask 0), reply 2 (mask 1)
    r1, r2 = server.replies
    ids, mask = output.response_ids, output.response_mask
    assert len(ids) == len(mask)
    layout = runs(mask)
    assert [m for m, _ in layout] == [1, 0, 1]
    assert layout[0][1] == len(r1) and layout[2][1] == len(r2)
    assert ids[: len(r1)] == r1 and ids[-len(r2) :] == r2
    observation = tokenizer.decode(ids[len(r1) : len(ids) - len(r2)], skip_special_tokens=False)
    assert env_prompts.observation_turn("A room with a key.", ADMISSIBLE) in observation
    assert observation.rstrip().endswith("assistant")  # the next generation prompt
    # the second request continued the running tokens exactly
    assert server.generation[1] == output.prompt_ids + ids[: len(ids) - len(r2)]
    assert output.num_turns == 5


def test_a_reply_without_an_action_is_counted_and_not_stepped_and_a_refused_action_counts(tokenizer):
    replies = ["I am not sure.", "Action: dance", "Action: take key"]
    _, output, server = play(tokenizer, replies)
    episode = output.extra_fields["env"]
    assert episode["invalid_actions"] == 2 and episode["won"] is True and episode["turns"] == 3
    assert FakeEnv.instances[0].actions == ["dance", "take key"]  # the reply without an action was not stepped
    second_prompt = tokenizer.decode(server.generation[1], skip_special_tokens=False)
    assert env_prompts.INVALID_REPLY in second_prompt
    assert "ACTION: (none)" in episode["transcript"]


def test_a_hung_environment_fails_the_episode_within_the_step_timeout(tokenizer):
    started = time.monotonic()
    _, output, server = play(tokenizer, ["Action: look"], trainer_config(step_timeout_s=0.5), extra_info(hang=True))
    assert time.monotonic() - started < 10
    episode = output.extra_fields["env"]
    assert episode["failed"].startswith("step timed out after 0.5 s in fake game")
    assert episode["won"] is False and episode["stop"] == "failed"
    assert episode["turns"] == 1 and runs(output.response_mask) == [(1, len(server.replies[0]))]
    assert FakeEnv.instances[0].closed  # the runner closed it (a JVM: killed, which ends the hung call)
    assert env_agent_module.POOL.idle() == 0  # not handed to the next episode


def test_a_crashing_environment_fails_the_episode_not_the_run(tokenizer):
    _, output, _ = play(tokenizer, ["Action: look"], info=extra_info(crash=True))
    episode = output.extra_fields["env"]
    assert episode["failed"].startswith("step failed in fake game") and episode["won"] is False
    assert episode["failed"].endswith("RuntimeError: the engine died")


def test_the_turn_budget_ends_the_episode(tokenizer):
    _, output, server = play(tokenizer, ["Action: look"], trainer_config(max_turns=2))
    episode = output.extra_fields["env"]
    assert episode["turns"] == 2 and episode["stop"] == "turns" and episode["won"] is False
    assert len(server.generation) == 2 and FakeEnv.instances[0].actions == ["look", "look"]
    assert [m for m, _ in runs(output.response_mask)] == [1, 0, 1]  # no observation after the last action


def test_the_response_length_holds_every_turn(tokenizer):
    _, output, server = play(tokenizer, ["Action: look"], trainer_config(max_turns=50, response_length=120))
    assert len(output.response_mask) <= 120 and output.extra_fields["env"]["stop"] == "length"
    # each request asks for at most the room left
    assert all(p["max_tokens"] <= 120 for p in server.params) and server.params[-1]["max_tokens"] < 120


def test_the_skill_goes_into_the_first_user_turn_and_is_recorded(tokenizer, monkeypatch):
    async def snapshot():
        return {"version": 1, "cache": CACHE, "mode": "train"}

    replica = SimpleNamespace(snapshot=SimpleNamespace(remote=snapshot))
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: replica)
    _, output, server = play(tokenizer, ["Action: take key"], trainer_config(enable=True))
    assert output.extra_fields["arise_skill_id"] in {skill_id for skill_id, _ in CACHE}
    prompt = tokenizer.decode(server.generation[0], skip_special_tokens=False)
    assert prompt.index("SKILL:") < prompt.index("Task: Take the key.") < prompt.index(FIRST)
    assert output.extra_fields["env"]["won"] is True


@pytest.mark.parametrize(
    "info, message",
    [
        ({}, "needs the row's extra_info.env"),
        ({"env": "{not json"}, "not valid JSON"),
        ({"env": json.dumps({"name": "nope", "game": {}})}, "no registered environment"),
        ({"env": json.dumps({"name": "fake", "game": [1]})}, "must be objects"),
    ],
)
def test_a_bad_row_is_an_error_naming_it(info, message):
    with pytest.raises(ValueError, match=message):
        env_spec(info)


def test_the_environment_is_reused_by_the_next_episode_of_the_process(tokenizer):
    play(tokenizer, ["Action: take key"])
    deadline = time.monotonic() + 5
    while env_agent_module.POOL.idle() == 0 and time.monotonic() < deadline:  # released in a thread
        time.sleep(0.01)
    play(tokenizer, ["Action: take key"])
    assert len(FakeEnv.instances) == 1 and FakeEnv.instances[0].actions == ["take key", "take key"]


def test_a_missing_environment_package_raises(tokenizer, monkeypatch):
    def missing(**options):
        raise ImportError("No module named 'textworld_express'", name="textworld_express")

    monkeypatch.setitem(ENVS, "fake", missing)
    with pytest.raises(ImportError, match="textworld_express"):
        play(tokenizer, ["Action: look"])


def test_an_error_of_the_loops_own_code_raises_and_the_environment_is_not_reused(tokenizer, monkeypatch):
    def broken(text):
        raise TypeError("a bug in the loop")

    monkeypatch.setattr(env_agent_module.env_prompts, "parse_action", broken)
    with pytest.raises(TypeError, match="a bug in the loop"):
        play(tokenizer, ["Action: look"])
    deadline = time.monotonic() + 5
    while not FakeEnv.instances[0].closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert FakeEnv.instances[0].closed and env_agent_module.POOL.idle() == 0


def test_a_first_prompt_over_the_prompt_length_is_refused_naming_it(tokenizer):
    """verl would cut it from the left (the chat header, the task): an error names the setting."""
    with pytest.raises(ValueError, match=r"over actor_rollout_ref.rollout.prompt_length=20"):
        play(tokenizer, ["Action: look"], trainer_config(prompt_length=20))


def test_a_real_textworld_express_game_is_won_by_its_gold_path(tokenizer):
    """envcore's TWX adapter (a real JVM) behind the pool, played by the loop."""
    pytest.importorskip("textworld_express")
    if shutil.which("java") is None:
        pytest.skip("no Java")
    coin = {"game": "coin", "seed": 3, "fold": "train", "params": "numLocations=3,numDistractorItems=0,includeDoors=0"}
    info = {**extra_info("twx", coin, step_limit=6), "task_type": ""}  # the environment names the type
    replies = ["Action: look around", "Action: move east", "Action: take coin"]
    config = trainer_config(prompt_length=8192, response_length=8192, step_timeout_s=60.0, episode_s=300.0)
    _, output, _ = play(tokenizer, replies, config, info)
    episode = output.extra_fields["env"]
    assert episode["won"] is True and episode["turns"] == 3 and episode["failed"] is None
    assert episode["task_type"] == "coin" and episode["invalid_actions"] == 0
    assert [m for m, _ in runs(output.response_mask)] == [1, 0, 1, 0, 1]


def test_the_episode_carries_the_weights_versions_verls_trainer_logs(tokenizer):
    """verl's v1 trainer reads min/max_global_steps of every trajectory (its staleness metrics): the
    first and the last generation's, else (no version reported) the step's own."""
    replies = ["Action: look", "Action: take key"]
    server = Server(tokenizer, replies)
    versions = iter([{"min_global_steps": 2, "max_global_steps": 2}, {"min_global_steps": 3, "max_global_steps": 3}])
    generate = server.generate

    async def versioned(*args, **kwargs):
        out = await generate(*args, **kwargs)
        if kwargs["sampling_params"].get("prompt_logprobs") is None:
            out.extra_fields = next(versions)
        return out

    server.generate = versioned
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}

    async def go():
        loop = build_loop(ARISEEnvAgentLoop, tokenizer, server, trainer_config())
        kwargs = {"raw_prompt": MESSAGES, "uid": "q", "session_id": 1, "global_steps": 3}
        return await loop.run(params, extra_info=extra_info(), **kwargs)

    fields = asyncio.run(go()).extra_fields
    assert (fields["min_global_steps"], fields["max_global_steps"]) == (2, 3)
    _, output, _ = play(tokenizer, replies)  # the scripted server reports none: the step's own (3)
    assert (output.extra_fields["min_global_steps"], output.extra_fields["max_global_steps"]) == (3, 3)


@pytest.mark.parametrize("live", [1, 2])
def test_episodes_beyond_max_live_wait_for_a_slot_and_reuse_its_environment(tokenizer, live):
    """Four episodes of one worker at once, at most ``arise.env.max_live`` environments (a JVM each)
    alive; the others wait before their time limits start, and take the freed environment."""
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}
    config = trainer_config(step_timeout_s=5.0, live=live)

    async def go():
        async def one(i):
            loop = build_loop(ARISEEnvAgentLoop, tokenizer, Server(tokenizer, ["Action: take key"]), config)
            kwargs = {"raw_prompt": MESSAGES, "uid": f"q{i}", "session_id": i, "global_steps": 3}
            return await loop.run(params, extra_info=extra_info(slow_s=0.3), **kwargs)

        return await asyncio.gather(*(one(i) for i in range(4)))

    episodes = [output.extra_fields["env"] for output in asyncio.run(go())]
    assert all(e["won"] for e in episodes)
    assert FakeEnv.peak == live and len(FakeEnv.instances) == live
    waits = sorted(e["wait_s"] for e in episodes)
    assert waits[:live] == pytest.approx([0.0] * live, abs=0.05) and min(waits[live:]) >= 0.25, waits
    assert all(e["seconds"] < 2.0 for e in episodes)  # the wait is not the episode's own time


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_max_live_must_be_a_whole_number_of_at_least_one(bad):
    from recipe.arise.core.env_config import EnvConfig

    with pytest.raises(ValueError, match="arise.env.max_live must be a whole number >= 1"):
        EnvConfig(max_live=bad)
