"""The library figures of :mod:`recipe.arise.tools.report` (from the per-step library log and the
checkpointed library) and the drawing helpers the metric figures share
(:mod:`recipe.arise.tools.report_figures`). Matplotlib's object API (``Figure``, Agg; no pyplot
state), imported lazily so that reading a run stays cheap. Every ``plot_*`` returns the matplotlib
``Figure`` (the tests read its series and labels); the Phase I/II boundary (``boundary``, an x
position or None) is drawn on every time plot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EVENT_SERIES = (
    ("added", "new skills", "tab:green"),
    ("evicted", "evicted (cache→reservoir)", "tab:orange"),
    ("loaded", "loaded (reservoir→cache)", "tab:blue"),
    ("removed", "deleted + overflow", "tab:red"),
    ("duplicate", "duplicates dropped", "tab:gray"),
)
MAX_BOX_STEPS = 8


def series(metrics: dict[int, dict[str, float]], key: str) -> tuple[list[int], list[float]]:
    """The steps that logged ``key`` and its values there, in step order."""
    steps = sorted(s for s, row in metrics.items() if key in row)
    return steps, [metrics[s][key] for s in steps]


def library_tables(df) -> dict[str, Any]:
    """The per-step tables of a library log (:func:`recipe.arise.tools.report.read_library_log`): tier
    ``sizes`` and ``events`` per step, the ``state`` rows, the ``final`` state, each skill's first step."""
    import pandas as pd

    steps = sorted(int(s) for s in df["step"].unique())
    state = df[df["event"] == "state"]
    sizes = state.groupby(["step", "tier"]).size().unstack(fill_value=0).reindex(steps, fill_value=0)
    for tier in ("cache", "reservoir"):
        if tier not in sizes.columns:
            sizes[tier] = 0
    sizes["total"] = sizes["cache"] + sizes["reservoir"]
    ev = df[df["event"] != "state"].groupby(["step", "event"]).size().unstack(fill_value=0).reindex(steps, fill_value=0)
    events = pd.DataFrame(index=steps)
    for name in ("added", "evicted", "loaded", "duplicate", "deleted", "overflow", "updated"):
        events[name] = ev[name] if name in ev.columns else 0
    events["removed"] = events["deleted"] + events["overflow"]
    last = steps[-1]
    final = state[state["step"] == last].copy()
    first_added = df[df["event"] == "added"].groupby("skill_id")["step"].min()
    return {
        "steps": steps,
        "sizes": sizes,
        "events": events,
        "state": state,
        "final": final,
        "last_step": last,
        "first_added": first_added,
    }


# ------------------------------------------------------------------------------ plots


def new_figure(w: float = 8.0, h: float = 4.0):
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=110, layout="constrained")


def phase_line(ax, boundary: float | None) -> None:
    if boundary is None:
        return
    ax.axvline(boundary, color="black", linestyle="--", linewidth=1.2, alpha=0.8)
    tr = ax.get_xaxis_transform()  # x in data, y in axes coordinates
    box = dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.8)
    ax.text(boundary, 0.985, "Phase I  ", transform=tr, va="top", ha="right", fontsize=8, bbox=box)
    ax.text(boundary, 0.985, "  Phase II", transform=tr, va="top", ha="left", fontsize=8, bbox=box)


_STYLES = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--"), ("X", "-.")]


def style(i: int, n_points: int) -> dict:
    marker, ls = _STYLES[i % len(_STYLES)]
    return {
        "marker": marker if n_points <= 60 else None,
        "linestyle": ls,
        "markersize": 6 if i == 0 else 5,
        "linewidth": 2.2 if i == 0 else 1.5,
    }


def legend_outside(ax, handles=None, labels=None) -> None:
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def step_axis(ax, steps: Sequence[int]) -> None:
    ax.set_xlabel("training step")
    if steps and len(steps) <= 12:
        ax.set_xticks(list(steps))
    ax.grid(alpha=0.3)


def skill_label(skill_id: str, name: str | None, width: int = 40) -> str:
    """A skill's legend text: its name, shortened, then its id (which always survives the cut, so that
    skills sharing a name, e.g. three ``make_ten``, stay apart)."""
    tail = f" ({skill_id})"
    name = (name or "").strip()
    if not name:
        return str(skill_id)
    room = max(4, width - len(tail))
    return (name if len(name) <= room else name[: room - 1] + "…") + tail


