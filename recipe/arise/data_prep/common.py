"""Shared helpers for the ARISE data-preparation scripts.

Everything here is pure Python + pyarrow (pandas optional); torch / verl /
datasets are never imported at module import time.  ``datasets`` is only
imported lazily when a script is asked to read from the Hugging Face hub.

Output format (one row per problem, verl RL parquet schema)::

    data_source   str
    prompt        list<struct<role: str, content: str>>  (one user turn)
    ability       str  ("math")
    reward_model  struct<style: str ("rule"), ground_truth: str>
    extra_info    struct<...>  -- ONE fixed schema (EXTRA_INFO_TYPE) for every
                                  dataset, so that several eval parquet files can
                                  be concatenated by verl's RLHFDataset
                                  (datasets.concatenate_datasets needs identical
                                  features).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# --------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------

#: The single instruction appended to every problem (train and eval, all datasets).
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."

ABILITY = "math"
REWARD_STYLE = "rule"


def build_prompt_content(problem: str) -> str:
    """``problem.strip() + "\\n" + INSTRUCTION``."""
    return problem.strip() + "\n" + INSTRUCTION


# --------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------

PROMPT_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
REWARD_MODEL_TYPE = pa.struct([("style", pa.string()), ("ground_truth", pa.string())])

#: extra_info fields, identical for every dataset (unused ones are null).
EXTRA_INFO_FIELDS: list[tuple[str, pa.DataType]] = [
    ("split", pa.string()),  # "train" / "test"
    ("index", pa.int64()),  # 0-based position in the output parquet
    ("question", pa.string()),  # raw problem text (without the instruction)
    ("raw_answer", pa.string()),  # the answer as found in the source (json-dumped if not a str)
    ("source_file", pa.string()),  # file name (or hub id) the row came from
    ("source_row", pa.int64()),  # 0-based record number inside that file / hub split
    ("source", pa.string()),  # Omni-MATH competition / DeepScaleR component / ...
    ("year", pa.int64()),  # AIME / AMC year when known
    ("contest", pa.string()),  # e.g. "AIME I", "AMC 12A" when known
    ("problem_number", pa.int64()),  # AIME / AMC problem number when known
    ("domain", pa.string()),  # Omni-MATH paper domain (algebra/number_theory/combinatorics/geometry/other)
    ("domain_paths", pa.list_(pa.string())),  # Omni-MATH raw domain list
    ("difficulty", pa.float64()),  # float or null, never mixed
    ("subject", pa.string()),  # MATH subject / type
    ("level", pa.int64()),  # MATH level
    ("unique_id", pa.string()),  # MATH-500 unique_id
    ("url", pa.string()),  # AoPS url when known
]
EXTRA_INFO_TYPE = pa.struct(EXTRA_INFO_FIELDS)
EXTRA_INFO_KEYS = [name for name, _ in EXTRA_INFO_FIELDS]

SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", PROMPT_TYPE),
        ("ability", pa.string()),
        ("reward_model", REWARD_MODEL_TYPE),
        ("extra_info", EXTRA_INFO_TYPE),
    ]
)


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


# --------------------------------------------------------------------------------------
# Answer normalisation
# --------------------------------------------------------------------------------------

# JSON escapes that swallow a LaTeX backslash: "\frac" in a JSON string is form-feed + "rac".
_CTRL_FIX = {"\x0c": "\\f", "\x08": "\\b", "\x07": "\\a", "\x0b": "\\v"}
_WRAPPERS = [("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")]


class AnswerError(ValueError):
    """The answer is missing or of an unusable type."""


def _strip_wrappers(s: str) -> str:
    changed = True
    while changed:
        changed = False
        s = s.strip()
        for left, right in _WRAPPERS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                inner = s[len(left) : len(s) - len(right)]
                # "$a$ and $b$" must not become "a$ and $b"
                if left == "$" and "$" in inner:
                    continue
                s = inner
                changed = True
                break
    return s.strip()


def _extract_last_boxed(s: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` / ``\\fbox{...}`` in s, else None."""
    idx = max(s.rfind("\\boxed{"), s.rfind("\\fbox{"))
    if idx < 0:
        return None
    start = s.index("{", idx)
    depth = 0
    for j in range(start, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return s[start + 1 : j]
    return None  # unbalanced


def _format_number(x: float | int) -> str:
    if isinstance(x, bool):
        raise AnswerError("boolean answer")
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        raise AnswerError(f"non-finite numeric answer {x!r}")
    if float(x).is_integer():
        return str(int(x))
    return repr(float(x))  # shortest round-trip repr, e.g. 0.5 -> "0.5"


def normalize_answer(ans: Any, *, strip_leading_zeros: bool = False) -> str:
    """Turn a raw dataset answer into the ground-truth string used by the grader.

    Rules (see docs/data.md):
      * None / empty / whitespace-only -> AnswerError (row is malformed).
      * bool, dict, other objects -> AnswerError.
      * int -> str(int); float -> "27" for 27.0, shortest repr otherwise ("0.5").
      * numpy scalars are treated like int/float.
      * list/tuple (Minerva / OlympiadBench style): elements normalised; empty ones dropped;
        one element -> that element; several -> joined with ", "; empty list -> AnswerError.
      * str: control characters produced by bad JSON escapes are repaired ("\\x0crac" -> "\\frac"),
        surrounding whitespace and $..$, $$..$$, \\(..\\), \\[..\\] are stripped; if the answer
        contains \\boxed{...} the content of the last one is used; wrappers are stripped again.
        The LaTeX itself is otherwise kept verbatim.
      * strip_leading_zeros=True (AIME-style sources only): a pure digit string loses leading
        zeros ("012" -> "12", "000" -> "0").
    """
    if ans is None:
        raise AnswerError("missing answer (null)")
    # numpy / pandas scalars without importing numpy
    if hasattr(ans, "item") and not isinstance(ans, (str, bytes, list, tuple, dict)):
        try:
            ans = ans.item()
        except Exception:  # pragma: no cover
            pass
    if hasattr(ans, "tolist") and not isinstance(ans, (str, bytes, list, tuple, dict)):
        ans = ans.tolist()  # numpy array (parquet list column read through pandas)
    if isinstance(ans, bool):
        raise AnswerError("boolean answer")
    if isinstance(ans, (int, float)):
        out = _format_number(ans)
    elif isinstance(ans, (list, tuple)):
        parts = []
        for a in ans:
            try:
                parts.append(normalize_answer(a, strip_leading_zeros=strip_leading_zeros))
            except AnswerError:
                continue
        if not parts:
            raise AnswerError("empty answer list")
        return ", ".join(parts)
    elif isinstance(ans, str):
        s = ans
        for bad_c, good in _CTRL_FIX.items():
            s = s.replace(bad_c, good)
        s = re.sub(r"\t(?=[a-zA-Z])", r"\\t", s)  # "\theta", "\times", "\tfrac"
        s = re.sub(r"\r(?=[a-zA-Z])", r"\\r", s)  # "\right", "\rangle"
        s = _strip_wrappers(s)
        boxed = _extract_last_boxed(s)
        if boxed is not None:
            s = _strip_wrappers(boxed)
        out = s
    else:
        raise AnswerError(f"unsupported answer type {type(ans).__name__}")
    if not out.strip():
        raise AnswerError("empty answer")
    if strip_leading_zeros and re.fullmatch(r"\d+", out):
        out = str(int(out))
    return out


def raw_answer_repr(ans: Any) -> str:
    if isinstance(ans, str):
        return ans
    try:
        return json.dumps(ans, ensure_ascii=False)
    except TypeError:
        return repr(ans)


# --------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------


def make_row(
    data_source: str,
    problem: str,
    ground_truth: str,
    *,
    split: str,
    index: int,
    extra: dict | None = None,
) -> dict:
    """Build one verl RL row. ``extra`` keys must be in EXTRA_INFO_KEYS; missing ones become null."""
    extra = dict(extra or {})
    unknown = set(extra) - set(EXTRA_INFO_KEYS)
    if unknown:
        raise KeyError(f"unknown extra_info keys {sorted(unknown)}")
    info = {k: None for k in EXTRA_INFO_KEYS}
    info.update(extra)
    info["split"] = split
    info["index"] = int(index)
    info["question"] = problem
    if info["difficulty"] is not None:
        info["difficulty"] = float(info["difficulty"])
    for k in ("year", "problem_number", "level", "source_row"):
        if info[k] is not None:
            info[k] = int(info[k])
    if info["domain_paths"] is not None:
        info["domain_paths"] = [str(x) for x in info["domain_paths"]]
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": build_prompt_content(problem)}],
        "ability": ABILITY,
        "reward_model": {"style": REWARD_STYLE, "ground_truth": ground_truth},
        "extra_info": info,
    }


