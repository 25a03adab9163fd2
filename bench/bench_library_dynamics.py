"""Library dynamics under each summary cadence: a framework-free simulation of a whole run.

The real :class:`~recipe.arise.core.library.SkillLibrary` (C_c = 10, C_r = 100, beta = 0.9,
``fair_trial``, the 5 seed skills), the real selection (:func:`~recipe.arise.core.selection.selection_probs`,
gate delta, per-trajectory epsilon), the real tau+ (:func:`~recipe.arise.core.groups.positive_advantage_sessions`),
group choice (:func:`~recipe.arise.core.groups.choose_summary_groups`), contrasts and hierarchical reward; no
verl, no model. A run has the paper's shape: ``--phase1`` steps of Phase I (N_w = 500), then ``--phase2``
steps of Phase II, ``--groups`` query groups of G = 8 per step.

The model (every constant is a flag):

* **Queries.** Each group's query has a base success probability b (the policy unaided). A share of the
  queries is *learnable*, b ~ U(0.1, 0.9); the rest are solved (b = 1) or out of reach (b = 0), half each.
  The learnable share is set so that in Phase I a fraction ``--tau-plus`` of the groups has tau+ (mixed
  rewards); the policy does not improve over the run (the library dynamics are the object here).
* **Skills.** Every skill k has a hidden quality Delta_k (logit units): a trajectory conditioned on it
  succeeds with probability sigmoid(logit(b) + Delta_k). Seeds and parsed summaries: Delta ~ N(0,
  ``--quality-sd``); ``trace_abstract`` fallbacks: Delta ~ N(``--fallback-mean``, ``--quality-sd``/2).
* **Summaries O_{G+1}.** Groups with tau+ are chosen by ``choose_summary_groups`` (``max_per_step``,
  ``--choose``). Each summary is, with probability ``--dup``, a copy of a skill already in the library (ADD
  drops it as a duplicate), else with probability ``--parse-fail`` a ``fallback_skill`` of a distinct trace,
  else a new parsed document. Quality does not depend on the source group, so ``hardest`` vs ``random``
  only changes which groups are summarised, not what the library receives.
* **Phase II selection** (arise defaults: sigma 1, delta 0.35, epsilon 0.1, control_share 0.25). Per group,
  the manager's score of cache skill k is ``--score-signal`` * Delta_k + N(0, ``--score-noise``) (the
  skill's relevance to this query, as the policy's log-probs see it); p = softmax(s); if max p < delta the
  group goes unaided; else each of the 6 non-control trajectories takes argmax p, or with probability
  epsilon a uniform cache skill. The 2 control trajectories go unaided. R = r_task + r_skill in {0, 1, 2}.
  ``step()`` receives every (skill, R), all rewards as ``global_rewards``, and the groups' contrasts.
  With the defaults about 74% of groups pass the gate (App. E.1 reports 73% skill use at delta 0.35).

Run from the repo root:  python bench/bench_library_dynamics.py [--phase1 500] [--phase2 300] [--reps 2]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from recipe.arise.core.groups import choose_summary_groups, group_contrasts  # noqa: E402
from recipe.arise.core.library import SkillLibrary  # noqa: E402
from recipe.arise.core.library_entry import Provenance  # noqa: E402
from recipe.arise.core.observation import Observation  # noqa: E402
from recipe.arise.core.reward import hierarchical_reward  # noqa: E402
from recipe.arise.core.skill import PROBLEM_TYPES, SkillDoc, fallback_skill, load_seed_skills  # noqa: E402
from recipe.arise.core.trajectory import TrajectoryInfo  # noqa: E402

CADENCES = (-1, 8, 2, 1)  # arise.summary.max_per_step (-1 = every group with tau+, Alg. 1)
SEED_PROTECTION = (8, 0)  # arise.library.seed_trial_uses
LEARNABLE = (0.1, 0.9)  # range of b for learnable queries
LATE = 50  # "the end" of the run: its last LATE steps
R_WRONG, R_PLAIN, R_SKILL = (hierarchical_reward(c, s, 2) for c, s in ((False, True), (True, False), (True, True)))


@dataclass(frozen=True)
class SimConfig:
    max_per_step: int = 2
    seed_trial_uses: int = 8
    phase1_steps: int = 500
    phase2_steps: int = 300
    groups: int = 64
    group_size: int = 8
    control: int = 2  # control arm per Phase II group (control_share 0.25 of G = 8)
    tau_plus: float = 0.6  # Phase I fraction of groups with tau+
    dup: float = 0.1  # a summary duplicates a library skill
    parse_fail: float = 0.15  # a summary does not parse: trace_abstract fallback
    choose: str = "hardest"
    quality_sd: float = 0.5
    fallback_mean: float = -0.3
    score_signal: float = 1.0
    score_noise: float = 1.7
    epsilon: float = 0.1
    gate: float = 0.35
    cache_capacity: int = 10
    reservoir_capacity: int = 100
    seed: int = 0


@dataclass
class _Tracker:
    """Per-skill bookkeeping beside the library (hidden quality, uses, cache stints)."""

    quality: dict[str, float] = field(default_factory=dict)
    uses: dict[str, int] = field(default_factory=dict)
    stint_start: dict[str, int] = field(default_factory=dict)  # skill -> first step of its current stint
    stints: list[int] = field(default_factory=list)  # Phase II stints (steps in the post-step cache)
    first_exit_uses: dict[str, int] = field(default_factory=dict)  # Phase II skills: uses at first eviction
    phase2_added: set[str] = field(default_factory=set)
    phase1_added: set[str] = field(default_factory=set)


def learnable_share(tau_plus: float, group_size: int) -> float:
    """Share of learnable queries (b ~ U(LEARNABLE)) that gives P(tau+) = tau_plus in Phase I."""
    lo, hi = LEARNABLE
    n = group_size + 1
    p_uniform = 2.0 * (hi**n - lo**n) / (n * (hi - lo))  # E[b^G + (1-b)^G], b ~ U(lo, hi)
    return min(1.0, max(0.0, tau_plus / (1.0 - p_uniform)))


def _base_rates(rng: np.random.Generator, cfg: SimConfig) -> np.ndarray:
    share = learnable_share(cfg.tau_plus, cfg.group_size)
    learnable = rng.random(cfg.groups) < share
    b = np.where(rng.random(cfg.groups) < 0.5, 0.0, 1.0)
    return np.where(learnable, rng.uniform(*LEARNABLE, size=cfg.groups), b)


def _new_doc(k: int, rng: np.random.Generator) -> SkillDoc:
    return SkillDoc(
        f"generated_skill_{k}",
        PROBLEM_TYPES[int(rng.integers(len(PROBLEM_TYPES)))],
        f"Insight number {k}: reduce the problem to a known structure first",
        ("Identify the structure", "Apply the reduction and solve"),
        "Substitute back",
    )


def _summaries(chosen, lib, step, rng, cfg, counter) -> tuple[list, list[float]]:
    """One document per chosen group (duplicate / fallback / parsed) and the qualities of the non-duplicates."""
    items, qualities = [], []
    entries = lib.entries()
    for g in chosen:
        u = rng.random()
        prov = dict(step=step, uid=g["uid"], rewards=g["rewards"])
        if u < cfg.dup and entries:
            items.append((entries[int(rng.integers(len(entries)))].doc, Provenance("json", **prov)))
            continue
        counter[0] += 1
        if u < cfg.dup + (1.0 - cfg.dup) * cfg.parse_fail:
            doc = fallback_skill(f"x{counter[0]} = {int(rng.integers(10**6))}")
            items.append((doc, Provenance("fallback", **prov)))
            qualities.append(float(rng.normal(cfg.fallback_mean, cfg.quality_sd / 2)))
        else:
            items.append((_new_doc(counter[0], rng), Provenance("json", **prov)))
            qualities.append(float(rng.normal(0.0, cfg.quality_sd)))
    return items, qualities


def _softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Row-wise ``selection_probs(scores, temperature=1)`` for finite scores (one row per group)."""
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def _phase2_groups(lib, b, rng, cfg, tr, step):
    """Selection, rollouts and rewards of one Phase II step: observations, group records, stats."""
    ids = lib.cache_ids()
    n, shape = len(ids), (cfg.groups, cfg.group_size)
    deltas = np.array([tr.quality[s] for s in ids])
    scores = cfg.score_signal * deltas[None, :] + rng.normal(0.0, cfg.score_noise, size=(cfg.groups, n))
    p = _softmax_rows(scores)
    greedy = p.argmax(axis=1)
    passed = p.max(axis=1) >= cfg.gate
    explore = rng.random(shape) < cfg.epsilon
    skill = np.where(explore, rng.integers(n, size=shape), greedy[:, None])
    aided = passed[:, None] & (np.arange(cfg.group_size)[None, :] >= cfg.control)
    delta = np.where(aided, deltas[skill], 0.0)
    with np.errstate(divide="ignore", over="ignore"):
        logit = np.log(b) - np.log1p(-b)
    p_ok = np.where(((b > 0) & (b < 1))[:, None], 1.0 / (1.0 + np.exp(-(logit[:, None] + delta))), b[:, None])
    correct = rng.random(shape) < p_ok
    rewards = np.where(correct, np.where(aided, R_SKILL, R_PLAIN), R_WRONG)
    observations, groups = [], []
    for g in range(cfg.groups):
        uid = f"{step}-{g}"
        for i in range(cfg.group_size):
            record = TrajectoryInfo(phase=2, skill_id=ids[skill[g, i]] if aided[g, i] else "", control=i < cfg.control)
            observations.append(Observation(uid, float(rewards[g, i]), bool(correct[g, i]), record, step=step))
        groups.append({"uid": uid, "rewards": rewards[g].tolist()})
    for k, c in zip(*np.unique(skill[aided], return_counts=True), strict=True):
        tr.uses[ids[k]] = tr.uses.get(ids[k], 0) + int(c)
    control = np.zeros(shape, dtype=bool)
    control[:, : cfg.control] = True
    stats = {
        "gate": int(passed.sum()),
        "skill_n": int(aided.sum()),
        "skill_s": int(correct[aided].sum()),
        "base_n": int(control.sum()),
        "base_s": int(correct[control].sum()),
        "quality_used": float(delta[aided].sum()),
    }
    return observations, groups, stats


