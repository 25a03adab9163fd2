"""End to end: ARISE under verl's async trainers on CPU (docs/trainer_modes.md).

Launches of ``TRAINER_MODE=<mode> run_scripts/cpu_smoke_arise.sh`` with the script's defaults
(6 steps, Phase I steps 1-2), each with its own ``OUT_DIR`` under pytest's tmp: colocate_async with
the single-turn agent and with the tool agent (``TOOL=python``: ``arise_tool_agent`` with the
sandboxed python tool), and separate_async. Each run completes, the verdict says OK, skills are used
in Phase II and no scoring request fails (verl's async client would lose every scoring answer's
``prompt_logprobs``; ARISE's client keeps them, recipe/arise/adapters/llm_client.py); the tool agent
calls its tool; every checkpoint holds its undrained observations.

separate_async runs on two fake "GPU" slots, the trainer's and the standalone rollout server's, and
sends the weights over Ray's object store (recipe/arise/cpu/cpu_checkpoint_engine.py): each step's
sync reaches the server, which stamps every trajectory with the weights' step, so no trained
trajectory is more than one step stale.
"""

from __future__ import annotations

import pytest
import smoke_run

from recipe.arise.adapters.trainer_resume import PENDING_FILE, load_pending_observations

pytestmark = pytest.mark.e2e
STEPS, PHASE2, CHECKPOINTS = 6, (3, 4, 5, 6), (2, 4, 6)


def _check_run(tmp_path, mode: str, loop: str = "arise_agent") -> dict[int, dict[str, float]]:
    cfg = smoke_run.config(tmp_path)
    assert cfg.trainer.v1.trainer_mode == mode
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == loop
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert f"trainer.v1.trainer_mode={mode}: the ARISE trainer arise_{mode}" in log
    metrics = smoke_run.metrics(tmp_path)
    assert sorted(metrics) == list(range(1, STEPS + 1))
    p2 = [metrics[s] for s in PHASE2]
    assert sum(x["arise/skill_use_rate"] * x["arise/trajectories"] for x in p2) > 0
    assert sum(x["arise/scoring_failures"] for x in metrics.values()) == 0
    assert all(metrics[s]["actor/grad_norm"] > 0.0 for s in metrics)
    _resume_state_kept(tmp_path, metrics)
    return metrics


def _resume_state_kept(run, metrics) -> None:
    """Every checkpoint holds the observations not yet drained at its save (readable, of its step;
    docs/trainer_modes.md), and the fresh run re-issued nothing."""
    for step in CHECKPOINTS:
        library = run / "checkpoints" / f"global_step_{step}" / "arise" / "library.parquet"
        load_pending_observations(str(library.parent / PENDING_FILE), step)
    assert metrics[1]["arise/reissued_groups"] == 0.0


@pytest.mark.launch
def test_arise_under_colocate_async(tmp_path, tiny):
    # no preflight: tests/test_run_scripts.py checks this config with it
    proc = smoke_run.launch(tmp_path, TINY_DIR=tiny, TRAINER_MODE="colocate_async", SKIP_PREFLIGHT=1)
    assert "[verdict] OK:" in proc.stdout  # the script exits 1 on FAIL: launch() fails first
    _check_run(tmp_path, "colocate_async")


@pytest.mark.launch
def test_tool_agent_under_colocate_async(tmp_path):
    proc = smoke_run.launch(tmp_path, TRAINER_MODE="colocate_async", TOOL="python", SKIP_PREFLIGHT=1)
    assert "[verdict] OK:" in proc.stdout
    metrics = _check_run(tmp_path, "colocate_async", loop="arise_tool_agent")
    # the tool was called (and ran: a sandbox failure is a tool error) in every step
    calls = {s: metrics[s]["arise/tool_calls"] for s in metrics}
    assert all(c > 0.0 for c in calls.values()), calls
    assert all(metrics[s]["arise/tool_error_rate"] < 0.5 for s in metrics)


@pytest.mark.launch
def test_arise_under_separate_async(tmp_path, tiny):
    proc = smoke_run.launch(tmp_path, TINY_DIR=tiny, TRAINER_MODE="separate_async", SKIP_PREFLIGHT=1)
    assert "[verdict] OK:" in proc.stdout
    metrics = _check_run(tmp_path, "separate_async")
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert "rollout served by 1 standalone replicas only" in log  # hybrid_engine=False: one vLLM engine
    assert all(metrics[s]["timing_s/update_weights"] > 0 for s in metrics)  # the standalone sync, every step
    assert max(metrics[s]["training/off_policy/trajectory_staleness/max"] for s in metrics) <= 1
