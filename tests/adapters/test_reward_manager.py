"""The reward manager: R by phase and ablation, and what it posts to the skill pool."""

import asyncio
from types import SimpleNamespace

import pytest
import torch

import recipe.arise.adapters.reward_manager as reward_manager_module
import recipe.arise.adapters.rollout_failures as failures_module
from recipe.arise.adapters.reward_manager import ARISERewardManager
from recipe.arise.core.arise_config import ARISEConfig


class FakeTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "so the answer is \\boxed{3}"


class FakePool:
    def __init__(self):
        self.posted = []

        async def record(obs, trace=None):
            self.posted.append(obs)

        self.record = SimpleNamespace(remote=record)
        self.failures = []

        async def record_failure(failure):
            self.failures.append(failure)

        self.record_failure = SimpleNamespace(remote=record_failure)


QUERY = [{"role": "user", "content": "What is 1 plus 2?"}]


def run(monkeypatch, cfg, fields, truth="3", pool=None, extra_info=None):
    from verl import DataProto

    pool = pool or FakePool()
    monkeypatch.setattr(reward_manager_module, "get_replica", lambda: pool)
    monkeypatch.setattr(failures_module, "get_replica", lambda: pool)
    data = DataProto.from_dict(
        tensors={"responses": torch.tensor([[5, 6, 7]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 1]])},
        non_tensors={
            "reward_model": [{"ground_truth": truth}],
            "tool_extra_fields": [fields],
            "raw_prompt": [QUERY],
            "extra_info": [extra_info or {}],
        },
    )
    manager = object.__new__(ARISERewardManager)  # no verl set-up: what run_single reads
    manager.arise, manager.tokenizer = cfg, FakeTokenizer()

    async def go():
        manager.loop = asyncio.get_running_loop()
        return await ARISERewardManager.run_single(manager, data)

    return asyncio.run(go()), pool.posted


AIDED = {"arise_skill_id": "s1", "arise_phase": 2, "arise_selected": True, "arise_scores": [-1.0, -2.0]}
CONTROL = {"arise_phase": 2, "arise_control": True}


@pytest.mark.parametrize(
    "binary, fields, score", [(False, AIDED, 2.0), (False, CONTROL, 1.0), (True, AIDED, 1.0), (True, CONTROL, 1.0)]
)
def test_binary_reward_changes_only_the_reward_not_the_managers_phase(monkeypatch, binary, fields, score):
    """Ablation (a): R is binary, but the trajectory is still a Phase II one (selection, control
    arm), so the step's Phase II metrics (control rate, uplift) still count it."""
    cfg = ARISEConfig()
    cfg.reward.binary = binary
    out, posted = run(monkeypatch, cfg, fields)
    assert out["reward_score"] == score
    assert posted[0].trajectory.phase == 2 and posted[0].trajectory.control == bool(fields.get("arise_control"))
    info = out["reward_extra_info"]
    assert info["skill_used"] == float("arise_skill_id" in fields)
    assert info["skill_scored"] == float("arise_scores" in fields)


def test_phase_one_is_binary(monkeypatch):
    out, posted = run(monkeypatch, ARISEConfig(), {**AIDED, "arise_phase": 1})
    assert out["reward_score"] == 1.0 and posted[0].trajectory.phase == 1


def test_the_observation_is_one_record_of_the_trajectory(monkeypatch):
    """What the trainer's step reads of a trajectory: the reward manager's own facts beside the
    agent loop's record, whole (each field defined once: core.trajectory.TrajectoryInfo)."""
    from recipe.arise.core.observation import Observation
    from recipe.arise.core.trajectory import TrajectoryInfo

    fields = {**AIDED, "arise_scorer": True, "arise_scoring_tokens": 40, "arise_skill_tokens": 12}
    _, posted = run(monkeypatch, ARISEConfig(), fields)
    (obs,) = posted
    assert isinstance(obs, Observation) and obs.trajectory == TrajectoryInfo.from_extra_fields(fields)
    assert (obs.reward, obs.correct, obs.response_tokens, obs.scored) == (2.0, True, 3, True)
    _, posted = run(monkeypatch, ARISEConfig(), CONTROL, truth="4")
    assert (posted[0].reward, posted[0].correct, posted[0].scored) == (0.0, False, False)
    # the query and the tools its prompt rendered: the gate rescores it in that context
    assert obs.messages == QUERY and obs.tool_selection is None
    _, posted = run(monkeypatch, ARISEConfig(), AIDED, extra_info={"tool_selection": ("python",)})
    assert posted[0].tool_selection == ["python"]


