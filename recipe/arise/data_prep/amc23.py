"""AMC 2023 (12A + 12B, 40 problems) -> ``{out}/amc23.parquet`` (data_source "amc23").

HF default: AI-MO/aimo-validation-amc (split "train", 83 rows = AMC 2022 + 2023, the set the paper
cites), filtered to 2023 by the year parsed from the AoPS url -> 40 rows. ``--hf-repo math-ai/amc23``
(already 2023-only) also works.

Local: raw/amc23_qwen25math/test.jsonl (40) or raw/deepscaler/test/amc.json (83, filtered to 40).
Answers are floats in the source (27.0); they become integer strings ("27").
"""

from __future__ import annotations

import sys

from recipe.arise.data_prep.common import make_parser, parse_args, prepare_competition, run_main

DATA_SOURCE = "amc23"
HF_REPO = "AI-MO/aimo-validation-amc"


def main(argv=None):
    parser = make_parser(
        __doc__.splitlines()[0], default_hf_repo=HF_REPO, default_split="train", default_name=DATA_SOURCE
    )
    args = parse_args(parser, argv)
    return prepare_competition(args, data_source=DATA_SOURCE, year=2023, expected_rows=40, strip_leading_zeros=False)


if __name__ == "__main__":
    sys.exit(run_main(main))
