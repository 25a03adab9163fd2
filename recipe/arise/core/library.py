"""Two-tier skill library (cache + reservoir) of ARISE (paper App. C.2-C.3).

One training step's maintenance is :meth:`SkillLibrary.step`, which runs the five
operations in the fixed order UPDATE -> ADD -> EVICT -> LOAD -> DELETE and returns a
:class:`StepEvents` record.  See docs/design_core.md for every decision the paper leaves
open (tie-breaking, reservoir overflow, duplicates, and the *library freeze* of the
literal rules together with the default ``"fair_trial"`` fix).

Framework free: stdlib + numpy + pyarrow (pyarrow only for save/load).
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .skill import SkillDoc

__all__ = [
    "FORMAT_VERSION",
    "SETTINGS",
    "load_library_file",
    "export_jsonl",
    "NEW_SKILL_POLICIES",
    "ORIGINS",
    "RANK_BY",
    "LibraryFormatError",
    "Provenance",
    "Contrast",
    "SkillEntry",
    "StepEvents",
    "SkillLibrary",
]

# 2: provenance (origin, source step/uid/query/rewards), causal-uplift counts and the exact IG.
# 3: the stratified uplift sums (uplift_groups, uplift_weight, uplift_wdiff, uplift_wvar).
# Version-1 and -2 files still load: the missing fields start empty. A version-2 file's pooled
# uplift counts are kept as counts, but its uplift restarts unmeasured: pooled counts cannot be
# split back into query groups, and their pooled difference is the confounded number version 3
# replaces (docs/design_core.md: causal uplift).
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
NEW_SKILL_POLICIES = ("fair_trial", "literal")
# seed: the initial library; json: parsed from a summary rollout; fallback: trace_abstract;
# external: handed to step() without provenance (tests, tools)
ORIGINS = ("seed", "json", "fallback", "external")
# what EVICT/LOAD rank by: the paper's EMA utility, or the measured causal uplift (docs/design.md)
RANK_BY = ("utility", "uplift")
_META_KEY = b"arise_skill_library"
TIERS = ("cache", "reservoir")
# the library's settings (constructor keywords); a run's config sets them, a saved file records them
SETTINGS = (
    "cache_capacity",
    "reservoir_capacity",
    "ema_beta",
    "new_skill_policy",
    "trial_uses",
    "trial_steps",
    "max_protected",
    "delete_percentile",
    "success_threshold",
    "seed_trial_uses",
    "rank_by",
)
logger = logging.getLogger(__name__)


class LibraryFormatError(ValueError):
    """A stored library file is missing, truncated or malformed."""


QUERY_CHARS = 200  # a skill's source question is stored clipped to this many characters


@dataclass(frozen=True)
class Provenance:
    """Where a skill came from: the step, the query group (uid and clipped text) whose tau+
    traces it was distilled from, those traces' rewards, and how it was parsed."""

    origin: str = "external"
    step: int | None = None
    uid: str = ""
    query: str = ""
    rewards: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"provenance origin must be one of {ORIGINS}, got {self.origin!r}")
        object.__setattr__(self, "query", str(self.query)[:QUERY_CHARS])
        object.__setattr__(self, "rewards", tuple(float(r) for r in self.rewards))


@dataclass(frozen=True)
class Contrast:
    """One query group's within-group comparison for one skill: ``n`` trajectories conditioned
    on the skill with ``successes`` correct, against the group's ``base_n`` unaided (control
    arm) trajectories with ``base_successes`` correct. Feeds the causal uplift."""

    skill_id: str
    n: int
    successes: int
    base_n: int
    base_successes: int

    def stratum(self) -> tuple[float, float, float] | None:
        """(weight, difference, variance) of this group's uplift estimate, or None when an arm is
        empty or the counts are impossible.

        difference d = successes/n - base_successes/base_n (the group's own uplift: both arms
        answer the same query, and which trajectories are the control arm is random);
        weight w = n * base_n / (n + base_n) (Mantel-Haenszel for a risk difference: it depends
        on the arm sizes only, never on the outcomes); variance v = p1(1-p1)/n + p0(1-p0)/base_n
        (binomial, plug-in)."""
        n, b = int(self.n), int(self.base_n)
        if n <= 0 or b <= 0 or not (0 <= self.successes <= n and 0 <= self.base_successes <= b):
            return None
        p1, p0 = self.successes / n, self.base_successes / b
        return n * b / (n + b), p1 - p0, p1 * (1.0 - p1) / n + p0 * (1.0 - p0) / b


@dataclass
class SkillEntry:
    """A library entry e_k = (m_k, u_k) plus bookkeeping.

    ``reward_sum`` / ``success_count`` are running stats over the entry's uses (one use =
    one trajectory that was conditioned on the skill); they feed the IG proxy (App. D.3).
    ``uplift_n`` ... ``uplift_base_successes`` count the skill's trajectories and the unaided
    control-arm trajectories of the query groups that used it beside a control arm
    (:class:`Contrast`). The causal uplift is *not* their pooled difference (pooling over groups
    confounds the skill with the queries it was used on: Simpson's paradox) but the weighted mean
    of the groups' own differences, kept as sums: ``uplift_groups`` groups, ``uplift_weight`` =
    sum w_g, ``uplift_wdiff`` = sum w_g d_g, ``uplift_wvar`` = sum w_g^2 v_g (:meth:`Contrast.stratum`).
    ``ig_exact`` is the paper's exact IG (App. D.3), measured every N steps on the rollout engine.
    """

    skill_id: str
    doc: SkillDoc
    utility: float = 0.0
    usage_count: int = 0
    created_step: int = 0
    updated_step: int = 0
    reward_sum: float = 0.0
    success_count: int = 0
    provenance: Provenance = field(default_factory=Provenance)
    uplift_n: int = 0
    uplift_successes: int = 0
    uplift_base_n: int = 0
    uplift_base_successes: int = 0
    uplift_groups: int = 0
    uplift_weight: float = 0.0
    uplift_wdiff: float = 0.0
    uplift_wvar: float = 0.0
    ig_exact: float | None = None
    ig_step: int | None = None

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.usage_count if self.usage_count else None

    @property
    def success_rate(self) -> float | None:
        return self.success_count / self.usage_count if self.usage_count else None

    @property
    def uplift(self) -> float | None:
        """Causal uplift: the weighted mean over query groups of (success rate with the skill minus
        the group's control-arm success rate); None until one group has measured it."""
        if not self.uplift_groups or self.uplift_weight <= 0.0:
            return None
        return self.uplift_wdiff / self.uplift_weight

    @property
    def uplift_se(self) -> float | None:
        """Standard error of :attr:`uplift`: sqrt(sum w^2 v) / sum w (groups independent)."""
        if not self.uplift_groups or self.uplift_weight <= 0.0:
            return None
        return math.sqrt(max(self.uplift_wvar, 0.0)) / self.uplift_weight

    @property
    def pooled_uplift(self) -> float | None:
        """The pooled difference of the raw counts (confounded across groups; display only)."""
        if not self.uplift_n or not self.uplift_base_n:
            return None
        return self.uplift_successes / self.uplift_n - self.uplift_base_successes / self.uplift_base_n

    def add_contrast(self, c: Contrast) -> bool:
        """Add one group's comparison; False (nothing added) when it cannot be measured."""
        stratum = c.stratum()
        if stratum is None:
            return False
        w, d, v = stratum
        self.uplift_n += int(c.n)
        self.uplift_successes += int(c.successes)
        self.uplift_base_n += int(c.base_n)
        self.uplift_base_successes += int(c.base_successes)
        self.uplift_groups += 1
        self.uplift_weight += w
        self.uplift_wdiff += w * d
        self.uplift_wvar += w * w * v
        return True

    @property
    def origin(self) -> str:
        return self.provenance.origin

    def _sort_key_low(self) -> tuple:
        """Eviction order: lowest utility, then fewest uses, then oldest (created step, id)."""
        return (self.utility, self.usage_count, self.created_step, self.skill_id)

    def _uplift_key_low(self) -> tuple:
        """Eviction order under ``rank_by="uplift"``: measured uplift (unmeasured = 0), then utility."""
        uplift = self.uplift
        return (0.0 if uplift is None else uplift, *self._sort_key_low())


