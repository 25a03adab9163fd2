"""MATH-500 -> ``{out}/math500.parquet`` (data_source "math500").

HF default: HuggingFaceH4/MATH-500 (split "test": problem, solution, answer, subject, level, unique_id).
Local: raw/math500/test.jsonl or raw/deepscaler/test/math.json (no subject/level there).
"""

from __future__ import annotations

import re
import sys

from recipe.arise.data_prep.common import (
    ANSWER_COLS,
    PROBLEM_COLS,
    clean_int,
    finish,
    get_field,
    iter_valid,
    load_input,
    loud_warning,
    make_parser,
    make_row,
    parse_args,
    record_extra,
    require_columns,
    run_main,
)

DATA_SOURCE = "math500"
HF_REPO = "HuggingFaceH4/MATH-500"


def _level(x):
    """MATH level: 3, 3.0 or "Level 3" -> 3; anything else -> None."""
    if isinstance(x, str):
        m = re.search(r"\d+", x)
        return int(m.group()) if m else None
    return clean_int(x)


def main(argv=None):
    parser = make_parser(
        __doc__.splitlines()[0], default_hf_repo=HF_REPO, default_split="test", default_name=DATA_SOURCE
    )
    args = parse_args(parser, argv)
    records = load_input(args)
    require_columns(records, DATA_SOURCE)
    rows = []
    for rec, problem, gt, raw in iter_valid(records, args, PROBLEM_COLS, ANSWER_COLS):
        subject = get_field(rec, ("subject", "type"))
        rows.append(
            make_row(
                DATA_SOURCE,
                problem,
                gt,
                split="test",
                index=len(rows),
                extra=dict(
                    record_extra(rec, raw),
                    source=DATA_SOURCE,
                    subject=subject if isinstance(subject, str) else None,
                    level=_level(get_field(rec, ("level",))),
                    unique_id=get_field(rec, ("unique_id",)),
                ),
            )
        )
    if len(rows) != 500:
        loud_warning(f"{DATA_SOURCE}: {len(rows)} rows, expected 500")
    return finish(rows, args)


if __name__ == "__main__":
    sys.exit(run_main(main))
