"""The figures of :mod:`recipe.arise.tools.report`: the tracker-metric plots (rates, co-evolution)
and :func:`draw_figures`, which draws every plot (the library ones from
:mod:`recipe.arise.tools.report_plots`), writes one PNG each and returns them with their captions.

Two rules keep the metric plots from misleading: a rate that does not apply in Phase I (gate pass,
gate target, mixed groups: nothing is scored and no group can mix R=1 and R=2 before Phase II) is
left out there instead of drawn as 0, which would read as "the gate was closed"; and the per-step
accuracy, a rate over a handful of queries, carries a 95% Wilson interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe.arise.core.library_entry import utility_uplift_disagreement
from recipe.arise.tools.report_plots import (
    MAX_BOX_STEPS,
    integer_ticks,
    legend_outside,
    new_figure,
    phase_line,
    plot_events,
    plot_library_size,
    plot_utility_distribution,
    plot_utility_trajectories,
    plot_utility_vs_uplift,
    series,
    step_axis,
    style,
)

# rates.png: one panel each, (key, legend label)
RATE_PANELS = (
    (
        "selection (Download)",
        (
            ("arise/skill_use_rate", "skill use (share of trajectories)"),
            ("arise/gate_pass_rate", "gate pass (share of scored queries)"),
            ("arise/gate_target", "gate target (calibrated σ)"),
            ("arise/gate_pass_rate_recent", "gate pass, last calibration_window queries"),
        ),
    ),
    (
        "reward",
        (
            ("arise/frac_reward_1", "R=1: right, no skill"),
            ("arise/frac_reward_2", "R=2: right with a skill"),
            ("arise/mixed_group_rate", "Phase II groups mixing R=1 and R=2"),
        ),
    ),
    (
        "summaries (Upload)",
        (
            ("arise/summary_parse_rate", "summary parsed"),
            ("arise/summary_fallback_rate", "summary fallback (trace_abstract)"),
        ),
    ),
)
RATE_KEYS = tuple(pair for _, pairs in RATE_PANELS for pair in pairs)
PHASE2_ONLY = frozenset(
    {"arise/gate_pass_rate", "arise/gate_pass_rate_recent", "arise/gate_target", "arise/mixed_group_rate"}
)
ACC_KEYS = (
    ("arise/acc", "train accuracy"),
    ("arise/reward_mean", "train reward R (mean)"),
)
Z95 = 1.959963984540054


def wilson_interval(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed on ``n`` trials (NaNs when n <= 0)."""
    if n <= 0:
        return math.nan, math.nan
    p = min(1.0, max(0.0, float(p)))
    d = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / d
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def in_phase2(metrics: dict[int, dict[str, float]], step: int, boundary: float | None) -> bool | None:
    """Whether ``step`` is a Phase II step: its ``arise/phase``, else the side of ``boundary`` it is on;
    None when neither says."""
    phase = metrics.get(step, {}).get("arise/phase")
    if phase is not None:
        return phase >= 2
    return None if boundary is None else step > boundary


def rate_series(metrics, key: str, boundary: float | None) -> tuple[list[int], list[float]]:
    """``series`` of a rate, without the Phase I steps for the keys that only apply in Phase II."""
    steps, vals = series(metrics, key)
    if key not in PHASE2_ONLY:
        return steps, vals
    kept = [(s, v) for s, v in zip(steps, vals, strict=True) if in_phase2(metrics, s, boundary) is not False]
    return [s for s, _ in kept], [v for _, v in kept]


def plot_rates(metrics, boundary):
    """Three panels sharing the step axis (selection, reward, summaries); None without any rate key."""
    panels = [
        (title, [(k, lbl) for k, lbl in pairs if rate_series(metrics, k, boundary)[0]]) for title, pairs in RATE_PANELS
    ]
    panels = [(title, pairs) for title, pairs in panels if pairs]
    if not panels:
        return None, []
    fig = new_figure(8.0, 2.3 * len(panels) + 0.4)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    all_steps = sorted({s for _, pairs in panels for k, _ in pairs for s in series(metrics, k)[0]})
    for ax, (title, pairs) in zip(axes, panels, strict=True):
        for i, (k, lbl) in enumerate(pairs):
            s, v = rate_series(metrics, k, boundary)
            ax.plot(s, v, label=lbl, **style(i, len(s)))
        ax.set_ylim(-0.03, 1.12)
        ax.set_ylabel("share")
        ax.set_title(title, fontsize=10, loc="left")
        step_axis(ax, all_steps)
        legend_outside(ax)
        phase_line(ax, boundary)
    for ax in axes[:-1]:
        ax.set_xlabel("")
    fig.suptitle("Rates per step (Phase-II-only rates are not drawn in Phase I)", fontsize=11)
    return fig, [k for _, pairs in panels for k, _ in pairs]