@dataclass
class StepEvents:
    """What one :meth:`SkillLibrary.step` did (for the append-only per-step log)."""

    step: int
    updated: list[str] = field(default_factory=list)  # ids whose utility changed (unique, first-use order)
    n_observations: int = 0  # observations applied
    unknown_observations: list[str] = field(default_factory=list)  # ids not in the library (skipped)
    added: list[str] = field(default_factory=list)
    dropped_duplicates: list[dict] = field(default_factory=list)  # {"skill_name", "duplicate_of"}
    evicted: list[str] = field(default_factory=list)  # cache -> reservoir by EVICT
    loaded: list[dict] = field(default_factory=list)  # {"loaded": reservoir id, "demoted": cache id}
    deleted: list[str] = field(default_factory=list)  # removed by DELETE
    overflow: list[str] = field(default_factory=list)  # removed because reservoir > C_r
    protected: list[str] = field(default_factory=list)  # cache ids shielded from EVICT/LOAD (fair_trial, seeds)
    contrasts: int = 0  # Contrast records applied (causal uplift)
    cache_size: int = 0
    reservoir_size: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)


def _dup_key(doc: SkillDoc) -> tuple[str, str]:
    return (doc.skill_name.strip().lower(), " ".join(doc.key_insight.lower().split()))


