"""End to end: ARISE's single-turn agent under verl's separate_async trainer on CPU
(docs/trainer_modes.md).

One launch of ``TRAINER_MODE=separate_async PARAM_SYNC_STEP=2 run_scripts/cpu_smoke_arise.sh`` with
the script's other defaults (``arise_agent``): two mini-batches (two policy updates) per weight sync,
checked as the colocate_async runs are (tests/helpers/async_checks.py), and the standalone rollout
server's weights synced every step, no trajectory more than one step stale
(``async_checks.check_standalone_rollout``); tests/e2e/test_cpu_separate_e2e.py runs the tool agent
in the same mode with one mini-batch per sync. A module of its own, so
that under CI's ``-n 2 --dist loadfile`` the other worker can take it beside that launch.
"""

from __future__ import annotations

import pytest
import smoke_run
from async_checks import check_run, check_standalone_rollout, verdict_not_failed

pytestmark = pytest.mark.e2e


@pytest.mark.launch
def test_single_turn_agent_under_separate_async(tmp_path, tiny):
    proc = smoke_run.launch(tmp_path, TINY_DIR=tiny, TRAINER_MODE="separate_async", PARAM_SYNC_STEP=2, SKIP_PREFLIGHT=1)
    verdict_not_failed(proc.stdout)
    metrics = check_run(tmp_path, "separate_async")
    check_standalone_rollout(tmp_path, metrics)
    cfg = smoke_run.config(tmp_path)
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 2
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size * 2 == cfg.data.train_batch_size