def validate_problem(rec: Record, problem: Any, bad: BadRowCollector) -> str | None:
    if problem is None:
        bad.add(rec, "missing problem (null)")
        return None
    if not isinstance(problem, str):
        bad.add(rec, f"problem is {type(problem).__name__}, not a string")
        return None
    if not problem.strip():
        bad.add(rec, "empty problem")
        return None
    return problem.strip()


def validate_answer(rec: Record, answer: Any, bad: BadRowCollector, *, strip_leading_zeros=False) -> str | None:
    try:
        return normalize_answer(answer, strip_leading_zeros=strip_leading_zeros)
    except AnswerError as e:
        bad.add(rec, str(e) + f" [raw: {raw_answer_repr(answer)[:60]!r}]")
        return None


def _clean_float(x) -> float | None:
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def clean_float(x) -> float | None:
    """float or None (NaN / unparsable -> None)."""
    return _clean_float(x)


def clean_int(x) -> int | None:
    f = _clean_float(x)
    return None if f is None or not f.is_integer() else int(f)


# --------------------------------------------------------------------------------------
# Dedupe / writing
# --------------------------------------------------------------------------------------


def dedupe_rows(rows: list[dict]) -> tuple[list[dict], int, int]:
    """Drop rows whose raw problem text (extra_info.question) was seen before (first one wins).

    Returns (kept_rows, n_dropped, n_conflicting) where n_conflicting counts dropped duplicates whose
    ground truth differed from the kept one.
    """
    seen: dict[str, str] = {}
    kept, dropped, conflicts = [], 0, 0
    for r in rows:
        q = r["extra_info"]["question"]
        if q in seen:
            dropped += 1
            if seen[q] != r["reward_model"]["ground_truth"]:
                conflicts += 1
            continue
        seen[q] = r["reward_model"]["ground_truth"]
        kept.append(r)
    return kept, dropped, conflicts


