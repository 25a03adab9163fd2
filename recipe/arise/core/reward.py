"""The hierarchical reward of ARISE (paper §3, App. D.2): R = r_task + r_skill.

``r_task`` is the task grade of :mod:`recipe.arise.core.grader` (last boxed answer vs the ground
truth, math-verify in worker processes with a time bound); this module holds the formula on top
of it and re-exports the grader's public names, which the reward manager, ``verl_score`` and the
benchmarks import from here too.
"""

from __future__ import annotations

import math

from recipe.arise.core.grader import (
    DEFAULT_TIMEOUT_S,
    configure_grader,
    extract_boxed,
    grade,
    grade_many,
    grader_stats,
    is_pathological,
    normalize_answer,
    shutdown_grader,
    warmup,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "configure_grader",
    "extract_boxed",
    "grade",
    "grade_many",
    "grader_stats",
    "hierarchical_reward",
    "is_pathological",
    "normalize_answer",
    "shutdown_grader",
    "warmup",
]


def hierarchical_reward(correct: bool, skill_used: bool, phase: int, skill_bonus: float = 1.0) -> float:
    """R = r_task + r_skill (App. D.2).  Phase 1: binary 0/1.  Phase 2: 0 if wrong,
    1 if right without a skill, 1 + skill_bonus if right with a skill."""
    if isinstance(phase, bool) or phase not in (1, 2):
        raise ValueError(f"phase must be 1 or 2, got {phase!r}")
    bonus = float(skill_bonus)
    if not math.isfinite(bonus) or bonus < 0:
        raise ValueError(f"skill_bonus must be a finite number >= 0, got {skill_bonus!r}")
    if not correct:
        return 0.0
    if phase == 2 and skill_used:
        return 1.0 + bonus
    return 1.0