class SkillLibrary:
    """Cache (active pool, capacity C_c) + reservoir (archive, capacity C_r).

    Parameters
    ----------
    new_skill_policy:
        ``"literal"`` -- paper rules verbatim: a new skill enters with utility 0 and is
        a normal eviction candidate (this freezes the library once the cache holds used
        skills with positive utility; see docs/design_core.md).
        ``"fair_trial"`` (default) -- a new skill enters with an optimistic prior equal to
        the mean utility of the cache entries before the ADD, and is protected from EVICT
        and LOAD-demotion while it is on trial (fewer than ``trial_uses`` uses and younger
        than ``trial_steps`` steps).  At most ``max_protected`` entries (newest first) are
        protected at any time, so a burst of new skills cannot lock the cache.
    """

    def __init__(
        self,
        cache_capacity: int = 10,
        reservoir_capacity: int = 100,
        ema_beta: float = 0.9,
        seed_skills: Iterable[SkillDoc] = (),
        *,
        new_skill_policy: str = "fair_trial",
        trial_uses: int = 8,
        trial_steps: int = 20,
        max_protected: int | None = None,
        delete_percentile: float = 10.0,
        success_threshold: float = 0.0,
        seed_trial_uses: int = 0,
        rank_by: str = "utility",
    ) -> None:
        self._apply_settings(
            {
                "cache_capacity": cache_capacity,
                "reservoir_capacity": reservoir_capacity,
                "ema_beta": ema_beta,
                "new_skill_policy": new_skill_policy,
                "trial_uses": trial_uses,
                "trial_steps": trial_steps,
                "max_protected": max_protected,
                "delete_percentile": delete_percentile,
                "success_threshold": success_threshold,
                "seed_trial_uses": seed_trial_uses,
                "rank_by": rank_by,
            }
        )
        self.cache: list[SkillEntry] = []
        self.reservoir: list[SkillEntry] = []
        self.next_id = 1
        self.global_reward_sum = 0.0
        self.global_success_count = 0
        self.global_count = 0
        self.last_step: int | None = None
        # what reconfigure() moved, reported again in the next step's events (the step log)
        self._pending: dict[str, list[str]] = {"evicted": [], "overflow": []}
        # seeds: first C_c in the cache, the rest in the reservoir (beyond C_r: ignored)
        for doc in seed_skills:
            if not isinstance(doc, SkillDoc):
                raise ValueError(f"seed skills must be SkillDoc, got {type(doc).__name__}")
            if self._find_duplicate(doc) is not None:
                continue
            entry = self._new_entry(doc, step=0, utility=0.0, provenance=Provenance("seed", step=0))
            if len(self.cache) < self.cache_capacity:
                self.cache.append(entry)
            elif len(self.reservoir) < self.reservoir_capacity:
                self.reservoir.append(entry)

    def _apply_settings(self, cfg: dict[str, Any]) -> None:
        """Validate and set every one of :data:`SETTINGS` (``max_protected`` None = C_c // 2)."""
        cache_capacity, reservoir_capacity = cfg["cache_capacity"], cfg["reservoir_capacity"]
        ema_beta, new_skill_policy, rank_by = cfg["ema_beta"], cfg["new_skill_policy"], cfg["rank_by"]
        if int(cache_capacity) < 1:
            raise ValueError("cache_capacity must be >= 1")
        if int(reservoir_capacity) < 0:
            raise ValueError("reservoir_capacity must be >= 0")
        if not (0.0 <= float(ema_beta) <= 1.0):
            raise ValueError("ema_beta must be in [0, 1]")
        if new_skill_policy not in NEW_SKILL_POLICIES:
            raise ValueError(f"new_skill_policy must be one of {NEW_SKILL_POLICIES}, got {new_skill_policy!r}")
        if int(cfg["trial_uses"]) < 0 or int(cfg["trial_steps"]) < 0:
            raise ValueError("trial_uses and trial_steps must be >= 0")
        if not (0.0 <= float(cfg["delete_percentile"]) <= 100.0):
            raise ValueError("delete_percentile must be in [0, 100]")
        if int(cfg["seed_trial_uses"]) < 0:
            raise ValueError("seed_trial_uses must be >= 0")
        if rank_by not in RANK_BY:
            raise ValueError(f"rank_by must be one of {RANK_BY}, got {rank_by!r}")
        self.cache_capacity = int(cache_capacity)
        self.reservoir_capacity = int(reservoir_capacity)
        self.ema_beta = float(ema_beta)
        self.new_skill_policy = new_skill_policy
        self.trial_uses = int(cfg["trial_uses"])
        self.trial_steps = int(cfg["trial_steps"])
        max_protected = cfg["max_protected"]
        self.max_protected = (
            max(0, self.cache_capacity // 2)
            if max_protected is None
            else max(0, min(int(max_protected), self.cache_capacity))
        )
        self.delete_percentile = float(cfg["delete_percentile"])
        self.success_threshold = float(cfg["success_threshold"])
        # seeds stay (no EVICT, LOAD-demotion, DELETE or overflow) until used this many times,
        # so they reach Phase II and get tried there (docs/design.md: seeds reach Phase II)
        self.seed_trial_uses = int(cfg["seed_trial_uses"])
        self.rank_by = rank_by

    def settings(self) -> dict[str, Any]:
        """The library's current :data:`SETTINGS`."""
        return {name: getattr(self, name) for name in SETTINGS}

    def _resolve_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ValueError(f"unknown library setting(s) {unknown}; known: {list(SETTINGS)}")
        probe = object.__new__(SkillLibrary)
        probe._apply_settings({**self.settings(), **settings})
        return probe.settings()

    def settings_diff(self, **settings) -> dict[str, tuple[Any, Any]]:
        """``{name: (current, new)}`` for each setting that ``settings`` would change (validated;
        settings not given keep their value; ``max_protected=None`` is C_c // 2 of the new C_c)."""
        new = self._resolve_settings(settings)
        return {k: (getattr(self, k), new[k]) for k in SETTINGS if getattr(self, k) != new[k]}

    def reconfigure(self, step: int | None = None, **settings) -> tuple[dict[str, tuple[Any, Any]], StepEvents]:
        """Take ``settings`` (a run's ``arise.library.*``) over the ones the library was saved with.

        Returns the changes (:meth:`settings_diff`) and what the new capacities moved: a smaller
        C_c evicts the excess cache entries to the reservoir by the configured ranking (as EVICT
        does, protected entries last), a smaller C_r then drops reservoir entries (as the
        overflow rule does). Those moves are also reported in the next :meth:`step`'s events, so
        the per-step library log shows them. ``step`` (default: the library's last step) is the
        step the trial protection is judged at."""
        new = self._resolve_settings(settings)
        changes = {k: (getattr(self, k), new[k]) for k in SETTINGS if getattr(self, k) != new[k]}
        self._apply_settings(new)
        step = int(self.last_step or 0) if step is None else int(step)
        ev = StepEvents(step=step)
        self._evict_excess(self._protected_ids(step), ev)
        self._drop_overflow(ev)
        ev.cache_size, ev.reservoir_size = len(self.cache), len(self.reservoir)
        self._pending["evicted"] += ev.evicted
        self._pending["overflow"] += ev.overflow
        return changes, ev

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return len(self.cache) + len(self.reservoir)

    def __contains__(self, skill_id: object) -> bool:
        return self.get(skill_id) is not None  # type: ignore[arg-type]

    def entries(self) -> list[SkillEntry]:
        return [*self.cache, *self.reservoir]

    def get(self, skill_id: str) -> SkillEntry | None:
        for e in self.cache:
            if e.skill_id == skill_id:
                return e
        for e in self.reservoir:
            if e.skill_id == skill_id:
                return e
        return None

    def tier_of(self, skill_id: str) -> str | None:
        if any(e.skill_id == skill_id for e in self.cache):
            return "cache"
        if any(e.skill_id == skill_id for e in self.reservoir):
            return "reservoir"
        return None

    def cache_docs(self) -> list[SkillDoc]:
        return [e.doc for e in self.cache]

    def cache_ids(self) -> list[str]:
        return [e.skill_id for e in self.cache]

    # ------------------------------------------------------------ statistics
    @property
    def global_mean_reward(self) -> float | None:
        return self.global_reward_sum / self.global_count if self.global_count else None

    @property
    def global_success_rate(self) -> float | None:
        return self.global_success_count / self.global_count if self.global_count else None

    def ig_proxy(self, skill_id: str) -> float | None:
        """IG proxy of App. D.3: 1/2 (r̄_k - r̄_global) + 1/2 (SR_k - SR_global);
        None when the skill is unused or no global stats were recorded."""
        e = self.get(skill_id)
        if e is None or not e.usage_count or not self.global_count:
            return None
        return 0.5 * (e.mean_reward - self.global_mean_reward) + 0.5 * (e.success_rate - self.global_success_rate)

    def ig_proxies(self) -> dict[str, float | None]:
        return {e.skill_id: self.ig_proxy(e.skill_id) for e in self.entries()}

    # -------------------------------------------------------------- internals
    def _new_entry(self, doc: SkillDoc, step: int, utility: float, provenance: Provenance | None = None) -> SkillEntry:
        sid = f"s{self.next_id:06d}"
        self.next_id += 1
        return SkillEntry(
            skill_id=sid,
            doc=doc,
            utility=float(utility),
            created_step=int(step),
            updated_step=int(step),
            provenance=provenance or Provenance(),
        )

    def _find_duplicate(self, doc: SkillDoc, extra: Sequence[SkillEntry] = ()) -> str | None:
        text, key = doc.to_json(), _dup_key(doc)
        for e in (*self.cache, *self.reservoir, *extra):
            if e.doc.to_json() == text or _dup_key(e.doc) == key:
                return e.skill_id
        return None

    def _on_trial(self, e: SkillEntry, step: int) -> bool:
        return (
            self.new_skill_policy == "fair_trial"
            and e.usage_count < self.trial_uses
            and (step - e.created_step) < self.trial_steps
        )

    def _seed_on_trial(self, e: SkillEntry) -> bool:
        return e.origin == "seed" and e.usage_count < self.seed_trial_uses

    def _protected_ids(self, step: int) -> set[str]:
        seeds = {e.skill_id for e in self.cache if self._seed_on_trial(e)}
        if self.new_skill_policy != "fair_trial" or self.max_protected == 0:
            return seeds
        trial = [e for e in self.cache if self._on_trial(e, step) and e.skill_id not in seeds]
        # newest first: larger created_step, then larger id (ids are monotone)
        trial.sort(key=lambda e: (e.created_step, e.skill_id), reverse=True)
        return seeds | {e.skill_id for e in trial[: self.max_protected]}

    def _low_key(self):
        return SkillEntry._uplift_key_low if self.rank_by == "uplift" else SkillEntry._sort_key_low

    def _high_key(self, e: SkillEntry) -> tuple:
        """LOAD's choice of the best reservoir entry (maximised)."""
        base = (e.utility, e.usage_count, -e.created_step, _neg_id(e.skill_id))
        if self.rank_by == "uplift":
            return (0.0 if e.uplift is None else e.uplift, *base)
        return base

    def _rank_value(self, e: SkillEntry) -> float:
        """The value LOAD compares (reservoir best vs cache lowest)."""
        if self.rank_by == "uplift":
            return 0.0 if e.uplift is None else e.uplift
        return e.utility

    def _is_success(self, reward: float) -> bool:
        return reward > self.success_threshold

    def _evict_excess(self, protected: set[str], ev: StepEvents) -> None:
        """EVICT: while the cache holds more than C_c, move the lowest entry (unprotected ones
        first, by the configured ranking) to the reservoir."""
        excess = len(self.cache) - self.cache_capacity
        if excess <= 0:
            return
        low_key = self._low_key()
        victims = sorted((e for e in self.cache if e.skill_id not in protected), key=low_key)[:excess]
        if len(victims) < excess:
            rest = sorted((e for e in self.cache if e.skill_id in protected), key=low_key)
            victims += rest[: excess - len(victims)]
        gone = {id(e) for e in victims}
        self.cache[:] = [e for e in self.cache if id(e) not in gone]
        self.reservoir.extend(victims)
        ev.evicted.extend(e.skill_id for e in victims)

    def _drop_overflow(self, ev: StepEvents) -> None:
        """OVERFLOW (not in the paper): keep len(reservoir) <= C_r, never-used entries first."""
        excess = len(self.reservoir) - self.reservoir_capacity
        if excess <= 0:
            return
        victims = sorted(
            self.reservoir,
            key=lambda e: (
                self._seed_on_trial(e),
                e.usage_count > 0,
                e.utility,
                e.usage_count,
                e.created_step,
                e.skill_id,
            ),
        )[:excess]
        gone = {id(e) for e in victims}
        self.reservoir[:] = [e for e in self.reservoir if id(e) not in gone]
        ev.overflow.extend(e.skill_id for e in victims)

    # ------------------------------------------------------------------- step
    def step(
        self,
        observations: Iterable[tuple[str, float]] = (),
        new_skills: Iterable[SkillDoc | tuple[SkillDoc, Provenance]] = (),
        step: int = 0,
        *,
        global_rewards: Iterable[float] | None = None,
        contrasts: Iterable[Contrast] = (),
    ) -> StepEvents:
        """One training step's maintenance: UPDATE -> ADD -> EVICT -> LOAD -> DELETE.

        ``new_skills`` holds skill documents, each optionally paired with its :class:`Provenance`;
        ``contrasts`` are the step's within-group comparisons (UPDATE adds them to the uplift
        counts of the skills they name; unknown skills are skipped)."""
        step = int(step)
        ev = StepEvents(step=step)
        self.last_step = step

        # ---- UPDATE: one EMA update and one use per observation, in order
        by_id: dict[str, SkillEntry] = {}
        for e in (*self.cache, *self.reservoir):
            by_id.setdefault(e.skill_id, e)
        updated: set[str] = set()
        b = self.ema_beta
        for obs in observations:
            try:
                sid, reward = obs
                reward = float(reward)
            except (TypeError, ValueError):
                ev.unknown_observations.append(repr(obs)[:80])
                continue
            e = by_id.get(sid) if isinstance(sid, str) else None
            if e is None or not math.isfinite(reward):
                ev.unknown_observations.append(str(sid)[:80])
                continue
            e.utility = b * e.utility + (1.0 - b) * reward
            e.usage_count += 1
            e.reward_sum += reward
            e.success_count += int(self._is_success(reward))
            e.updated_step = step
            ev.n_observations += 1
            if e.skill_id not in updated:
                updated.add(e.skill_id)
                ev.updated.append(e.skill_id)
        for c in contrasts:
            e = by_id.get(c.skill_id)
            if e is not None and e.add_contrast(c):
                ev.contrasts += 1
        if global_rewards is not None:
            for r in global_rewards:
                r = float(r)
                if math.isfinite(r):
                    self.global_reward_sum += r
                    self.global_success_count += int(self._is_success(r))
                    self.global_count += 1

        # ---- ADD
        prior = 0.0
        if self.new_skill_policy == "fair_trial" and self.cache:
            prior = float(np.mean([e.utility for e in self.cache]))
        # duplicate check against a key index built once per step: equal to_json() texts imply
        # equal keys, so "same text or same key" (_find_duplicate) is "same key"; first entry wins
        dup_index: dict[tuple[str, str], str] = {}
        for e in (*self.cache, *self.reservoir):
            dup_index.setdefault(_dup_key(e.doc), e.skill_id)
        for item in new_skills:
            doc, provenance = item if isinstance(item, tuple) else (item, None)
            if not isinstance(doc, SkillDoc):
                raise TypeError(f"new_skills must contain SkillDoc, got {type(doc).__name__}")
            if provenance is not None and not isinstance(provenance, Provenance):
                raise TypeError(f"a new skill's provenance must be a Provenance, got {type(provenance).__name__}")
            key = _dup_key(doc)
            dup = dup_index.get(key)
            if dup is not None:
                ev.dropped_duplicates.append({"skill_name": doc.skill_name, "duplicate_of": dup})
                continue
            entry = self._new_entry(doc, step=step, utility=prior, provenance=provenance)
            self.cache.append(entry)
            dup_index[key] = entry.skill_id
            ev.added.append(entry.skill_id)

        # ---- EVICT: while cache > C_c, move the lowest (unprotected) entry to the reservoir
        protected = self._protected_ids(step)
        ev.protected = [e.skill_id for e in self.cache if e.skill_id in protected]
        low_key = self._low_key()
        self._evict_excess(protected, ev)

        # ---- LOAD: swap while some reservoir utility > lowest (unprotected) cache utility
        blocked = set(ev.evicted)  # a just-evicted skill does not re-enter in this step
        while True:
            pool = [e for e in self.reservoir if e.skill_id not in blocked]
            low_cands = [e for e in self.cache if e.skill_id not in protected]
            if not pool or not low_cands:
                break
            best = max(pool, key=self._high_key)
            low = min(low_cands, key=low_key)
            if not self._rank_value(best) > self._rank_value(low):
                break
            ci = next(i for i, e in enumerate(self.cache) if e is low)
            ri = next(i for i, e in enumerate(self.reservoir) if e is best)
            self.cache[ci] = best
            del self.reservoir[ri]
            self.reservoir.append(low)
            blocked.add(low.skill_id)
            ev.loaded.append({"loaded": best.skill_id, "demoted": low.skill_id})

        # ---- DELETE: reservoir entries with utility < P10(reservoir) and zero usage
        if self.reservoir:
            utils = np.array([e.utility for e in self.reservoir], dtype=np.float64)
            threshold = float(np.percentile(utils, self.delete_percentile))
            keep = []
            for e in self.reservoir:
                if e.utility < threshold and e.usage_count == 0 and not self._seed_on_trial(e):
                    ev.deleted.append(e.skill_id)
                else:
                    keep.append(e)
            self.reservoir[:] = keep

        # ---- OVERFLOW (not in the paper): keep len(reservoir) <= C_r
        self._drop_overflow(ev)

        # moves made by reconfigure() since the last step (a resumed run's new capacities)
        ev.evicted[:0] = self._pending["evicted"]
        ev.overflow[:0] = self._pending["overflow"]
        self._pending = {"evicted": [], "overflow": []}
        ev.cache_size, ev.reservoir_size = len(self.cache), len(self.reservoir)
        return ev

    # ------------------------------------------------------------ persistence
    def _config(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "cache_capacity": self.cache_capacity,
            "reservoir_capacity": self.reservoir_capacity,
            "ema_beta": self.ema_beta,
            "new_skill_policy": self.new_skill_policy,
            "trial_uses": self.trial_uses,
            "trial_steps": self.trial_steps,
            "max_protected": self.max_protected,
            "delete_percentile": self.delete_percentile,
            "success_threshold": self.success_threshold,
            "seed_trial_uses": self.seed_trial_uses,
            "rank_by": self.rank_by,
            "next_id": self.next_id,
            "global_reward_sum": self.global_reward_sum,
            "global_success_count": self.global_success_count,
            "global_count": self.global_count,
            "last_step": self.last_step,
        }

    def to_records(self) -> list[dict[str, Any]]:
        rows = []
        for tier, entries in (("cache", self.cache), ("reservoir", self.reservoir)):
            for pos, e in enumerate(entries):
                rows.append(
                    {
                        "tier": tier,
                        "position": pos,
                        "skill_id": e.skill_id,
                        "skill_name": e.doc.skill_name,
                        "problem_type": e.doc.problem_type,
                        "key_insight": e.doc.key_insight,
                        "method": list(e.doc.method),
                        "check": e.doc.check,
                        "utility": float(e.utility),
                        "usage_count": int(e.usage_count),
                        "created_step": int(e.created_step),
                        "updated_step": int(e.updated_step),
                        "reward_sum": float(e.reward_sum),
                        "success_count": int(e.success_count),
                        "origin": e.provenance.origin,
                        "source_step": e.provenance.step,
                        "source_uid": e.provenance.uid,
                        "source_query": e.provenance.query,
                        "source_rewards": list(e.provenance.rewards),
                        "uplift_n": int(e.uplift_n),
                        "uplift_successes": int(e.uplift_successes),
                        "uplift_base_n": int(e.uplift_base_n),
                        "uplift_base_successes": int(e.uplift_base_successes),
                        "uplift_groups": int(e.uplift_groups),
                        "uplift_weight": float(e.uplift_weight),
                        "uplift_wdiff": float(e.uplift_wdiff),
                        "uplift_wvar": float(e.uplift_wvar),
                        "ig_exact": e.ig_exact,
                        "ig_step": e.ig_step,
                    }
                )
        return rows

    def state_dict(self) -> dict[str, Any]:
        return {"config": self._config(), "records": self.to_records()}

    @classmethod
    def from_records(
        cls, records: Sequence[dict[str, Any]], config: dict[str, Any] | None = None, *, source: str = "<records>"
    ) -> SkillLibrary:
        cfg = dict(config or {})
        version = cfg.get("format_version", FORMAT_VERSION)
        if version not in READABLE_VERSIONS:
            raise LibraryFormatError(
                f"{source}: unsupported format_version {version!r} (readable: {READABLE_VERSIONS})"
            )
        # a flipped byte in a key name must not fall back to a default silently: the metadata of the
        # current format holds exactly the keys it writes, an older one no key it never wrote
        known = set(cls()._config())
        unknown = sorted(set(cfg) - known)
        missing = sorted(known - set(cfg)) if version == FORMAT_VERSION and config is not None else []
        if unknown or missing:
            raise LibraryFormatError(f"{source}: bad library metadata: unknown keys {unknown}, missing keys {missing}")
        try:
            lib = cls(
                cache_capacity=cfg.get("cache_capacity", 10),
                reservoir_capacity=cfg.get("reservoir_capacity", 100),
                ema_beta=cfg.get("ema_beta", 0.9),
                new_skill_policy=cfg.get("new_skill_policy", "fair_trial"),
                trial_uses=cfg.get("trial_uses", 8),
                trial_steps=cfg.get("trial_steps", 20),
                max_protected=cfg.get("max_protected"),
                delete_percentile=cfg.get("delete_percentile", 10.0),
                success_threshold=cfg.get("success_threshold", 0.0),
                seed_trial_uses=cfg.get("seed_trial_uses", 0),
                rank_by=cfg.get("rank_by", "utility"),
            )
            lib.global_reward_sum = float(cfg.get("global_reward_sum", 0.0))
            lib.global_success_count = int(cfg.get("global_success_count", 0))
            lib.global_count = int(cfg.get("global_count", 0))
            lib.last_step = None if cfg.get("last_step") is None else int(cfg["last_step"])
        except (TypeError, ValueError) as e:
            raise LibraryFormatError(f"{source}: bad library metadata: {e}") from e
        tiers: dict[str, list[tuple[int, SkillEntry]]] = {"cache": [], "reservoir": []}
        seen: set[str] = set()
        max_num = 0
        restarted = 0
        for i, r in enumerate(records):
            try:
                entry, tier, pos = _entry_from_record(r)
            except (KeyError, TypeError, ValueError) as e:
                raise LibraryFormatError(f"{source}: row {i}: {e}") from e
            if version == 2 and entry.uplift_n:
                restarted += 1
            if entry.skill_id in seen:
                raise LibraryFormatError(f"{source}: row {i}: field 'skill_id': duplicate id {entry.skill_id!r}")
            seen.add(entry.skill_id)
            if entry.skill_id[1:].isdigit():
                max_num = max(max_num, int(entry.skill_id[1:]))
            tiers[tier].append((pos, entry))
        for tier, items in tiers.items():
            items.sort(key=lambda pe: pe[0])
            if [p for p, _ in items] != list(range(len(items))):
                raise LibraryFormatError(f"{source}: field 'position': tier {tier!r} positions are not 0..n-1")
        lib.cache = [e for _, e in tiers["cache"]]
        lib.reservoir = [e for _, e in tiers["reservoir"]]
        if len(lib.cache) > lib.cache_capacity or len(lib.reservoir) > lib.reservoir_capacity:
            raise LibraryFormatError(f"{source}: tier sizes exceed capacities")
        lib.next_id = max(int(cfg.get("next_id", 1)), max_num + 1)
        if restarted:
            logger.warning(
                f"{source}: a format-version-2 library: the uplift of {restarted} skill(s) restarts unmeasured "
                "(version 2 pooled the counts over query groups, which confounds a skill with its queries; "
                "the counts are kept)"
            )
        return lib

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> SkillLibrary:
        return cls.from_records(state["records"], state["config"], source="<state_dict>")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SkillLibrary):
            return NotImplemented
        return self.state_dict() == other.state_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"SkillLibrary(cache={len(self.cache)}/{self.cache_capacity}, "
            f"reservoir={len(self.reservoir)}/{self.reservoir_capacity}, policy={self.new_skill_policy!r})"
        )

    def save(self, path: str | os.PathLike) -> None:
        """Atomically write the library as parquet (temp file + fsync + os.replace + dir fsync)."""
        import pyarrow as pa

        path = Path(path)
        table = pa.Table.from_pylist(self.to_records(), schema=_arrow_schema())
        table = table.replace_schema_metadata({_META_KEY: json.dumps(self._config()).encode()})
        write_table_atomic(table, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SkillLibrary:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = Path(path)
        if not path.is_file():
            raise LibraryFormatError(f"{path}: library file not found")
        try:
            table = pq.read_table(str(path), page_checksum_verification=True)  # files without checksums load too
        except Exception as e:  # pyarrow raises ArrowInvalid/OSError on truncation/garbage
            raise LibraryFormatError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from e
        meta = table.schema.metadata or {}
        if _META_KEY not in meta:
            raise LibraryFormatError(f"{path}: missing library metadata key {_META_KEY.decode()!r}")
        try:
            config = json.loads(meta[_META_KEY].decode("utf-8"))
            if not isinstance(config, dict):
                raise ValueError("metadata is not a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            raise LibraryFormatError(f"{path}: malformed library metadata: {e}") from e
        expected = _arrow_schema()
        version = config.get("format_version")
        if version in _COLUMNS_OF_VERSION:  # an older file: the columns of its version
            expected = pa.schema(list(expected)[: _COLUMNS_OF_VERSION[version]])
        try:
            names = table.schema.names
        except UnicodeDecodeError as e:  # a corrupted byte in a column name
            raise LibraryFormatError(f"{path}: corrupted column names ({e})") from e
        if names != expected.names:
            raise LibraryFormatError(f"{path}: columns {names} != expected {expected.names}")
        for f in expected:
            actual = table.schema.field(f.name).type
            if actual != f.type:
                raise LibraryFormatError(f"{path}: column {f.name!r} has type {actual}, expected {f.type}")
        try:
            records = table.to_pylist()
        except (UnicodeDecodeError, pa.ArrowException) as e:  # corrupted string data
            raise LibraryFormatError(f"{path}: corrupted contents ({type(e).__name__}: {e})") from e
        return cls.from_records(records, config, source=str(path))


# ------------------------------------------------------------------ the library as a JSONL file
# One skill per line (`python -m recipe.arise.tools.inspect_run RUN --export skills.jsonl`), readable by
# `arise.library.load_from`. Fields: "skill" (the five-field document; required), "id", "tier"
# (cache | reservoir; default cache), "utility", "uses", "created_step", "updated_step",
# "provenance" {origin, step, uid, query, rewards}, "counts" {the raw counters a resumed
# estimate needs}, "ig_exact", "ig_step"; and, computed at export and ignored on load, "uplift",
# "uplift_se", "ig_proxy", "mean_reward", "success_rate". A line that is a bare skill document
# (the seed-skill format) is read as {"skill": line}. The library-wide settings and global reward
# statistics are not part of the file: the loading run's config gives the settings.
_COUNT_FIELDS = {
    "reward_sum": float,
    "success_count": int,
    "uplift_n": int,
    "uplift_successes": int,
    "uplift_base_n": int,
    "uplift_base_successes": int,
    "uplift_groups": int,
    "uplift_weight": float,
    "uplift_wdiff": float,
    "uplift_wvar": float,
}
_DERIVED_FIELDS = ("uplift", "uplift_se", "ig_proxy", "mean_reward", "success_rate")
_LINE_FIELDS = (
    "skill",
    "id",
    "tier",
    "utility",
    "uses",
    "created_step",
    "updated_step",
    "provenance",
    "counts",
    "ig_exact",
    "ig_step",
    *_DERIVED_FIELDS,
)
_DOC_FIELDS = ("skill_name", "problem_type", "key_insight", "method", "check")


def export_rows(lib: SkillLibrary) -> list[dict[str, Any]]:
    """One JSON-ready dict per entry, cache first then reservoir, in library order."""
    ig = lib.ig_proxies()
    rows = []
    for tier, entries in (("cache", lib.cache), ("reservoir", lib.reservoir)):
        for e in entries:
            p = e.provenance
            rows.append(
                {
                    "skill": e.doc.to_dict(),
                    "id": e.skill_id,
                    "tier": tier,
                    "utility": float(e.utility),
                    "uses": int(e.usage_count),
                    "uplift": e.uplift,
                    "uplift_se": e.uplift_se,
                    "ig_proxy": ig.get(e.skill_id),
                    "mean_reward": e.mean_reward,
                    "success_rate": e.success_rate,
                    "ig_exact": e.ig_exact,
                    "ig_step": e.ig_step,
                    "created_step": int(e.created_step),
                    "updated_step": int(e.updated_step),
                    "provenance": {
                        "origin": p.origin,
                        "step": p.step,
                        "uid": p.uid,
                        "query": p.query,
                        "rewards": list(p.rewards),
                    },
                    "counts": {name: kind(getattr(e, name)) for name, kind in _COUNT_FIELDS.items()},
                }
            )
    return rows


def export_jsonl(lib: SkillLibrary, path: str | os.PathLike) -> Path:
    """Write :func:`export_rows` as JSON lines (temp file + ``os.replace``: never a torn file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in export_rows(lib))
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
    return path


def _check_int(value: Any, name: str, minimum: int | None = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"field {name!r}: must be an integer{bound}, got {value!r}")
    return value


def _check_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"field {name!r}: must be a finite number, got {value!r}")
    return float(value)


def _record_from_line(obj: Any) -> dict[str, Any]:
    """A :func:`_entry_from_record` record from one JSONL line (errors name the line's field)."""
    if not isinstance(obj, dict):
        raise ValueError(f"not a JSON object (got {type(obj).__name__})")
    if "skill" not in obj and "skill_name" in obj:  # a bare skill document
        obj = {"skill": obj}
    unknown = sorted(set(obj) - set(_LINE_FIELDS))
    if unknown:
        raise ValueError(f"field {unknown[0]!r}: unknown field (known: {', '.join(_LINE_FIELDS)})")
    if "skill" not in obj:
        raise ValueError("field 'skill': missing")
    doc = obj["skill"]
    if not isinstance(doc, dict):
        raise ValueError(f"field 'skill': must be a JSON object, got {type(doc).__name__}")
    for name in _DOC_FIELDS:
        if name not in doc:
            raise ValueError(f"field 'skill.{name}': missing")
        if name == "method":
            if not isinstance(doc[name], list) or not all(isinstance(x, str) for x in doc[name]):
                raise ValueError("field 'skill.method': must be a list of strings")
        elif not isinstance(doc[name], str):
            raise ValueError(f"field 'skill.{name}': must be a string, got {type(doc[name]).__name__}")
    extra = sorted(set(doc) - set(_DOC_FIELDS))
    if extra:
        raise ValueError(f"field 'skill.{extra[0]}': unknown field")
    tier = obj.get("tier", "cache")
    if tier not in TIERS:
        raise ValueError(f"field 'tier': must be one of {TIERS}, got {tier!r}")
    sid = obj.get("id")
    if sid is not None and (not isinstance(sid, str) or not sid):
        raise ValueError(f"field 'id': must be a non-empty string, got {sid!r}")
    created = _check_int(obj.get("created_step", 0), "created_step")
    record: dict[str, Any] = {
        "tier": tier,
        "position": 0,
        "skill_id": sid or "",
        **{name: doc[name] for name in _DOC_FIELDS},
        "utility": _check_number(obj.get("utility", 0.0), "utility"),
        "usage_count": _check_int(obj.get("uses", 0), "uses"),
        "created_step": created,
        "updated_step": _check_int(obj.get("updated_step", created), "updated_step"),
    }
    counts = obj.get("counts", {})
    if not isinstance(counts, dict):
        raise ValueError(f"field 'counts': must be a JSON object, got {type(counts).__name__}")
    extra = sorted(set(counts) - set(_COUNT_FIELDS))
    if extra:
        raise ValueError(f"field 'counts.{extra[0]}': unknown field")
    for name, kind in _COUNT_FIELDS.items():
        value = counts.get(name, kind(0))
        if kind is int:
            record[name] = _check_int(value, f"counts.{name}")
        else:
            record[name] = _check_number(value, f"counts.{name}")
    if record["success_count"] > record["usage_count"]:
        raise ValueError("field 'counts.success_count': more successes than uses")
    prov = obj.get("provenance", {"origin": "external"})
    if not isinstance(prov, dict):
        raise ValueError(f"field 'provenance': must be a JSON object, got {type(prov).__name__}")
    extra = sorted(set(prov) - {"origin", "step", "uid", "query", "rewards"})
    if extra:
        raise ValueError(f"field 'provenance.{extra[0]}': unknown field")
    origin = prov.get("origin", "external")
    if origin not in ORIGINS:
        raise ValueError(f"field 'provenance.origin': must be one of {ORIGINS}, got {origin!r}")
    step = prov.get("step")
    if step is not None:
        _check_int(step, "provenance.step")
    for name in ("uid", "query"):
        if not isinstance(prov.get(name, ""), str):
            raise ValueError(f"field 'provenance.{name}': must be a string")
    rewards = prov.get("rewards", [])
    if not isinstance(rewards, list):
        raise ValueError("field 'provenance.rewards': must be a list of numbers")
    for r in rewards:
        _check_number(r, "provenance.rewards")
    record.update(
        origin=origin,
        source_step=step,
        source_uid=prov.get("uid", ""),
        source_query=prov.get("query", ""),
        source_rewards=rewards,
    )
    ig_exact, ig_step = obj.get("ig_exact"), obj.get("ig_step")
    record["ig_exact"] = None if ig_exact is None else _check_number(ig_exact, "ig_exact")
    record["ig_step"] = None if ig_step is None else _check_int(ig_step, "ig_step")
    return record


def library_from_jsonl(path: str | os.PathLike, step: int | None = None, **settings) -> tuple[SkillLibrary, StepEvents]:
    """A library with ``settings`` (the run's config) holding the skills of a JSONL file.

    Each line's tier is kept while the tiers fit: more cache lines than C_c are evicted to the
    reservoir by the configured ranking, more reservoir entries than C_r dropped by the overflow
    rule (the returned events list them). Ids are kept (lines without one get fresh ids).
    Raises :class:`LibraryFormatError` naming the file, the line and the field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LibraryFormatError(f"{path}: cannot read ({type(e).__name__}: {e})") from e
    lib = SkillLibrary(seed_skills=(), **settings)
    seen_ids: dict[str, int] = {}
    seen_docs: dict[tuple[str, str], int] = {}
    pending: list[tuple[str, str, SkillEntry]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise LibraryFormatError(f"{path}: line {number}: not valid JSON ({e.msg} at column {e.colno})") from e
        try:
            record = _record_from_line(obj)
            given_id = record["skill_id"]
            record["skill_id"] = given_id or "pending"
            entry, tier, _ = _entry_from_record(record)
        except (KeyError, TypeError, ValueError) as e:
            raise LibraryFormatError(f"{path}: line {number}: {e}") from e
        if given_id:
            if given_id in seen_ids:
                raise LibraryFormatError(
                    f"{path}: line {number}: field 'id': {given_id!r} is also the id of line {seen_ids[given_id]}"
                )
            seen_ids[given_id] = number
        key = _dup_key(entry.doc)
        if key in seen_docs:
            raise LibraryFormatError(
                f"{path}: line {number}: field 'skill': the same skill as line {seen_docs[key]} (name and insight)"
            )
        seen_docs[key] = number
        pending.append((tier, given_id, entry))
    numbers = [int(sid[1:]) for sid in seen_ids if sid[:1] == "s" and sid[1:].isdigit()]
    lib.next_id = max(numbers, default=0) + 1
    for tier, given_id, entry in pending:
        if not given_id:
            entry.skill_id = f"s{lib.next_id:06d}"
            lib.next_id += 1
        (lib.reservoir if tier == "reservoir" else lib.cache).append(entry)
    ref = max((max(e.created_step, e.updated_step) for _, _, e in pending), default=0) if step is None else step
    ev = StepEvents(step=int(ref))
    lib._evict_excess(lib._protected_ids(int(ref)), ev)
    lib._drop_overflow(ev)
    ev.cache_size, ev.reservoir_size = len(lib.cache), len(lib.reservoir)
    lib._pending["evicted"] += ev.evicted
    lib._pending["overflow"] += ev.overflow
    return lib, ev


def load_library_file(
    path: str | os.PathLike, step: int | None = None, **settings
) -> tuple[SkillLibrary, dict[str, tuple[Any, Any]], StepEvents]:
    """A stored library (``library.parquet`` or an exported ``.jsonl``) under the run's ``settings``.

    Returns the library, the settings the file held that the run changed (``{name: (file, run)}``;
    always empty for a JSONL file, which holds no settings) and what fitting the run's capacities
    moved (:meth:`SkillLibrary.reconfigure`). Settings not given keep the file's value."""
    path = Path(path)
    if path.suffix == ".jsonl":
        lib, ev = library_from_jsonl(path, step=step, **settings)
        return lib, {}, ev
    lib = SkillLibrary.load(path)
    changes, ev = lib.reconfigure(step=step, **settings)
    return lib, changes, ev


def _neg_id(sid: str) -> tuple:
    # prefer the older (smaller) id on full ties when maximising
    return tuple(-ord(c) for c in sid)


def _arrow_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("tier", pa.string()),
            ("position", pa.int64()),
            ("skill_id", pa.string()),
            ("skill_name", pa.string()),
            ("problem_type", pa.string()),
            ("key_insight", pa.string()),
            ("method", pa.list_(pa.string())),
            ("check", pa.string()),
            ("utility", pa.float64()),
            ("usage_count", pa.int64()),
            ("created_step", pa.int64()),
            ("updated_step", pa.int64()),
            ("reward_sum", pa.float64()),
            ("success_count", pa.int64()),
            # format version 2
            ("origin", pa.string()),
            ("source_step", pa.int64()),
            ("source_uid", pa.string()),
            ("source_query", pa.string()),
            ("source_rewards", pa.list_(pa.float64())),
            ("uplift_n", pa.int64()),
            ("uplift_successes", pa.int64()),
            ("uplift_base_n", pa.int64()),
            ("uplift_base_successes", pa.int64()),
            ("ig_exact", pa.float64()),
            ("ig_step", pa.int64()),
            # format version 3
            ("uplift_groups", pa.int64()),
            ("uplift_weight", pa.float64()),
            ("uplift_wdiff", pa.float64()),
            ("uplift_wvar", pa.float64()),
        ]
    )


# format version -> how many of the first columns of _arrow_schema() its files hold
_COLUMNS_OF_VERSION = {1: 14, 2: 25, 3: 29}


def write_table_atomic(table, path: str | os.PathLike) -> Path:
    """Write a pyarrow table as parquet so that ``path`` always holds a complete file
    (:func:`atomic_write`)."""
    return atomic_write(path, lambda f: _write_table(table, f))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write) -> Path:
    """``write(f)`` into a binary file so that ``path`` always holds a complete file.

    Temp file in the same folder, fsync, ``os.replace``, folder fsync: a crash (or power loss)
    at any point leaves either the previous file or the new one, never a torn one. The file gets
    the permissions an ordinary ``open`` would (0666 less the umask), not mkstemp's 0600: a
    colleague who can read the checkpoint's model shards can read its library too.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # cleanup only: the exception goes on
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(str(path.parent), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - some filesystems refuse directory fsync
        pass
    return path


def _write_table(table, f) -> None:
    """The parquet writer (module-level so tests can simulate a crash mid-save).

    The file is built in memory and written with one ``f.write``: pyarrow's Python-file wrapper
    would issue many small writes (~0.35 ms more CPU per save); the bytes are identical."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, write_page_checksum=True)  # load() verifies them: a flipped byte is an error
    f.write(buf.getvalue())