def _val_keys(metrics) -> list[str]:
    all_keys = sorted({k for row in metrics.values() for k in row})
    return [k for k in all_keys if k.startswith("val-core/") and ("acc" in k or "reward" in k or "score" in k)][:4]


def plot_coevolution(metrics, t, boundary):
    """Accuracy (with 95% Wilson intervals), mean reward and library size on three axes sharing the
    steps; None without accuracy or reward keys."""
    val = _val_keys(metrics)
    acc_keys = [("arise/acc", "train accuracy")] * bool(series(metrics, "arise/acc")[0])
    acc_keys += [(k, k) for k in val if "acc" in k]
    rew_keys = [("arise/reward_mean", "train reward R (mean)")] * bool(series(metrics, "arise/reward_mean")[0])
    rew_keys += [(k, k) for k in val if "acc" not in k]
    if not acc_keys and not rew_keys:
        return None, []
    fig = new_figure(8.0, 7.0)
    ax_acc, ax_rew, ax_lib = fig.subplots(3, 1, sharex=True, height_ratios=[3, 2, 2])
    all_steps = set(t["steps"])
    for i, (k, lbl) in enumerate(acc_keys):
        s, v = series(metrics, k)
        all_steps.update(s)
        line = ax_acc.plot(s, v, label=lbl, **style(i, len(s)))[0]
        if k == "arise/acc":
            lo, hi, basis = _acc_interval(metrics, s, v)
            if lo:
                ax_acc.fill_between(
                    s, lo, hi, color=line.get_color(), alpha=0.2, label=f"95% Wilson interval ({basis})"
                )
    ax_acc.set_ylim(-0.03, 1.05)
    ax_acc.set_ylabel("accuracy")
    for i, (k, lbl) in enumerate(rew_keys):
        s, v = series(metrics, k)
        all_steps.update(s)
        ax_rew.plot(s, v, label=lbl, color=f"C{i + 2}", **style(i, len(s)))
    ax_rew.set_ylim(-0.05, 2.1)
    ax_rew.set_ylabel("mean reward R\n(0–1 Phase I, 0–2 Phase II)", fontsize=9)
    ax_lib.plot(
        t["steps"],
        t["sizes"]["total"].values,
        color="tab:gray",
        label="library entries (total)",
        **style(3, len(t["steps"])),
    )
    ax_lib.set_ylim(bottom=0, top=max(1, int(t["sizes"]["total"].max())) * 1.2)
    ax_lib.set_ylabel("library entries")
    integer_ticks(ax_lib.yaxis)
    for ax in (ax_acc, ax_rew, ax_lib):
        step_axis(ax, sorted(all_steps))
        legend_outside(ax)
        phase_line(ax, boundary)
    for ax in (ax_acc, ax_rew):
        ax.set_xlabel("")
    fig.suptitle("Policy–library co-evolution", fontsize=11)
    return fig, [k for k, _ in acc_keys + rew_keys]


def _acc_interval(metrics, steps: Sequence[int], acc: Sequence[float]) -> tuple[list[float], list[float], str]:
    """Per-step Wilson bounds of the accuracy. The sample size is the step's query count: a query's G
    trajectories share their question and mostly succeed or fail together, so counting them as G
    independent trials would claim far more precision than a step of a few queries has. Without
    ``arise/queries`` the trajectory count is used (the narrower, optimistic interval)."""
    key = "arise/queries" if all("arise/queries" in metrics[s] for s in steps) else "arise/trajectories"
    if not all(key in metrics[s] for s in steps):
        return [], [], ""
    bounds = [wilson_interval(a, metrics[s][key]) for s, a in zip(steps, acc, strict=True)]
    return (
        [b[0] for b in bounds],
        [b[1] for b in bounds],
        "n = queries" if key == "arise/queries" else "n = trajectories",
    )


# ---------------------------------------------------------------------------- all figures


@dataclass(frozen=True)
class ReportFigure:
    """One written plot: ``key`` names it in :func:`recipe.arise.tools.report.build_report`'s result;
    ``fig`` is the matplotlib Figure (its axes, lines and labels are what the tests read)."""

    key: str
    path: Path
    title: str
    caption: str
    fig: Any


