"""Shared helpers for the ARISE data-preparation scripts: the command line, the write of the output
parquet, what every converter reads of a record (its problem and answer columns, the ``extra_info``
of its provenance), and the AIME / AMC competition sets.

The scripts import every shared name from here; they are defined in

* :mod:`recipe.arise.data_prep.schema`: the prompt, the output parquet schema (``SCHEMA``, one
  fixed ``extra_info`` struct for every dataset), ``make_row``, dedupe;
* :mod:`recipe.arise.data_prep.records`: reading .json / .jsonl / .parquet files and hub splits,
  ``Record`` provenance, the malformed-row report (``BadRowCollector``), ``DataPrepError``;
* :mod:`recipe.arise.data_prep.fields`: answer normalisation (``normalize_answer``) and the
  per-record checks.

Everything here is pure Python + pyarrow (pandas optional); torch / verl /
datasets are never imported at module import time.  ``datasets`` is only
imported lazily when a script is asked to read from the Hugging Face hub.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from recipe.arise.data_prep.fields import (
    AnswerError,
    clean_float,
    clean_int,
    normalize_answer,
    raw_answer_repr,
    validate_answer,
    validate_problem,
)
from recipe.arise.data_prep.records import (
    SUPPORTED_SUFFIXES,
    BadRow,
    BadRowCollector,
    DataPrepError,
    Record,
    get_field,
    load_hf_records,
    loud_warning,
    read_records,
    resolve_column,
    source_name,
)
from recipe.arise.data_prep.schema import (
    ABILITY,
    EXTRA_INFO_FIELDS,
    EXTRA_INFO_KEYS,
    EXTRA_INFO_TYPE,
    INSTRUCTION,
    PROMPT_TYPE,
    REWARD_MODEL_TYPE,
    REWARD_STYLE,
    SCHEMA,
    TOOL_INSTRUCTIONS,
    build_prompt_content,
    dedupe_rows,
    for_tool,
    make_row,
    reindex,
    rows_to_table,
)

__all__ = [
    # schema
    "ABILITY",
    "EXTRA_INFO_FIELDS",
    "EXTRA_INFO_KEYS",
    "EXTRA_INFO_TYPE",
    "INSTRUCTION",
    "PROMPT_TYPE",
    "REWARD_MODEL_TYPE",
    "REWARD_STYLE",
    "SCHEMA",
    "TOOL_INSTRUCTIONS",
    "build_prompt_content",
    "dedupe_rows",
    "for_tool",
    "make_row",
    "reindex",
    "rows_to_table",
    # records
    "SUPPORTED_SUFFIXES",
    "BadRow",
    "BadRowCollector",
    "DataPrepError",
    "Record",
    "get_field",
    "load_hf_records",
    "loud_warning",
    "read_records",
    "resolve_column",
    "source_name",
    # fields
    "AnswerError",
    "clean_float",
    "clean_int",
    "normalize_answer",
    "raw_answer_repr",
    "validate_answer",
    "validate_problem",
    # this module
    "ANSWER_COLS",
    "PROBLEM_COLS",
    "finish",
    "iter_valid",
    "load_input",
    "make_parser",
    "parse_aops_url",
    "parse_args",
    "prepare_competition",
    "record_extra",
    "record_year_info",
    "require_columns",
    "run_main",
    "write_parquet_atomic",
]

# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


def write_parquet_atomic(rows: list[dict], out_path: str | os.PathLike) -> Path:
    """Write rows with the fixed SCHEMA to out_path atomically (tmp file + os.replace)."""
    from recipe.arise.core.store import write_table_atomic  # the project's one atomic parquet writer

    return write_table_atomic(rows_to_table(rows), out_path)


# --------------------------------------------------------------------------------------
# CLI helpers
# --------------------------------------------------------------------------------------


def make_parser(
    description: str, *, default_hf_repo: str, default_split: str, default_name: str
) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--local", default=None, help="local .json/.jsonl/.parquet file or folder (default: read from the HF hub)"
    )
    p.add_argument("--hf-repo", default=default_hf_repo, help=f"HF hub dataset id (default: {default_hf_repo})")
    p.add_argument(
        "--hf-config",
        default=None,
        help="HF dataset config name(s), comma-separated ones are concatenated (default: none)",
    )
    p.add_argument("--hf-split", default=default_split, help=f"HF split (default: {default_split})")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--name", default=default_name, help=f"output file stem (default: {default_name})")
    p.add_argument(
        "--on-bad",
        choices=("skip", "error"),
        default="skip",
        help="malformed rows: skip them and print a report (default) or stop with an error",
    )
    p.add_argument(
        "--tool",
        choices=sorted(TOOL_INSTRUCTIONS),
        default=None,
        help="tool-use data: the prompt's instruction names this tool (the tool agent, docs/agent_loops.md)",
    )
    return p


def load_input(args) -> list[Record]:
    """Records from --local (file/folder) or the hub; malformed JSON lines go to args' collector."""
    bad = args._bad
    if args.local:
        return read_records(args.local, bad)
    configs = [c for c in (args.hf_config or "").split(",") if c] or [None]
    out: list[Record] = []
    for cfg in configs:
        print(f"[data_prep] loading {args.hf_repo} config={cfg} split={args.hf_split} from the HF hub")
        out.extend(load_hf_records(args.hf_repo, args.hf_split, cfg))
    return out


