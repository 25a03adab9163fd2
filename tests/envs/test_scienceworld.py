"""ScienceWorld through the TextEnv interface: one real JVM shared by the module, its gold path won,
the engine's invalid answer. Marked e2e (out of the fast tier): the module takes ~15 s on the busy 2
cores and up to ~45 s under load (JVM start and the first load of a task)."""

from __future__ import annotations

import pytest

from recipe.arise.envs.base import TextEnv, make_env

pytestmark = pytest.mark.e2e

GAME = {"task": "find-living-thing", "variation": 0, "simplification": "easy"}
GOLD = [  # the engine's gold path of GAME
    "open door to greenhouse",
    "go to greenhouse",
    "open door to outside",
    "go to outside",
    "look around",
    "focus on butterfly",
    "pick up butterfly",
    "open door to kitchen",
    "go to kitchen",
    "move egg butterfly egg in inventory to red box",
]


@pytest.fixture(scope="module")
def env():
    env = make_env("scienceworld", step_limit=30)
    yield env
    env.close()


def test_the_jvm_runs_with_a_small_heap(env):
    with open(f"/proc/{env.vm.pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    assert b"-Xmx512m" in argv and b"-XX:+UseSerialGC" in argv


def test_a_game_resets_and_its_gold_path_wins(env):
    assert isinstance(env, TextEnv)
    task, first = env.reset(GAME)
    assert "find a(n) living thing" in task and env.task_type(GAME) == "find-living-thing"
    assert not first.done and not first.won and len(first.admissible) > 40
    steps = [env.step(action) for action in GOLD]
    assert steps[-1].won and steps[-1].done and steps[-1].score == 100
    assert not any(s.won for s in steps[:-1]) and not any(s.invalid for s in steps)


def test_the_engine_says_which_actions_are_invalid(env):
    env.reset(GAME)
    step = env.step("dance wildly")
    assert step.invalid is True and not step.done
    assert env.step("look around").invalid is False


def test_splits_are_disjoint_and_bad_games_are_refused(env):
    splits = env.variations("boil")
    assert all(splits.values())
    assert not set(splits["train"]) & set(splits["test"]) and not set(splits["train"]) & set(splits["dev"])
    with pytest.raises(ValueError, match="unknown task 'boil-water'"):
        env.reset({"task": "boil-water", "variation": 0})
    with pytest.raises(ValueError, match="variations 0..29, not 999"):
        env.reset({"task": "boil", "variation": 999})
    with pytest.raises(ValueError, match=r"lacks \['variation'\]"):
        env.reset({"task": "boil"})