# ------------------------------------------------------------------ streaming O_{G+1}


class CharTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, **kwargs):
        return [ord(c) for c in "".join(f"U:{m['content']}" for m in messages) + "|A:"]


class StreamPool:
    """The pool's stream side: claims the group on its second trajectory, collects deliveries."""

    def __init__(self, client):
        from recipe.arise.core.stream import SummaryStream

        self.stream, self.delivered, self.traces = SummaryStream(), [], []
        self.stream.begin("k", budget=-1, group_size=2)

        async def record(obs, trace=None):
            self.traces.append(trace)
            return self.stream.add(obs.uid, obs.reward, trace["text"], trace["question"], trace["messages"])

        async def deliver(result):
            self.delivered.append(result)
            return self.stream.deliver(result)

        async def llm_client():
            return client

        self.record = SimpleNamespace(remote=record)
        self.stream_deliver = SimpleNamespace(remote=deliver)
        self.llm_client = SimpleNamespace(remote=llm_client)


class SummaryServer:
    def __init__(self, fail=False):
        self.prompts, self.fail = [], fail

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.prompts.append(prompt_ids)
        if self.fail:
            raise RuntimeError("server down")
        return SimpleNamespace(token_ids=[ord(c) for c in '{"skill_name": "x"}'])


def run_group(monkeypatch, server, skill_in_response=False):
    """Two trajectories of one group (one right, one wrong) through run_single with streaming on."""
    from verl import DataProto

    cfg = ARISEConfig.from_dict({"summary": {"stream": True, "choose": "first"}})
    pool = StreamPool(server)
    monkeypatch.setattr(reward_manager_module, "get_replica", lambda: pool)
    manager = object.__new__(ARISERewardManager)
    manager.arise, manager.tokenizer = cfg, CharTokenizer()
    manager.config = SimpleNamespace(data={"apply_chat_template_kwargs": {}})
    manager._summaries, manager._llm_client = set(), None
    lead = "SKILL:{}" if skill_in_response else ""
    fields = {"arise_phase": 1, "arise_skill_in_response": skill_in_response, "arise_skill_tokens": len(lead)}

    def item(text):
        ids = torch.tensor([[ord(c) for c in lead + text]])
        return DataProto.from_dict(
            tensors={"responses": ids, "attention_mask": torch.ones(1, 2 + ids.shape[1], dtype=torch.long)},
            non_tensors={
                "reward_model": [{"ground_truth": "3"}],
                "tool_extra_fields": [fields],
                "uid": ["g"],
                "raw_prompt": [[{"role": "user", "content": "What is 1 plus 2?"}]],
                "extra_info": [{"question": "What is 1 plus 2?"}],
            },
        )

    async def go():
        manager.loop = asyncio.get_running_loop()
        outs = [await ARISERewardManager.run_single(manager, item(t)) for t in ("so \\boxed{3}", "so \\boxed{4}")]
        await asyncio.gather(*list(manager._summaries))
        return outs

    return asyncio.run(go()), pool


