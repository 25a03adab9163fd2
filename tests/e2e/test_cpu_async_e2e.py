"""End to end: ARISE under verl's colocate_async trainer on CPU (docs/trainer_modes.md).

Launches of ``TRAINER_MODE=colocate_async run_scripts/cpu_smoke_arise.sh`` with the script's
defaults (6 steps, Phase I steps 1-2), each with its own ``OUT_DIR`` under pytest's tmp: the
single-turn agent and the tool agent (``TOOL=python``: ``arise_tool_agent`` with the sandboxed
python tool); separate_async in test_cpu_separate_e2e.py (its own module, so CI's two pytest-xdist
workers run it beside these). Each run completes, the verdict says OK, skills are used
in Phase II and no scoring request fails (verl's async client would lose every scoring answer's
``prompt_logprobs``; ARISE's client keeps them, recipe/arise/adapters/llm_client.py); the tool agent
calls its tool; every checkpoint holds its undrained observations.
"""

from __future__ import annotations

import pytest
import smoke_run
from async_checks import check_run as _check_run
from async_checks import verdict_not_failed

pytestmark = pytest.mark.e2e


@pytest.mark.launch
def test_arise_under_colocate_async(tmp_path, tiny):
    # no preflight: tests/test_run_scripts.py checks this config with it
    proc = smoke_run.launch(tmp_path, TINY_DIR=tiny, TRAINER_MODE="colocate_async", SKIP_PREFLIGHT=1)
    verdict_not_failed(proc.stdout)  # the script exits 1 on FAIL: launch() fails first
    _check_run(tmp_path, "colocate_async")


@pytest.mark.launch
def test_tool_agent_under_colocate_async(tmp_path):
    proc = smoke_run.launch(tmp_path, TRAINER_MODE="colocate_async", TOOL="python", SKIP_PREFLIGHT=1)
    verdict_not_failed(proc.stdout)
    metrics = _check_run(tmp_path, "colocate_async", loop="arise_tool_agent")
    # the tool was called (and ran: a sandbox failure is a tool error) in every step
    calls = {s: metrics[s]["arise/tool_calls"] for s in metrics}
    assert all(c > 0.0 for c in calls.values()), calls
    assert all(metrics[s]["arise/tool_error_rate"] < 0.5 for s in metrics)