def simulate(cfg: SimConfig) -> dict[str, float]:
    """One run; returns the figures of the table (see :func:`ROWS`)."""
    rng = np.random.default_rng(cfg.seed)
    seeds = load_seed_skills()
    lib = SkillLibrary(
        cache_capacity=cfg.cache_capacity,
        reservoir_capacity=cfg.reservoir_capacity,
        seed_skills=seeds,
        seed_trial_uses=cfg.seed_trial_uses,
    )
    tr = _Tracker()
    seed_ids = set()
    for e in lib.entries():
        tr.quality[e.skill_id] = float(rng.normal(0.0, cfg.quality_sd))
        seed_ids.add(e.skill_id)
    n_w, total = cfg.phase1_steps, cfg.phase1_steps + cfg.phase2_steps
    added = {1: 0, 2: 0}
    turnover = {1: 0, 2: 0}
    tau_groups = {1: 0, 2: 0}
    gate = skill_n = skill_s = base_n = base_s = 0
    quality_used = 0.0
    out: dict[str, float] = {}
    counter = [0]
    loads = 0
    late: list[list[str]] = []  # the cache after each of the last LATE steps
    prev = set(lib.cache_ids())
    for t in range(1, total + 1):
        phase = 1 if t <= n_w else 2
        b = _base_rates(rng, cfg)
        if phase == 1:
            rewards = np.where(rng.random((cfg.groups, cfg.group_size)) < b[:, None], R_PLAIN, R_WRONG)
            groups = [{"uid": f"{t}-{g}", "rewards": rewards[g].tolist()} for g in range(cfg.groups)]
            # Phase I: no skill, no contrast; the library's step reads only the rewards
            global_rewards = rewards.ravel().tolist()
            used, contrasts = [], []
        else:
            observations, groups, st = _phase2_groups(lib, b, rng, cfg, tr, t)
            gate += st["gate"]
            skill_n, skill_s = skill_n + st["skill_n"], skill_s + st["skill_s"]
            base_n, base_s = base_n + st["base_n"], base_s + st["base_s"]
            quality_used += st["quality_used"]
            used = [(o.trajectory.skill_id, o.reward) for o in observations if o.trajectory.skill_id]
            global_rewards = [o.reward for o in observations]
            contrasts = group_contrasts(observations)
        # tau+ is non-empty exactly when the group's rewards are not all equal (positive_advantage_sessions)
        with_tau = []
        for g in groups:
            r = g["rewards"]
            if max(r) > min(r):
                g["success_rate"] = sum(x > 0 for x in r) / len(r)
                with_tau.append(g)
        tau_groups[phase] += len(with_tau)
        chosen = choose_summary_groups(with_tau, cfg.max_per_step, cfg.choose, rng)
        items, qualities = _summaries(chosen, lib, t, rng, cfg, counter)
        ev = lib.step(used, items, t, global_rewards=global_rewards, contrasts=contrasts)
        if len(ev.added) != len(qualities):
            raise AssertionError("a generated document was taken for a duplicate")
        for sid, q in zip(ev.added, qualities, strict=True):
            tr.quality[sid] = q
        added[phase] += len(ev.added)
        cur = set(lib.cache_ids())
        turnover[phase] += len(cur - prev)
        # cache stints (Phase II): a skill added or loaded and gone in the same step stays 0 steps
        if phase == 1:
            tr.phase1_added.update(ev.added)
        if phase == 2:
            tr.phase2_added.update(ev.added)
            entered = set(ev.added) | {x["loaded"] for x in ev.loaded}
            tr.stints += [0 for s in entered if s not in cur]
            for s in prev - cur:
                if s in tr.stint_start:
                    tr.stints.append(t - tr.stint_start.pop(s))
            for s in cur - prev:
                tr.stint_start[s] = t
            left = set(ev.evicted) | {x["demoted"] for x in ev.loaded}
            for s in left & tr.phase2_added:
                tr.first_exit_uses.setdefault(s, tr.uses.get(s, 0))
        elif t == n_w:  # stints counted from the start of Phase II
            tr.stint_start = dict.fromkeys(cur, n_w + 1)
        prev = cur
        if phase == 2:
            loads += len(ev.loaded)
            if t > total - LATE:
                late.append(list(cur))
        if t == n_w:
            out["seeds_cache_nw"] = len(cur & seed_ids)
            out["library_nw"] = len(lib)
        if t == n_w + 50:
            out["seeds_cache_nw50"] = len(cur & seed_ids)
    tr.stints += [total + 1 - s for s in tr.stint_start.values()]  # still in the cache at the end (censored)
    p1, p2 = max(1, n_w), max(1, cfg.phase2_steps)
    exits = list(tr.first_exit_uses.values())
    all_q = np.sort(list(tr.quality.values()))
    late_q = np.array([tr.quality[s] for ids in late for s in ids]) if late else np.zeros(0)
    seed_uses = [tr.uses.get(s, 0) for s in seed_ids]
    out.update(
        added_p1=added[1] / p1,
        added_p2=added[2] / p2,
        tau_plus_p1=tau_groups[1] / (p1 * cfg.groups),
        tau_plus_p2=tau_groups[2] / (p2 * cfg.groups),
        turnover_p1=turnover[1] / p1,
        turnover_p2=turnover[2] / p2,
        stay_p2=float(np.mean(tr.stints)) if tr.stints else float("nan"),
        uses_before_exit=float(np.median(exits)) if exits else float("nan"),
        exit_unused=float(np.mean([u == 0 for u in exits])) if exits else float("nan"),
        new_used=float(np.mean([tr.uses.get(s, 0) > 0 for s in tr.phase2_added])) if tr.phase2_added else float("nan"),
        gate_rate=gate / (p2 * cfg.groups),
        loads_p2=loads / p2,
        seeds_tried=float(sum(u > 0 for u in seed_uses)),
        phase1_tried=float(sum(tr.uses.get(s, 0) > 0 for s in tr.phase1_added)),
        cache_quality_end=float(late_q.mean()) if late_q.size else float("nan"),
        all_quality=float(all_q.mean()),
        cache_rank_end=float((np.searchsorted(all_q, late_q) / all_q.size).mean()) if late_q.size else float("nan"),
        used_quality=quality_used / skill_n if skill_n else float("nan"),
        uplift=(skill_s / skill_n - base_s / base_n) if skill_n and base_n else float("nan"),
    )
    out.setdefault("seeds_cache_nw", float("nan"))
    out.setdefault("library_nw", float("nan"))
    out.setdefault("seeds_cache_nw50", float("nan"))
    return out


