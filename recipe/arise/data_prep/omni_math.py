"""Omni-MATH -> ``{out}/omni_math.parquet`` + per-domain ``{out}/omni_math_<domain>.parquet``
(domain: algebra, number_theory, combinatorics, geometry).

HF default: KbsdJames/Omni-MATH (split "test", 4,428 problems: domain, difficulty, problem, solution,
answer, source). The full set is NOT available locally; ``--local`` accepts the full Omni-Math.jsonl
or the 2,821-problem Omni-MATH-Rule subset (omni_math_rule.jsonl), with a loud warning for the subset.

Domain mapping (paper: Algebra, Number Theory, Combinatorics, Geometry): ``map_omni_domain``. Rows
that match none of the four keywords get domain "other"; they stay in omni_math.parquet (so the
overall accuracy covers every problem) but are in no per-domain file and hence not in the 4-domain
macro average.

data_source: "omni_math" in omni_math.parquet; "omni_math_<domain>" in the per-domain files (so that
verl's per-data_source validation metrics directly give per-domain accuracy). Use
``--no-suffix-domain-data-source`` to keep "omni_math" there too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from recipe.arise.data_prep.common import (
    finish,
    for_tool,
    get_field,
    iter_valid,
    load_input,
    loud_warning,
    make_parser,
    make_row,
    parse_args,
    record_extra,
    require_columns,
    resolve_column,
    run_main,
    write_parquet_atomic,
)

DATA_SOURCE = "omni_math"
HF_REPO = "KbsdJames/Omni-MATH"
FULL_SIZE = 4428
RULE_SUBSET_SIZE = 2821

#: (keyword, domain) in priority order: the first keyword found in ANY path wins.
DOMAIN_RULES: tuple[tuple[str, str], ...] = (
    ("combinatorics", "combinatorics"),
    ("number theory", "number_theory"),
    ("geometry", "geometry"),
    ("algebra", "algebra"),
)
DOMAINS = tuple(d for _, d in DOMAIN_RULES)
OTHER = "other"

PROBLEM_COLS = ("problem",)
ANSWER_COLS = ("answer",)


def _as_paths(paths) -> list[str]:
    if paths is None:
        return []
    if isinstance(paths, str):
        s = paths.strip()
        if s.startswith("["):
            try:
                return [str(p) for p in json.loads(s)]
            except json.JSONDecodeError:
                pass
        return [s] if s else []
    if hasattr(paths, "tolist"):
        paths = paths.tolist()
    return [str(p) for p in paths if p is not None]


def map_omni_domain(paths) -> str:
    """Map Omni-MATH's ``domain`` list (e.g. ["Mathematics -> Discrete Mathematics -> Combinatorics"])
    to one of "combinatorics", "number_theory", "geometry", "algebra" or "other".

    Rule: a path "contains" a keyword if the keyword occurs (case-insensitively) anywhere in it; the
    keywords are checked in the order Combinatorics > Number Theory > Geometry > Algebra across ALL
    paths of the problem; nothing found -> "other" (Precalculus, Calculus, Applied Mathematics
    (probability/statistics/math word problems), Discrete Mathematics other than Combinatorics, and
    problems with an empty domain list).
    """
    lowered = [p.lower() for p in _as_paths(paths)]
    for kw, dom in DOMAIN_RULES:
        if any(kw in p for p in lowered):
            return dom
    return OTHER


def main(argv=None):
    parser = make_parser(
        __doc__.splitlines()[0], default_hf_repo=HF_REPO, default_split="test", default_name=DATA_SOURCE
    )
    parser.add_argument(
        "--suffix-domain-data-source",
        action=argparse.BooleanOptionalAction,
        default=True,
        help='per-domain files use data_source "omni_math_<domain>" (default) instead of "omni_math"',
    )
    parser.add_argument("--no-domain-files", action="store_true", help="only write omni_math.parquet")
    args = parse_args(parser, argv)
    records = load_input(args)
    require_columns(records, DATA_SOURCE, PROBLEM_COLS, ANSWER_COLS)
    resolve_column(records, ("domain",), DATA_SOURCE)

    n_in = len(records)
    is_rule = bool(args.local) and ("rule" in Path(args.local).name.lower() or n_in == RULE_SUBSET_SIZE)
    if is_rule:
        loud_warning(
            f"Omni-MATH input {args.local} looks like the Omni-MATH-Rule subset ({n_in} records),\n"
            f"NOT the full {FULL_SIZE}-problem Omni-MATH used in the paper. Numbers computed on it are\n"
            f"not comparable to the paper's Table 1. Use --hf-repo {HF_REPO} (default) or the full Omni-Math.jsonl."
        )
    elif n_in != FULL_SIZE:
        loud_warning(f"Omni-MATH input has {n_in} records, expected {FULL_SIZE} (full set)")

    rows = []
    for rec, problem, gt, raw in iter_valid(records, args, PROBLEM_COLS, ANSWER_COLS):
        paths = _as_paths(get_field(rec, ("domain",)))
        src = get_field(rec, ("source",))
        rows.append(
            make_row(
                DATA_SOURCE,
                problem,
                gt,
                split="test",
                index=len(rows),
                extra=dict(
                    record_extra(rec, raw),
                    source=src if isinstance(src, str) else None,
                    domain=map_omni_domain(paths),
                    domain_paths=paths,
                ),
            )
        )
    n_dup = len(rows) - len({r["extra_info"]["question"] for r in rows})
    if n_dup:
        print(f"[data_prep] omni_math: {n_dup} duplicated problem texts kept (eval set is used as published)")
    counts = Counter(r["extra_info"]["domain"] for r in rows)
    print("[data_prep] omni_math domain counts: " + ", ".join(f"{d}={counts.get(d, 0)}" for d in DOMAINS + (OTHER,)))
    print(
        f"[data_prep] omni_math: {counts.get(OTHER, 0)} of {len(rows)} rows fall outside the four paper domains "
        f"(domain='other'; kept in omni_math.parquet, excluded from the per-domain files / 4-domain average)"
    )
    out = finish(rows, args)
    if not args.no_domain_files:
        for dom in DOMAINS:
            sub = [
                dict(for_tool(r, args.tool), extra_info=dict(r["extra_info"]))
                for r in rows
                if r["extra_info"]["domain"] == dom
            ]
            ds = f"{DATA_SOURCE}_{dom}" if args.suffix_domain_data_source else DATA_SOURCE
            for i, r in enumerate(sub):
                r["data_source"] = ds
                r["extra_info"]["index"] = i
            p = write_parquet_atomic(sub, Path(args.out) / f"{args.name}_{dom}.parquet")
            print(f"[data_prep] wrote {p} ({len(sub)} rows)")
    return out


if __name__ == "__main__":
    sys.exit(run_main(main))