def test_the_trajectory_completing_a_claimed_group_starts_its_summary(monkeypatch):
    server = SummaryServer()
    outs, pool = run_group(monkeypatch, server, skill_in_response=True)
    assert [o["reward_score"] for o in outs] == [1.0, 0.0]  # the rewards are returned as without streaming
    # the trace is the response after the Manager's skill line; the summary prompt holds the right one
    assert pool.traces[0]["text"] == "so \\boxed{3}" and pool.traces[0]["question"] == "What is 1 plus 2?"
    (prompt,) = server.prompts
    assert "so \\boxed{3}" in "".join(chr(i) for i in prompt) and "boxed{4}" not in "".join(chr(i) for i in prompt)
    (result,) = pool.delivered
    assert result["group"]["uid"] == "g" and result["error"] is None and result["prompt_tokens"] == len(prompt)
    assert "".join(chr(i) for i in result["token_ids"]) == '{"skill_name": "x"}'
    assert pool.stream.collect() == (1, [result])


def test_a_failed_streamed_summary_is_delivered_as_a_failure(monkeypatch):
    outs, pool = run_group(monkeypatch, SummaryServer(fail=True))
    (result,) = pool.delivered
    assert result["token_ids"] is None and "server down" in result["error"]


PHASE1 = {"arise_phase": 1}


@pytest.mark.parametrize(
    "selection, fields, carries",
    [
        ({}, CONTROL, True),
        ({}, PHASE1, True),
        ({"calibration": "window"}, CONTROL, False),
        # window: the last Phase I step scores the recent queries against Phase II's first cache, so
        # step N_w + 1 starts calibrated (without them it ran on initial_temperature)
        ({"calibration": "window"}, PHASE1, True),
        ({"temperature": 1.0}, PHASE1, False),
        ({"random": True}, CONTROL, False),
    ],
    ids=["rescore", "rescore-phase1", "window", "window-phase1", "fixed-sigma", "random"],
)
def test_observation_carries_its_query_when_the_gate_is_rescored(monkeypatch, selection, fields, carries):
    """calibration=rescore calibrates sigma on the queries of every generated group: each observation
    carries its query, so the groups dynamic sampling drops are not missing from the calibration."""
    _, posted = run(monkeypatch, ARISEConfig.from_dict({"selection": selection}), fields)
    assert (posted[0].messages is not None) == carries
    if carries:
        assert posted[0].messages == QUERY


# ------------------------------------------------------------------ grader failures (issue 34)


def test_a_grader_failure_is_graded_wrong_posted_and_counted_in_the_step_metrics(monkeypatch):
    from recipe.arise.adapters.trainer_metrics import StepState, step_metrics
    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.library_entry import StepEvents

    monkeypatch.setattr(reward_manager_module, "grade_checked", lambda *a, **k: (False, "timeout"))
    out, posted = run(monkeypatch, ARISEConfig(), CONTROL)
    assert out["reward_score"] == 0.0 and posted[0].grader_error == "timeout" and posted[0].correct is False
    monkeypatch.setattr(reward_manager_module, "grade_checked", lambda *a, **k: (True, None))
    _, decided = run(monkeypatch, ARISEConfig(), CONTROL)
    assert decided[0].grader_error is None
    m = step_metrics(SkillLibrary(), 2, [posted[0], decided[0]], StepEvents(step=1), StepState(), 0.0, True)
    assert m["arise/grader_errors"] == 1.0


def test_a_programming_error_in_the_reward_is_recorded_for_the_trainer(monkeypatch):
    """An exception in the reward fails the session's query group under verl's V1 worker: it is
    recorded in the replica, traceback and all, for the trainer to stop on (rollout_failures)."""
    pool = FakePool()

    def broken(*args, **kwargs):
        raise KeyError("ground_truth")

    monkeypatch.setattr(reward_manager_module, "grade_checked", broken)
    with pytest.raises(KeyError):
        run(monkeypatch, ARISEConfig(), AIDED, pool=pool)
    (failure,) = pool.failures
    assert failure["programming"] and failure["error"].startswith("KeyError") and "in broken" in failure["traceback"]


# ------------------------------------------------------------------ environment episodes (arise_env_agent)

EPISODE = {
    "won": True,
    "turns": 3,
    "invalid_actions": 1,
    "seconds": 0.5,
    "task_type": "keys",
    "failed": None,
    "stop": "done",
    "transcript": "OBSERVATION: A room.\nACTION: take key\nOBSERVATION: You won!",
}