def parse_args(parser: argparse.ArgumentParser, argv=None):
    args = parser.parse_args(argv)
    args._bad = BadRowCollector(args.on_bad)
    return args


def finish(rows: list[dict], args, *, subdir_name: str | None = None) -> Path:
    """Report bad rows, write ``{out}/{name}.parquet``, print a summary line."""
    args._bad.report()
    if not rows:
        raise DataPrepError("no valid rows left; nothing written")
    rows = [for_tool(row, getattr(args, "tool", None)) for row in rows]
    out = write_parquet_atomic(reindex(rows), Path(args.out) / f"{subdir_name or args.name}.parquet")
    print(f"[data_prep] wrote {out} ({len(rows)} rows)")
    return out


def run_main(fn: Callable[[list[str] | None], Any], argv=None) -> int:
    """Call fn(argv) turning DataPrepError into a clean 'error: ...' message and exit status 2."""
    try:
        fn(argv)
    except DataPrepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


# --------------------------------------------------------------------------------------
# Reading a record: shared by every converter
# --------------------------------------------------------------------------------------

# the names a problem / an answer column may have, in the order they are looked for
PROBLEM_COLS = ("problem", "question", "Problem", "Question")
ANSWER_COLS = ("answer", "Answer", "final_answer", "expected_answer")


def require_columns(
    records: Sequence[Record],
    what: str,
    problem_cols: Sequence[str] = PROBLEM_COLS,
    answer_cols: Sequence[str] = ANSWER_COLS,
) -> None:
    """Refuse (DataPrepError naming the file) input in which a file has no problem or no answer column."""
    resolve_column(records, problem_cols, what)
    resolve_column(records, answer_cols, what)


def record_extra(rec: Record, raw: str) -> dict:
    """The ``extra_info`` every converter fills from a record: its raw answer, where it was read
    (file, row) and its difficulty (None where it has none)."""
    return dict(
        raw_answer=raw,
        source_file=source_name(rec.file),
        source_row=rec.row,
        difficulty=clean_float(get_field(rec, ("difficulty",))),
    )


def iter_valid(
    records: Iterable[Record],
    args,
    problem_cols: Sequence[str],
    answer_cols: Sequence[str],
    *,
    strip_leading_zeros: bool = False,
):
    """Yield (record, problem, ground_truth, raw_answer) for well-formed records; report the rest."""
    for rec in records:
        problem = validate_problem(rec, get_field(rec, problem_cols), args._bad)
        if problem is None:
            continue
        raw = get_field(rec, answer_cols)
        if not any(c in rec.data for c in answer_cols):
            args._bad.add(rec, f"missing answer (no '{answer_cols[0]}' field)")
            continue
        gt = validate_answer(rec, raw, args._bad, strip_leading_zeros=strip_leading_zeros)
        if gt is None:
            continue
        yield rec, problem, gt, raw_answer_repr(raw)


_URL_RE = re.compile(r"(\d{4})_(AIME|AMC)_(\w+?)_Problems/Problem_(\d+)", re.I)


def parse_aops_url(url: Any) -> dict:
    """Extract year / contest / problem_number from an AoPS wiki url, e.g. .../2023_AMC_12A_Problems/Problem_1."""
    if not isinstance(url, str):
        return {}
    m = _URL_RE.search(url)
    if not m:
        return {}
    year, kind, part, num = m.groups()
    return {"year": int(year), "contest": f"{kind.upper()} {part}", "problem_number": int(num)}


# --------------------------------------------------------------------------------------
# Competition sets (AIME / AMC): shared by aime24.py, aime25.py, amc23.py
# --------------------------------------------------------------------------------------


def record_year_info(rec: Record) -> dict:
    info = parse_aops_url(get_field(rec, ("url", "link")))
    y = clean_int(get_field(rec, ("year",)))
    if y is not None:
        info["year"] = y
    pn = clean_int(get_field(rec, ("problem_number",)))
    if pn is not None:
        info["problem_number"] = pn
    if "contest" not in info:
        num = clean_int(get_field(rec, ("aime_number",)))
        if num is not None:
            info["contest"] = "AIME " + "I" * num
    return info


def prepare_competition(
    args,
    *,
    data_source: str,
    year: int,
    expected_rows: int,
    strip_leading_zeros: bool,
    default_contest: str | None = None,
) -> Path:
    """Build an AIME/AMC eval parquet: rows whose known year != `year` are filtered out (reported)."""
    records = load_input(args)
    require_columns(records, data_source)
    rows, other_year = [], 0
    for rec, problem, gt, raw in iter_valid(
        records, args, PROBLEM_COLS, ANSWER_COLS, strip_leading_zeros=strip_leading_zeros
    ):
        info = record_year_info(rec)
        if info.get("year") is not None and info["year"] != year:
            other_year += 1
            continue
        info.setdefault("year", year)
        if default_contest and "contest" not in info:
            info["contest"] = default_contest
        rows.append(
            make_row(
                data_source,
                problem,
                gt,
                split="test",
                index=len(rows),
                extra=dict(info, **record_extra(rec, raw), url=get_field(rec, ("url", "link")), source=data_source),
            )
        )
    if other_year:
        print(f"[data_prep] {data_source}: filtered out {other_year} rows from other years (kept year {year})")
    if len(rows) != expected_rows:
        loud_warning(f"{data_source}: {len(rows)} rows, expected {expected_rows}")
    return finish(rows, args)
