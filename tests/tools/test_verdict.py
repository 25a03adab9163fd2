"""The verdict on synthetic verl metrics files: a healthy run passes, the ways ARISE silently becomes
GRPO fail (no skill used, scoring failing), a tiny run's normal outcome exits 0, the launch parts of
a resumed run are read in order."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recipe.arise.tools import verdict

REPO = Path(__file__).resolve().parents[2]


def _step(phase: int, n: int = 512, **over) -> dict:
    row = {
        "arise/phase": float(phase),
        "arise/trajectories": float(n),
        "arise/control_rate": 0.25 if phase == 2 else 0.0,
        "arise/skill_use_rate": 0.5 if phase == 2 else 0.0,
        "arise/gate_pass_rate": 0.7 if phase == 2 else 0.0,
        "arise/scoring_failures": 0.0,
        "arise/cache_size": 10.0,
        "arise/mixed_group_rate": 0.2 if phase == 2 else 0.0,
        "arise/phase2_groups": float(n // 8) if phase == 2 else 0.0,
        "arise/frac_reward_2": 0.3 if phase == 2 else 0.0,
        "arise/adv_shift": 0.1 if phase == 2 else 0.0,
        "arise/summary_attempts": 1.0,
        "arise/summary_parsed": 1.0,
        "arise/new_skills": 1.0,
        "arise/scoring_s": 20.0 if phase == 2 else 0.0,
        "training/rollout_probs_diff_mean": 0.003,
        "training/rollout_actor_probs_pearson_corr": 0.995,
        "timing_s/step": 100.0,
        "timing_s/arise_summary": 2.0,
        "timing_s/arise_library": 0.1,
    }
    row.update(over)
    return row


def _write(path: Path, rows: dict[int, dict]) -> Path:
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows.items()))
    return path


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipe.arise.tools.verdict", *map(str, args)], cwd=REPO, capture_output=True, text=True
    )


def _status(checks, metric_start: str) -> str:
    (check,) = [c for c in checks if c.metric.startswith(metric_start)]
    return check.status


def _gpu_run(**phase2) -> dict[int, dict]:
    return {1: _step(1), **{s: _step(2, **phase2) for s in range(2, 11)}}


def test_healthy_gpu_run_is_ok(tmp_path):
    checks = verdict.judge(_gpu_run(), "gpu")
    assert {c.status for c in checks} == {"OK"}, [c.line() for c in checks]
    proc = _run("--scale", "gpu", _write(tmp_path / "m.jsonl", _gpu_run()))
    assert proc.returncode == 0 and "ARISE is alive" in proc.stdout
    for line in proc.stdout.splitlines()[1:-1]:  # metric, value, threshold, status on every line
        assert line.startswith("[verdict] OK ") and "(" in line


def test_no_skill_used_fails(tmp_path):
    rows = _gpu_run(**{"arise/skill_use_rate": 0.0, "arise/gate_pass_rate": 0.0, "arise/mixed_group_rate": 0.0})
    checks = verdict.judge(rows, "gpu")
    assert _status(checks, "arise/skill_use_rate") == "FAIL"
    assert _status(checks, "arise/gate_pass_rate") == "FAIL"
    proc = _run("--scale", "gpu", _write(tmp_path / "m.jsonl", rows))
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if "skill_use_rate" in x)
    assert "FAIL" in line and "0.00" in line and "->" in line  # value, status and what to do
    # the tiny scale catches it too
    tiny = {s: {**r, "arise/trajectories": 16.0} for s, r in rows.items()}
    assert _status(verdict.judge(tiny, "tiny"), "arise/skill_use_rate") == "FAIL"


def test_scoring_failures_everywhere_fail():
    n = 512
    rows = _gpu_run(**{"arise/scoring_failures": n * 0.75, "arise/skill_use_rate": 0.0, "arise/gate_pass_rate": 0.0})
    checks = verdict.judge(rows, "gpu")
    assert _status(checks, "arise/scoring_failures") == "FAIL"
    few = _gpu_run(**{"arise/scoring_failures": 10.0})  # 10 of 384 scored trajectories
    assert _status(verdict.judge(few, "gpu"), "arise/scoring_failures") == "WARN"


def test_gpu_thresholds_warn_and_fail():
    checks = verdict.judge(_gpu_run(**{"arise/skill_use_rate": 0.1, "arise/mixed_group_rate": 0.0}), "gpu")
    assert _status(checks, "arise/skill_use_rate") == "WARN"
    assert _status(checks, "arise/mixed_group_rate") == "FAIL"  # skills used, no R=1/R=2 group: binary gradient
    parse = _gpu_run(**{"arise/summary_parsed": 0.0})
    assert _status(verdict.judge(parse, "gpu"), "arise/summary_parse_rate") == "FAIL"
    drift = _gpu_run(**{"training/rollout_probs_diff_mean": 0.08})
    assert _status(verdict.judge(drift, "gpu"), "training/rollout_probs_diff") == "FAIL"
    slow = _gpu_run(**{"timing_s/arise_summary": 30.0})
    assert _status(verdict.judge(slow, "gpu"), "timing_s/arise") == "WARN"


def test_tiny_run_normal_outcome_exits_zero(tmp_path):
    """The CPU smoke run: 6 steps, 16 trajectories, rare mixing, bf16 vLLM-CPU vs fp32 actor."""
    rows = {
        s: _step(
            1 if s <= 2 else 2,
            n=16,
            **(
                {
                    "arise/skill_use_rate": 0.25 if s in (4, 6) else 0.0,
                    "arise/gate_pass_rate": 0.5 if s in (4, 6) else 0.0,
                    "arise/mixed_group_rate": 0.0,
                    "arise/summary_parsed": 0.0,
                    "training/rollout_probs_diff_mean": 0.2,
                    "training/rollout_actor_probs_pearson_corr": 0.5,
                    "timing_s/arise_summary": 40.0,
                }
                if s > 2
                else {}
            ),
        )
        for s in range(1, 7)
    }
    assert verdict.scale_of(rows) == "tiny"
    checks = verdict.judge(rows, "auto")
    assert "FAIL" not in {c.status for c in checks}, [c.line() for c in checks]
    assert _status(checks, "training/rollout_probs_diff") == "INFO"  # not judged at this scale
    assert _status(checks, "arise/mixed_group_rate") == "INFO"
    assert _run("--scale", "tiny", _write(tmp_path / "m.jsonl", rows)).returncode == 0


@pytest.mark.parametrize(
    "rows",
    [
        {1: _step(1, n=16), 2: _step(1, n=16)},  # Phase I only (the e2e test's first launch)
        {3: _step(2, n=16, **{"arise/skill_use_rate": 0.0, "arise/gate_pass_rate": 0.0})},  # one Phase II step
        {1: {"timing_s/step": 3.0, "training/rollout_probs_diff_mean": 0.01}},  # plain GRPO (arise.enable=false)
    ],
    ids=["phase1-only", "one-phase2-step", "grpo"],
)
def test_too_little_to_judge_is_not_a_failure(rows):
    checks = verdict.judge(rows, "tiny")
    assert "FAIL" not in {c.status for c in checks}, [c.line() for c in checks]


def test_launch_parts_are_read_in_order(tmp_path):
    """A resumed run: launch 1's file moved to metrics.launch1.jsonl; its step 3 redone by launch 2."""
    healthy = _gpu_run()
    _write(tmp_path / "metrics.launch1.jsonl", {s: healthy[s] for s in (1, 2, 3)} | {3: _step(2, **{"x": 1.0})})
    _write(tmp_path / "metrics.jsonl", {s: healthy[s] for s in range(3, 11)})
    metrics = verdict.load([tmp_path / "metrics.jsonl"])
    assert sorted(metrics) == list(range(1, 11)) and "x" not in metrics[3]  # the later launch's step 3
    assert sorted(verdict.load([tmp_path / "metrics.jsonl"], launch_only=True)) == list(range(3, 11))
    assert _run("--scale", "gpu", tmp_path / "metrics.jsonl").returncode == 0
    assert _run(tmp_path / "missing.jsonl").returncode == 1


