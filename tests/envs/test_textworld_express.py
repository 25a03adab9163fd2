"""TextWorldExpress through the TextEnv interface: a real JVM (~1 s to start, games in ms), its gold
path won, invalid actions, bad games refused, and the JVM gone when its Python process is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from recipe.arise.envs.base import TextEnv, make_env

COIN = {"game": "coin", "seed": 3, "fold": "train", "params": "numLocations=3,numDistractorItems=0,includeDoors=0"}
COIN_GOLD = ["look around", "move east", "take coin"]  # the engine's gold path of COIN


@pytest.fixture(scope="module")
def env():
    env = make_env("twx", step_limit=6)
    yield env
    env.close()


def test_a_game_resets_to_its_task_and_admissible_actions(env):
    assert isinstance(env, TextEnv)
    task, first = env.reset(COIN)
    assert "find the coin" in task
    assert first.admissible and "look around" in first.admissible
    assert not first.done and not first.won and first.invalid is None
    assert env.task_type(COIN) == "coin"


def test_the_gold_path_wins_and_the_same_seed_is_the_same_game(env):
    _, first = env.reset(COIN)
    steps = [env.step(action) for action in COIN_GOLD]
    assert [s.won for s in steps] == [False, False, True] and steps[-1].done
    assert env.reset(COIN)[1].observation == first.observation


def test_unknown_actions_are_invalid_and_the_step_limit_ends_the_episode(env):
    env.reset(COIN)
    step = env.step("dance wildly")
    assert step.invalid is True and not step.done
    assert env.step("look around").invalid is None  # judged by membership by the loop
    steps = [env.step("look around") for _ in range(4)]
    assert [s.done for s in steps] == [False, False, False, True] and not steps[-1].won


@pytest.mark.parametrize(
    ("game", "match"),
    [
        ({"game": "coin", "seed": 3}, r"lacks \['fold'\]"),
        ({**COIN, "game": "zork"}, "unknown game 'zork'"),
        ({**COIN, "fold": "valid"}, "fold must be one of"),
        ({**COIN, "seed": "3"}, "seed must be an int"),
        ({**COIN, "params": "numLocations=3,noSuchParam=1"}, "twx game"),
    ],
)
def test_a_bad_game_is_refused_naming_it(env, game, match):
    with pytest.raises(ValueError, match=match):
        env.reset(game)


def _java_children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid), "java"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie left for its (dead) parent's reaper counts as gone
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


def test_the_jvm_dies_with_its_python_process_on_sigkill(tmp_path):
    code = textwrap.dedent(
        f"""
        from recipe.arise.envs.base import make_env
        env = make_env("twx")
        env.reset({COIN!r})
        print(env.vm.pid, flush=True)
        import time; time.sleep(600)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=os.getcwd(), env=dict(os.environ)
    )
    java = None
    try:
        java = int(child.stdout.readline())
        assert _alive(java) and java in _java_children(child.pid)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(java) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(java), f"java {java} outlived its SIGKILLed Python process"
    finally:
        child.kill()
        if java is not None and _alive(java):
            os.kill(java, signal.SIGKILL)


def test_close_kills_the_jvm_and_leaves_no_py4j_finalizers():
    from py4j.finalizer import ThreadSafeFinalizer

    before = set(ThreadSafeFinalizer.finalizers)
    env = make_env("twx")
    env.reset(COIN)
    pid = env.vm.pid
    env.close()
    assert not _alive(pid)
    # a finalizer calling the killed JVM from a GC pass broke CPython 3.11's next compile (jvm.py)
    assert set(ThreadSafeFinalizer.finalizers) <= before
