"""The tiny env assets (recipe/arise/cpu/tiny_env.py, tiny_env_game.py) and the smoke script's
``ENV=twx`` branch, without the warm start (seconds, one TWX JVM): what the warm start teaches is
the episode exactly as ``arise_env_agent`` renders it, the loss covers the replies only, the expert
wins and the noisy expert does not always, the summary prompt is the trainer's, and the assets are a
cache entry of their own."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from smoke_run import print_overrides, printed_overrides  # tests/helpers (tests/conftest.py)

from recipe.arise.cpu import tiny
from recipe.arise.cpu import tiny_env as te
from recipe.arise.cpu import tiny_env_game as game

REPO = Path(__file__).resolve().parents[2]
GAMES = [{"game": "coin", "seed": s, "fold": "train", "params": game.PARAMS} for s in range(12)]


@pytest.fixture(scope="module")
def player():
    p = game.Player()
    yield p
    p.close()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, player):
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("tiny_env")
    rng = random.Random(0)
    corpus = [m["content"] for g in GAMES[:4] for m in player.play(g, "Task", 0.5, rng).messages]
    tiny.build_model(tiny.build_tokenizer(out, corpus), seed=0).config.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


def test_the_expert_takes_the_coin_in_view_else_follows_gold_else_goes_back():
    assert game.expert_action(["move east", "take coin"], ["move east"], []) == "take coin"
    assert game.expert_action(["move east", "look around"], ["move east"], []) == "move east"
    assert game.expert_action(["move west", "move north"], ["move east"], ["move north"]) == "move south"
    with pytest.raises(RuntimeError, match="no expert action"):
        game.expert_action(["look around"], [], [])


def test_the_expert_wins_every_game_and_the_noisy_one_not_always(player):
    from recipe.arise.core.env_prompts import parse_action

    rng = random.Random(0)
    assert all(player.play(g, "Task", 1.0, rng).won for g in GAMES)
    noisy = [player.play(g, "Task", te.P_EXPERT_UNAIDED, rng) for g in GAMES for _ in range(4)]
    won = sum(ep.won for ep in noisy) / len(noisy)
    assert 0.3 < won < 0.95, won  # reward variance within a group, not a rule
    for ep in noisy:
        replies = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        assert 1 <= len(replies) <= game.TURNS and all(parse_action(r) for r in replies)
        assert [m["role"] for m in ep.messages] == ["user", "assistant"] * len(replies)


def test_an_episode_is_rendered_as_the_agent_loop_renders_it(player):
    from recipe.arise.core.env_prompts import first_turn, observation_turn

    rng = random.Random(1)
    ep = player.play(GAMES[1], "Task: find it", 1.0, rng)
    _, first = player.env.reset(GAMES[1])
    assert ep.messages[0]["content"] == first_turn("Task: find it", first.observation, first.admissible)
    second = player.env.step(ep.messages[1]["content"].removeprefix("Action: "))
    if len(ep.messages) > 2:
        assert ep.messages[2]["content"] == observation_turn(second.observation, second.admissible)
    # the transcript is the loop's (Episode.as_dict): one OBSERVATION / ACTION line per part
    lines = ep.transcript.split("\n")
    assert lines[0].startswith("OBSERVATION: You are in the") and lines[1].startswith("ACTION: ")
    assert len(lines) == len(ep.messages) + 1  # every reply's action and the observation after it


def test_the_loss_covers_each_reply_and_its_end_token_only(tokenizer, player):
    ep = player.play(GAMES[1], "Task", 0.0, random.Random(2))
    ids, labels = te.episode_example(tokenizer, ep.messages)
    assert ids == te._render(tokenizer, ep.messages)[: len(ids)]  # the chat template, turn by turn
    taught, run = [], []
    for token, label in zip(ids, labels, strict=True):
        if label:
            run.append(token)
        elif run:
            taught.append(run)
            run = []
    taught += [run] if run else []
    replies = [m["content"] for m in ep.messages if m["role"] == "assistant"]
    assert [tokenizer.decode(r) for r in taught] == [f"{r}<|im_end|>" for r in replies]


def test_the_scoring_context_ends_in_the_skill_without_an_end_token(tokenizer):
    from recipe.arise.core.scoring import SCORING_SUFFIX

    ids, labels = te.chat_example(tokenizer, "Task", '{"a":1}', scoring=True)
    assert tokenizer.decode([t for t, m in zip(ids, labels, strict=True) if m]) == '{"a":1}'
    assert tokenizer.decode(ids).endswith(f"<|im_start|>assistant\n{SCORING_SUFFIX}" + '{"a":1}')


def test_the_summary_is_taught_on_the_trainers_prompt(tokenizer, player):
    from recipe.arise.core.arise_config import SummaryConfig
    from recipe.arise.core.env_config import EnvConfig
    from recipe.arise.core.summary import summary_prompt_ids
    from recipe.arise.core.transcript import env_transcript

    cfg = SummaryConfig()
    won = [player.play(g, "T", 1.0, random.Random(3)) for g in GAMES[:3]]
    traces = [
        {"text": env_transcript(ep.transcript, cfg.trace_clip_chars, cfg.tool_result_chars, cfg.transcript_chars).text,
         "env": True, "tool_turns": 1} for ep in won
    ]  # fmt: skip
    task = player.task(GAMES[0])
    group = {"question": task, "traces": traces}
    trainers = summary_prompt_ids(tokenizer, group, cfg, None, EnvConfig().summary_domain)
    prompt = te.summary_prompt(task, [e.transcript for e in won])
    ours = te._render(tokenizer, [{"role": "user", "content": prompt}], True)
    assert ours == trainers
    assert "skill distiller for text-based tasks" in tokenizer.decode(ours)


def test_every_taught_skill_fits_the_schema():
    from recipe.arise.core.skill import SkillDoc

    docs = te._COIN_SKILLS + [te.distilled_skill(r, d) for r in ("pantry", "living room") for d in ("north", None)]
    for doc in docs:
        SkillDoc.from_dict(doc)  # raises over the 220-char cap or on a bad field


def test_a_cache_entry_of_its_own(tmp_path, monkeypatch):
    built = []

    def fake(out, **kw):
        built.append(out)
        return {"model": str(out / "model")}

    monkeypatch.setattr(te, "build_env_assets", fake)
    target = te.cached_assets(tmp_path)
    assert target.name == f"tiny-qwen3-env-twx-{te.assets_key()}" and te.assets_key() != tiny.assets_key()
    assert te.cached_assets(tmp_path) == target and len(built) == 1
    from recipe.arise.tools.preflight_tiny import cache_folder

    monkeypatch.setenv("ARISE_CACHE", str(tmp_path))
    assert cache_folder("recipe.arise.cpu.tiny_env") == target  # the preflight checks the same folder


@pytest.mark.parametrize("arise,folder", [("true", "cpu_smoke_env_twx"), ("false", "cpu_smoke_env_twx_grpo")])
def test_the_smoke_scripts_env_branch(arise, folder):
    args = printed_overrides(ENV="twx", ARISE=arise)
    assert args["actor_rollout_ref.rollout.agent.default_agent_loop"] == "arise_env_agent"
    assert args["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] == str(game.TURNS)
    assert "actor_rollout_ref.rollout.multi_turn.enable" not in args  # no tools: verl's tool loop is not used
    assert args["data.train_files"].endswith("/tmp/t/data/train.parquet")
    assert int(args["actor_rollout_ref.rollout.max_model_len"]) <= te.MAX_POSITIONS
    assert args["trainer.default_local_dir"] == str(REPO / "outputs" / folder / "checkpoints")


@pytest.mark.parametrize(
    "script,env,message",
    [
        ("cpu_smoke_arise.sh", {"ENV": "alfworld"}, "ENV must be twx, scienceworld or unset"),
        ("cpu_smoke_arise.sh", {"ENV": "twx", "TOOL": "python"}, "ENV=twx and TOOL=python together"),
        ("arise.sh", {"ENV": "webshop", "MODEL_PATH": "m"}, "unknown ENV=webshop (twx, scienceworld, alfworld"),
        ("arise.sh", {"ENV": "twx", "TOOL": "python", "MODEL_PATH": "m"}, "ENV=twx and TOOL=python together"),
    ],
)
def test_bad_env_choices_are_refused(script, env, message):
    proc = print_overrides(script, **env)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_the_env_rows_are_the_data_preps(tmp_path, monkeypatch):
    """The assets' data is recipe.arise.data_prep.env's (coin, the tiny world's params): val from the
    test seeds, disjoint from train."""
    import pandas as pd

    monkeypatch.setattr(game, "TRAIN_GAMES", 3)
    monkeypatch.setattr(game, "VAL_GAMES", 2)
    train, val = game.write_data(tmp_path)
    assert {g["fold"] for g in train} == {"train"} and {g["fold"] for g in val} == {"test"}
    assert all(g["params"] == game.PARAMS and g["game"] == "coin" for g in train + val)
    row = pd.read_parquet(tmp_path / "train.parquet").iloc[0]
    assert row["agent_name"] == "arise_env_agent" and row["data_source"] == "env/twx/coin"
    assert json.loads(row["extra_info"]["env"])["options"] == {"step_limit": game.STEP_LIMIT}
    assert not (tmp_path / "test.parquet").exists() and (tmp_path / "val.parquet").is_file()
