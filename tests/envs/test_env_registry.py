import pytest

from recipe.arise.envs import base
from recipe.arise.envs.base import Step, make_env, register_env


class Corridor:
    """Walk east twice."""

    def reset(self, game):
        self.pos = 0
        return "reach the end of the corridor", Step("You are at the start.", admissible=["east", "west"])

    def step(self, action):
        self.pos += 1 if action == "east" else 0
        return Step(f"position {self.pos}", done=self.pos == 2, won=self.pos == 2, admissible=["east", "west"])

    def task_type(self, game):
        return "corridor"

    def close(self):
        pass


def test_register_and_make(monkeypatch):
    monkeypatch.setattr(base, "ENVS", dict(base.ENVS))
    register_env("corridor", Corridor)
    env = make_env("corridor")
    task, first = env.reset({})
    assert task and first.admissible == ["east", "west"]
    assert env.step("east").done is False and env.step("east").won is True
    with pytest.raises(ValueError, match="already registered"):
        register_env("corridor", lambda: Corridor())


def test_unknown_and_malformed_envs_are_refused(monkeypatch):
    monkeypatch.setattr(base, "ENVS", dict(base.ENVS))
    with pytest.raises(KeyError, match="unknown environment 'nope'"):
        make_env("nope")
    register_env("broken", lambda: object())
    with pytest.raises(TypeError, match="lacks reset/step/task_type/close"):
        make_env("broken")
    base.ENVS["missing"] = "recipe.arise.envs.no_such_module:Env"
    with pytest.raises(ImportError, match=r"pip install -e '\.\[envs\]'"):
        make_env("missing")
