"""Two-tier skill library (cache + reservoir) of ARISE (paper App. C.2-C.3): the domain.

One training step's maintenance is :meth:`SkillLibrary.step`: the paper's five operations in the
order of App. C.3, each its own method -- :meth:`~SkillLibrary._op_update` (EMA utility),
:meth:`~SkillLibrary._op_add`, :meth:`~SkillLibrary._op_evict`, :meth:`~SkillLibrary._op_load`,
:meth:`~SkillLibrary._op_delete` -- then the reservoir overflow rule (not in the paper); it
returns a :class:`~recipe.arise.core.library_entry.StepEvents` record. See docs/design_core.md
for every decision the paper leaves open (tie-breaking, reservoir overflow, duplicates, and the
*library freeze* of the literal rules together with the default ``"fair_trial"`` fix).

The entries are :mod:`recipe.arise.core.library_entry`; the files are
:mod:`recipe.arise.core.library_store` (parquet) and :mod:`recipe.arise.core.library_jsonl`.

Framework free: stdlib + numpy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .library_entry import Contrast, Provenance, SkillEntry, StepEvents, dup_key, find_duplicate
from .library_store import library_config, library_from_records, library_records, load_library, save_library
from .skill import SkillDoc

__all__ = ["NEW_SKILL_POLICIES", "RANK_BY", "SETTINGS", "SkillLibrary"]

NEW_SKILL_POLICIES = ("fair_trial", "literal")
# what EVICT/LOAD rank by: the paper's EMA utility, or the measured causal uplift (docs/design.md)
RANK_BY = ("utility", "uplift")
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
    "seed_trial_steps",
    "selection_start_step",
    "rank_by",
    "dedupe",
)


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
        seed_trial_steps: int | None = None,
        selection_start_step: int = 0,
        rank_by: str = "utility",
        dedupe: bool = True,
    ) -> None:
        given = locals()  # the keyword arguments above are exactly SETTINGS
        self._apply_settings({name: given[name] for name in SETTINGS})
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
            if find_duplicate(doc, (*self.cache, *self.reservoir)) is not None:
                continue
            entry = self._new_entry(doc, step=0, utility=0.0, provenance=Provenance("seed", step=0))
            if len(self.cache) < self.cache_capacity:
                self.cache.append(entry)
            elif len(self.reservoir) < self.reservoir_capacity:
                self.reservoir.append(entry)

    # ---------------------------------------------------------------- settings
    def _apply_settings(self, cfg: dict[str, Any]) -> None:
        """Validate and set every one of :data:`SETTINGS` (``max_protected`` None = C_c // 2)."""
        cache_capacity, reservoir_capacity = cfg["cache_capacity"], cfg["reservoir_capacity"]
        ema_beta, new_skill_policy, rank_by = cfg["ema_beta"], cfg["new_skill_policy"], cfg["rank_by"]
        if int(cache_capacity) < 1 or int(reservoir_capacity) < 0:
            raise ValueError("cache_capacity must be >= 1 and reservoir_capacity >= 0")
        if not (0.0 <= float(ema_beta) <= 1.0):
            raise ValueError("ema_beta must be in [0, 1]")
        if new_skill_policy not in NEW_SKILL_POLICIES:
            raise ValueError(f"new_skill_policy must be one of {NEW_SKILL_POLICIES}, got {new_skill_policy!r}")
        if not (0.0 <= float(cfg["delete_percentile"]) <= 100.0):
            raise ValueError("delete_percentile must be in [0, 100]")
        counts = ("trial_uses", "trial_steps", "seed_trial_uses", "seed_trial_steps")
        if any(cfg[k] is not None and int(cfg[k]) < 0 for k in counts):
            raise ValueError(f"{', '.join(counts)} must be >= 0")
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
        # seeds stay (no EVICT, LOAD-demotion, DELETE or overflow) until used this many times, or
        # seed_trial_steps steps after selection starts, so they reach Phase II and get tried there
        self.seed_trial_uses = int(cfg["seed_trial_uses"])
        steps = cfg["seed_trial_steps"]
        self.seed_trial_steps = None if steps is None else int(steps)
        self.selection_start_step = int(cfg["selection_start_step"])
        self.rank_by = rank_by
        self.dedupe = bool(cfg["dedupe"])  # ADD drops a duplicate of an entry (not in the paper)

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

        Returns the changes (:meth:`settings_diff`) and what the new capacities moved
        (:meth:`fit_capacities`). ``step`` (default: the library's last step) is the step the
        trial protection is judged at."""
        changes = self.settings_diff(**settings)
        self._apply_settings(self._resolve_settings(settings))
        return changes, self.fit_capacities(int(self.last_step or 0) if step is None else int(step))

    def fit_capacities(self, step: int) -> StepEvents:
        """Outside a step, fit the tiers to C_c and C_r: the excess cache entries are evicted to the
        reservoir by the configured ranking (as EVICT does, protected entries last), then excess
        reservoir entries dropped (as the overflow rule does). The moves are also reported in the
        next :meth:`step`'s events, so the per-step library log shows them."""
        ev = StepEvents(step=step)
        self._evict_excess(self._protected_ids(step), ev)
        self._drop_overflow(ev)
        ev.cache_size, ev.reservoir_size = len(self.cache), len(self.reservoir)
        self._pending["evicted"] += ev.evicted
        self._pending["overflow"] += ev.overflow
        return ev

    def __len__(self) -> int:
        return len(self.cache) + len(self.reservoir)

    def __contains__(self, skill_id: object) -> bool:
        return self.get(skill_id) is not None  # type: ignore[arg-type]

    def entries(self) -> list[SkillEntry]:
        return [*self.cache, *self.reservoir]

    def get(self, skill_id: str) -> SkillEntry | None:
        return next((e for e in (*self.cache, *self.reservoir) if e.skill_id == skill_id), None)

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

    def _on_trial(self, e: SkillEntry, step: int) -> bool:
        return (
            self.new_skill_policy == "fair_trial"
            and e.usage_count < self.trial_uses
            and (step - e.created_step) < self.trial_steps
        )

    def _seed_on_trial(self, e: SkillEntry) -> bool:
        if e.origin != "seed" or e.usage_count >= self.seed_trial_uses:
            return False
        limit = self.seed_trial_steps
        return limit is None or self.last_step is None or self.last_step < self.selection_start_step + limit

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

    def _is_success(self, reward: float) -> bool:
        return reward > self.success_threshold

    def _evict_excess(self, protected: set[str], ev: StepEvents) -> None:
        """While the cache holds more than C_c, move the lowest entry (unprotected ones first, by
        the configured ranking) to the reservoir."""
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
        victims = sorted(self.reservoir, key=lambda e: (self._seed_on_trial(e), e.usage_count > 0, *e._sort_key_low()))[
            :excess
        ]
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
        """One training step's maintenance: UPDATE -> ADD -> EVICT -> LOAD -> DELETE (-> OVERFLOW).

        ``new_skills`` holds skill documents, each optionally paired with its :class:`Provenance`;
        ``contrasts`` are the step's within-group comparisons (UPDATE adds them to the uplift
        counts of the skills they name; unknown skills are skipped)."""
        step = int(step)
        ev = StepEvents(step=step)
        self.last_step = step
        self._op_update(observations, contrasts, global_rewards, step, ev)
        self._op_add(new_skills, step, ev)
        protected = self._op_evict(step, ev)
        self._op_load(protected, ev)
        self._op_delete(ev)
        self._drop_overflow(ev)
        # moves made by reconfigure() since the last step (a resumed run's new capacities)
        ev.evicted[:0] = self._pending["evicted"]
        ev.overflow[:0] = self._pending["overflow"]
        self._pending = {"evicted": [], "overflow": []}
        ev.cache_size, ev.reservoir_size = len(self.cache), len(self.reservoir)
        return ev

    def _op_update(
        self,
        observations: Iterable[tuple[str, float]],
        contrasts: Iterable[Contrast],
        global_rewards: Iterable[float] | None,
        step: int,
        ev: StepEvents,
    ) -> None:
        """UPDATE: u_k <- beta u_k + (1 - beta) r and one use per observation, in order; then the
        step's contrasts (causal uplift) and the global reward statistics (IG proxy)."""
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
            if not isinstance(sid, str) or not math.isfinite(reward):
                ev.unknown_observations.append(str(sid)[:80])
                continue
            if e is None:  # async trainers: DELETE/OVERFLOW removed it after the trajectory selected it
                ev.orphaned.append(sid[:80])
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
        for r in global_rewards if global_rewards is not None else ():
            r = float(r)
            if math.isfinite(r):
                self.global_reward_sum += r
                self.global_success_count += int(self._is_success(r))
                self.global_count += 1

    def _op_add(self, new_skills: Iterable[SkillDoc | tuple[SkillDoc, Provenance]], step: int, ev: StepEvents) -> None:
        """ADD: each new skill enters the cache (utility 0, or under ``fair_trial`` the mean cache
        utility before the ADD); with ``dedupe`` a duplicate of an entry or earlier new skill is dropped."""
        prior = 0.0
        if self.new_skill_policy == "fair_trial" and self.cache:
            prior = float(np.mean([e.utility for e in self.cache]))
        # duplicate check against a key index built once per step: equal to_json() texts imply
        # equal keys, so "same text or same key" (_find_duplicate) is "same key"; first entry wins
        dup_index: dict[tuple[str, str], str] = {}
        for e in (*self.cache, *self.reservoir):
            dup_index.setdefault(dup_key(e.doc), e.skill_id)
        for item in new_skills:
            doc, provenance = item if isinstance(item, tuple) else (item, None)
            if not isinstance(doc, SkillDoc):
                raise TypeError(f"new_skills must contain SkillDoc, got {type(doc).__name__}")
            if provenance is not None and not isinstance(provenance, Provenance):
                raise TypeError(f"a new skill's provenance must be a Provenance, got {type(provenance).__name__}")
            key = dup_key(doc)
            dup = dup_index.get(key) if self.dedupe else None
            if dup is not None:
                ev.dropped_duplicates.append({"skill_name": doc.skill_name, "duplicate_of": dup})
                continue
            entry = self._new_entry(doc, step=step, utility=prior, provenance=provenance)
            self.cache.append(entry)
            dup_index[key] = entry.skill_id
            ev.added.append(entry.skill_id)

    def _op_evict(self, step: int, ev: StepEvents) -> set[str]:
        """EVICT: while the cache exceeds C_c, move its lowest (unprotected) entry to the reservoir,
        keeping its utility and usage. Returns the ids protected this step (trials, seeds)."""
        protected = self._protected_ids(step)
        ev.protected = [e.skill_id for e in self.cache if e.skill_id in protected]
        self._evict_excess(protected, ev)
        return protected

    def _op_load(self, protected: set[str], ev: StepEvents) -> None:
        """LOAD: swap while the best reservoir entry ranks strictly above the lowest (unprotected)
        cache entry; a skill evicted or demoted in this step does not re-enter in it."""
        low_key = self._low_key()
        blocked = set(ev.evicted)
        while True:
            pool = [e for e in self.reservoir if e.skill_id not in blocked]
            low_cands = [e for e in self.cache if e.skill_id not in protected]
            if not pool or not low_cands:
                break
            best = max(pool, key=lambda e: e._high_key(self.rank_by))
            low = min(low_cands, key=low_key)
            if not best.rank_value(self.rank_by) > low.rank_value(self.rank_by):
                break
            ci = next(i for i, e in enumerate(self.cache) if e is low)
            ri = next(i for i, e in enumerate(self.reservoir) if e is best)
            self.cache[ci] = best
            del self.reservoir[ri]
            self.reservoir.append(low)
            blocked.add(low.skill_id)
            ev.loaded.append({"loaded": best.skill_id, "demoted": low.skill_id})

    def _op_delete(self, ev: StepEvents) -> None:
        """DELETE: remove reservoir entries with utility below the reservoir's P10 (the
        ``delete_percentile``) and zero usage (seeds on trial stay)."""
        if not self.reservoir:
            return
        utils = np.array([e.utility for e in self.reservoir], dtype=np.float64)
        threshold = float(np.percentile(utils, self.delete_percentile))
        keep = []
        for e in self.reservoir:
            if e.utility < threshold and e.usage_count == 0 and not self._seed_on_trial(e):
                ev.deleted.append(e.skill_id)
            else:
                keep.append(e)
        self.reservoir[:] = keep

    def _config(self) -> dict[str, Any]:
        return library_config(self)

    def to_records(self) -> list[dict[str, Any]]:
        return library_records(self)

    def state_dict(self) -> dict[str, Any]:
        return {"config": self._config(), "records": self.to_records()}

    @classmethod
    def from_records(
        cls, records: Sequence[dict[str, Any]], config: dict[str, Any] | None = None, *, source: str = "<records>"
    ) -> SkillLibrary:
        return library_from_records(cls, records, config, source=source)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> SkillLibrary:
        return cls.from_records(state["records"], state["config"], source="<state_dict>")

    def save(self, path: str | os.PathLike) -> None:
        """Atomically write the library as parquet (:func:`~recipe.arise.core.library_store.save_library`)."""
        save_library(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SkillLibrary:
        """Read a ``library.parquet`` (a bad one raises :class:`~.library_store.LibraryFormatError`)."""
        return load_library(cls, path)

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
