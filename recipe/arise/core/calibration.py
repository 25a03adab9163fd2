"""The calibrated confidence gate: the selection temperature sigma that gives a target pass rate.

The gate (Eq. 3) passes a query iff max_k softmax(s / sigma)_k >= delta. Whether it ever passes
depends on the spread of the scores s, which depends on the model, the scoring normalisation and
the cache; with mean-normalised scores, sigma = 1, delta = 0.35 and a 10-skill cache, the top skill
must beat every other by ~1.6 nats per token, so the gate can reject every query. The paper
reports the gate's effect as skill use per delta (App. sensitivity table); ``temperature: auto``
sets sigma from the policy's own recent score vectors so the pass rate at delta is that skill use.

The estimator is exact and cheap: max p is non-increasing in sigma, so each score vector i has a
critical temperature sigma_i* (max p = delta there) and passes iff sigma <= sigma_i*. Over a window
of vectors the pass rate at sigma is the share of sigma_i* >= sigma; the sigma giving rate r is
the (1 - r) quantile of the sigma_i* (taken between two order statistics, so the window's pass
rate is exactly the achievable rate nearest r). Framework free (numpy only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PAPER_SKILL_USE",
    "Calibration",
    "paper_target_use",
    "critical_temperature",
    "critical_temperatures",
    "pass_rate",
    "calibrate",
    "resolve_temperature",
    "max_prob_quantiles",
    "GateCalibrator",
    "GATE_FILE",
]

# The paper's hyperparameter sensitivity table (Qwen3-4B): skill use (%) at each gate delta
PAPER_SKILL_USE: tuple[tuple[float, float], ...] = (
    (0.15, 0.893),
    (0.25, 0.816),
    (0.35, 0.730),
    (0.45, 0.582),
    (0.55, 0.417),
)

GATE_FILE = "gate.json"  # beside library.parquet in a checkpoint's arise/ folder
_BISECTION_STEPS = 200  # on log(1/sigma): far below float resolution of the gate's comparison


def paper_target_use(delta: float) -> float:
    """The paper's reported skill use at gate ``delta``, linearly interpolated, clamped at the ends."""
    d = float(delta)
    if math.isnan(d):
        raise ValueError("gate delta must not be NaN")
    xs, ys = zip(*PAPER_SKILL_USE, strict=True)
    return float(np.interp(d, xs, ys))