def test_calibrated_gate_judged_against_its_target():
    """temperature: auto logs arise/gate_target: the pooled Phase II pass rate must be within +-0.15
    of it, or within 3 binomial s.d. when the run has too few queries to hold +-0.15."""

    def run(rate: float, queries: float, n: int = 512) -> dict[int, dict]:
        p2 = {"arise/gate_target": 0.73, "arise/gate_pass_rate": rate, "arise/queries": queries}
        return {1: _step(1, n=n), **{s: _step(2, n=n, **p2) for s in range(2, 11)}}

    name = "arise/gate_target"
    assert _status(verdict.judge(run(0.80, 64.0), "gpu"), name) == "OK"  # 576 queries, 0.07 off
    assert _status(verdict.judge(run(0.50, 64.0), "gpu"), name) == "WARN"  # 0.23 off, s.d. 0.019
    assert _status(verdict.judge(run(0.95, 64.0), "gpu"), name) == "WARN"  # open too wide, too
    # 9 steps of 2 queries: 3 s.d. = 0.31 > 0.23, so 0.50 is within sampling noise of 0.73
    assert _status(verdict.judge(run(0.50, 2.0, n=8), "tiny"), name) == "OK"
    assert _status(verdict.judge(run(0.0, 2.0, n=8), "tiny"), name) == "WARN"  # a shut gate is not noise
    # a fixed sigma logs no target: no such check
    assert not [c for c in verdict.judge(_gpu_run(), "gpu") if c.metric.startswith(name)]