# (key, label, format) of the printed table, in order
ROWS = (
    ("added_p1", "new skills added / step, Phase I", "{:.2f}"),
    ("added_p2", "new skills added / step, Phase II", "{:.2f}"),
    ("turnover_p1", "cache turnover / step, Phase I", "{:.2f}"),
    ("turnover_p2", "cache turnover / step, Phase II", "{:.2f}"),
    ("loads_p2", "LOAD swaps / step, Phase II", "{:.2f}"),
    ("stay_p2", "steps a skill stays in the cache (Phase II, mean)", "{:.1f}"),
    ("uses_before_exit", "uses of a new skill before its 1st eviction (Phase II, median)", "{:.0f}"),
    ("exit_unused", "new skills evicted unused (Phase II)", "{:.0%}"),
    ("seeds_cache_nw", "seeds in the cache at N_w", "{:.1f}"),
    ("seeds_cache_nw50", "seeds in the cache at N_w+50", "{:.1f}"),
    ("seeds_tried", "seeds used at least once in Phase II", "{:.1f}"),
    ("library_nw", "library size (cache + reservoir) at N_w", "{:.0f}"),
    ("phase1_tried", "Phase I skills (not seeds) ever used in Phase II", "{:.1f}"),
    ("cache_quality_end", "hidden quality of the cache, last 50 steps (mean Delta)", "{:+.2f}"),
    ("all_quality", "hidden quality of all skills seen (mean Delta)", "{:+.2f}"),
    ("cache_rank_end", "cache, last 50 steps: quality percentile among all skills seen", "{:.0%}"),
    ("used_quality", "hidden quality of the skills used (Phase II, per trajectory)", "{:+.3f}"),
    ("uplift", "realised uplift: skill minus control success rate (Phase II)", "{:+.1%}"),
)


