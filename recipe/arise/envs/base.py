"""The text-environment interface ``arise_env_agent`` plays (docs/environments.md).  Framework free.

An environment is reset to one game (the parquet row's ``extra_info.env.game``, a JSON-able dict
that data prep wrote), then stepped with one action per turn until it says ``done``. The agent loop
runs every call in a worker thread with a time limit, so an implementation may block; it must not
keep state between games other than what ``reset`` replaces, since one object plays many games in
turn (``close`` ends it for good).

Register a new environment with :func:`register_env` (or an entry in :data:`ENVS` for ours, as
``"module:Class"`` so its package is imported only when used).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["ENVS", "Step", "TextEnv", "make_env", "register_env"]


@dataclass
class Step:
    """What the environment answers to ``reset`` or an action."""

    observation: str
    done: bool = False
    won: bool = False  # the episode's success: the task reward (0/1)
    score: float = 0.0  # the environment's own progress score, logged only
    admissible: list[str] | None = None  # None: the environment lists no actions
    # the engine's own verdict on the action where it has one (e.g. ScienceWorld's "No known action
    # matches that input."); None: judged by membership in the previous step's ``admissible``
    invalid: bool | None = None
    info: dict[str, Any] = field(default_factory=dict)  # anything else, for logs


@runtime_checkable
class TextEnv(Protocol):
    def reset(self, game: dict) -> tuple[str, Step]:
        """Start ``game``; returns (the task description, the first observation)."""

    def step(self, action: str) -> Step:
        """Play one action (the model's text, stripped) in the current game."""

    def task_type(self, game: dict) -> str:
        """The game's task type (metrics and evaluation report success per type)."""

    def close(self) -> None:
        """Free the environment's resources (a JVM, a game engine); the object is not used again."""


# name -> "module:Class" (imported on first use) or a factory registered at run time
ENVS: dict[str, str | Callable[..., TextEnv]] = {
    "twx": "recipe.arise.envs.textworld_express:TextWorldExpressEnv",
    "scienceworld": "recipe.arise.envs.scienceworld:ScienceWorldEnv",
    "alfworld": "recipe.arise.envs.alfworld:AlfWorldEnv",  # the user installs alfworld (docs/environments.md)
}


def register_env(name: str, factory: Callable[..., TextEnv]) -> None:
    """Make ``factory(**options)`` the environment called ``name`` (a user's own environment)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"environment name must be a non-empty string, got {name!r}")
    if name in ENVS and ENVS[name] is not factory:
        raise ValueError(f"environment {name!r} is already registered ({ENVS[name]!r})")
    ENVS[name] = factory


def make_env(name: str, **options) -> TextEnv:
    """A new environment object of the registered ``name``, built with ``options``."""
    if name not in ENVS:
        raise KeyError(f"unknown environment {name!r}; registered: {sorted(ENVS)}")
    factory = ENVS[name]
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            raise ImportError(
                f"environment {name!r} needs its package ({exc.name}): pip install -e '.[envs]' "
                "(and Java: apt-get install -y default-jre-headless)"
            ) from exc
    env = factory(**options)
    if not isinstance(env, TextEnv):
        raise TypeError(f"environment {name!r}: {type(env).__name__} lacks reset/step/task_type/close")
    return env
