"""Per-query-group computations of one ARISE step (framework free: numpy only).

- :func:`positive_advantage_sessions`: tau+ of a group (Alg. 1);
- :func:`choose_summary_groups`: which groups get a summary rollout O_{G+1} when capped;
- :func:`group_contrasts`: each skill's within-group comparison with the control arm (uplift);
- :func:`mechanism_metrics`: whether the hierarchical reward is alive — reward levels, groups
  mixing R=1 and R=2, and how far GRPO's advantages move from the binary reward's;
- :func:`exact_information_gain`: the paper's exact IG (App. D.3) from trace log-probs.

An *observation* is one training trajectory as the reward manager posts it to the library replica
(``recipe.arise.adapters.reward_manager``): an :class:`~recipe.arise.core.observation.Observation`
(simulations build the same records: ``bench/``); anything else is a TypeError.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from recipe.arise.core.library_entry import Contrast
from recipe.arise.core.observation import Observation

__all__ = [
    "positive_advantage_sessions",
    "choose_summary_groups",
    "by_group",
    "group_contrasts",
    "grpo_advantages",
    "mechanism_metrics",
    "exact_information_gain",
]


def positive_advantage_sessions(rewards: Sequence[float]) -> list[int]:
    """tau+ = {i : A_i > 0}. For GRPO (with or without std normalisation) sign(A_i) = sign(R_i - mean R)."""
    mean = float(np.mean(rewards))
    return [i for i, r in enumerate(rewards) if r > mean + 1e-9]


def choose_summary_groups(
    groups: Sequence[dict[str, Any]], max_count: int, choose: str, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """At most ``max_count`` of ``groups`` (-1: all, Alg. 1), in the order they are chosen.

    ``hardest``: lowest ``success_rate`` first, ties in random order — a success on a query the
    policy mostly fails carries the most that the library does not already hold. ``random``:
    uniform without replacement. ``first``: in the order given (what streaming does, where a group
    is chosen as its rewards complete: ``recipe.arise.core.stream``).
    """
    if choose not in ("hardest", "random", "first"):
        raise ValueError(f"choose must be 'hardest', 'random' or 'first', got {choose!r}")
    order = list(range(len(groups))) if choose == "first" else list(rng.permutation(len(groups)))
    if choose == "hardest":
        order.sort(key=lambda i: groups[i]["success_rate"])  # stable: ties keep the random order
    if max_count >= 0:
        order = order[:max_count]
    return [groups[i] for i in order]


def _records(observations: Iterable[Observation], caller: str) -> list[Observation]:
    """``observations`` as a list; anything but an :class:`Observation` is a TypeError naming it."""
    records = list(observations)
    for o in records:
        if not isinstance(o, Observation):
            raise TypeError(
                f"{caller}: expected recipe.arise.core.observation.Observation records, got {type(o).__name__} "
                f"{o!r:.200}"
            )
    return records


def by_group(observations: Iterable[Observation]) -> OrderedDict[str, list[Observation]]:
    """The observations of each query group (``uid``), groups in order of their first member."""
    groups: OrderedDict[str, list[Observation]] = OrderedDict()
    for o in _records(observations, "by_group"):
        groups.setdefault(str(o.uid), []).append(o)
    return groups


def group_contrasts(observations: Iterable[Observation]) -> list[Contrast]:
    """For each Phase II group with a control arm, one :class:`Contrast` per skill used in it.

    Each stays one group's comparison: the library averages the groups' own differences
    (:meth:`Contrast.stratum`) instead of pooling counts across groups, which would credit a skill
    with the easiness of the queries it happened to be chosen for (Simpson's paradox)."""
    out = []
    for members in by_group(_records(observations, "group_contrasts")).values():
        if not any(o.trajectory.phase == 2 for o in members):
            continue
        base = [o for o in members if o.trajectory.control]
        if not base:
            continue
        base_successes = sum(bool(o.correct) for o in base)
        per_skill: OrderedDict[str, list[Observation]] = OrderedDict()
        for o in members:
            if o.trajectory.skill_id:
                per_skill.setdefault(o.trajectory.skill_id, []).append(o)
        for skill_id, used in per_skill.items():
            out.append(Contrast(skill_id, len(used), sum(bool(o.correct) for o in used), len(base), base_successes))
    return out


def grpo_advantages(rewards: Sequence[float], norm_by_std: bool = True, epsilon: float = 1e-6) -> np.ndarray:
    """One group's outcome advantages as verl's ``compute_grpo_outcome_advantage`` computes them
    (mean-centred; divided by the sample std, ``torch.std``'s unbiased estimate, plus epsilon;
    a group of one gets advantage 0)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.size <= 1:
        return np.zeros_like(r)
    centred = r - r.mean()
    return centred / (r.std(ddof=1) + epsilon) if norm_by_std else centred


def mechanism_metrics(observations: Sequence[Observation], norm_by_std: bool = True) -> dict[str, float]:
    """Step metrics that say whether the hierarchical reward is alive.

    ``frac_reward_{0,1,2}``: fractions of trajectories with R = 0, 1, 2; ``mixed_group_rate``:
    fraction of Phase II groups holding both R=1 and R=2 (App. B's case, the only one where the
    hierarchical reward's advantages differ from the binary reward's in sign pattern);
    ``adv_shift``: mean |A(R) - A(r_task)| over Phase II trajectories (0 means the step's gradient
    is what the binary reward would give); ``adv_gap_2v1``: in mixed groups, mean advantage of
    R=2 minus that of R=1 trajectories; ``step_uplift``: success rate of skill-conditioned minus
    control-arm trajectories, the weighted mean of each Phase II group's own difference (groups
    holding both; the library's estimator, :meth:`Contrast.stratum`, with all skills as one arm).
    """
    observations = _records(observations, "mechanism_metrics")
    n = len(observations)
    rewards = [float(o.reward) for o in observations]
    m = {f"frac_reward_{k}": (sum(abs(r - k) < 1e-9 for r in rewards) / n if n else 0.0) for k in (0, 1, 2)}
    groups = by_group(observations).values()
    phase2 = [members for members in groups if any(o.trajectory.phase == 2 for o in members)]
    mixed, shifts, gaps = 0, [], []
    weight = weighted_diff = 0.0
    for members in phase2:
        r = [float(o.reward) for o in members]
        binary = [float(bool(o.correct)) for o in members]
        a_hier = grpo_advantages(r, norm_by_std)
        shifts.extend(np.abs(a_hier - grpo_advantages(binary, norm_by_std)).tolist())
        levels = {round(x) for x in r}
        if {1, 2} <= levels:
            mixed += 1
            a2 = [a for a, x in zip(a_hier, r, strict=True) if round(x) == 2]
            a1 = [a for a, x in zip(a_hier, r, strict=True) if round(x) == 1]
            gaps.append(float(np.mean(a2) - np.mean(a1)))
        control = [o for o in members if o.trajectory.control]
        aided = [o for o in members if o.trajectory.skill_id]
        stratum = Contrast(
            "",
            len(aided),
            sum(bool(o.correct) for o in aided),
            len(control),
            sum(bool(o.correct) for o in control),
        ).stratum()
        if stratum is not None:  # the group holds both arms
            weight += stratum[0]
            weighted_diff += stratum[0] * stratum[1]
    m["phase2_groups"] = float(len(phase2))
    m["mixed_group_rate"] = mixed / len(phase2) if phase2 else 0.0
    m["adv_shift"] = float(np.mean(shifts)) if shifts else 0.0
    m["adv_gap_2v1"] = float(np.mean(gaps)) if gaps else 0.0
    m["step_uplift"] = weighted_diff / weight if weight > 0 else 0.0
    return m


def exact_information_gain(with_skill: Sequence[Sequence[float]], without: Sequence[float]) -> list[float]:
    """IG(m_k) = E_{tau+}[log pi(tau+ | m_k, q) - log pi(tau+ | q)] (App. D.3, Eq. info_gain).

    ``with_skill[k][t]``: summed log-prob of trace t given skill k and its query; ``without[t]``:
    the same trace given its query alone. Returns one IG per skill (mean over traces)."""
    base = np.asarray(without, dtype=np.float64)
    return [float(np.mean(np.asarray(row, dtype=np.float64) - base)) for row in with_skill]
