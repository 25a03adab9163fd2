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
from collections.abc import Iterable, Mapping
from typing import Any

from recipe.arise.core.trajectory import TrajectoryInfo

__all__ = ["Observation", "as_observations"]


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
    # why the grader could not decide (a timeout, a dead worker, an error on the text; counted in
    # arise/grader_errors, the trajectory graded wrong); None: it decided
    grader_error: str | None = None

    @property
    def scored(self) -> bool:
        """The cache was scored for this query (the trajectory carries its group's score vector)."""
        return len(self.trajectory.scores) > 0

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Observation:
        """An observation from one flat dict of its own fields and its trajectory's (the names of
        :class:`TrajectoryInfo`'s fields), as simulations build them (``bench/``). A None value
        takes the field's default; an unknown or a missing required key raises ValueError."""
        own = {f.name for f in dataclasses.fields(cls)} - {"trajectory"}
        theirs = {f.name for f in dataclasses.fields(TrajectoryInfo)}
        unknown = sorted(set(values) - own - theirs)
        if unknown:
            raise ValueError(f"observation: unknown field(s) {unknown}; known: {sorted(own | theirs)}")
        unset = dataclasses.MISSING
        required = [f.name for f in dataclasses.fields(cls) if f.default is unset and f.default_factory is unset]
        missing = [name for name in required if values.get(name) is None]
        if missing:
            raise ValueError(f"observation: required field(s) {missing} missing in {dict(values)!r}")
        trajectory = TrajectoryInfo(**{k: v for k, v in values.items() if k in theirs and v is not None})
        return cls(trajectory=trajectory, **{k: v for k, v in values.items() if k in own and v is not None})


def as_observations(observations: Iterable[Observation | Mapping[str, Any]]) -> list[Observation]:
    """The records of ``observations``; a plain dict (a simulation's) becomes one by
    :meth:`Observation.from_dict`."""
    return [o if isinstance(o, Observation) else Observation.from_dict(o) for o in observations]
