"""The output format of ARISE's data preparation: the prompt, the parquet schema, one row.

One row per problem, verl RL parquet schema::

    data_source   str
    prompt        list<struct<role: str, content: str>>  (one user turn)
    ability       str  ("math")
    reward_model  struct<style: str ("rule"), ground_truth: str>
    extra_info    struct<...>  -- ONE fixed schema (EXTRA_INFO_TYPE) for every
                                  dataset, so that several eval parquet files can
                                  be concatenated by verl's RLHFDataset
                                  (datasets.concatenate_datasets needs identical
                                  features).

Pure Python + pyarrow.  The scripts import these names through :mod:`recipe.arise.data_prep.common`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

# --------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------

#: The single instruction appended to every problem (train and eval, all datasets).
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
#: The instruction of the tool-use data (``--tool python``): the same task, the Python tool named (the
#: tool agent gives the model the tool's schema; this sentence says the tool may be used at all).
TOOL_INSTRUCTIONS = {
    "python": (
        "You may run Python code with the `python` tool (numpy and sympy are available) to compute or "
        "check a step. " + INSTRUCTION
    ),
}

ABILITY = "math"
REWARD_STYLE = "rule"


def build_prompt_content(problem: str, tool: str | None = None) -> str:
    """``problem.strip() + "\\n" + INSTRUCTION`` (``tool``: that tool's instruction instead)."""
    return problem.strip() + "\n" + (TOOL_INSTRUCTIONS[tool] if tool else INSTRUCTION)


def for_tool(row: dict, tool: str | None) -> dict:
    """The row with the tool-use instruction (``--tool``): only the user turn changes."""
    if not tool:
        return row
    return {**row, "prompt": [{"role": "user", "content": build_prompt_content(row["extra_info"]["question"], tool)}]}


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
    ("env", pa.string()),  # environment rows: json {"name", "game", "options"} (docs/environments.md)
    ("task_type", pa.string()),  # environment rows: the game's task type (success per type)
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

#: Environment rows (one game each): the same columns and the agent loop that plays them.
ENV_ABILITY = "env"
ENV_REWARD_STYLE = "env"  # no ground truth: the environment says whether the episode is won
ENV_AGENT = "arise_env_agent"
ENV_SCHEMA = SCHEMA.append(pa.field("agent_name", pa.string()))


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
    """Build one verl RL row. ``extra`` keys must be in EXTRA_INFO_KEYS; missing ones become null.
    An empty problem or ground truth raises ValueError (:func:`row_faults`): no converter writes one."""
    faults = row_faults([{"role": "user", "content": problem}], {"ground_truth": ground_truth})
    if faults:
        raise ValueError(f"{data_source} {split} row {index}: " + "; ".join(faults))
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


def make_env_row(env: str, game: dict, options: dict, task: str, task_type: str, *, split: str, index: int) -> dict:
    """One environment row (a game): the user turn is the task, ``extra_info.env`` what the agent
    loop needs to start the game (``make_env(env, **options).reset(game)``)."""
    from recipe.arise.core.env_prompts import task_prompt

    if not task_type or not isinstance(task_type, str):
        raise ValueError(f"env/{env} {split} row {index}: empty task type")
    info = {k: None for k in EXTRA_INFO_KEYS}
    info.update(
        split=split,
        index=int(index),
        question=str(task).strip(),
        source=env,
        task_type=task_type,
        env=json.dumps({"name": env, "game": game, "options": options}, sort_keys=True),
    )
    return {
        "data_source": f"env/{env}/{task_type}",
        "prompt": [{"role": "user", "content": task_prompt(task)}],  # raises on an empty task
        "ability": ENV_ABILITY,
        "reward_model": {"style": ENV_REWARD_STYLE, "ground_truth": ""},
        "extra_info": info,
        "agent_name": ENV_AGENT,
    }


# --------------------------------------------------------------------------------------
# Dedupe / table (the atomic write: common.write_parquet_atomic)
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
    return pa.Table.from_pylist(rows, schema=ENV_SCHEMA if rows and "agent_name" in rows[0] else SCHEMA)


# --------------------------------------------------------------------------------------
# Row checks: the converters (make_row), the preflight and the training's dataset
# (recipe.arise.adapters.dataset) refuse the same rows
# --------------------------------------------------------------------------------------

GROUND_TRUTH_FIELD = "reward_model.ground_truth"


class DataRowError(ValueError):
    """A data file holds rows a run must not take (:func:`row_faults`)."""


@dataclass(frozen=True)
class RowFault:
    file: str
    row: int | None  # 0-based row in the file; None: the whole file (a missing column)
    what: str  # "field: reason"

    def __str__(self) -> str:
        return f"{self.file}: {self.what}" if self.row is None else f"{self.file} row {self.row}: {self.what}"


def _blank(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list | tuple):
        return all(_blank(v) for v in value)
    return False


def row_faults(prompt: Any, reward_model: Any, prompt_key: str = "prompt") -> list[str]:
    """``"field: reason"`` for each reason a row is unusable. Without a ground truth every
    trajectory of the row is graded 0, a constant reward that trains nothing (an environment row,
    ``reward_model.style`` "env", has none: its environment grades it); an empty prompt trains on
    the chat template alone."""
    faults = []
    if not isinstance(prompt, list | tuple) or not prompt:
        faults.append(f"{prompt_key}: no messages")
    elif all(not isinstance(m, dict) or _blank(m.get("content")) for m in prompt):
        faults.append(f"{prompt_key}: every message's content is empty")
    truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if isinstance(reward_model, dict) and reward_model.get("style") == ENV_REWARD_STYLE:
        return faults  # an environment row: the episode's success is its reward, no ground truth
    if truth is None:
        faults.append(f"{GROUND_TRUTH_FIELD}: missing")
    elif _blank(truth):
        faults.append(f"{GROUND_TRUTH_FIELD}: empty")
    return faults


def _read_columns(path: str, columns: list[str]) -> tuple[int, dict[str, list]]:
    """The row count and those of ``columns`` the file has (parquet, JSON lines, a JSON list)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        present = [c for c in columns if c in pq.read_schema(path).names]
        table = pq.read_table(path, columns=present)
        return table.num_rows, {c: table.column(c).to_pylist() for c in present}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    present = [c for c in columns if any(c in r for r in rows)]
    return len(rows), {c: [r.get(c) for r in rows] for c in present}


def file_row_faults(
    path: str | os.PathLike,
    prompt_key: str = "prompt",
    count_tokens: Callable[[list], int] | None = None,
    max_tokens: int | None = None,
    shown_as: str | None = None,
) -> tuple[int, list[RowFault]]:
    """The file's row count and its unusable rows (:func:`row_faults`). With ``count_tokens``, a
    prompt over ``max_tokens`` is one too: verl 0.9.1's agent loop left-truncates it silently,
    whatever ``data.truncation`` says. ``shown_as``: the file's name in the faults."""
    path = os.fspath(path)
    name = shown_as or path
    try:
        n, cols = _read_columns(path, [prompt_key, "reward_model"])
    except (OSError, ValueError, pa.ArrowException) as error:  # a truncated or empty file, bad JSON
        return 0, [RowFault(name, None, f"unreadable: {type(error).__name__}: {error}")]
    missing = [(c, f) for c, f in ((prompt_key, prompt_key), ("reward_model", GROUND_TRUTH_FIELD)) if c not in cols]
    if missing:
        return n, [RowFault(name, None, f"{field}: no '{column}' column") for column, field in missing]
    faults = []
    for i, (prompt, reward_model) in enumerate(zip(cols[prompt_key], cols["reward_model"], strict=True)):
        found = row_faults(prompt, reward_model, prompt_key)
        if not found and count_tokens is not None and (tokens := count_tokens(prompt)) > max_tokens:
            found = [
                f"{prompt_key}: {tokens} tokens > data.max_prompt_length {max_tokens} "
                "(data.truncation=error, data.filter_overlong_prompts=False)"
            ]
        faults += [RowFault(name, i, what) for what in found]
    return n, faults


def describe_faults(faults: list[RowFault], rows: int, limit: int = 10) -> str:
    """One message for a refusal: how many faults, and the first ``limit`` (file, row, field: reason)."""
    shown = "; ".join(str(f) for f in faults[:limit])
    more = f"; ... and {len(faults) - limit} more" if len(faults) > limit else ""
    return f"{len(faults)} unusable data row(s) or column(s) in {rows} rows: {shown}{more}"
