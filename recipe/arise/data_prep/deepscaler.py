"""DeepScaleR-Preview training set -> ``{out}/deepscaler.parquet`` (data_source "deepscaler", split "train").

HF default: agentica-org/DeepScaleR-Preview-Dataset (split "train", 40,315 rows: problem, answer, solution).
``--local FILE`` reads the full deepscaler.json (or a parquet/jsonl export; a folder of such files works too).

Component mode (``--components DIR``, or ``--local DIR`` where DIR holds component files such as
train/{amc,omni_math,aime,still,math}.json and no deepscaler.json): the set is rebuilt from the
components present, in the notebook order amc, omni_math, aime, still, math. Locally only aime (975,
AIME 1983-2023) and math (7,474, MATH train) exist, so this is NOT the paper's ~40K set: a loud
warning says so, with counts. (The original notebook also drops answers sympy cannot parse; we do not.)

Exact duplicate problems (same stripped text) are dropped, first occurrence wins, and reported
(``--no-dedupe`` keeps them). No AIME 2024/2025 problem is in DeepScaleR's AIME component (1983-2023),
so no eval-contamination filter is applied.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recipe.arise.data_prep.common import (
    DataPrepError,
    clean_int,
    dedupe_rows,
    finish,
    get_field,
    iter_valid,
    load_input,
    loud_warning,
    make_parser,
    make_row,
    parse_args,
    read_records,
    record_extra,
    record_year_info,
    require_columns,
    run_main,
)

DATA_SOURCE = "deepscaler"
HF_REPO = "agentica-org/DeepScaleR-Preview-Dataset"
FULL_SIZE = 40315
#: component files in the order of deepscaler/data/preprocess/deepscaler.ipynb
COMPONENTS = ("amc", "omni_math", "aime", "still", "math")
FULL_NAMES = ("deepscaler.json", "deepscaler.jsonl", "deepscaler.parquet")

PROBLEM_COLS = ("problem",)
ANSWER_COLS = ("answer",)


def _component_files(d: Path) -> dict[str, Path]:
    found = {}
    for c in COMPONENTS:
        for suf in (".json", ".jsonl", ".parquet"):
            if (d / f"{c}{suf}").is_file():
                found[c] = d / f"{c}{suf}"
                break
    return found


def _rows_from(records, args, component: str | None) -> list[dict]:
    rows = []
    for rec, problem, gt, raw in iter_valid(
        records, args, PROBLEM_COLS, ANSWER_COLS, strip_leading_zeros=(component == "aime")
    ):
        extra = dict(record_extra(rec, raw), source=component or DATA_SOURCE)
        if component == "aime":
            extra.update(record_year_info(rec))
        subj = get_field(rec, ("type", "subject"))
        if isinstance(subj, str):
            extra["subject"] = subj
        lvl = get_field(rec, ("level",))
        if clean_int(lvl) is not None:
            extra["level"] = clean_int(lvl)
        rows.append(make_row(DATA_SOURCE, problem, gt, split="train", index=len(rows), extra=extra))
    return rows


def main(argv=None):
    parser = make_parser(
        __doc__.splitlines()[0], default_hf_repo=HF_REPO, default_split="train", default_name=DATA_SOURCE
    )
    parser.add_argument(
        "--components",
        default=None,
        help="folder with DeepScaleR component files (amc/omni_math/aime/still/math .json)",
    )
    parser.add_argument("--no-dedupe", action="store_true", help="keep exact duplicate problems")
    args = parse_args(parser, argv)

    comp_dir = None
    if args.components:
        comp_dir = Path(args.components)
        if not comp_dir.is_dir():
            raise DataPrepError(f"--components {comp_dir}: not a folder")
    elif args.local and Path(args.local).is_dir():
        d = Path(args.local)
        full = [d / n for n in FULL_NAMES if (d / n).is_file()]
        if full:
            args.local = str(full[0])
        elif _component_files(d):
            comp_dir = d

    if comp_dir is not None:
        files = _component_files(comp_dir)
        if not files:
            raise DataPrepError(
                f"{comp_dir}: no DeepScaleR component files ({', '.join(c + '.json' for c in COMPONENTS)})"
            )
        rows, counts = [], {}
        for c, f in files.items():
            recs = read_records(f, args._bad)
            require_columns(recs, f"deepscaler component {c}", PROBLEM_COLS, ANSWER_COLS)
            counts[c] = len(recs)
            rows.extend(_rows_from(recs, args, c))
        missing = [c for c in COMPONENTS if c not in files]
        total = sum(counts.values())
        msg = (
            f"DeepScaleR built from COMPONENTS in {comp_dir}: "
            + ", ".join(f"{c}={n}" for c, n in counts.items())
            + f" (total {total} records).\n"
        )
        if missing:
            msg += (
                f"MISSING components: {', '.join(missing)}. This is NOT the paper's DeepScaleR-Preview set\n"
                f"({FULL_SIZE} problems); only {total} raw records ({total / FULL_SIZE:.1%}). Training results will\n"
                "not be comparable. Get the full set with: "
                "python -m recipe.arise.data_prep.deepscaler --out DIR (HF hub)."
            )
        else:
            msg += "All five components present, but the notebook's sympy-parsability filter is not applied."
        loud_warning(msg)
    else:
        records = load_input(args)
        require_columns(records, DATA_SOURCE, PROBLEM_COLS, ANSWER_COLS)
        rows = _rows_from(records, args, None)
        if len(records) != FULL_SIZE:
            loud_warning(f"DeepScaleR input has {len(records)} records, expected {FULL_SIZE} (full DeepScaleR-Preview)")

    if not args.no_dedupe:
        rows, dropped, conflicts = dedupe_rows(rows)
        print(
            f"[data_prep] deepscaler: dropped {dropped} exact duplicate problems"
            + (f" ({conflicts} of them with a different answer; first kept)" if conflicts else "")
        )
    return finish(rows, args)


if __name__ == "__main__":
    sys.exit(run_main(main))
