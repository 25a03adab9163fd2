"""What one trajectory carries of ARISE, from the agent loop to the reward manager and the trainer.

:class:`TrajectoryInfo` is written by the skill layer (``recipe.arise.adapters.skill_layer``), travels
in verl's ``AgentLoopOutput.extra_fields`` (one ``arise_<field>`` key per field), and is read back by
the reward manager (``tool_extra_fields``) and the trainer (the transfer queue's ``extra_fields``).
:meth:`TrajectoryInfo.to_extra_fields` and :meth:`TrajectoryInfo.from_extra_fields` are the one
place that converts to and from that dict: the key names, the defaults of missing keys and the
plain Python values of what verl hands back (numpy / torch scalars and arrays, ``NonTensorData``).

:class:`SelectedSkill` is the agent loop's choice for one trajectory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

from recipe.arise.core.skill import SkillDoc

PREFIX = "arise_"


@dataclasses.dataclass(frozen=True)
class ScoredSkill:
    """train_manager: what the group's scoring request saw of one skill. ``prefix_ids`` is
    chat(query) + ``SKILL:``, ``skill_ids`` the scored skill tokens, ``logprobs`` their per-token
    log-probs from the request's prompt log-probs (None when the engine's numbers were unusable)."""

    prefix_ids: list[int]
    skill_ids: list[int]
    logprobs: list[float] | None


class SelectedSkill(NamedTuple):
    """The skill the Manager chose for a trajectory; ``scored`` with train_manager only."""

    skill_id: str
    doc: SkillDoc
    scored: ScoredSkill | None = None


def plain(value: Any) -> Any:
    """A Python value from what verl / TransferQueue hands back (``NonTensorData``, a numpy or torch
    scalar or array); anything else unchanged."""
    if type(value).__name__ == "NonTensorData":
        value = getattr(value, "data", value)
    return value.tolist() if hasattr(value, "tolist") else value


def as_list(value: Any) -> list:
    """A list of the rows TransferQueue hands back for a non-tensor field (NonTensorStack, tensordict
    LinkedList)."""
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _floats(value: Any) -> list[float]:
    return [float(v) for v in value]


@dataclasses.dataclass
class TrajectoryInfo:
    """The ARISE fields of one trajectory (the reward manager and the trainer's metrics read them)."""

    phase: int = 1
    validate: bool = False
    skill_id: str = ""  # "" = unaided
    selected: bool = False
    control: bool = False  # in the group's unaided control arm
    gate_passed: bool | None = None  # None: no gate decision (not scored)
    explored: bool = False
    max_prob: float | None = None  # the softmax's top probability the gate compared with delta
    scores: list[float] = dataclasses.field(default_factory=list)  # the group's score vector
    scoring_failed: bool = False
    scores_nonfinite: int = 0
    skill_overlong: bool = False  # a chosen skill was dropped: the prompt would not fit
    skill_tokens: int = 0
    # train_manager: the skill line is the first skill_tokens tokens of the response
    skill_in_response: bool = False
    scorer: bool = False  # this trajectory ran the group's scoring (its cost is counted here)
    scoring_s: float = 0.0
    scoring_tokens: int = 0  # scoring prompt tokens prefilled (computed) for the group
    scoring_cached_tokens: int = 0  # ... read from vLLM's prefix cache instead
    scoring_rescored: int = 0  # scoring requests sent again without the prefix cache
    # the library version the trajectory selected from (its group's one snapshot); None: not recorded
    library_version: int | None = None

    # the type of each field's value; a None value is kept only for the optional fields
    _CONVERT: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "phase": int,
        "validate": bool,
        "skill_id": str,
        "selected": bool,
        "control": bool,
        "gate_passed": bool,
        "explored": bool,
        "max_prob": float,
        "scores": _floats,
        "scoring_failed": bool,
        "scores_nonfinite": int,
        "skill_overlong": bool,
        "skill_tokens": int,
        "skill_in_response": bool,
        "scorer": bool,
        "scoring_s": float,
        "scoring_tokens": int,
        "scoring_cached_tokens": int,
        "scoring_rescored": int,
        "library_version": int,
    }
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"gate_passed", "max_prob", "library_version"})

    @classmethod
    def keys(cls) -> list[str]:
        """The ``extra_fields`` keys, in field order."""
        return [PREFIX + f.name for f in dataclasses.fields(cls)]

    def to_extra_fields(self) -> dict[str, Any]:
        """``{"arise_<field>": value}`` for every field (plain Python values, lists copied)."""
        return {PREFIX + f.name: _copy(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_extra_fields(cls, fields: Mapping[str, Any] | None) -> TrajectoryInfo:
        """The record in a verl ``extra_fields`` dict (None or empty: every field at its default).

        Keys without the ``arise_`` prefix are verl's own and ignored; an ``arise_`` key this record
        does not define raises ValueError (a writer and this reader disagree). A missing key, or a
        None value of a field that cannot be None, takes the field's default; numpy / torch values
        become plain Python values of the field's type."""
        fields = plain(fields)
        if fields is None:
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in fields.keys() if str(k).startswith(PREFIX) and str(k)[len(PREFIX) :] not in names)
        if unknown:
            raise ValueError(f"unknown ARISE trajectory field(s) {unknown}; known: {cls.keys()}")
        values = {}
        for name in names:
            value = plain(fields.get(PREFIX + name, None))
            if value is None:
                if name in cls._OPTIONAL:
                    values[name] = None
                continue  # the field's default
            values[name] = cls._CONVERT[name](value)
        return cls(**values)


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


__all__ = ["PREFIX", "ScoredSkill", "SelectedSkill", "TrajectoryInfo", "as_list", "plain"]
