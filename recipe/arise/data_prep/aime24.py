"""AIME 2024 (30 problems, I + II) -> ``{out}/aime24.parquet`` (data_source "aime24").

HF default: HuggingFaceH4/aime_2024 (split "train", 30 rows: id, problem, solution, answer, url, year).
It holds the same 30 problems as ids 60-89 of AI-MO/aimo-validation-aime (the set the paper cites);
``--hf-repo AI-MO/aimo-validation-aime`` also works: rows from other years are filtered out by the
year parsed from the AoPS url.

Local: raw/aime24_qwen25math/test.jsonl (Qwen2.5-Math eval copy) or raw/deepscaler/test/aime.json.
Answers are integer strings; leading zeros are stripped ("012" -> "12").
"""

from __future__ import annotations

import sys

from recipe.arise.data_prep.common import make_parser, parse_args, prepare_competition, run_main

DATA_SOURCE = "aime24"
HF_REPO = "HuggingFaceH4/aime_2024"


def main(argv=None):
    parser = make_parser(
        __doc__.splitlines()[0], default_hf_repo=HF_REPO, default_split="train", default_name=DATA_SOURCE
    )
    args = parse_args(parser, argv)
    return prepare_competition(args, data_source=DATA_SOURCE, year=2024, expected_rows=30, strip_leading_zeros=True)


if __name__ == "__main__":
    sys.exit(run_main(main))