def draw_figures(run: dict[str, Any], out: Path) -> tuple[list[ReportFigure], list[str], list[tuple[str, str]]]:
    """Draw every plot of ``run`` (:func:`recipe.arise.tools.report.load_run`) into ``out``; return the
    figures in report order, the metric keys plotted and (title, reason) of the plots left out: the
    rates and co-evolution plots need tracker metrics, the utility-vs-uplift plot a checkpointed library."""
    t, metrics, boundary = run["t"], run["metrics"], run["boundary"]
    figures: list[ReportFigure] = []
    missing: list[tuple[str, str]] = []

    def add(key: str, fig, title: str, caption: str) -> None:
        path = out / f"{key}.png"
        fig.savefig(path, format="png")
        figures.append(ReportFigure(key, path, title, caption, fig))

    add(
        "library_size",
        plot_library_size(t, boundary),
        "Library size",
        "Entries in the cache (C_c) and the reservoir (C_r) after each step's maintenance, and their total, from the "
        "log's state rows.",
    )
    add(
        "events",
        plot_events(t, boundary),
        "Library events",
        "Per step: skills added by the summary rollouts (ADD), cache→reservoir evictions (EVICT), "
        "reservoir→cache loads (LOAD), reservoir deletions and overflow drops (DELETE), and summaries dropped"
        " as duplicates. Long runs are drawn as lines (a rolling mean beyond 200 steps); in steady state "
        "added = evicted = deleted, so those lines overlap (thick-to-thin).",
    )
    used_keys: list[str] = []

    def add_metrics_plot(key: str, plotted, title: str, why_missing: str, caption: str) -> None:
        """``add`` for a plot of metrics keys (``plotted`` = (figure or None, the keys drawn))."""
        fig, keys = plotted
        if fig is None:
            missing.append((title, why_missing))
        else:
            used_keys.extend(keys)
            add(key, fig, title, caption)

    add_metrics_plot(
        "rates",
        plot_rates(metrics, boundary),
        "Rates",
        "no metrics file or none of the arise/* rate keys in it",
        "From the tracker metrics, one panel each. Selection: skill use (share of trajectories conditioned "
        "on a skill), gate pass (share of scored queries whose max selection probability passed the "
        "confidence gate δ), the gate target the calibrated σ aims at, and the pass rate over the last "
        "calibration_window queries (the rate the target is judged on). Reward: shares of trajectories with "
        "R=1 (right without a skill) and R=2 (right with a skill), and the share of Phase II groups holding "
        "both R=1 and R=2 (the only groups where the hierarchical reward changes GRPO's advantages). "
        "Summaries: share of summary rollouts parsed, and of those that fell back to trace_abstract. "
        "Gate pass, gate target and mixed groups do not apply in Phase I and are not drawn there.",
    )
    add_metrics_plot(
        "coevolution",
        plot_coevolution(metrics, t, boundary),
        "Policy–library co-evolution",
        "no arise/acc or arise/reward_mean in the metrics",
        "Top: training accuracy per step with a 95% Wilson interval whose sample size is the step's query "
        "count (a query's G trajectories are not independent trials; a step of a few queries is a noisy "
        "estimate, so do not read a drop within the band as a change), and validation accuracies when "
        "logged. Middle: mean reward R on its own axis (at most 1 in Phase I, 2 in Phase II), and "
        "validation reward/score metrics when logged. Bottom: total library entries.",
    )
    add(
        "utility_distribution",
        plot_utility_distribution(t, boundary),
        "Utility distribution",
        f"Left: cache utilities at up to {MAX_BOX_STEPS} evenly spaced steps, drawn at their steps with the "
        "Phase I/II line (box = quartiles, green triangle = mean, dots = entries). Right: utilities of all "
        "entries at the last logged step, stacked by tier.",
    )
    add(
        "utility_trajectories",
        plot_utility_trajectories(t, run["top_ids"], run["names"], boundary),
        "Top-skill utility trajectories",
        "EMA utility of the six highest-utility skills of the last step, over the steps they were in the "
        "library; each is named with its id, since generated skills often share a name.",
    )
    lib = run.get("lib")
    if lib is None:
        missing.append(("Utility vs uplift", f"no checkpointed library at step {t['last_step']}"))
    else:
        add(
            "utility_vs_uplift",
            plot_utility_vs_uplift(lib, t["last_step"]),
            "Utility vs uplift",
            "Each entry of the checkpointed library with a measured causal uplift: its EMA utility against "
            "its uplift (success rate with the skill minus the same query group's control arm, weighted over "
            "groups) with a 95% interval (±1.96 SE). The three highest-utility ones are named. Utility "
            "rewards R=2, which a skill earns on queries the policy would have solved anyway; the uplift "
            "says whether it helps. A high-utility skill below the dotted line does not"
            + _disagreement_note(lib)
            + ".",
        )
    return figures, used_keys, missing


def _disagreement_note(lib) -> str:
    """The caption's count of cache skills ranked in the top half by utility whose uplift interval is
    entirely below 0 (``arise/utility_uplift_disagree``)."""
    ids = utility_uplift_disagreement(lib.cache)
    if not ids:
        return "; no cache skill in the top half by utility has an interval entirely below 0"
    return (
        f"; {len(ids)} cache skill(s) in the top half by utility have an interval entirely below 0 "
        f"({', '.join(ids)}): `arise.library.rank_by: uplift` would demote them (docs/design.md)"
    )
