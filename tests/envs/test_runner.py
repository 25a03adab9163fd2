"""Time limits and the pool (recipe/arise/envs/runner.py): a hung or crashing environment fails the
episode with EnvFailure and is closed and replaced; a real TextWorldExpress JVM SIGSTOPped mid-game
is killed on the step timeout."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from recipe.arise.envs.base import Step, make_env
from recipe.arise.envs.runner import EnvFailure, EnvPool, EnvRunner

GAME = {"level": 1}


class Fake:
    """Steps take ``delay`` s; the action "hang" blocks until close(), "crash" raises."""

    made = 0

    def __init__(self, delay: float = 0.0):
        Fake.made += 1
        self.delay, self.closed = delay, threading.Event()

    def reset(self, game):
        return "task", Step("start", admissible=["go"])

    def step(self, action):
        if action == "hang":
            self.closed.wait()
            raise RuntimeError("closed while hanging")
        if action == "crash":
            raise RuntimeError("engine crashed")
        time.sleep(self.delay)
        return Step(f"did {action}")

    def task_type(self, game):
        return "fake"

    def close(self):
        self.closed.set()


def test_a_hung_step_fails_the_episode_and_closes_the_environment():
    runner = EnvRunner(Fake, step_timeout_s=0.5, label="fake")
    runner.reset(GAME)
    env = runner.env
    assert runner.step("go").observation == "did go"
    began = time.monotonic()
    with pytest.raises(EnvFailure, match=r'step timed out after 0\.5 s in fake game \{"level": 1\}'):
        runner.step("hang")
    assert time.monotonic() - began < 2
    assert env.closed.is_set() and runner.broken and runner.env is None
    with pytest.raises(EnvFailure, match="step without a running game"):
        runner.step("go")


def test_a_crash_fails_the_episode_naming_the_error():
    runner = EnvRunner(Fake, label="fake")
    runner.reset(GAME)
    with pytest.raises(EnvFailure, match="step failed in fake game .*RuntimeError: engine crashed"):
        runner.step("crash")
    assert runner.broken


def test_the_episode_limit_counts_from_reset():
    runner = EnvRunner(lambda: Fake(delay=0.3), step_timeout_s=5, episode_timeout_s=0.5, label="fake")
    runner.reset(GAME)
    with pytest.raises(EnvFailure, match=r"episode timed out after 0\.5 s"):
        for _ in range(5):
            runner.step("go")
    assert runner.broken


def test_the_pool_reuses_healthy_environments_and_replaces_broken_ones():
    pool = EnvPool(factory=lambda name, **options: Fake(**options))
    Fake.made = 0
    with pool.episode("fake", {"delay": 0}) as runner:
        runner.reset(GAME)
        first = runner.env
    assert pool.idle() == 1 and not first.closed.is_set()
    with pool.episode("fake", {"delay": 0}, step_timeout_s=0.3) as runner:
        runner.reset(GAME)
        assert runner.env is first and runner.step_timeout_s == 0.3
        with pytest.raises(EnvFailure):
            runner.step("hang")
    assert pool.idle() == 0 and first.closed.is_set()
    with pool.episode("fake", {"delay": 0}) as runner:
        runner.reset(GAME)
        assert runner.env is not first
    with pool.episode("fake", {"delay": 0.01}) as other:  # other options: another environment
        other.reset(GAME)
    assert Fake.made == 3 and pool.idle() == 2
    pool.close_all()
    assert pool.idle() == 0


def test_an_episode_left_by_an_exception_is_not_reused():
    pool = EnvPool(factory=lambda name, **options: Fake())
    with pytest.raises(KeyError), pool.episode("fake") as runner:
        runner.reset(GAME)
        env = runner.env
        raise KeyError("the loop failed")
    assert pool.idle() == 0 and env.closed.is_set()


def test_take_and_give_back_hand_out_the_objects_themselves():
    pool = EnvPool(factory=lambda name, **options: Fake())
    env = pool.take("fake", {"a": 1})
    pool.give_back(env, "fake", {"a": 1})
    assert pool.take("fake", {"a": 1}) is env and pool.idle() == 0
    pool.give_back(env, "fake", {"a": 1}, healthy=False)
    assert env.closed.is_set() and pool.idle() == 0 and pool.take("fake", {"a": 1}) is not env


COIN = {"game": "coin", "seed": 3, "fold": "train", "params": "numLocations=3,numDistractorItems=0,includeDoors=0"}


def test_a_crashed_jvm_fails_the_episode_once_without_py4j_tracebacks(caplog):
    runner = EnvRunner(lambda: make_env("twx"), label="twx")
    runner.reset(COIN)
    vm = runner.env.vm
    os.kill(vm.pid, signal.SIGKILL)
    vm.process.wait(timeout=10)
    with caplog.at_level("DEBUG"), pytest.raises(EnvFailure, match="step failed in twx game .*Py4J"):
        runner.step("move east")
    assert [r for r in caplog.records if r.name.startswith("py4j") and r.levelname != "DEBUG"] == []


def test_a_stopped_jvm_is_killed_on_the_step_timeout():
    runner = EnvRunner(lambda: make_env("twx"), step_timeout_s=2, label="twx")
    runner.reset(COIN)
    vm = runner.env.vm
    os.kill(vm.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        with pytest.raises(EnvFailure, match=r"step timed out after 2 s in twx game .*\"game\": \"coin\""):
            runner.step("move east")
        assert time.monotonic() - began < 8
        assert not vm.alive()
    finally:
        if vm.alive():
            os.kill(vm.pid, signal.SIGKILL)
    fresh = EnvRunner(lambda: make_env("twx"), label="twx")
    try:
        fresh.reset(COIN)
        assert fresh.step("move east").admissible
    finally:
        fresh.close()