def _gaps(scores: Sequence[float] | np.ndarray) -> tuple[np.ndarray, int] | None:
    """(gaps s_max - s_j >= 0 of the finite candidates, #+inf) or None when nothing is scorable.
    NaN entries are dropped; -inf entries never get probability and are dropped too."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    s = s[~np.isnan(s)]
    pos_inf = int(np.isposinf(s).sum())
    finite = s[np.isfinite(s)]
    if pos_inf:
        return np.zeros(0), pos_inf
    if finite.size == 0:
        return None
    return finite.max() - finite, 0


def critical_temperatures(vectors: Iterable[Sequence[float] | np.ndarray], delta: float) -> np.ndarray:
    """sigma_i* per score vector: the gate passes vector i iff sigma <= sigma_i*.

    +inf: passes at every sigma (one finite candidate, or delta <= 1/#candidates); 0: passes at
    none (the top score is shared by m candidates and delta >= 1/m, e.g. all scores equal); NaN:
    nothing scorable (empty, all NaN, all -inf): not informative, callers drop it."""
    d = float(delta)
    if not 0.0 <= d <= 1.0:
        raise ValueError(f"gate delta must be in [0, 1], got {delta!r}")
    out: list[float] = []
    rows: list[tuple[int, np.ndarray, int]] = []  # (position, gaps, m) solved below
    for i, scores in enumerate(vectors):
        gaps = _gaps(scores)
        if gaps is None:
            out.append(math.nan)
            continue
        g, pos_inf = gaps
        if pos_inf:  # the +inf entries share all the mass whatever sigma
            out.append(math.inf if 1.0 / pos_inf >= d else 0.0)
            continue
        n, m = g.size, int((g == 0).sum())
        if d <= 1.0 / n:  # max p >= 1/n at every sigma
            out.append(math.inf)
        elif d >= 1.0 / m:  # max p < 1/m at every sigma > 0 (other candidates keep some mass)
            out.append(0.0)
        else:
            out.append(math.nan)
            rows.append((i, g, m))
    result = np.asarray(out, dtype=np.float64)
    if rows:
        result[[i for i, _, _ in rows]] = _solve(rows, d)
    return result


def _solve(rows: list[tuple[int, np.ndarray, int]], delta: float) -> np.ndarray:
    """Bisection on log(beta), beta = 1/sigma, of sum_j exp(-beta g_j) = 1/delta, all rows at once.
    The sum is decreasing in beta from n (beta=0) to m (beta=inf); 1/delta lies strictly between."""
    width = max(g.size for _, g, _ in rows)
    gaps = np.full((len(rows), width), np.inf)
    for r, (_, g, _) in enumerate(rows):
        gaps[r, : g.size] = g
    target = 1.0 / delta
    n = np.array([g.size for _, g, _ in rows], dtype=np.float64)
    m = np.array([mm for _, _, mm in rows], dtype=np.float64)
    positive = np.where(gaps > 0, gaps, np.nan)
    g_max, g_min = np.nanmax(np.where(np.isinf(positive), np.nan, positive), axis=1), np.nanmin(positive, axis=1)
    # brackets: n exp(-beta g_max) > 1/delta below lo; m + (n-m) exp(-beta g_min) < 1/delta above hi
    lo = np.log(np.maximum(n * delta, 1.0 + 1e-12)) / g_max * 0.5
    hi = np.log((n - m) / (target - m)) / g_min * 2.0
    log_lo, log_hi = np.log(lo), np.log(hi)
    with np.errstate(over="ignore"):
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (log_lo + log_hi)
            total = np.exp(-np.exp(mid)[:, None] * gaps).sum(axis=1)
            above = total > target  # beta too small: max p < delta
            log_lo = np.where(above, mid, log_lo)
            log_hi = np.where(above, log_hi, mid)
    # sigma at the upper beta end: max p >= delta there, so sigma_i* itself passes
    return np.exp(-log_hi)


def critical_temperature(scores: Sequence[float] | np.ndarray, delta: float) -> float:
    """sigma* of one score vector (see :func:`critical_temperatures`)."""
    return float(critical_temperatures([scores], delta)[0])


def pass_rate(sigma: float, sigma_stars: Sequence[float] | np.ndarray) -> float:
    """The gate's pass rate at ``sigma`` over vectors with these sigma_i* (NaN ones dropped)."""
    s = np.asarray(sigma_stars, dtype=np.float64).reshape(-1)
    s = s[~np.isnan(s)]
    return float((s >= float(sigma)).mean()) if s.size else math.nan


@dataclass(frozen=True)
class Calibration:
    """sigma: the calibrated temperature (None when no sigma changes the pass rate: every
    informative vector passes always or never); rate: the window's pass rate at sigma (at any sigma
    when sigma is None); groups: informative vectors in the window."""

    sigma: float | None
    rate: float
    groups: int


def calibrate(sigma_stars: Sequence[float] | np.ndarray, target: float) -> Calibration:
    """The sigma whose pass rate over the window is the achievable rate nearest ``target``.

    Pass counts change only at the distinct finite positive sigma_i*; each candidate sigma sits
    inside one interval between them (the geometric midpoint, sigma being a scale), below the
    smallest (half of it) or above the largest (twice it). Ties in |rate - target| go to the higher
    rate. NaN sigma_i* are dropped."""
    t = float(target)
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"gate target pass rate must be in [0, 1], got {target!r}")
    s = np.asarray(sigma_stars, dtype=np.float64).reshape(-1)
    s = s[~np.isnan(s)]
    if s.size == 0:
        return Calibration(None, math.nan, 0)
    levels = np.unique(s[np.isfinite(s) & (s > 0)])
    if levels.size == 0:
        return Calibration(None, pass_rate(1.0, s), int(s.size))
    candidates = np.concatenate([[levels[0] / 2.0], np.sqrt(levels[:-1] * levels[1:]), [levels[-1] * 2.0]])
    rates = np.array([(s >= c).mean() for c in candidates])
    best = min(range(candidates.size), key=lambda j: (abs(rates[j] - t), -rates[j]))
    return Calibration(float(candidates[best]), float(rates[best]), int(s.size))


def resolve_temperature(setting: float | str, published: float | None, initial: float) -> float:
    """The sigma the agent loop uses: a number as configured, or with ``auto`` the sigma the
    trainer published with the cache (``initial`` until it has published one)."""
    if isinstance(setting, str):
        if setting != "auto":
            raise ValueError(f"arise.selection.temperature must be a number > 0 or 'auto', got {setting!r}")
        return float(published) if published is not None else float(initial)
    return float(setting)


def max_prob_quantiles(
    vectors: Iterable[Sequence[float] | np.ndarray], sigma: float, qs: Sequence[float] = (0.1, 0.25, 0.5, 0.75, 0.9)
) -> dict[float, float]:
    """Quantiles of max softmax(s / sigma) over score vectors (unscorable ones dropped)."""
    from recipe.arise.core.selection import selection_probs

    tops = []
    for scores in vectors:
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        s = s[~np.isnan(s)]
        if s.size and not np.isneginf(s).all():
            tops.append(float(selection_probs(s, sigma).max()))
    if not tops:
        return {float(q): math.nan for q in qs}
    return {float(q): float(v) for q, v in zip(qs, np.quantile(tops, list(qs)), strict=True)}


