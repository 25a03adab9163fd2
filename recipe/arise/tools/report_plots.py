"""The figures of :mod:`recipe.arise.tools.report`: one PNG per plot, drawn with matplotlib's
object API (``Figure``, Agg; no pyplot state), imported lazily so that reading a run stays cheap.

:func:`draw_figures` draws them all and returns, per figure, its file, title and caption; the
Phase I/II boundary (``boundary``, an x position or None) is drawn on every time plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

EVENT_SERIES = (
    ("added", "new skills", "tab:green"),
    ("evicted", "evicted (cache→reservoir)", "tab:orange"),
    ("loaded", "loaded (reservoir→cache)", "tab:blue"),
    ("removed", "deleted + overflow", "tab:red"),
    ("duplicate", "duplicates dropped", "tab:gray"),
)
RATE_KEYS = (
    ("arise/skill_use_rate", "skill-use rate"),
    ("arise/gate_pass_rate", "gate-pass rate"),
    ("arise/gate_pass_rate_recent", "gate-pass rate, last 64 queries"),
    ("arise/gate_target", "gate target (calibrated sigma)"),
    ("arise/frac_reward_1", "fraction R=1"),
    ("arise/frac_reward_2", "fraction R=2"),
    ("arise/mixed_group_rate", "groups mixing R=1 and R=2"),
    ("arise/summary_parse_rate", "summary parse rate"),
    ("arise/summary_fallback_rate", "summary fallback rate"),
)
ACC_KEYS = (
    ("arise/acc", "train accuracy"),
    ("arise/reward_mean", "train reward R (mean)"),
)
MAX_BOX_STEPS = 8


def series(metrics: dict[int, dict[str, float]], key: str) -> tuple[list[int], list[float]]:
    """The steps that logged ``key`` and its values there, in step order."""
    steps = sorted(s for s, row in metrics.items() if key in row)
    return steps, [metrics[s][key] for s in steps]


# ------------------------------------------------------------------------------ plots


def _new_figure(w: float = 8.0, h: float = 4.0):
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=110, layout="constrained")


def _phase_line(ax, boundary: float | None) -> None:
    if boundary is None:
        return
    ax.axvline(boundary, color="black", linestyle="--", linewidth=1.2, alpha=0.8)
    tr = ax.get_xaxis_transform()  # x in data, y in axes coordinates
    box = dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.8)
    ax.text(boundary, 0.985, "Phase I  ", transform=tr, va="top", ha="right", fontsize=8, bbox=box)
    ax.text(boundary, 0.985, "  Phase II", transform=tr, va="top", ha="left", fontsize=8, bbox=box)


_STYLES = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--"), ("X", "-.")]


def _style(i: int, n_points: int) -> dict:
    marker, ls = _STYLES[i % len(_STYLES)]
    return {
        "marker": marker if n_points <= 60 else None,
        "linestyle": ls,
        "markersize": 6 if i == 0 else 5,
        "linewidth": 2.2 if i == 0 else 1.5,
    }


def _legend_outside(ax, handles=None, labels=None) -> None:
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _step_axis(ax, steps: Sequence[int]) -> None:
    ax.set_xlabel("training step")
    if steps and len(steps) <= 12:
        ax.set_xticks(list(steps))
    ax.grid(alpha=0.3)


def _save(fig, path: Path) -> Path:
    fig.savefig(path, format="png")
    return path


def _plot_library_size(t, boundary, path: Path) -> Path:
    fig = _new_figure()
    ax = fig.add_subplot()
    steps = t["steps"]
    sizes = t["sizes"]
    n = len(steps)
    ax.plot(steps, sizes["cache"].values, label="cache", color="tab:blue", **_style(0, n))
    ax.plot(steps, sizes["reservoir"].values, label="reservoir", color="tab:orange", **_style(1, n))
    ax.plot(steps, sizes["total"].values, label="total", color="tab:gray", **_style(3, n))
    ax.set_ylabel("entries")
    ax.set_ylim(bottom=0, top=max(1, int(sizes["total"].max())) * 1.15)
    ax.set_title("Skill library size by tier")
    _step_axis(ax, steps)
    _legend_outside(ax)
    _phase_line(ax, boundary)
    return _save(fig, path)


def _plot_events(t, boundary, path: Path) -> Path:
    import numpy as np

    fig = _new_figure()
    ax = fig.add_subplot()
    steps = t["steps"]
    ev = t["events"]
    if len(steps) <= 40:
        x = np.arange(len(steps), dtype=float)
        width = 0.8 / len(EVENT_SERIES)
        for i, (col, label, color) in enumerate(EVENT_SERIES):
            ax.bar(x + (i - (len(EVENT_SERIES) - 1) / 2) * width, ev[col].values, width, label=label, color=color)
        ax.set_xticks(x, [str(s) for s in steps])
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3, axis="y")
        if boundary is not None:  # bars sit at positions 0..n-1: map the boundary onto them
            xb = float(np.interp(boundary, steps, x)) if len(steps) > 1 else None
            _phase_line(ax, xb)
    else:
        window = max(1, len(steps) // 100)  # long runs: a rolling mean keeps the lines readable
        # in steady state added = evicted = deleted + overflow: thick-to-thin, dashed, so overlaps stay visible
        widths = (3.2, 2.2, 1.4, 1.2, 1.0)
        dashes = ("-", "--", "-", ":", "-.")
        for (col, label, color), lw, ls in zip(EVENT_SERIES, widths, dashes, strict=False):
            y = ev[col].rolling(window, min_periods=1).mean().values if window > 1 else ev[col].values
            ax.plot(steps, y, label=label, color=color, linewidth=lw, linestyle=ls, alpha=0.85)
        _step_axis(ax, steps)
        _phase_line(ax, boundary)
        if window > 1:
            ax.set_title(f"Library events per step (rolling mean over {window} steps)")
    ax.set_ylabel("count per step")
    if not ax.get_title():
        ax.set_title("Library events per step")
    _legend_outside(ax)
    ax.set_ylim(top=max(1.0, ax.get_ylim()[1]) * 1.1)
    return _save(fig, path)


def _plot_rates(metrics, boundary, path: Path) -> tuple[Path | None, list[str]]:
    present = [(k, lbl) for k, lbl in RATE_KEYS if series(metrics, k)[0]]
    if not present:
        return None, []
    fig = _new_figure()
    ax = fig.add_subplot()
    all_steps: set[int] = set()
    for i, (k, lbl) in enumerate(present):
        s, v = series(metrics, k)
        all_steps.update(s)
        ax.plot(s, v, label=lbl, **_style(i, len(s)))
    ax.set_ylim(-0.03, 1.12)
    ax.set_ylabel("rate")
    ax.set_title("Skill use, gate pass and summary rates per step")
    _step_axis(ax, sorted(all_steps))
    _legend_outside(ax)
    _phase_line(ax, boundary)
    return _save(fig, path), [k for k, _ in present]


def _acc_keys(metrics) -> list[tuple[str, str]]:
    keys = [(k, lbl) for k, lbl in ACC_KEYS if series(metrics, k)[0]]
    all_keys = sorted({k for row in metrics.values() for k in row})
    val = [k for k in all_keys if k.startswith("val-core/") and ("acc" in k or "reward" in k or "score" in k)]
    keys += [(k, k) for k in val[:4]]
    return keys


def _plot_coevolution(metrics, t, boundary, path: Path) -> tuple[Path | None, list[str]]:
    keys = _acc_keys(metrics)
    if not keys:
        return None, []
    fig = _new_figure()
    ax = fig.add_subplot()
    all_steps = set(t["steps"])
    for i, (k, lbl) in enumerate(keys):
        s, v = series(metrics, k)
        all_steps.update(s)
        ax.plot(s, v, label=lbl, **_style(i, len(s)))
    ax.set_ylabel("accuracy / reward")
    ax2 = ax.twinx()
    ax2.plot(
        t["steps"],
        t["sizes"]["total"].values,
        color="tab:gray",
        label="library size (right axis)",
        **dict(_style(3, len(t["steps"])), linewidth=1.5),
    )
    ax2.set_ylabel("library entries")
    ax2.set_ylim(bottom=0, top=max(1, int(t["sizes"]["total"].max())) * 1.2)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left", bbox_to_anchor=(1.12, 1.0), borderaxespad=0.0)
    ax.set_title("Policy–library co-evolution")
    _step_axis(ax, sorted(all_steps))
    _phase_line(ax, boundary)
    return _save(fig, path), [k for k, _ in keys]


def _box_steps(steps: Sequence[int], k: int = MAX_BOX_STEPS) -> list[int]:
    if len(steps) <= k:
        return list(steps)
    idx = sorted({round(i * (len(steps) - 1) / (k - 1)) for i in range(k)})
    return [steps[i] for i in idx]


def _plot_utility_distribution(t, path: Path) -> Path:
    fig = _new_figure(10.0, 4.0)
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[3, 2])
    state = t["state"]
    cache = state[state["tier"] == "cache"]
    chosen = _box_steps(t["steps"])
    data = [cache[cache["step"] == s]["utility"].dropna().values for s in chosen]
    ax1.boxplot(data, tick_labels=[str(s) for s in chosen], showmeans=True)
    for i, d in enumerate(data, start=1):  # show the individual entries too
        ax1.scatter([i] * len(d), d, s=8, alpha=0.5, color="tab:blue", zorder=3)
    ax1.set_xlabel("training step")
    ax1.set_ylabel("utility")
    ax1.set_title("Cache utilities over training")
    ax1.grid(alpha=0.3)
    final = t["final"]
    fc = final[final["tier"] == "cache"]["utility"].dropna().values
    fr = final[final["tier"] == "reservoir"]["utility"].dropna().values
    vals = [v for v in (fc, fr) if len(v)]
    if vals:
        lo = min(float(v.min()) for v in vals)
        hi = max(float(v.max()) for v in vals)
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        ax2.hist(
            [fc, fr],
            bins=12,
            range=(lo, hi),
            stacked=True,
            label=[f"cache ({len(fc)})", f"reservoir ({len(fr)})"],
            color=["tab:blue", "tab:orange"],
        )
        ax2.legend(fontsize=8)
    else:
        ax2.text(0.5, 0.5, "library empty", ha="center", va="center", transform=ax2.transAxes)
    ax2.set_xlabel("utility")
    ax2.set_ylabel("entries")
    ax2.set_title(f"Final utilities (step {t['last_step']})")
    ax2.grid(alpha=0.3)
    return _save(fig, path)


def _plot_utility_trajectories(t, top_ids: Sequence[str], names: dict[str, str], boundary, path: Path) -> Path:
    fig = _new_figure()
    ax = fig.add_subplot()
    state = t["state"]
    for i, sid in enumerate(top_ids):
        rows = state[state["skill_id"] == sid].sort_values("step")
        ax.plot(
            rows["step"].values,
            rows["utility"].values,
            label=f"{sid} {names.get(sid, '')}"[:40],
            **dict(_style(i, len(rows)), linewidth=1.5),
        )
    ax.set_ylabel("utility (EMA)")
    ax.set_title("Utility of the final top skills over training")
    _step_axis(ax, t["steps"])
    _legend_outside(ax)
    _phase_line(ax, boundary)
    return _save(fig, path)


# ---------------------------------------------------------------------------- all figures


@dataclass(frozen=True)
class Figure:
    """One written plot: ``key`` names it in :func:`recipe.arise.tools.report.build_report`'s result."""

    key: str
    path: Path
    title: str
    caption: str