def integer_ticks(axis) -> None:
    """Counts get whole-number ticks (matplotlib would otherwise put ticks at 0.5, 1.5, ...)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def plot_library_size(t, boundary):
    fig = new_figure()
    ax = fig.add_subplot()
    steps = t["steps"]
    sizes = t["sizes"]
    n = len(steps)
    ax.plot(steps, sizes["cache"].values, label="cache", color="tab:blue", **style(0, n))
    ax.plot(steps, sizes["reservoir"].values, label="reservoir", color="tab:orange", **style(1, n))
    ax.plot(steps, sizes["total"].values, label="total", color="tab:gray", **style(3, n))
    ax.set_ylabel("entries")
    ax.set_ylim(bottom=0, top=max(1, int(sizes["total"].max())) * 1.15)
    integer_ticks(ax.yaxis)
    ax.set_title("Skill library size by tier")
    step_axis(ax, steps)
    legend_outside(ax)
    phase_line(ax, boundary)
    return fig


def plot_events(t, boundary):
    import numpy as np

    fig = new_figure()
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
            phase_line(ax, xb)
    else:
        window = max(1, len(steps) // 100)  # long runs: a rolling mean keeps the lines readable
        # in steady state added = evicted = deleted + overflow: thick-to-thin, dashed, so overlaps stay visible
        widths = (3.2, 2.2, 1.4, 1.2, 1.0)
        dashes = ("-", "--", "-", ":", "-.")
        for (col, label, color), lw, ls in zip(EVENT_SERIES, widths, dashes, strict=False):
            y = ev[col].rolling(window, min_periods=1).mean().values if window > 1 else ev[col].values
            ax.plot(steps, y, label=label, color=color, linewidth=lw, linestyle=ls, alpha=0.85)
        step_axis(ax, steps)
        phase_line(ax, boundary)
        if window > 1:
            ax.set_title(f"Library events per step (rolling mean over {window} steps)")
    if len(steps) <= 40 or window == 1:  # whole counts; a rolling mean is fractional
        integer_ticks(ax.yaxis)
    ax.set_ylabel("count per step")
    if not ax.get_title():
        ax.set_title("Library events per step")
    legend_outside(ax)
    ax.set_ylim(top=max(1.0, ax.get_ylim()[1]) * 1.1)
    return fig


def box_steps(steps: Sequence[int], k: int = MAX_BOX_STEPS) -> list[int]:
    """Up to ``k`` evenly spaced steps, the first and the last included."""
    if len(steps) <= k:
        return list(steps)
    return sorted({steps[round(i * (len(steps) - 1) / (k - 1))] for i in range(k)})


def plot_utility_distribution(t, boundary=None):
    fig = new_figure(10.0, 4.0)
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[3, 2])
    state = t["state"]
    cache = state[state["tier"] == "cache"]
    chosen = box_steps(t["steps"])
    data = [cache[cache["step"] == s]["utility"].dropna().values for s in chosen]
    # boxes at their steps (not at 1..k), so that the phase line falls where it belongs
    gaps = [b - a for a, b in zip(chosen, chosen[1:], strict=False)]
    width = 0.6 * min(gaps) if gaps else 0.6
    ax1.boxplot(data, positions=chosen, widths=width, showmeans=True, manage_ticks=False)
    for s, d in zip(chosen, data, strict=True):  # show the individual entries too
        ax1.scatter([s] * len(d), d, s=8, alpha=0.5, color="tab:blue", zorder=3)
    if len(chosen) <= 12:
        ax1.set_xticks(chosen, [str(s) for s in chosen])
    ax1.set_xlim(chosen[0] - width, chosen[-1] + width)
    ax1.set_xlabel("training step")
    ax1.set_ylabel("utility")
    ax1.set_title("Cache utilities over training")
    ax1.grid(alpha=0.3)
    phase_line(ax1, boundary)
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
    integer_ticks(ax2.yaxis)
    ax2.set_title(f"Final utilities (step {t['last_step']})")
    ax2.grid(alpha=0.3)
    return fig


def plot_utility_trajectories(t, top_ids: Sequence[str], names: dict[str, str], boundary):
    fig = new_figure()
    ax = fig.add_subplot()
    state = t["state"]
    for i, sid in enumerate(top_ids):
        rows = state[state["skill_id"] == sid].sort_values("step")
        ax.plot(
            rows["step"].values,
            rows["utility"].values,
            label=skill_label(sid, names.get(sid)),
            **dict(style(i, len(rows)), linewidth=1.5),
        )
    ax.set_ylabel("utility (EMA)")
    ax.set_title("Utility of the final top skills over training")
    step_axis(ax, t["steps"])
    legend_outside(ax)
    phase_line(ax, boundary)
    return fig


def plot_utility_vs_uplift(lib, step: int, label_top: int = 3):
    """Each entry of the checkpointed library ``lib`` (a :class:`~recipe.arise.core.library.SkillLibrary`)
    with a measured causal uplift: utility (x) against uplift (y, with a 95% interval, ±1.96 SE), so
    that a skill the EMA ranks high but that does not help (uplift < 0) shows. The ``label_top``
    highest-utility measured skills are named."""
    fig = new_figure()
    ax = fig.add_subplot()
    in_cache = {e.skill_id for e in lib.cache}
    entries = lib.entries()
    measured = [e for e in entries if e.uplift is not None]
    for tier, color, marker in (("cache", "tab:blue", "o"), ("reservoir", "tab:orange", "s")):
        es = [e for e in measured if (e.skill_id in in_cache) == (tier == "cache")]
        if es:
            ax.errorbar(
                [e.utility for e in es],
                [e.uplift for e in es],
                yerr=[1.96 * (e.uplift_se or 0.0) for e in es],
                fmt=marker,
                color=color,
                capsize=3,
                alpha=0.85,
                label=f"{tier} ({len(es)}), 95% interval",
            )
    ax.axhline(0.0, color="black", linewidth=1.0, linestyle=":", label="no uplift")
    for e in sorted(measured, key=lambda e: (-e.utility, e.skill_id))[:label_top]:
        ax.annotate(
            skill_label(e.skill_id, e.doc.skill_name, 32),
            (e.utility, e.uplift),
            xytext=(6, 6),
            textcoords="offset points",
            fontsize=8,
        )
    if not measured:
        ax.text(
            0.5,
            0.5,
            "no entry has a measured uplift yet\n(it needs Phase II groups with a control arm)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    unmeasured = len(entries) - len(measured)
    if unmeasured:
        ax.text(
            0.01,
            0.02,
            f"{unmeasured} of {len(entries)} entries have no measured uplift (not shown)",
            transform=ax.transAxes,
            fontsize=8,
            color="0.3",
        )
    ax.set_xlabel("utility (EMA)")
    ax.set_ylabel("causal uplift\n(success with skill − control arm)")
    ax.set_title(f"Utility vs measured uplift (library at step {step})")
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig
