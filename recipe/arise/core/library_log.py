"""Append-only per-step log of the skill library, for analysis (``recipe.arise.tools.report``).

One parquet file per training step under ``<log_dir>/library_log/`` (a parquet dataset: read the
whole log with ``pandas.read_parquet(dir)``), each written atomically. Rows are events
(added, evicted, loaded, demoted, deleted, overflow, duplicate, updated) and one ``state`` row per
library entry after the step's maintenance, with its tier, utility and usage.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from recipe.arise.core.store import write_table_atomic

COLUMNS = (
    "step",
    "phase",
    "event",
    "skill_id",
    "tier",
    "skill_name",
    "problem_type",
    "utility",
    "usage_count",
    "doc",
    # provenance (where the skill came from) and the measured causal uplift
    "origin",
    "source_step",
    "source_uid",
    "source_query",
    "source_rewards",
    "uplift",
)


def step_rows(step: int, phase: int, events, library) -> list[dict[str, Any]]:
    def row(event: str, skill_id: str, **extra) -> dict[str, Any]:
        entry = library.get(skill_id)
        base = {c: None for c in COLUMNS}
        base.update(step=int(step), phase=int(phase), event=event, skill_id=skill_id)
        if entry is not None:
            base.update(
                tier=library.tier_of(skill_id),
                skill_name=entry.doc.skill_name,
                problem_type=entry.doc.problem_type,
                utility=float(entry.utility),
                usage_count=int(entry.usage_count),
                doc=entry.doc.to_json(),
                origin=entry.provenance.origin,
                source_step=entry.provenance.step,
                source_uid=entry.provenance.uid,
                source_query=entry.provenance.query,
                source_rewards=list(entry.provenance.rewards),
                uplift=entry.uplift,
            )
        base.update(extra)
        return base

    rows = [row("added", sid) for sid in events.added]
    rows += [row("evicted", sid) for sid in events.evicted]
    for swap in events.loaded:
        rows.append(row("loaded", swap["loaded"]))
        rows.append(row("demoted", swap["demoted"]))
    rows += [row("deleted", sid) for sid in events.deleted]
    rows += [row("overflow", sid) for sid in events.overflow]
    rows += [row("updated", sid) for sid in events.updated]
    rows += [
        row("duplicate", d.get("duplicate_of", ""), skill_name=d.get("skill_name")) for d in events.dropped_duplicates
    ]
    rows += [row("state", entry.skill_id) for entry in library.cache + library.reservoir]
    return rows


def write_step_log(log_dir: str | os.PathLike, step: int, phase: int, events, library) -> Path:
    import pyarrow as pa

    out_dir = Path(log_dir) / "library_log"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = step_rows(step, phase, events, library)
    schema = pa.schema(
        [
            ("step", pa.int64()),
            ("phase", pa.int64()),
            ("event", pa.string()),
            ("skill_id", pa.string()),
            ("tier", pa.string()),
            ("skill_name", pa.string()),
            ("problem_type", pa.string()),
            ("utility", pa.float64()),
            ("usage_count", pa.int64()),
            ("doc", pa.string()),
            ("origin", pa.string()),
            ("source_step", pa.int64()),
            ("source_uid", pa.string()),
            ("source_query", pa.string()),
            ("source_rewards", pa.list_(pa.float64())),
            ("uplift", pa.float64()),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    return write_table_atomic(table, out_dir / f"step_{int(step):08d}.parquet")


def library_digest(library) -> str:
    """A content hash of the whole library state (entries, utilities, counters)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(library.state_dict(), sort_keys=True, default=str).encode()).hexdigest()


def record_resume(log_dir: str | os.PathLike, step: int, source: str, library) -> None:
    """Append one line to ``<log_dir>/resumes.jsonl`` saying which library a resumed run restored."""
    import json

    Path(log_dir).mkdir(parents=True, exist_ok=True)
    line = {
        "step": int(step),
        "source": str(source),
        "digest": library_digest(library),
        "entries": len(library.entries()),
    }
    with open(Path(log_dir) / "resumes.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def set_aside_steps_after(log_dir: str | os.PathLike, step: int) -> list[Path]:
    """A resumed run redoes the steps after ``step``: the step logs a killed run wrote past that
    checkpoint move to ``library_log/superseded/<time>/`` (kept, not deleted; ``read_log`` reads
    only the run's own line of steps). Returns the moved files' new paths."""
    import time

    log = Path(log_dir) / "library_log"
    later = [f for f in sorted(log.glob("step_*.parquet")) if int(f.stem.split("_")[1]) > int(step)]
    if not later:
        return []
    aside = log / "superseded" / time.strftime("%Y%m%dT%H%M%S")
    aside.mkdir(parents=True, exist_ok=True)
    moved = []
    for f in later:
        moved.append(f.rename(aside / f.name))
    return moved


def read_log(log_dir: str | os.PathLike):
    import pandas as pd

    files = sorted((Path(log_dir) / "library_log").glob("step_*.parquet"))
    if not files:
        raise FileNotFoundError(f"no library log files under {Path(log_dir) / 'library_log'}")
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
