"""End to end: plain GRPO (``ARISE=false``, README) through the same code path as ARISE — the real
verl 0.9.1 trainer on CPU with the tiny model, two steps and a checkpoint. A module of its own, so
that under pytest-xdist (CI) its launch runs beside the evaluation of tests/e2e/test_cpu_e2e.py
instead of after it."""

from __future__ import annotations

import pytest
import smoke_run
from omegaconf import OmegaConf

from recipe.arise.tools import verdict

pytestmark = pytest.mark.e2e


def test_plain_grpo_through_the_same_path(tmp_path, tiny):
    # no preflight: README command 2 runs it, and tests/test_run_scripts.py checks this config with it
    smoke_run.launch(tmp_path, TINY_DIR=tiny, STEPS=2, ARISE="false", SAVE_FREQ=2, SKIP_PREFLIGHT=1)
    metrics = smoke_run.metrics(tmp_path)
    assert sorted(metrics) == [1, 2]
    assert all(metrics[s]["actor/grad_norm"] > 0.0 for s in metrics)
    # only the run-level keys the trainer logs with ARISE on or off (rows dropped at load, the tool's)
    assert not [k for k in metrics[2] if k.startswith("arise/") and k not in verdict.RUN_KEYS], metrics[2]
    assert metrics[2]["arise/rows_dropped"] == 0.0
    folder = tmp_path / "checkpoints" / "global_step_2"
    assert (folder / "actor").is_dir()
    assert not (folder / "arise" / "library.parquet").exists()  # no library: ARISE is off
    # the settings the step was trained with are recorded for every run (a resume compares them)
    assert OmegaConf.load(folder / "arise" / "config.yaml").arise.enable is False
