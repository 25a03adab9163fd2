"""AIME 2025 (30 problems, I + II) -> ``{out}/aime25.parquet`` (data_source "aime25").

HF default: yentinglin/aime_2025 (split "train", 30 rows). AI-MO/aimo-validation-aime (cited by the
paper) stops at 2024, so it cannot be used for 2025. Alternative:
``--hf-repo opencompass/AIME2025 --hf-config AIME2025-I,AIME2025-II --hf-split test``
(both configs are concatenated; the "question" column is accepted as the problem).

Local: raw/aime25/test.jsonl (problem + answer only; problem numbers are not available and stay null)
or raw/aime25_deepscaler_format/aime-2025.json. Leading zeros are stripped ("012" -> "12").
"""

from __future__ import annotations

import sys

from recipe.arise.data_prep.common import make_parser, parse_args, prepare_competition, run_main

DATA_SOURCE = "aime25"
HF_REPO = "yentinglin/aime_2025"


def main(argv=None):
    parser = make_parser(
        __doc__.splitlines()[0], default_hf_repo=HF_REPO, default_split="train", default_name=DATA_SOURCE
    )
    args = parse_args(parser, argv)
    return prepare_competition(args, data_source=DATA_SOURCE, year=2025, expected_rows=30, strip_leading_zeros=True)


if __name__ == "__main__":
    sys.exit(run_main(main))
