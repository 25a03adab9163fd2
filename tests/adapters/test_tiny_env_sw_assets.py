"""The tiny ScienceWorld assets (recipe/arise/cpu/tiny_env_sw.py) and the smoke script's
``ENV=scienceworld`` branch, without the warm start (one ScienceWorld JVM: the e2e tier): the expert wins
every lifespan game in 2 actions and the noisy one not always, episodes are rendered as the agent
loop renders them, every taught skill fits the schema, and the assets are a cache entry of their own."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from smoke_run import print_overrides, printed_overrides  # tests/helpers (tests/conftest.py)

from recipe.arise.cpu import tiny, tiny_env
from recipe.arise.cpu import tiny_env_sw as sw

REPO = Path(__file__).resolve().parents[2]
GAMES = [{"task": sw.GAME, "variation": v, "simplification": "easy"} for v in (0, 2, 5)]


@pytest.fixture(scope="module")
def player():
    pytest.importorskip("scienceworld")
    p = sw.Player()
    yield p
    p.close()


@pytest.mark.e2e  # a ScienceWorld JVM (as tests/envs/test_scienceworld.py): ~1.5 min in all here
def test_the_expert_wins_in_two_actions_and_the_noisy_one_not_always(player):
    from recipe.arise.core.env_prompts import parse_action

    rng = random.Random(0)
    for g in GAMES:
        ep = player.play(g, "Task", 1.0, rng)
        replies = [parse_action(m["content"]) for m in ep.messages if m["role"] == "assistant"]
        assert ep.won and replies == [sw.GO_OUTSIDE, f"focus on {player.target(g)}"], replies
    noisy = [player.play(g, "Task", sw.P_UNAIDED, rng) for g in GAMES for _ in range(6)]
    won = sum(ep.won for ep in noisy) / len(noisy)
    assert 0.15 < won < 0.9, won  # reward variance within a group, not a rule
    for ep in noisy:
        assert [m["role"] for m in ep.messages] == ["user", "assistant"] * (len(ep.messages) // 2)
        assert len(ep.messages) // 2 <= sw.TURNS


@pytest.mark.e2e  # a ScienceWorld JVM (as tests/envs/test_scienceworld.py): ~1.5 min in all here
def test_an_episode_is_rendered_as_the_agent_loop_renders_it(player):
    from recipe.arise.core.env_prompts import first_turn, observation_turn

    ep = player.play(GAMES[1], "Task: longest", 1.0, random.Random(1))
    _, first = player.env.reset(GAMES[1])
    assert ep.messages[0]["content"] == first_turn("Task: longest", first.observation, first.admissible)
    second = player.env.step(sw.GO_OUTSIDE)
    assert second.observation == "You teleport to the outside."
    assert ep.messages[2]["content"] == observation_turn(second.observation, second.admissible)
    assert f"focus on {player.target(GAMES[1])}" in ep.messages[2]["content"]  # the animals are listed
    assert ep.transcript.split("\n")[0].startswith("OBSERVATION: This room is called")


@pytest.mark.e2e  # a ScienceWorld JVM (as tests/envs/test_scienceworld.py): ~1.5 min in all here
def test_every_taught_skill_fits_the_schema(player):
    from recipe.arise.core.skill import SkillDoc

    for doc in sw.SKILLS + [sw.distilled_skill(player.target(g)) for g in GAMES]:
        SkillDoc.from_dict(doc)  # raises over the 220-char cap or on a bad field
    assert sw.animal("egg giant tortoise") == "giant tortoise" and sw.animal("baby baby wolf") == "wolf"


def test_a_cache_entry_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(tiny_env, "build_env_assets", lambda out, **kw: {"model": str(out / "model"), **kw})
    target = sw.cached_assets(tmp_path)
    world = sw.world()
    assert target.name == f"tiny-{tiny.ASSETS_FAMILY}-env-scienceworld-{tiny_env.assets_key(world)}"
    assert tiny_env.assets_key(world) != tiny_env.assets_key()  # not the twx assets
    from recipe.arise.tools.preflight_tiny import cache_folder

    monkeypatch.setenv("ARISE_CACHE", str(tmp_path))
    assert cache_folder("recipe.arise.cpu.tiny_env_sw") == target  # the preflight checks the same folder


def test_the_smoke_scripts_scienceworld_branch():
    args = printed_overrides(ENV="scienceworld")
    assert args["actor_rollout_ref.rollout.agent.default_agent_loop"] == "arise_env_agent"
    assert args["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] == str(sw.TURNS)
    assert int(args["actor_rollout_ref.rollout.max_model_len"]) <= sw.world().max_positions
    assert args["trainer.default_local_dir"] == str(REPO / "outputs" / "cpu_smoke_env_scienceworld" / "checkpoints")
    # no TINY_DIR: the assets' module is named for the preflight
    proc = print_overrides(ENV="scienceworld", TINY_DIR="")
    assert "/arise-tiny-assets-built-at-launch/recipe.arise.cpu.tiny_env_sw/model" in proc.stdout
