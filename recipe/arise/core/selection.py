"""Manager skill selection (paper Eq. 2 / Eq. mgr-full, App. C.4).

p = softmax(s / sigma); if max p < delta -> no skill (confidence gate); otherwise with
probability epsilon a uniform index over the candidates with a finite score, else argmax p.

Framework free (numpy only).  The log-probability scores themselves are computed by the
lead's verl adapter; :func:`truncate_skill_for_scoring` gives the <=128 skill tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Selection",
    "selection_probs",
    "select_skill",
    "select_skill_detailed",
    "truncate_skill_for_scoring",
    "control_arm_size",
    "is_control_session",
    "finite_scores",
    "top_m_candidates",
]


@dataclass(frozen=True)
class Selection:
    """Outcome of one selection.

    index: chosen candidate or None (empty candidate set or gate rejected);
    probs: the softmax distribution p (float64 array, len = #candidates);
    gate_passed: max p >= delta; explored: the epsilon branch was taken;
    greedy_index: argmax p (None when empty).
    """

    index: int | None
    probs: np.ndarray
    gate_passed: bool
    explored: bool
    greedy_index: int | None

    @property
    def max_prob(self) -> float:
        return float(self.probs.max()) if self.probs.size else 0.0


def _check_temperature(temperature: float) -> float:
    try:
        t = float(temperature)
    except (TypeError, ValueError) as e:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}") from e
    if not (t > 0.0) or math.isinf(t):  # catches NaN, <= 0, inf
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    return t


def selection_probs(scores: Sequence[float] | np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Numerically stable softmax of scores / temperature.

    -inf scores get probability 0; if every score is -inf the distribution is uniform
    (no information); +inf scores share all the mass.  NaN scores and temperature <= 0
    (or NaN/inf) raise ValueError.  Empty input -> empty array.
    """
    t = _check_temperature(temperature)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.size == 0:
        return np.zeros(0, dtype=np.float64)
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    pos_inf = np.isposinf(s)
    if pos_inf.any():
        return pos_inf.astype(np.float64) / pos_inf.sum()
    finite = np.isfinite(s)
    if not finite.any():
        return np.full(s.size, 1.0 / s.size)
    with np.errstate(over="ignore", invalid="ignore"):
        shifted = np.where(finite, s - s[finite].max(), -np.inf)  # <= 0, may overflow to -inf
        z = shifted / t  # shift before scaling: no overflow to +inf for tiny temperatures
        z = np.where(np.isnan(z), -np.inf, z)
    w = np.exp(z)  # exp(-inf) = 0; the max entry is exp(0) = 1
    return w / w.sum()


def select_skill_detailed(
    scores: Sequence[float] | np.ndarray,
    *,
    temperature: float = 1.0,
    epsilon: float = 0.1,
    gate: float = 0.35,
    rng: np.random.Generator,
) -> Selection:
    """Confidence-gated epsilon-greedy selection with full diagnostics.

    The rng is consumed only when the gate passes (one uniform draw for the epsilon coin,
    plus one integer draw when exploring), so runs are reproducible from the seed.
    """
    eps = float(epsilon)
    if not (0.0 <= eps <= 1.0):
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
    g = float(gate)
    if math.isnan(g):
        raise ValueError("gate must not be NaN")
    probs = selection_probs(scores, temperature)
    n = probs.size
    if n == 0:
        return Selection(None, probs, False, False, None)
    greedy = int(np.argmax(probs))
    if probs[greedy] < g:
        return Selection(None, probs, False, False, greedy)
    if eps > 0.0 and rng.random() < eps:
        # uniform over the candidates with a finite score only: a -inf score (a NaN/+inf that
        # finite_scores replaced, a failed request) marks a skill that must not be injected.
        # All finite: the same draw as uniform over all n (runs stay reproducible from the seed).
        finite = np.flatnonzero(np.isfinite(np.asarray(scores, dtype=np.float64).reshape(-1)))
        if finite.size == 0:  # nothing to explore: the greedy choice stands
            return Selection(greedy, probs, True, False, greedy)
        return Selection(int(finite[rng.integers(finite.size)]), probs, True, True, greedy)
    return Selection(greedy, probs, True, False, greedy)


def select_skill(
    scores: Sequence[float] | np.ndarray,
    *,
    temperature: float = 1.0,
    epsilon: float = 0.1,
    gate: float = 0.35,
    rng: np.random.Generator,
) -> int | None:
    """Index of the selected candidate, or None (no candidates / gate rejected)."""
    return select_skill_detailed(scores, temperature=temperature, epsilon=epsilon, gate=gate, rng=rng).index


def truncate_skill_for_scoring(text: str, tokenizer: Any, max_tokens: int = 128) -> list[int]:
    """Token ids of the skill text (no special tokens), truncated to ``max_tokens``."""
    if int(max_tokens) < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
    ids = tokenizer.encode(text, add_special_tokens=False)
    return [int(i) for i in list(ids)[: int(max_tokens)]]


def control_arm_size(control_share: float, group_size: int) -> int:
    """How many of a group's ``group_size`` trajectories form the unaided control arm."""
    share = float(control_share)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"control_share must be in [0, 1], got {control_share!r}")
    return min(int(group_size), max(0, int(round(share * int(group_size)))))


def is_control_session(session: int, group_size: int, control_share: float) -> bool:
    """Sessions 0 .. k-1 of a group are its control arm (sessions are exchangeable samples)."""
    return int(session) < control_arm_size(control_share, group_size)


def finite_scores(scores: Sequence[float] | np.ndarray) -> tuple[np.ndarray, int]:
    """Scores with NaN/+inf replaced by -inf, and how many were. A -inf score cannot be chosen:
    it gets probability 0 (so never the greedy choice while any score is finite) and
    :func:`select_skill_detailed` explores only among finite scores."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    bad = ~np.isfinite(s) & ~np.isneginf(s)
    return np.where(bad, -np.inf, s), int(bad.sum())


def top_m_candidates(n: int, m: int, utilities: Sequence[float] | None = None) -> list[int]:
    """Indices (into a cache of ``n`` skills) of the candidates scored for a query.

    ``m <= 0`` or ``m >= n``: every skill, in cache order (the paper). Otherwise the ``m`` skills of
    highest utility, ties broken by cache order (NaN ranks last), returned in
    cache order. Without ``utilities`` (or with a list that does not match the cache) the first ``m``
    skills of the cache."""
    n, m = int(n), int(m)
    if m <= 0 or m >= n:
        return list(range(max(n, 0)))
    if utilities is None or len(utilities) != n:
        return list(range(m))
    u = np.asarray(utilities, dtype=np.float64).reshape(-1)
    u = np.where(np.isnan(u), -np.inf, u)
    order = sorted(range(n), key=lambda i: (-u[i], i))
    return sorted(order[:m])
