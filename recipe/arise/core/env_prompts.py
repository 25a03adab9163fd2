"""The text of an environment episode: the user turns the policy reads and the action it writes.
Framework free; shared by ``arise_env_agent``, data prep and the CPU tiny world.

The parquet row's user turn is the task (:func:`task_prompt`): ARISE scores and selects a skill on
it once per episode (docs/environments.md). The agent loop appends the first observation to that
turn (:func:`first_turn`), and every later observation is a user turn of its own
(:func:`observation_turn`). The policy answers each turn with text whose last ``Action:`` line is
the action (:func:`parse_action`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "ACTION_PREFIX",
    "MAX_LISTED_ACTIONS",
    "first_turn",
    "invalid_turn",
    "observation_turn",
    "parse_action",
    "task_prompt",
]

ACTION_PREFIX = "Action:"
MAX_LISTED_ACTIONS = 40  # ScienceWorld lists ~115 at the start: the first ones, then a count
INSTRUCTIONS = (
    "You are playing a text game. Each turn you read what you observe and reply with one action. "
    f"End your reply with a line '{ACTION_PREFIX} <action>'."
)
INVALID_REPLY = f"Your reply has no action. End it with a line '{ACTION_PREFIX} <action>'."
_ACTION = re.compile(r"^\s*action\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def task_prompt(task: str) -> str:
    """The row's user turn: the instructions and the task description."""
    task = str(task).strip()
    if not task:
        raise ValueError("the task description is empty")
    return f"{INSTRUCTIONS}\n\nTask: {task}"


def _admissible(actions: Sequence[str] | None) -> str:
    if not actions:
        return ""
    shown = list(actions)[:MAX_LISTED_ACTIONS]
    more = len(actions) - len(shown)
    tail = f" (and {more} more)" if more > 0 else ""
    return "\n\nAdmissible actions: " + ", ".join(shown) + tail


def observation_turn(observation: str, admissible: Sequence[str] | None = None) -> str:
    """A user turn with an observation (and the admissible actions where the environment lists them)."""
    return str(observation).strip() + _admissible(admissible)


def invalid_turn(admissible: Sequence[str] | None = None) -> str:
    """The user turn after a reply with no action line (the environment was not stepped)."""
    return INVALID_REPLY + _admissible(admissible)


def first_turn(user_turn: str, observation: str, admissible: Sequence[str] | None = None) -> str:
    """The row's user turn (skill already injected, if any) followed by the first observation."""
    return f"{user_turn}\n\n{observation_turn(observation, admissible)}"


def parse_action(text: str) -> str | None:
    """The action in the policy's reply: its last ``Action:`` line, else None (an invalid turn)."""
    found = _ACTION.findall(str(text))
    return found[-1] if found else None
