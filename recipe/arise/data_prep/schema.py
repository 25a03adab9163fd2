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

import pyarrow as pa

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
    return pa.Table.from_pylist(rows, schema=SCHEMA)
