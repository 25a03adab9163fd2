"""HTML report of an ARISE run: ``python -m recipe.arise.tools.report RUN_DIR [options]``.

Reads the per-step library log (``<log_dir>/library_log/step_XXXXXXXX.parquet``, see
:mod:`recipe.arise.core.library_log`) and, when present, verl's file-tracker metrics
(``metrics.jsonl``: one ``{"step": N, "data": {...}}`` per line) and writes into ``--out``
(default ``RUN_DIR/report``):

* ``library_size.png``   -- cache / reservoir / total entries per step;
* ``events.png``         -- new skills, evictions, loads, deletions (+overflow), duplicates per step;
* ``rates.png``          -- selection (skill use, gate pass, target, recent pass), reward (R=1, R=2,
  mixed groups) and summary rates per step, one panel each (metrics);
* ``coevolution.png``    -- accuracy (95% Wilson intervals), mean reward and library size on three
  axes (the paper's "policy-library co-evolution" view; needs the metrics);
* ``utility_distribution.png`` -- box plots of cache utilities at a few steps + histogram of
  the final cache and reservoir utilities;
* ``utility_trajectories.png`` -- utility over steps of the final top skills;
* ``utility_vs_uplift.png`` -- utility against measured causal uplift of the checkpointed library's
  entries (needs ``global_step_<last>/arise/library.parquet``);
* ``report.html``        -- everything above (PNGs embedded as base64, so the file is
  self-contained) plus a summary and the top skills with their documents.

The Phase I/II boundary is drawn on every time plot: ``--phase1-steps N`` puts it between
steps N and N+1; otherwise it is where ``arise/phase`` (metrics, else the log's ``phase``
column) changes from 1 to 2.  Missing metric keys are skipped (the report says which); no
library log at all is an error (exit status 2).

The page is rendered from ``templates/report.html.j2`` (jinja2, autoescaping on: skill documents,
questions and paths are model or user text and reach the page only HTML-escaped); the plots are
drawn by :mod:`recipe.arise.tools.report_figures` (library plots in
:mod:`recipe.arise.tools.report_plots`). Matplotlib, pandas and jinja2 are imported lazily.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe.arise.core.library_entry import utility_uplift_disagreement
from recipe.arise.tools.report_figures import ACC_KEYS, RATE_KEYS, draw_figures
from recipe.arise.tools.report_plots import EVENT_SERIES, library_tables, series

__all__ = [
    "ReportError",
    "find_log_dir",
    "find_metrics",
    "read_library_log",
    "read_metrics",
    "metrics_launches",
    "phase_boundary",
    "load_run",
    "build_report",
    "main",
]

# logged by every ARISE run (the gate's target and recent rate only in Phase II with temperature: auto)
OPTIONAL_KEYS = ("arise/gate_pass_rate_recent", "arise/gate_target")
EXPECTED_KEYS = tuple(k for k, _ in RATE_KEYS + ACC_KEYS if k not in OPTIONAL_KEYS) + ("arise/phase",)
TEMPLATES = Path(__file__).resolve().parent / "templates"


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


def phase_boundary(
    metrics: dict[int, dict[str, float]] | None, log_df=None, phase1_steps: int | None = None
) -> tuple[float | None, str]:
    """x position of the Phase I/II boundary and where it came from."""
    if phase1_steps is not None:
        return float(phase1_steps) + 0.5, f"--phase1-steps {phase1_steps}"
    sources = []
    if metrics:
        steps, vals = series(metrics, "arise/phase")
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


def _doc_fields(doc: Any) -> dict[str, Any]:
    try:
        d = json.loads(doc) if isinstance(doc, str) else {}
    except ValueError:
        d = {}
    return d if isinstance(d, dict) else {}


# -------------------------------------------------------------------------- top skills


def _final_library(run_dir: Path, step: int, lib_log: Path):
    """The checkpointed library of the log's last step, if there is one (for the IG proxy)."""
    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.library_store import LibraryFormatError

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


# ------------------------------------------------------------------------------- HTML


def _fmt(v: Any, nd: int = 4) -> str:
    """A table cell's text: floats to ``nd`` decimals, missing values as a dash (escaped by the template)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def render_html(context: dict[str, Any]) -> str:
    """``templates/report.html.j2`` filled with ``context``. Autoescaping is on for every value, and
    values are data, never template source: text such as ``{{ 7*7 }}`` in a skill document is printed
    as it is. An undefined name is an error, not an empty cell."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = _fmt
    return env.get_template("report.html.j2").render(context)