def _entry_from_record(r: dict[str, Any]) -> tuple[SkillEntry, str, int]:
    if not isinstance(r, dict):
        raise TypeError("record is not a mapping")
    tier = r["tier"]
    if tier not in TIERS:
        raise ValueError(f"field 'tier': must be one of {TIERS}, got {tier!r}")
    for name in ("skill_id", "skill_name", "problem_type", "key_insight", "check"):
        if not isinstance(r[name], str):
            raise ValueError(f"field {name!r}: must be a string, got {type(r[name]).__name__}")
    if not r["skill_id"]:
        raise ValueError("field 'skill_id': empty")
    method = r["method"]
    if not isinstance(method, (list, tuple)) or not all(isinstance(s, str) for s in method):
        raise ValueError("field 'method': must be a list of strings")
    nums = {}
    for name in ("position", "usage_count", "created_step", "updated_step", "success_count"):
        v = r[name]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"field {name!r}: must be an integer, got {v!r}")
        nums[name] = v
    for name in ("utility", "reward_sum"):
        v = r[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"field {name!r}: must be a finite number, got {v!r}")
        nums[name] = float(v)
    if nums["usage_count"] < 0 or nums["success_count"] < 0 or nums["position"] < 0:
        raise ValueError("fields 'position'/'usage_count'/'success_count' must be >= 0")
    doc = SkillDoc(r["skill_name"], r["problem_type"], r["key_insight"], tuple(method), r["check"])
    if "origin" not in r:  # format version 1: no provenance; its seeds are the entries of step 0
        r = {**r, "origin": "seed" if nums["created_step"] == 0 else "external"}
    for name in ("uplift_n", "uplift_successes", "uplift_base_n", "uplift_base_successes"):
        v = r.get(name, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"field {name!r}: must be an integer >= 0, got {v!r}")
        nums[name] = v
    if nums["uplift_successes"] > nums["uplift_n"] or nums["uplift_base_successes"] > nums["uplift_base_n"]:
        raise ValueError("fields 'uplift_*': more successes than trajectories")
    v = r.get("uplift_groups", 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"field 'uplift_groups': must be an integer >= 0, got {v!r}")
    nums["uplift_groups"] = v
    for name in ("uplift_weight", "uplift_wdiff", "uplift_wvar"):
        v = r.get(name, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"field {name!r}: must be a finite number, got {v!r}")
        nums[name] = float(v)
    if nums["uplift_weight"] < 0 or nums["uplift_wvar"] < 0:
        raise ValueError("fields 'uplift_weight'/'uplift_wvar' must be >= 0")
    if (nums["uplift_groups"] == 0) != (nums["uplift_weight"] == 0.0):
        raise ValueError("fields 'uplift_groups'/'uplift_weight': a weight needs groups and groups need a weight")
    ig_exact, ig_step = r.get("ig_exact"), r.get("ig_step")
    if ig_exact is not None and (isinstance(ig_exact, bool) or not math.isfinite(float(ig_exact))):
        raise ValueError(f"field 'ig_exact': must be a finite number or null, got {ig_exact!r}")
    rewards = r.get("source_rewards") or []
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rewards):
        raise ValueError("field 'source_rewards': must be a list of numbers")
    provenance = Provenance(
        origin=r["origin"],
        step=r.get("source_step"),
        uid=r.get("source_uid") or "",
        query=r.get("source_query") or "",
        rewards=tuple(rewards),
    )
    entry = SkillEntry(
        skill_id=r["skill_id"],
        doc=doc,
        utility=nums["utility"],
        usage_count=nums["usage_count"],
        created_step=nums["created_step"],
        updated_step=nums["updated_step"],
        reward_sum=nums["reward_sum"],
        success_count=nums["success_count"],
        provenance=provenance,
        uplift_n=nums["uplift_n"],
        uplift_successes=nums["uplift_successes"],
        uplift_base_n=nums["uplift_base_n"],
        uplift_base_successes=nums["uplift_base_successes"],
        uplift_groups=nums["uplift_groups"],
        uplift_weight=nums["uplift_weight"],
        uplift_wdiff=nums["uplift_wdiff"],
        uplift_wvar=nums["uplift_wvar"],
        ig_exact=None if ig_exact is None else float(ig_exact),
        ig_step=None if ig_step is None else int(ig_step),
    )
    return entry, tier, nums["position"]
