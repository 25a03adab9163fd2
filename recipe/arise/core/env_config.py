"""``arise.env``: the settings of ``arise_env_agent``'s episodes (docs/environments.md).  Framework free.

The turn budget and the token budget are verl's own keys (``rollout.multi_turn.max_assistant_turns``,
``rollout.response_length``, which holds every turn); what verl has no key for is here: the time
limits that turn a hung environment into a failed episode instead of a hung run, and the summary
prompt's domain for episodes (docs/design.md: the summary prompt of environment episodes).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EnvConfig"]


def _key(default: Any, help: str) -> Any:  # as arise_config._key (that module imports this one)
    return field(default=default, metadata={"help": help, "group": "advanced"})


@dataclass
class EnvConfig:
    step_timeout_s: float = _key(
        60.0, "environment episodes: an environment's step past this (s) fails the episode (arise/env_failed)"
    )
    reset_timeout_s: float = _key(
        180.0, "environment episodes: starting an environment (a JVM) and resetting it to a game, at most (s)"
    )
    episode_timeout_s: float = _key(
        900.0, "environment episodes: the wall-clock limit (s) of one episode, generation included; then it ends"
    )
    max_live: int = _key(
        16,
        "environment episodes: environments (JVMs) at once per agent-loop worker; more wait (arise/env_wait_s)",
    )
    # Figure 4 opens "You are a skill distiller for math reasoning."; an episode's summary names its own domain
    summary_domain: str = _key(
        "text-based tasks in an interactive environment",
        "environment episodes: the summary prompt's 'skill distiller for <this>' (Figure 4: math reasoning)",
    )

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "float" and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ValueError(f"arise.env.{f.name} must be a number, got {value!r} ({type(value).__name__})")
            if f.type == "str" and not isinstance(value, str):
                raise ValueError(f"arise.env.{f.name} must be a string, got {value!r} ({type(value).__name__})")
        for name in ("step_timeout_s", "reset_timeout_s", "episode_timeout_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"arise.env.{name} must be a finite number > 0 (seconds), got {getattr(self, name)!r}")
        if isinstance(self.max_live, bool) or not isinstance(self.max_live, int) or self.max_live < 1:
            raise ValueError(f"arise.env.max_live must be a whole number >= 1, got {self.max_live!r}")
        if not self.summary_domain.strip():
            raise ValueError("arise.env.summary_domain must be a non-empty string")