def _provenance_items(top_rows) -> list[dict[str, Any]]:
    """The generated skills among the top ones, with their source (the list under the table)."""
    return [
        dict(r, source_rewards_text=", ".join(f"{x:g}" for x in r.get("source_rewards") or []) or "–")
        for r in top_rows
        if r.get("origin") in ("json", "fallback")
    ]


def load_run(
    run_dir: str | Path,
    metrics: str | Path | None = None,
    log_dir: str | Path | None = None,
    *,
    phase1_steps: int | None = None,
    top: int = 15,
) -> dict[str, Any]:
    """Everything the report reads from a run, for :func:`recipe.arise.tools.report_figures.draw_figures`
    and the page: the library tables ``t``, ``metrics`` ({step: {key: value}}), the phase ``boundary``,
    the checkpointed library ``lib`` of the last step (or None), the top-skill rows and more."""
    run_dir = Path(run_dir)
    lib_log = find_log_dir(run_dir, log_dir)
    df = read_library_log(lib_log)
    metrics_path = find_metrics(run_dir, metrics)
    metric_rows: dict[int, dict[str, float]] = {}
    warnings = list(df.attrs.get("warnings", []))
    if metrics_path is not None:
        metric_rows, mw = read_metrics(metrics_path)
        warnings += mw
    t = library_tables(df)
    boundary, boundary_src = phase_boundary(metric_rows, df, phase1_steps)
    lib_path, lib = _final_library(run_dir, t["last_step"], lib_log)
    if isinstance(lib, Exception):
        warnings.append(f"checkpointed library not usable (IG proxy, uplift plot): {lib}")
        lib = None
    top_rows = _top_rows(t, top, lib)
    return {
        "run_dir": run_dir,
        "lib_log": lib_log,
        "df": df,
        "metrics_path": metrics_path,
        "metrics": metric_rows,
        "warnings": warnings,
        "t": t,
        "boundary": boundary,
        "boundary_src": boundary_src,
        "lib_path": lib_path,
        "lib": lib,
        "top_rows": top_rows,
        "names": {r["skill_id"]: r["skill_name"] for r in top_rows},
        "top_ids": [r["skill_id"] for r in top_rows[:6]],
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
    run = load_run(run_dir, metrics, log_dir, phase1_steps=phase1_steps, top=top)
    run_dir, t, lib, top_rows, metric_rows = run["run_dir"], run["t"], run["lib"], run["top_rows"], run["metrics"]
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    figures, used_keys, unavailable = draw_figures(run, out)

    missing = [k for k in EXPECTED_KEYS if not any(k in row for row in metric_rows.values())]
    ev, sizes, boundary, mp = t["events"], t["sizes"], run["boundary"], run["metrics_path"]
    files = run["df"].attrs.get("files", "?")
    summary = [
        ("run", str(run_dir)),
        ("library log", f"{run['lib_log']} ({files} step files, steps {t['steps'][0]}–{t['last_step']})"),
        ("metrics", f"{mp} ({len(metric_rows)} steps)" if mp else "none found (library plots only)"),
        (
            "Phase I/II boundary",
            f"x = {boundary:g} ({run['boundary_src']})" if boundary is not None else run["boundary_src"],
        ),
        ("final library", f"cache {int(sizes['cache'].iloc[-1])}, reservoir {int(sizes['reservoir'].iloc[-1])}"),
        ("totals", ", ".join(f"{lbl}: {int(ev[c].sum())}" for c, lbl, _ in EVENT_SERIES)),
        (
            "utility vs uplift",
            "no checkpointed library"
            if lib is None
            else f"{len(utility_uplift_disagreement(lib.cache))} cache skill(s) in the top half by utility "
            "with an uplift interval entirely below 0",
        ),
        ("metric keys plotted", ", ".join(used_keys) or "–"),
        ("metric keys missing", ", ".join(missing) or "–"),
    ]
    page = render_html(
        {
            "run_name": run_dir.name or str(run_dir),
            "run_dir": str(run_dir),
            "summary": summary,
            "warnings": run["warnings"][:20],
            "figures": [
                {
                    "title": f.title,
                    "caption": f.caption,
                    "file": f.path.name,
                    "png_base64": base64.b64encode(f.path.read_bytes()).decode("ascii"),
                }
                for f in figures
            ],
            "unavailable": unavailable,
            "last_step": t["last_step"],
            "lib_path": str(run["lib_path"]) if lib is not None else None,
            "top_rows": top_rows,
            "provenance": _provenance_items(top_rows),
        }
    )
    html_path = out / "report.html"
    tmp = html_path.with_name(".report.html.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(html_path)
    written = {f.key: f.path for f in figures}
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
