"""Shared by the end-to-end modules: the tiny model, tokenizer and dataset the CPU runs use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny() -> Path:
    """The default assets, from the content-keyed cache the smoke script uses (built once; CI's
    README command 2, run before the tests, has built it). ARISE_TINY_DIR=DIR uses assets built by
    ``python -m recipe.arise.cpu.tiny DIR`` instead."""
    reuse = os.environ.get("ARISE_TINY_DIR")
    if reuse and (Path(reuse) / "tiny_assets.json").is_file():
        return Path(reuse)
    proc = subprocess.run(
        [sys.executable, "-m", "recipe.arise.cpu.tiny", "--cached"],
        cwd=REPO,
        check=True,
        timeout=1800,
        capture_output=True,
        text=True,
    )
    return Path(proc.stdout.strip().splitlines()[-1])
