"""HTML report of an ARISE run: ``python -m recipe.arise.tools.report RUN_DIR [options]``.

Reads the per-step library log (``<log_dir>/library_log/step_XXXXXXXX.parquet``, see
:mod:`recipe.arise.core.library_log`) and, when present, verl's file-tracker metrics
(``metrics.jsonl``: one ``{"step": N, "data": {...}}`` per line) and writes into ``--out``
(default ``RUN_DIR/report``):

* ``library_size.png``   -- cache / reservoir / total entries per step;
* ``events.png``         -- new skills, evictions, loads, deletions (+overflow), duplicates per step;
* ``rates.png``          -- skill-use, gate-pass, R=2 and summary-parse rates per step (metrics);
* ``coevolution.png``    -- accuracy / reward next to library size (the paper's "policy-library
  co-evolution" view; needs the metrics);
* ``utility_distribution.png`` -- box plots of cache utilities at a few steps + histogram of
  the final cache and reservoir utilities;
* ``utility_trajectories.png`` -- utility over steps of the final top skills;
* ``report.html``        -- everything above (PNGs embedded as base64, so the file is
  self-contained) plus a summary and the top skills with their documents.

The Phase I/II boundary is drawn on every time plot: ``--phase1-steps N`` puts it between
steps N and N+1; otherwise it is where ``arise/phase`` (metrics, else the log's ``phase``
column) changes from 1 to 2.  Missing metric keys are skipped (the report says which); no
library log at all is an error (exit status 2).

Matplotlib (Agg, no pyplot state) and pandas are imported lazily.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ReportError",
    "find_log_dir",
    "find_metrics",
    "read_library_log",
    "read_metrics",
    "metrics_launches",
    "phase_boundary",
    "build_report",
    "main",
]

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
EXPECTED_KEYS = tuple(k for k, _ in RATE_KEYS + ACC_KEYS) + ("arise/phase",)
MAX_BOX_STEPS = 8


class ReportError(Exception):
    """No library log, unreadable inputs; the CLI exits with status 2."""


# ------------------------------------------------------------------------------ inputs


def _has_step_files(d: Path) -> bool:
    return d.is_dir() and any(d.glob("step_*.parquet"))


def find_log_dir(run_dir: str | Path, log_dir: str | Path | None = None) -> Path:
    """The ``library_log`` folder (holding ``step_*.parquet``) for a run.

    ``log_dir`` may be the folder that contains ``library_log/`` (the trainer's ``arise.log_dir``)
    or the ``library_log`` folder itself. Without it: ``RUN_DIR/checkpoints/arise``,
    ``RUN_DIR/arise``, ``RUN_DIR`` are tried in this order."""
    run_dir = Path(run_dir)
    if log_dir is not None:
        candidates = [Path(log_dir) / "library_log", Path(log_dir)]
    else:
        candidates = [
            run_dir / "checkpoints" / "arise" / "library_log",
            run_dir / "arise" / "library_log",
            run_dir / "library_log",
            run_dir,
        ]
    for c in candidates:
        if _has_step_files(c):
            return c
    where = ", ".join(str(c) for c in candidates)
    raise ReportError(f"no library log (step_*.parquet files) found; looked in: {where}")


def read_library_log(lib_log_dir: str | Path):
    """All step files of a ``library_log`` folder as one DataFrame (unreadable files are skipped
    with a warning in ``df.attrs['warnings']``; an empty result is an error)."""
    import pandas as pd

    lib_log_dir = Path(lib_log_dir)
    files = sorted(lib_log_dir.glob("step_*.parquet"))  # hidden temp files never match
    frames, warnings = [], []
    for f in files:
        try:
            frames.append(pd.read_parquet(f))
        except Exception as e:  # noqa: BLE001 - a damaged file must not kill the whole report
            warnings.append(f"{f.name}: unreadable, skipped ({type(e).__name__}: {e})")
    if not frames:
        raise ReportError(
            f"{lib_log_dir}: no readable library log files" + (f" ({'; '.join(warnings)})" if warnings else "")
        )
    df = pd.concat(frames, ignore_index=True)
    missing = {"step", "event", "skill_id", "tier", "utility"} - set(df.columns)
    if missing:
        raise ReportError(f"{lib_log_dir}: library log lacks columns {sorted(missing)}")
    df.attrs["warnings"] = warnings
    df.attrs["files"] = len(files)
    return df


def find_metrics(run_dir: str | Path, metrics: str | Path | None = None) -> Path | None:
    """``metrics`` if given (must exist), else ``RUN_DIR/metrics.jsonl``, else the one ``*.jsonl``
    directly in RUN_DIR that looks like verl's file tracker; None when there is none."""
    if metrics is not None:
        p = Path(metrics)
        if not p.is_file():
            raise ReportError(f"{p}: metrics file not found")
        return p
    run_dir = Path(run_dir)
    default = run_dir / "metrics.jsonl"
    if default.is_file():
        return default
    if run_dir.is_dir():
        for p in sorted(run_dir.glob("*.jsonl")):
            try:
                with p.open(encoding="utf-8") as fh:
                    first = json.loads(fh.readline() or "null")
            except (OSError, ValueError):
                continue
            if isinstance(first, dict) and "step" in first and isinstance(first.get("data"), dict):
                return p
    return None


def metrics_launches(path: str | Path) -> list[Path]:
    """The files holding a run's metrics, oldest first: the earlier launches' parts
    (``<stem>.launchN.jsonl``, moved aside by ``run_scripts/common.sh`` before a launch, because
    verl's file logger truncates its file) in launch order, then ``path`` itself when it exists."""
    path = Path(path)
    stem = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    parts = []
    for p in path.parent.glob(f"{stem}.launch*.jsonl"):
        n = p.name[len(stem) + len(".launch") : -len(".jsonl")]
        if n.isdigit():
            parts.append((int(n), p))
    return [p for _, p in sorted(parts)] + ([path] if path.is_file() else [])


def read_metrics(path: str | Path, launches: bool = True) -> tuple[dict[int, dict[str, float]], list[str]]:
    """verl file-tracker lines -> {step: {key: float}} (later lines of a step update earlier ones),
    plus warnings for lines that could not be parsed. With ``launches`` the earlier launches' parts
    of ``path`` (:func:`metrics_launches`) are read first; a step a later launch logged again (a
    resume redoes the steps after its checkpoint) takes the later launch's values."""
    files = metrics_launches(path) if launches else [Path(path)]
    if not files:
        raise FileNotFoundError(f"{path}: no metrics file")
    out: dict[int, dict[str, float]] = {}
    warnings: list[str] = []
    for file in files:
        this: dict[int, dict[str, float]] = {}
        with file.open(encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    step = int(rec["step"])
                    data = rec["data"]
                    if not isinstance(data, dict):
                        raise TypeError("data is not an object")
                except (ValueError, KeyError, TypeError) as e:
                    warnings.append(f"{file.name} line {lineno}: skipped ({type(e).__name__})")
                    continue
                row = this.setdefault(step, {})
                for k, v in data.items():
                    if isinstance(v, bool):
                        v = float(v)
                    if isinstance(v, (int, float)) and math.isfinite(float(v)):
                        row[str(k)] = float(v)
        out.update(this)
    return out, warnings


def _series(metrics: dict[int, dict[str, float]], key: str) -> tuple[list[int], list[float]]:
    steps = sorted(s for s, row in metrics.items() if key in row)
    return steps, [metrics[s][key] for s in steps]


def phase_boundary(
    metrics: dict[int, dict[str, float]] | None, log_df=None, phase1_steps: int | None = None
) -> tuple[float | None, str]:
    """x position of the Phase I/II boundary and where it came from."""
    if phase1_steps is not None:
        return float(phase1_steps) + 0.5, f"--phase1-steps {phase1_steps}"
    sources = []
    if metrics:
        steps, vals = _series(metrics, "arise/phase")
        sources.append(("metric arise/phase", steps, vals))
    if log_df is not None and "phase" in log_df.columns:
        per = log_df.dropna(subset=["phase"]).groupby("step")["phase"].first()
        sources.append(("library log phase column", [int(s) for s in per.index], [float(v) for v in per.values]))
    for name, steps, vals in sources:
        points = list(zip(steps, vals, strict=True))
        for (s0, v0), (s1, v1) in zip(points, points[1:], strict=False):
            if v0 < 2 <= v1:
                return (s0 + s1) / 2.0, f"{name} (1 → 2 between steps {s0} and {s1})"
    return None, "no phase change seen"


# --------------------------------------------------------------------------- analysis


def _library_tables(df) -> dict[str, Any]:
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


def _doc_fields(doc: Any) -> dict[str, Any]:
    try:
        d = json.loads(doc) if isinstance(doc, str) else {}
    except ValueError:
        d = {}
    return d if isinstance(d, dict) else {}


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
    present = [(k, lbl) for k, lbl in RATE_KEYS if _series(metrics, k)[0]]
    if not present:
        return None, []
    fig = _new_figure()
    ax = fig.add_subplot()
    all_steps: set[int] = set()
    for i, (k, lbl) in enumerate(present):
        s, v = _series(metrics, k)
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
    keys = [(k, lbl) for k, lbl in ACC_KEYS if _series(metrics, k)[0]]
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
        s, v = _series(metrics, k)
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


# ------------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;max-width:1200px;color:#222}
h1{font-size:22px} h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ccc;padding:4px 7px;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:Menlo,Consolas,monospace;font-size:12px} pre{white-space:pre-wrap;margin:0}
figure{margin:12px 0} figcaption{font-size:13px;color:#555;max-width:900px} img{max-width:100%;border:1px solid #eee}
.warn{color:#a60}
"""


def _img_tag(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _fmt(v: Any, nd: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return html.escape(str(v))


def _top_skills_html(top_rows) -> str:
    columns = ("#", "id", "tier", "name", "type", "utility", "uses", "uplift", "IG proxy", "added at step")
    columns += ("source", "key insight", "method", "check")
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"
    body = []
    for i, r in enumerate(top_rows, start=1):
        method = r["method"]
        method_html = "<ol>" + "".join(f"<li>{html.escape(str(m))}</li>" for m in method) + "</ol>" if method else "–"
        body.append(
            "<tr>"
            f"<td class=num>{i}</td><td><code>{html.escape(r['skill_id'])}</code></td>"
            f"<td>{html.escape(str(r['tier']))}</td>"
            f"<td><b>{html.escape(str(r['skill_name']))}</b></td><td>{html.escape(str(r['problem_type']))}</td>"
            f"<td class=num>{_fmt(r['utility'])}</td><td class=num>{_fmt(r['usage_count'])}</td>"
            f"<td class=num>{_fmt(r['uplift'], 3)}</td>"
            f"<td class=num>{_fmt(r['ig'], 3)}</td><td class=num>{_fmt(r['added_step'])}</td>"
            f"<td>{_source_html(r)}</td>"
            f"<td>{html.escape(str(r['key_insight']))}</td><td>{method_html}</td><td>{html.escape(str(r['check']))}</td>"
            "</tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


def _source_html(r: dict[str, Any]) -> str:
    """Where a top skill came from: a link to its provenance entry below the table."""
    if r.get("origin") in (None, "external"):
        return "–"
    if r["origin"] == "seed":
        return "seed"
    return f"<a href='#src-{html.escape(r['skill_id'])}'>{html.escape(r['origin'])}, step {_fmt(r['source_step'])}</a>"


def _provenance_html(top_rows) -> str:
    items = []
    for r in top_rows:
        if r.get("origin") not in ("json", "fallback"):
            continue
        how = "parsed from the summary rollout's JSON" if r["origin"] == "json" else "trace_abstract fallback"
        rewards = ", ".join(f"{x:g}" for x in r.get("source_rewards") or []) or "–"
        items.append(
            f"<li id='src-{html.escape(r['skill_id'])}'><code>{html.escape(r['skill_id'])}</code> "
            f"<b>{html.escape(str(r['skill_name']))}</b>: distilled at step {_fmt(r['source_step'])} ({how}) "
            f"from query group <code>{html.escape(str(r.get('source_uid') or '–'))}</code>, traces rewarded "
            f"{html.escape(rewards)}. Question: <i>{html.escape(str(r.get('source_query') or '–'))}</i></li>"
        )
    return f"<ul>{''.join(items)}</ul>" if items else "<p>no generated skill among the top skills</p>"


def _final_library(run_dir: Path, step: int, lib_log: Path):
    """The checkpointed library of the log's last step, if there is one (for the IG proxy)."""
    from recipe.arise.core.library import LibraryFormatError, SkillLibrary

    roots = [run_dir / "checkpoints", run_dir, lib_log.parent.parent]
    for root in roots:
        p = root / f"global_step_{step}" / "arise" / "library.parquet"
        if p.is_file():
            try:
                return p, SkillLibrary.load(p)
            except LibraryFormatError as e:
                return p, e
    return None, None


def _top_rows(t, top: int, lib=None) -> list[dict[str, Any]]:
    final = t["final"].copy()
    final["utility"] = final["utility"].astype(float)
    final["tier_rank"] = (final["tier"] != "cache").astype(int)
    final = final.sort_values(["utility", "tier_rank", "skill_id"], ascending=[False, True, True]).head(top)
    rows = []
    for _, r in final.iterrows():
        d = _doc_fields(r.get("doc"))
        sid = str(r["skill_id"])
        added = t["first_added"].get(sid)
        uc = r.get("usage_count")
        rows.append(
            {
                "skill_id": sid,
                "tier": r["tier"],
                "skill_name": r.get("skill_name") or d.get("skill_name", ""),
                "problem_type": r.get("problem_type") or d.get("problem_type", ""),
                "utility": float(r["utility"]),
                "usage_count": None if uc is None or (isinstance(uc, float) and math.isnan(uc)) else int(uc),
                "added_step": None if added is None else int(added),
                "ig": lib.ig_proxy(sid) if lib is not None and sid in lib else None,
                **_provenance_fields(lib, sid),
                "key_insight": d.get("key_insight", ""),
                "method": d.get("method") if isinstance(d.get("method"), list) else [],
                "check": d.get("check", ""),
            }
        )
    return rows


def _provenance_fields(lib, sid: str) -> dict[str, Any]:
    e = lib.get(sid) if lib is not None and hasattr(lib, "get") else None
    if e is None:
        return {"origin": None, "uplift": None, "source_step": None}
    return {
        "origin": e.provenance.origin,
        "uplift": e.uplift,
        "source_step": e.provenance.step,
        "source_uid": e.provenance.uid,
        "source_query": e.provenance.query,
        "source_rewards": list(e.provenance.rewards),
    }


def build_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    metrics: str | Path | None = None,
    log_dir: str | Path | None = None,
    *,
    phase1_steps: int | None = None,
    top: int = 15,
) -> dict[str, Path]:
    """Write the PNGs and ``report.html``; return ``{name: path}`` of every written file
    (keys: ``html`` and the PNG stems, e.g. ``library_size``)."""
    run_dir = Path(run_dir)
    lib_log = find_log_dir(run_dir, log_dir)
    df = read_library_log(lib_log)
    metrics_path = find_metrics(run_dir, metrics)
    metric_rows: dict[int, dict[str, float]] = {}
    warnings = list(df.attrs.get("warnings", []))
    if metrics_path is not None:
        metric_rows, mw = read_metrics(metrics_path)
        warnings += mw
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)

    t = _library_tables(df)
    boundary, boundary_src = phase_boundary(metric_rows, df, phase1_steps)
    lib_path, lib = _final_library(run_dir, t["last_step"], lib_log)
    if isinstance(lib, Exception):
        warnings.append(f"checkpointed library not usable for the IG proxy: {lib}")
        lib = None
    top_rows = _top_rows(t, top, lib)
    names = {r["skill_id"]: r["skill_name"] for r in top_rows}

    written: dict[str, Path] = {}
    figures: list[tuple[str, str, str]] = []  # (key, title, caption)
    written["library_size"] = _plot_library_size(t, boundary, out / "library_size.png")
    figures.append(
        (
            "library_size",
            "Library size",
            "Entries in the cache (C_c) and the reservoir (C_r) after each step's maintenance, from the log's "
            "state rows.",
        )
    )
    written["events"] = _plot_events(t, boundary, out / "events.png")
    figures.append(
        (
            "events",
            "Library events",
            "Per step: skills added by the summary rollouts (ADD), cache→reservoir evictions (EVICT), "
            "reservoir→cache loads (LOAD), reservoir deletions and overflow drops (DELETE), and summaries dropped"
            " as duplicates. Long runs are drawn as lines (a rolling mean beyond 200 steps); in steady state "
            "added = evicted = deleted, so those lines overlap (thick-to-thin).",
        )
    )
    used_keys: list[str] = []
    p, keys = _plot_rates(metric_rows, boundary, out / "rates.png")
    if p is not None:
        written["rates"] = p
        used_keys += keys
        figures.append(
            (
                "rates",
                "Skill-use and gate-pass rates",
                "From the tracker metrics: fraction of trajectories conditioned on a skill, fraction of scored "
                "queries whose max selection probability passed the confidence gate, fraction of trajectories "
                "rewarded R=2, and the summary parse / fallback rates.",
            )
        )
    p, keys = _plot_coevolution(metric_rows, t, boundary, out / "coevolution.png")
    if p is not None:
        written["coevolution"] = p
        used_keys += keys
        figures.append(
            (
                "coevolution",
                "Policy–library co-evolution",
                "Training accuracy / mean reward (and validation metrics when logged) next to the total library size.",
            )
        )
    written["utility_distribution"] = _plot_utility_distribution(t, out / "utility_distribution.png")
    figures.append(
        (
            "utility_distribution",
            "Utility distribution",
            f"Left: cache utilities at up to {MAX_BOX_STEPS} evenly spaced steps (box = quartiles, green triangle "
            f"= mean, dots = entries). Right: utilities of all entries at the last logged step, stacked by tier.",
        )
    )
    top_ids = [r["skill_id"] for r in top_rows[:6]]
    written["utility_trajectories"] = _plot_utility_trajectories(
        t, top_ids, names, boundary, out / "utility_trajectories.png"
    )
    figures.append(
        (
            "utility_trajectories",
            "Top-skill utility trajectories",
            "EMA utility of the six highest-utility skills of the last step, over the steps they were in the library.",
        )
    )

    missing = [k for k in EXPECTED_KEYS if not any(k in row for row in metric_rows.values())]
    ev = t["events"]
    sizes = t["sizes"]
    summary = [
        ("run", str(run_dir)),
        ("library log", f"{lib_log} ({df.attrs.get('files', '?')} step files, steps {t['steps'][0]}–{t['last_step']})"),
        (
            "metrics",
            f"{metrics_path} ({len(metric_rows)} steps)" if metrics_path else "none found (library plots only)",
        ),
        ("Phase I/II boundary", f"x = {boundary:g} ({boundary_src})" if boundary is not None else boundary_src),
        ("final library", f"cache {int(sizes['cache'].iloc[-1])}, reservoir {int(sizes['reservoir'].iloc[-1])}"),
        ("totals", ", ".join(f"{lbl}: {int(ev[c].sum())}" for c, lbl, _ in EVENT_SERIES)),
        ("metric keys plotted", ", ".join(used_keys) or "–"),
        ("metric keys missing", ", ".join(missing) or "–"),
    ]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>ARISE report – {html.escape(run_dir.name or str(run_dir))}</title><style>{_CSS}</style></head><body>",
        f"<h1>ARISE run report: {html.escape(str(run_dir))}</h1>",
        "<h2>Summary</h2><table>",
        *[f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in summary],
        "</table>",
    ]
    if warnings:
        parts.append("<p class=warn>" + "<br>".join(html.escape(w) for w in warnings[:20]) + "</p>")
    for key, title, caption in figures:
        parts.append(
            f"<h2>{html.escape(title)}</h2><figure>{_img_tag(written[key], title)}"
            f"<figcaption>{html.escape(caption)} File: <code>{written[key].name}</code>.</figcaption></figure>"
        )
    if "rates" not in written:
        parts.append(
            "<h2>Skill-use and gate-pass rates</h2><p class=warn>not available: no metrics file or none of the "
            "arise/* rate keys in it.</p>"
        )
    parts.append(f"<h2>Top skills by utility at step {t['last_step']}</h2>")
    parts.append(
        "<p>Highest utility first (both tiers). <i>added at step</i>: first <code>added</code> event in the log "
        "(– for seed skills and skills added before the first logged step). <i>IG proxy</i> (App. D.3): "
        + (
            f"from the checkpointed library <code>{html.escape(str(lib_path))}</code>."
            if lib is not None
            else "– (no checkpointed library for this step)."
        )
        + "</p>"
    )
    parts.append(_top_skills_html(top_rows) if top_rows else "<p>library empty</p>")
    if top_rows:
        parts.append("<h3>Where the top skills came from</h3>" + _provenance_html(top_rows))
    parts.append("</body></html>")
    html_path = out / "report.html"
    tmp = html_path.with_name(".report.html.tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(html_path)
    written["html"] = html_path
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m recipe.arise.tools.report",
        description="HTML report (library log + tracker metrics) of an ARISE run.",
    )
    p.add_argument("run_dir", help="run folder (holds metrics.jsonl and checkpoints/arise/library_log)")
    p.add_argument("--out", default=None, help="output folder (default RUN_DIR/report)")
    p.add_argument("--metrics", default=None, help="verl file-tracker jsonl (default RUN_DIR/metrics.jsonl)")
    p.add_argument(
        "--log-dir",
        default=None,
        help="folder holding library_log/ (the trainer's arise.log_dir), or library_log itself",
    )
    p.add_argument(
        "--phase1-steps",
        type=int,
        default=None,
        help="Phase I length (boundary drawn after this step); default: from arise/phase",
    )
    p.add_argument("--top", type=int, default=15, help="rows of the top-skills table (default 15)")
    args = p.parse_args(argv)
    if not Path(args.run_dir).is_dir() and args.log_dir is None:
        print(f"error: {args.run_dir}: run folder not found", file=sys.stderr)
        return 2
    try:
        written = build_report(
            args.run_dir, args.out, args.metrics, args.log_dir, phase1_steps=args.phase1_steps, top=args.top
        )
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, path in written.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
