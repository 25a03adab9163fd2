"""A skill library's entry and its records (paper App. C.2-C.3; docs/design_core.md).

:class:`SkillEntry` is one library entry e_k = (m_k, u_k) with its usage statistics and its
causal uplift, measured from :class:`Contrast` records (a Mantel-Haenszel weighted mean of the
query groups' own differences); :class:`Provenance` says where a skill came from and
:class:`StepEvents` what one library step did. The library itself is :mod:`recipe.arise.core.library`.

Framework free: stdlib only.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from .skill import SkillDoc

__all__ = [
    "ORIGINS",
    "QUERY_CHARS",
    "TIERS",
    "Contrast",
    "Provenance",
    "SkillEntry",
    "StepEvents",
    "dup_key",
    "find_duplicate",
    "utility_uplift_disagreement",
]

# seed: the initial library; json: parsed from a summary rollout; fallback: trace_abstract;
# external: handed to step() without provenance (tests, tools)
ORIGINS = ("seed", "json", "fallback", "external")
TIERS = ("cache", "reservoir")
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
        (binomial, plug-in: kept for the record, not the interval — with 1 or 2 control
        trajectories p0(1-p0) is mostly 0, see :meth:`sato_terms`)."""
        n, b = int(self.n), int(self.base_n)
        if n <= 0 or b <= 0 or not (0 <= self.successes <= n and 0 <= self.base_successes <= b):
            return None
        p1, p0 = self.successes / n, self.base_successes / b
        return n * b / (n + b), p1 - p0, p1 * (1.0 - p1) / n + p0 * (1.0 - p0) / b

    def sato_terms(self) -> tuple[float, float]:
        """(P, Q) of Sato's variance of the Mantel-Haenszel risk difference (Sato, Greenland & Robins
        1989, Biometrics 45:1323): Var = (RD * sum P + sum Q) / (sum w)^2. Consistent when the
        groups are many and small (2 or 1 control trajectories each), where the plug-in binomial
        variance is not: it gave 95% intervals covering 0.57-0.91 of the time at this run's arm
        sizes (tests/core/test_uplift.py simulates both). Call only when :meth:`stratum` is not None."""
        n1, n0 = int(self.n), int(self.base_n)
        a, c, big_n = int(self.successes), int(self.base_successes), n1 + n0
        p = (n1 * n1 * c - n0 * n0 * a + n1 * n0 * (n0 - n1) / 2.0) / (big_n * big_n)
        q = (a * (n0 - c) + c * (n1 - a)) / (2.0 * big_n)
        return p, q


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
    sum w_g, ``uplift_wdiff`` = sum w_g d_g, ``uplift_wvar`` = sum w_g^2 v_g (:meth:`Contrast.stratum`,
    the plug-in variance, kept for the record), ``uplift_sato_p`` / ``uplift_sato_q`` = Sato's sums
    (:meth:`Contrast.sato_terms`), which give :attr:`uplift_se`.
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
    uplift_sato_p: float = 0.0
    uplift_sato_q: float = 0.0
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
        """Standard error of :attr:`uplift`, Sato's: sqrt(RD sum P + sum Q) / sum w (groups independent)."""
        uplift = self.uplift
        if uplift is None:
            return None
        return math.sqrt(max(uplift * self.uplift_sato_p + self.uplift_sato_q, 0.0)) / self.uplift_weight

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
        sato_p, sato_q = c.sato_terms()
        self.uplift_sato_p += sato_p
        self.uplift_sato_q += sato_q
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

    def rank_value(self, rank_by: str) -> float:
        """The value EVICT and LOAD rank by: the utility, or the measured uplift (unmeasured = 0)."""
        if rank_by == "uplift":
            return 0.0 if self.uplift is None else self.uplift
        return self.utility

    def _high_key(self, rank_by: str) -> tuple:
        """LOAD's choice of the best reservoir entry (maximised): the ranked value, then utility, then
        more uses, then the older entry (smaller created step, then smaller id)."""
        base = (self.utility, self.usage_count, -self.created_step, tuple(-ord(c) for c in self.skill_id))
        return (self.rank_value(rank_by), *base) if rank_by == "uplift" else base


@dataclass
class StepEvents:
    """What one :meth:`~recipe.arise.core.library.SkillLibrary.step` did (for the append-only per-step log)."""

    step: int
    updated: list[str] = field(default_factory=list)  # ids whose utility changed (unique, first-use order)
    n_observations: int = 0  # observations applied
    unknown_observations: list[str] = field(default_factory=list)  # malformed, or a non-finite reward (skipped)
    # ids of skills the library no longer holds (deleted or dropped since a trajectory selected them)
    orphaned: list[str] = field(default_factory=list)
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


def dup_key(doc: SkillDoc) -> tuple[str, str]:
    """Two skills are the same skill when their names and key insights agree (case and spacing aside)."""
    return (doc.skill_name.strip().lower(), " ".join(doc.key_insight.lower().split()))


def find_duplicate(doc: SkillDoc, entries) -> str | None:
    """The id of the first of ``entries`` with the same text or :func:`dup_key` as ``doc``, else None."""
    text, key = doc.to_json(), dup_key(doc)
    for e in entries:
        if e.doc.to_json() == text or dup_key(e.doc) == key:
            return e.skill_id
    return None


def utility_uplift_disagreement(cache: list[SkillEntry], z: float = 1.96) -> list[str]:
    """Ids of the cache skills the paper's utility ranks in the top half (ties: id order) whose uplift
    interval (uplift + z se) lies entirely below 0: skills the EMA keeps that the control arm measured
    as harmful (utility counts R = 2 earned on queries the policy solves anyway; docs/design.md)."""
    ranked = sorted(cache, key=lambda e: (-e.utility, e.skill_id))
    top = ranked[: (len(ranked) + 1) // 2]
    return [e.skill_id for e in top if e.uplift is not None and e.uplift + z * (e.uplift_se or 0.0) < 0.0]