@pytest.mark.parametrize(
    "episode, fields, score",
    [
        (EPISODE, AIDED, 2.0),
        (EPISODE, CONTROL, 1.0),
        ({**EPISODE, "won": False}, AIDED, 0.0),
        ({**EPISODE, "won": False, "failed": "timeout: step took over 60.0 s", "stop": "failed"}, CONTROL, 0.0),
    ],
)
def test_an_episode_is_scored_by_the_environment_not_the_grader(monkeypatch, episode, fields, score):
    """R = hierarchical_reward(won, skill used, phase); the response ("\\boxed{3}", which the grader
    would accept against "3") is not graded."""
    monkeypatch.setattr(reward_manager_module, "grade_checked", lambda *a, **k: pytest.fail("graded"))
    out, posted = run(monkeypatch, ARISEConfig(), {**fields, "env": episode}, truth="")
    assert out["reward_score"] == score
    info = out["reward_extra_info"]
    assert info["acc"] == float(episode["won"]) and info["env_turns"] == 3.0 and info["env_invalid"] == 1.0
    assert info["env_failed"] == float(episode["failed"] is not None)
    assert posted[0].correct is episode["won"] and posted[0].reward == score and posted[0].grader_error is None


def test_a_math_trajectory_has_no_env_columns(monkeypatch):
    out, _ = run(monkeypatch, ARISEConfig(), AIDED)
    assert not [k for k in out["reward_extra_info"] if k.startswith("env_")]


@pytest.mark.parametrize("episode", ["won", {**EPISODE, "won": 1}, {k: v for k, v in EPISODE.items() if k != "turns"}])
def test_an_episode_record_that_is_not_the_loops_is_an_error_naming_it(episode):
    from recipe.arise.adapters.reward_manager import env_episode

    with pytest.raises(ValueError, match=r"extra_fields\['env'\]"):
        env_episode({"env": episode})


def test_a_streamed_episode_trace_is_its_transcript_marked_env(monkeypatch):
    manager = object.__new__(ARISERewardManager)
    manager.arise = ARISEConfig.from_dict({"summary": {"tool_result_chars": 5}})
    item = SimpleNamespace(non_tensor_batch={"raw_prompt": QUERY, "extra_info": {"question": "Take the key."}})
    from recipe.arise.core.trajectory import TrajectoryInfo

    trace = manager._trace(item, [], None, TrajectoryInfo(), EPISODE)
    assert trace["env"] is True and trace["question"] == "Take the key."
    # each observation clipped to tool_result_chars (core.transcript.env_transcript)
    assert trace["text"] == "OBSERVATION: A roo\nACTION: take key\nOBSERVATION: You w"


def test_every_generated_episode_counts_in_the_step_metrics_not_only_the_trained_batch(monkeypatch):
    """Dynamic sampling drops the groups all won or all lost from the batch the actor trains on:
    success counted there would sit near 0.5. The step counts the posted observations, every episode."""
    from recipe.arise.adapters.trainer_metrics import StepState, step_metrics
    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.library_entry import StepEvents

    posted = []
    for won in (True, True, True, False):  # e.g. one all-won group of 3 and a lost episode of another
        posted += run(monkeypatch, ARISEConfig(), {**CONTROL, "env": {**EPISODE, "won": won}}, truth="")[1]
    assert posted[0].env == {k: v for k, v in EPISODE.items() if k != "transcript"}
    m = step_metrics(SkillLibrary(), 2, posted, StepEvents(step=1), StepState(), 0.0, True)
    assert m["arise/env_success"] == 0.75 and m["arise/env_success/keys"] == 0.75 and m["arise/env_turns"] == 3.0
    math = run(monkeypatch, ARISEConfig(), CONTROL)[1]
    assert "arise/env_success" not in step_metrics(SkillLibrary(), 2, math, StepEvents(step=1), StepState(), 0.0, True)