def draw_figures(
    t, metrics: dict[int, dict[str, float]], boundary: float | None, top_ids: Sequence[str], names, out: Path
) -> tuple[list[Figure], list[str]]:
    """Draw every plot into ``out``; return the figures in report order and the metric keys plotted.
    The rates and co-evolution plots need tracker metrics and are left out without them."""
    figures = [
        Figure(
            "library_size",
            _plot_library_size(t, boundary, out / "library_size.png"),
            "Library size",
            "Entries in the cache (C_c) and the reservoir (C_r) after each step's maintenance, from the log's "
            "state rows.",
        ),
        Figure(
            "events",
            _plot_events(t, boundary, out / "events.png"),
            "Library events",
            "Per step: skills added by the summary rollouts (ADD), cache→reservoir evictions (EVICT), "
            "reservoir→cache loads (LOAD), reservoir deletions and overflow drops (DELETE), and summaries dropped"
            " as duplicates. Long runs are drawn as lines (a rolling mean beyond 200 steps); in steady state "
            "added = evicted = deleted, so those lines overlap (thick-to-thin).",
        ),
    ]
    used_keys: list[str] = []
    p, keys = _plot_rates(metrics, boundary, out / "rates.png")
    if p is not None:
        used_keys += keys
        figures.append(
            Figure(
                "rates",
                p,
                "Skill-use and gate-pass rates",
                "From the tracker metrics: fraction of trajectories conditioned on a skill, fraction of scored "
                "queries whose max selection probability passed the confidence gate, fraction of trajectories "
                "rewarded R=2, and the summary parse / fallback rates.",
            )
        )
    p, keys = _plot_coevolution(metrics, t, boundary, out / "coevolution.png")
    if p is not None:
        used_keys += keys
        figures.append(
            Figure(
                "coevolution",
                p,
                "Policy–library co-evolution",
                "Training accuracy / mean reward (and validation metrics when logged) next to the total library size.",
            )
        )
    figures.append(
        Figure(
            "utility_distribution",
            _plot_utility_distribution(t, out / "utility_distribution.png"),
            "Utility distribution",
            f"Left: cache utilities at up to {MAX_BOX_STEPS} evenly spaced steps (box = quartiles, green triangle "
            f"= mean, dots = entries). Right: utilities of all entries at the last logged step, stacked by tier.",
        )
    )
    figures.append(
        Figure(
            "utility_trajectories",
            _plot_utility_trajectories(t, top_ids, names, boundary, out / "utility_trajectories.png"),
            "Top-skill utility trajectories",
            "EMA utility of the six highest-utility skills of the last step, over the steps they were in the library.",
        )
    )
    return figures, used_keys