def reindex(rows: list[dict]) -> list[dict]:
    for i, r in enumerate(rows):
        r["extra_info"]["index"] = i
    return rows


def rows_to_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_parquet_atomic(rows: list[dict], out_path: str | os.PathLike) -> Path:
    """Write rows with the fixed SCHEMA to out_path atomically (tmp file + os.replace)."""
    from recipe.arise.core.library import write_table_atomic  # the project's one atomic parquet writer

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

PROBLEM_COLS = ("problem", "question", "Problem", "Question")
ANSWER_COLS = ("answer", "Answer", "final_answer", "expected_answer")


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
    resolve_column(records, PROBLEM_COLS, data_source)
    resolve_column(records, ANSWER_COLS, data_source)
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
                extra=dict(
                    info,
                    raw_answer=raw,
                    source_file=source_name(rec.file),
                    source_row=rec.row,
                    url=get_field(rec, ("url", "link")),
                    difficulty=clean_float(get_field(rec, ("difficulty",))),
                    source=data_source,
                ),
            )
        )
    if other_year:
        print(f"[data_prep] {data_source}: filtered out {other_year} rows from other years (kept year {year})")
    if len(rows) != expected_rows:
        loud_warning(f"{data_source}: {len(rows)} rows, expected {expected_rows}")
    return finish(rows, args)
