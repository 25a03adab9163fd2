"""End to end: ARISE's tool agent under verl's colocate_async trainer on CPU (docs/trainer_modes.md).

A launch of ``TRAINER_MODE=colocate_async TOOL=python run_scripts/cpu_smoke_arise.sh`` with the
script's defaults (6 steps, Phase I steps 1-2; ``arise_tool_agent`` with the sandboxed python tool),
its ``OUT_DIR`` under pytest's tmp. The single-turn agent's colocate_async run is killed after a
checkpoint and resumed in test_cpu_async_resume_e2e.py, separate_async runs in
test_cpu_separate_e2e.py and test_cpu_separate_single_turn_e2e.py (modules of their own, so CI's
two pytest-xdist workers run them side by side). The run completes, the verdict FAILs nothing,
skills are used in Phase II and no scoring request fails (verl's async client would lose every
scoring answer's ``prompt_logprobs``; ARISE's client keeps them, recipe/arise/adapters/
llm_client.py); the tool agent calls its tool; every checkpoint holds its undrained observations.
"""

from __future__ import annotations

import pytest
import smoke_run
from async_checks import check_run, check_tool_calls, verdict_not_failed

pytestmark = pytest.mark.e2e


@pytest.mark.launch
def test_tool_agent_under_colocate_async(tmp_path):
    # no preflight: tests/test_run_scripts.py checks this config with it
    proc = smoke_run.launch(tmp_path, TRAINER_MODE="colocate_async", TOOL="python", SKIP_PREFLIGHT=1)
    verdict_not_failed(proc.stdout)  # the script exits 1 on FAIL: launch() fails first
    check_tool_calls(check_run(tmp_path, "colocate_async", loop="arise_tool_agent"))