class GateCalibrator:
    """The trainer's side of ``arise.selection.temperature``: a window of the last ``window``
    Phase II groups' sigma_i*, the sigma published with the cache, and the extreme-rate watch.

    With a fixed sigma (``temperature`` a number) it only watches: :meth:`watch` returns a warning
    once the gate's pass rate has stayed below 5% or above 99% for ``patience`` Phase II steps."""

    LOW, HIGH = 0.05, 0.99

    def __init__(
        self,
        *,
        delta: float,
        target: float,
        window: int,
        initial: float,
        fixed: float | None = None,
        patience: int = 10,
    ):
        from collections import deque

        self.delta, self.target, self.fixed = float(delta), float(target), fixed
        self.window: deque[float] = deque(maxlen=int(window))
        self.sigma = float(fixed) if fixed is not None else float(initial)
        self.patience = int(patience)
        self._streak = 0
        self.last: Calibration | None = None
        # the gate's outcome on the last ``window`` Phase II queries (each: the share of its scored
        # trajectories that passed, 0 or 1 unless the query's scoring was split): the rate the
        # target is judged on, since one step's B queries put a binomial s.d. of
        # sqrt(t (1 - t) / B) on the per-step rate (0.22 at B = 4, 0.06 at the paper's 64)
        self.recent: deque[float] = deque(maxlen=int(window))

    @property
    def auto(self) -> bool:
        return self.fixed is None

    def add(self, vectors: Iterable[Sequence[float] | np.ndarray]) -> int:
        """Add the score vectors of newly scored groups (unscorable ones are dropped); how many."""
        stars = critical_temperatures(list(vectors), self.delta)
        stars = stars[~np.isnan(stars)]
        self.window.extend(float(s) for s in stars)
        return int(stars.size)

    def update(self) -> float:
        """Recalibrate sigma on the window (auto only; a window where no sigma changes the rate
        keeps the current sigma). Returns the sigma to publish."""
        if self.auto and self.window:
            self.last = calibrate(np.fromiter(self.window, dtype=np.float64), self.target)
            if self.last.sigma is not None:
                self.sigma = self.last.sigma
        return self.sigma

    def observe(self, outcomes: Iterable[float]) -> float:
        """Add Phase II queries' gate outcomes (share passed, in [0, 1]); the pass rate over the
        last ``window`` queries (NaN before any)."""
        for x in outcomes:
            x = float(x)
            if not 0.0 <= x <= 1.0:
                raise ValueError(f"a gate outcome is a share in [0, 1], got {x!r}")
            self.recent.append(x)
        return float(np.mean(self.recent)) if self.recent else math.nan

    def watch(self, rate: float) -> str | None:
        """One Phase II step's gate pass rate; a warning text when a fixed sigma keeps the gate
        (almost) always closed or open."""
        if self.auto or rate is None or math.isnan(rate):
            return None
        extreme = rate < self.LOW or rate > self.HIGH
        self._streak = self._streak + 1 if extreme else 0
        if self._streak != self.patience:
            return None
        side = "below 5%" if rate < self.LOW else "above 99%"
        return (
            f"ARISE: the confidence gate's pass rate has been {side} for {self.patience} Phase II steps with the "
            f"fixed arise.selection.temperature={self.sigma:g} (delta={self.delta:g}); the paper reports "
            f"{100 * paper_target_use(self.delta):.0f}% skill use at this delta. arise.selection.temperature=auto "
            "calibrates sigma to it (python -m recipe.arise.tools.calibrate shows the max-p distribution)"
        )

    def state(self) -> dict:
        """What a checkpoint keeps (json-serialisable)."""
        return {
            "sigma": self.sigma,
            "auto": self.auto,
            "delta": self.delta,
            "target": self.target,
            "window": [s if math.isfinite(s) else ("inf" if s > 0 else "-inf") for s in self.window],
        }

    def restore(self, state: dict) -> str:
        """Take a checkpoint's sigma (and window, if it was computed at this delta); a fixed sigma
        in the config wins. Returns a line for the log."""
        if not self.auto:
            return f"fixed sigma {self.sigma:g} from the config (the checkpoint's {state.get('sigma')} is not used)"
        sigma = float(state["sigma"])
        if not 0.0 < sigma < math.inf:
            raise ValueError(f"calibration state: sigma must be a finite number > 0, got {state['sigma']!r}")
        self.sigma = sigma
        if float(state.get("delta", math.nan)) == self.delta:
            self.window.extend(float(s) for s in state.get("window", []))
            return f"sigma {sigma:g} and a window of {len(self.window)} groups"
        return f"sigma {sigma:g} (window dropped: it was computed at delta {state.get('delta')}, now {self.delta:g})"