def label(cfg: SimConfig) -> str:
    cadence = "all" if cfg.max_per_step < 0 else str(cfg.max_per_step)
    return f"{cadence}/{'kept' if cfg.seed_trial_uses else 'off'}"


def run_grid(base: SimConfig, reps: int, cadences=CADENCES, protections=SEED_PROTECTION) -> dict[str, dict]:
    """Mean of ``reps`` runs (seeds base.seed ..) for every cadence x seed protection; ``<key>_se``
    is the standard error of the mean (0 for one run)."""
    results = {}
    for keep in protections:
        for cadence in cadences:
            cfg = replace(base, max_per_step=cadence, seed_trial_uses=keep)
            runs = [simulate(replace(cfg, seed=base.seed + r)) for r in range(reps)]
            row = {}
            for k in runs[0]:
                values = [run[k] for run in runs]
                row[k] = statistics.fmean(values)
                row[f"{k}_se"] = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
            results[label(cfg)] = row
    return results


def table(results: dict[str, dict]) -> str:
    cols = list(results)
    lines = [
        "| max_per_step / seeds | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for key, text, fmt in ROWS:
        lines.append(f"| {text} | " + " | ".join(fmt.format(results[c][key]) for c in cols) + " |")
    return "\n".join(lines)


def recommend(results: dict[str, dict]) -> tuple[str, str]:
    """The cadence to use, and why: among the configurations with seeds kept, the one with the
    fewest summaries whose Phase II skill quality (hidden quality per skill-conditioned trajectory,
    what the policy is trained on) is within one standard error of the best."""
    kept = {c: r for c, r in results.items() if c.endswith("/kept")}
    best = kept[max(kept, key=lambda c: kept[c]["used_quality"])]
    ok = [
        c
        for c, r in kept.items()
        if r["used_quality"] >= best["used_quality"] - math.hypot(r["used_quality_se"], best["used_quality_se"])
    ]
    choice = min(ok, key=lambda c: kept[c]["added_p1"] + kept[c]["added_p2"])
    why = ", ".join(
        f"{c.split('/')[0]}: {r['used_quality']:+.3f} ± {r['used_quality_se']:.3f}" for c, r in kept.items()
    )
    return choice.split("/")[0], why


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = SimConfig()
    ap.add_argument("--phase1", type=int, default=d.phase1_steps, help="Phase I steps (N_w)")
    ap.add_argument("--phase2", type=int, default=d.phase2_steps, help="Phase II steps")
    ap.add_argument("--groups", type=int, default=d.groups, help="query groups per step")
    ap.add_argument("--tau-plus", type=float, default=d.tau_plus, help="Phase I fraction of groups with tau+")
    ap.add_argument("--dup", type=float, default=d.dup, help="probability a summary duplicates a library skill")
    ap.add_argument("--parse-fail", type=float, default=d.parse_fail, help="probability of a fallback skill")
    ap.add_argument("--choose", choices=("hardest", "random"), default=d.choose)
    ap.add_argument("--quality-sd", type=float, default=d.quality_sd, help="sd of the hidden quality (logits)")
    ap.add_argument("--fallback-mean", type=float, default=d.fallback_mean, help="mean quality of fallbacks")
    ap.add_argument("--score-signal", type=float, default=d.score_signal, help="score = signal * quality + noise")
    ap.add_argument("--score-noise", type=float, default=d.score_noise, help="sd of the per-query score noise")
    ap.add_argument("--reps", type=int, default=2, help="runs (seeds) averaged per configuration")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    base = replace(
        d,
        phase1_steps=args.phase1,
        phase2_steps=args.phase2,
        groups=args.groups,
        tau_plus=args.tau_plus,
        dup=args.dup,
        parse_fail=args.parse_fail,
        choose=args.choose,
        quality_sd=args.quality_sd,
        fallback_mean=args.fallback_mean,
        score_signal=args.score_signal,
        score_noise=args.score_noise,
        seed=args.seed,
    )
    started = time.perf_counter()
    results = run_grid(base, args.reps)
    any_run = next(iter(results.values()))
    print(
        f"N_w={base.phase1_steps} + {base.phase2_steps} Phase II steps, {base.groups} groups x G={base.group_size}, "
        f"tau+ {any_run['tau_plus_p1']:.0%} (Phase I) / {any_run['tau_plus_p2']:.0%} (Phase II), "
        f"gate passed {any_run['gate_rate']:.0%}, mean of {args.reps} run(s), {time.perf_counter() - started:.0f} s"
    )
    print(table(results))
    choice, why = recommend(results)
    print(f"recommended arise.summary.max_per_step: {choice}  (quality of the skills used, seeds kept: {why})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
