"""What the trainer's step sees of one training trajectory: an :class:`Observation`.

The reward manager (``recipe.arise.adapters.reward_manager``) posts one per training trajectory to
the library replica (through Ray: a plain dataclass pickles as it is), the trainer drains them once
per global step and reads them for UPDATE, the within-group contrasts, the calibrated gate and the
step's metrics (``recipe.arise.core.groups``, ``recipe.arise.adapters.trainer_gate``,
``recipe.arise.adapters.trainer_metrics``). What the agent loop recorded of the trajectory is its
:class:`~recipe.arise.core.trajectory.TrajectoryInfo`, carried whole: each field has one definition.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from recipe.arise.core.trajectory import TrajectoryInfo

__all__ = ["Observation"]


@dataclasses.dataclass(frozen=True)
class Observation:
    """One training trajectory as the reward manager posts it (a group shares ``uid``)."""

    uid: str  # the query group: the G trajectories of one query share it
    reward: float  # R = r_task + r_skill, the reward the trajectory received
    correct: bool  # r_task: the grader's verdict
    # what the agent loop recorded: skill, phase, control arm, gate, the group's scores, scoring cost
    trajectory: TrajectoryInfo = dataclasses.field(default_factory=TrajectoryInfo)
    step: int = 0  # the global step that generated it
    prompt_tokens: int = 0  # the prompt's tokens (the injected skill line included)
    response_tokens: int = 0  # the response's tokens
    # the query's chat messages, posted only when the gate is calibrated on rescored queries
    messages: list[dict[str, Any]] | None = None
    # with messages: the sample's extra_info.tool_selection (the tools its prompt rendered; None: all)
    tool_selection: list[str] | None = None
    # why the grader could not decide (a timeout, a dead worker, an error on the text; counted in
    # arise/grader_errors, the trajectory graded wrong); None: it decided
    grader_error: str | None = None
    # an environment episode's record (arise_env_agent: won, turns, invalid_actions, seconds, task_type,
    # failed; not its transcript); None: not an episode. The step's arise/env_* count every generated one
    env: dict[str, Any] | None = None

    @property
    def scored(self) -> bool:
        """The cache was scored for this query (the trajectory carries its group's score vector)."""
        return len(self.trajectory.scores) > 0
