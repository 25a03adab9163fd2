"""End to end: ARISE under verl's separate_async trainer on CPU (docs/trainer_modes.md).

One launch of ``TRAINER_MODE=separate_async TOOL=python run_scripts/cpu_smoke_arise.sh`` with the
script's defaults (the tool agent, ``arise_tool_agent``: it sends its requests through the same
async client as the single-turn agent, which CI runs under colocate_async), checked as the
colocate_async runs are (tests/helpers/async_checks.py), the tool called in every step, and the
standalone rollout server's weights synced every step, no trajectory more than one step stale
(``async_checks.check_standalone_rollout``).
"""

from __future__ import annotations

import pytest
import smoke_run
from async_checks import check_run, check_standalone_rollout, check_tool_calls, verdict_not_failed

pytestmark = pytest.mark.e2e


@pytest.mark.launch
def test_tool_agent_under_separate_async(tmp_path):
    proc = smoke_run.launch(tmp_path, TRAINER_MODE="separate_async", TOOL="python", SKIP_PREFLIGHT=1)
    verdict_not_failed(proc.stdout)
    metrics = check_run(tmp_path, "separate_async", loop="arise_tool_agent")
    check_tool_calls(metrics)
    check_standalone_rollout(tmp_path, metrics)
