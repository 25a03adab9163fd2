"""Reading the raw inputs of ARISE's data preparation: records with their provenance, the
malformed-row bookkeeping, and the .json / .jsonl / .parquet / hub readers.

Pure Python + pyarrow; ``datasets`` is imported lazily, only when a script reads from the Hugging
Face hub.  The scripts import these names through :mod:`recipe.arise.data_prep.common`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# --------------------------------------------------------------------------------------
# Errors / bad-row bookkeeping
# --------------------------------------------------------------------------------------


class DataPrepError(Exception):
    """Raised for unrecoverable input problems (missing column, --on-bad error, ...)."""


@dataclass
class Record:
    """One raw input record plus its provenance."""

    data: dict
    file: str
    row: int  # 0-based record number in the file
    line: int | None = None  # 1-based line number for .jsonl

    def where(self) -> str:
        loc = f"{self.file} row {self.row}"
        if self.line is not None:
            loc += f" (line {self.line})"
        return loc


@dataclass
class BadRow:
    file: str
    row: int
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        loc = f"{self.file} row {self.row}"
        if self.line is not None:
            loc += f" (line {self.line})"
        return f"{loc}: {self.reason}"


@dataclass
class BadRowCollector:
    """Collects malformed rows; raises immediately in ``error`` mode."""

    on_bad: str = "skip"
    rows: list[BadRow] = field(default_factory=list)

    def add(self, rec: Record | None, reason: str, *, file: str | None = None, row: int = -1, line=None) -> None:
        bad = BadRow(rec.file, rec.row, reason, rec.line) if rec is not None else BadRow(file or "?", row, reason, line)
        self.rows.append(bad)
        if self.on_bad == "error":
            raise DataPrepError(f"malformed row (--on-bad error): {bad}")

    def report(self, stream=None) -> None:
        stream = stream or sys.stdout
        if not self.rows:
            print("[data_prep] malformed rows: 0", file=stream)
            return
        print(f"[data_prep] malformed rows skipped: {len(self.rows)}", file=stream)
        for b in self.rows:
            print(f"[data_prep]   SKIPPED {b}", file=stream)


def loud_warning(msg: str, stream=None) -> None:
    stream = stream or sys.stderr
    bar = "!" * 100
    print(bar, file=stream)
    for line in msg.strip().splitlines():
        print(f"!!! WARNING: {line}", file=stream)
    print(bar, file=stream)


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------

SUPPORTED_SUFFIXES = (".json", ".jsonl", ".parquet")


def _read_json_file(path: Path, bad: BadRowCollector) -> list[Record]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if not stripped:
        return []
    if stripped[0] == "[":
        data = json.loads(text)
        out = []
        for i, d in enumerate(data):
            if not isinstance(d, dict):
                bad.add(None, f"record is {type(d).__name__}, not an object", file=str(path), row=i)
                continue
            out.append(Record(d, str(path), i))
        return out
    if stripped[0] == "{":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return _read_jsonl_file(path, bad)  # json-lines with a .json suffix
        # {"col": [..], ...} (column-oriented) or a single record
        if data and all(isinstance(v, list) for v in data.values()):
            n = len(next(iter(data.values())))
            if all(len(v) == n for v in data.values()):
                return [Record({k: v[i] for k, v in data.items()}, str(path), i) for i in range(n)]
        return [Record(data, str(path), 0)]
    raise DataPrepError(f"{path}: not a JSON array/object")


def _read_jsonl_file(path: Path, bad: BadRowCollector) -> list[Record]:
    out = []
    row = 0
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                bad.add(None, f"invalid JSON ({e.msg})", file=str(path), row=row, line=lineno)
                row += 1
                continue
            if not isinstance(d, dict):
                bad.add(None, f"record is {type(d).__name__}, not an object", file=str(path), row=row, line=lineno)
            else:
                out.append(Record(d, str(path), row, lineno))
            row += 1
    return out


def _read_parquet_file(path: Path) -> list[Record]:
    table = pq.read_table(path)
    return [Record(d, str(path), i) for i, d in enumerate(table.to_pylist())]


def read_records(path: str | os.PathLike, bad: BadRowCollector | None = None) -> list[Record]:
    """Read a .json / .jsonl / .parquet file, or every such file in a folder (sorted, non-recursive)."""
    bad = bad if bad is not None else BadRowCollector()
    p = Path(path)
    if not p.exists():
        raise DataPrepError(f"input not found: {p}")
    files = sorted(f for f in p.iterdir() if f.suffix in SUPPORTED_SUFFIXES) if p.is_dir() else [p]
    if not files:
        raise DataPrepError(f"no {'/'.join(SUPPORTED_SUFFIXES)} files in folder {p}")
    out: list[Record] = []
    for f in files:
        try:
            if f.suffix == ".jsonl":
                out.extend(_read_jsonl_file(f, bad))
            elif f.suffix == ".json":
                out.extend(_read_json_file(f, bad))
            elif f.suffix == ".parquet":
                out.extend(_read_parquet_file(f))
            else:
                raise DataPrepError(f"{f}: unsupported file type (expected {SUPPORTED_SUFFIXES})")
        except (json.JSONDecodeError, UnicodeDecodeError, pa.ArrowException, OSError) as e:
            # truncated / corrupted input: name the file instead of a traceback
            raise DataPrepError(f"{f}: cannot read input file ({type(e).__name__}: {e})") from e
    return out


def load_hf_records(repo: str, split: str, config: str | None = None) -> list[Record]:
    """Load a hub dataset split via ``datasets.load_dataset`` (imported lazily)."""
    try:
        import datasets  # noqa: PLC0415  (lazy on purpose)
    except ImportError as e:  # pragma: no cover - depends on env
        raise DataPrepError("reading from the HF hub needs the `datasets` package (pip install datasets)") from e
    ds = datasets.load_dataset(repo, config, split=split) if config else datasets.load_dataset(repo, split=split)
    name = f"hf://{repo}" + (f"[{config}]" if config else "") + f":{split}"
    return [Record(dict(d), name, i) for i, d in enumerate(ds)]


def resolve_column(records: Sequence[Record], candidates: Sequence[str], source_name: str, *, required=True):
    """Return the first candidate column present in any record of every input file.

    Raises DataPrepError naming the file and the column when a required column is absent.
    """
    by_file: dict[str, list[Record]] = {}
    for r in records:
        by_file.setdefault(r.file, []).append(r)
    chosen = None
    for fname, recs in by_file.items():
        found = next((c for c in candidates if any(c in r.data for r in recs)), None)
        if found is None:
            if required:
                raise DataPrepError(
                    f"{fname}: missing required column '{candidates[0]}'"
                    + (f" (also tried {list(candidates[1:])})" if len(candidates) > 1 else "")
                    + f" for {source_name}"
                )
            continue
        if chosen is None:
            chosen = found
        elif found != chosen:  # different files use different aliases -> per-record lookup handles it
            pass
    return chosen


def source_name(file: str) -> str:
    """File name for local inputs, the full ``hf://repo:split`` name for hub inputs."""
    return file if file.startswith("hf://") else os.path.basename(file)


def get_field(rec: Record, candidates: Sequence[str], default=None):
    for c in candidates:
        if c in rec.data:
            return rec.data[c]
    return default
