"""The verdict on synthetic verl metrics files: a healthy run passes, the ways ARISE silently becomes
GRPO fail (no arise/* metric at all, ARISE idle, no skill used, scoring failing), a plain GRPO run
expected as such says ARISE was off, a tiny run's normal outcome exits 0 (and a tiny run is never
judged at the gpu scale), the launch parts of a resumed run are read in order, unreadable metrics
exit 2, and the CPU smoke script's ending passes the run's expectation on."""

import json
import os
import shutil
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
    cpu = verdict.RunConfig("c.yaml", True, "cpu")
    assert verdict.scale_of(cpu) == "tiny"
    checks = verdict.judge(rows, "auto", config=cpu)
    assert "FAIL" not in {c.status for c in checks}, [c.line() for c in checks]
    assert _status(checks, "training/rollout_probs_diff") == "INFO"  # not judged at this scale
    assert _status(checks, "arise/mixed_group_rate") == "INFO"
    assert _run("--scale", "tiny", _write(tmp_path / "m.jsonl", rows)).returncode == 0


@pytest.mark.parametrize(
    "rows",
    [
        {1: _step(1, n=16), 2: _step(1, n=16)},  # Phase I only (the e2e test's first launch)
        {3: _step(2, n=16, **{"arise/skill_use_rate": 0.0, "arise/gate_pass_rate": 0.0})},  # one Phase II step
    ],
    ids=["phase1-only", "one-phase2-step"],
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
    (tmp_path / "run_config.yaml").write_text("trainer:\n  device: cuda\n")  # the preflight's record
    assert _run(tmp_path).returncode == 0  # the run folder: its metrics.jsonl and launch parts


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


# ----------------------------------------------------------------------------- runs without ARISE
GRPO_STEP = {"timing_s/step": 3.0, "training/rollout_probs_diff_mean": 0.01, "actor/grad_norm": 0.5}


def _grpo_run(folder: Path, enable: bool | None = None, steps: int = 2) -> Path:
    """A plain GRPO run's folder: verl metrics without arise/* keys, and (enable given) the hydra config."""
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "metrics.jsonl", {s: dict(GRPO_STEP) for s in range(1, steps + 1)})
    if enable is not None:
        (folder / "hydra" / ".hydra").mkdir(parents=True)
        (folder / "hydra" / ".hydra" / "config.yaml").write_text(
            "data:\n  train_batch_size: 4\nactor_rollout_ref:\n  rollout:\n    n: 4\ntrainer:\n  device: cpu\n"
            f"arise:\n  enable: {enable}\n"
        )
    return folder


def test_grpo_metrics_fail_when_arise_was_expected(tmp_path):
    """No arise/* key in a run meant to be ARISE: FAIL with a sentence that says so, exit 1."""
    rows = {1: dict(GRPO_STEP), 2: dict(GRPO_STEP)}
    checks = verdict.judge(rows, "tiny")
    assert [c.status for c in checks] == ["FAIL"], [c.line() for c in checks]
    proc = _run("--scale", "tiny", _write(tmp_path / "m.jsonl", rows))
    assert proc.returncode == 1, proc.stdout
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("[verdict] FAIL: no ARISE activity") and "plain GRPO" in last, last
    assert "ARISE is alive" not in proc.stdout
    # the run's config says why: ARISE was off (quoted), still a FAIL where ARISE was expected
    run = _grpo_run(tmp_path / "run", enable=False)
    proc = _run(run)
    assert proc.returncode == 1 and "ARISE was off" in proc.stdout and "arise.enable=false" in proc.stdout


def test_grpo_run_expected_as_such_says_arise_was_off(tmp_path):
    """--expect grpo (the CPU smoke run's ARISE=false): ARISE off is the expected outcome, exit 0,
    in those words and with no pointer at ARISE's tools; ARISE metrics there are a FAIL."""
    run = _grpo_run(tmp_path / "run", enable=False)
    proc = _run("--expect", "grpo", run)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "[verdict] OFF: ARISE was off in this run (plain GRPO): nothing to judge"
    assert "ARISE is alive" not in proc.stdout and "inspect_run" not in proc.stdout and "library" not in proc.stdout
    assert _run("--expect", "grpo", "--scale", "gpu", _write(tmp_path / "arise.jsonl", _gpu_run())).returncode == 1


def test_arise_logged_but_idle_fails():
    """arise/* keys, but no summary, no skill scored or injected anywhere: FAIL once Phase II ran; a
    short Phase I without summaries (the no_summary ablation's normal) is not judged."""
    activity = ("summary_attempts", "summary_parsed", "new_skills", "scoring_tokens", "gate_pass_rate")
    idle = {f"arise/{k}": 0.0 for k in (*activity, "skill_use_rate", "mixed_group_rate")}
    rows = {1: _step(1, n=16, **idle), 2: _step(2, n=16, **idle)}  # one Phase II step: too few for the rates
    checks = verdict.judge(rows, "tiny")
    assert "FAIL" in {c.status for c in checks}, [c.line() for c in checks]
    assert _status(checks, "arise activity") == "FAIL"
    status, sentence, code = verdict.outcome(checks)
    assert (status, code) == ("FAIL", 1) and sentence.startswith("no ARISE activity"), sentence
    phase1 = {1: _step(1, n=16, **idle), 2: _step(1, n=16, **idle)}
    assert "FAIL" not in {c.status for c in verdict.judge(phase1, "tiny")}
    assert _status(verdict.judge(_gpu_run(), "gpu"), "arise activity") == "OK"


def test_the_scale_comes_from_the_runs_config_not_its_largest_step(tmp_path):
    """The CPU smoke run (trainer.device=cpu, 4 x 4 trajectories) where dynamic sampling's refills
    lifted one step to 72 trajectories: scale tiny, as its launch said, not gpu."""
    rows = {s: _step(1 if s <= 2 else 2, n=16) for s in range(1, 7)} | {4: _step(2, n=72)}
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "metrics.jsonl", rows)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "run_config.yaml").write_text(
        "data:\n  train_batch_size: 4\nactor_rollout_ref:\n  rollout:\n    n: 4\ntrainer:\n  device: cpu\n"
    )
    proc = _run(run)
    first = proc.stdout.splitlines()[0]
    assert "scale tiny (trainer.device=cpu in " in first and "run_config.yaml" in first, proc.stdout + proc.stderr
    assert verdict.scale_of(verdict.RunConfig("c.yaml", True, "cuda")) == "gpu"
    # a GRPO run's hydra config says the same
    assert "scale tiny" in _run(_grpo_run(tmp_path / "grpo", enable=False)).stdout.splitlines()[0]


def test_no_readable_config_says_what_is_missing(tmp_path):
    """--scale auto without a config: exit 2 naming the folder, the files looked for and the way out;
    no guess. A config without trainer.device says that."""
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "metrics.jsonl", _gpu_run())
    proc = _run(run)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert f"cannot tell the run's scale: no readable run config in {run}" in proc.stderr
    assert "run_config.yaml" in proc.stderr and "--config" in proc.stderr and "--scale tiny|gpu" in proc.stderr
    assert _run("--scale", "gpu", run).returncode == 0  # told the scale: judged
    (run / "run_config.yaml").write_text("data:\n  train_batch_size: 64\n")
    proc = _run(run)
    assert proc.returncode == 2 and "run_config.yaml: no trainer.device" in proc.stderr, proc.stderr
    (run / "run_config.yaml").write_text("trainer: [unclosed\n")  # unreadable: said, then the same exit
    proc = _run(run)
    assert proc.returncode == 2 and "unreadable config" in proc.stderr and "no readable run config" in proc.stderr
    with pytest.raises(verdict.VerdictInputError, match="no readable run config"):
        verdict.judge(_gpu_run(), "auto")


@pytest.mark.parametrize("case", ["missing", "empty", "garbage", "folder-without-metrics"])
def test_unreadable_metrics_exit_2(tmp_path, case):
    """Could not read (2) is told apart from FAIL (1)."""
    path = tmp_path / "metrics.jsonl"
    if case == "empty":
        path.write_text("")
    elif case == "garbage":
        path.write_text('not json\n{"step": 1}\n')
    elif case == "folder-without-metrics":
        path = tmp_path
    proc = _run(path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot read the metrics" in proc.stderr and str(tmp_path) in proc.stderr


@pytest.mark.parametrize("arise", ["true", "false"])
def test_cpu_smoke_ending_passes_the_expectation(tmp_path, arise):
    """run_scripts/cpu_smoke_arise.sh after a run that logged plain GRPO metrics (a stand-in for
    run_scripts/arise.sh): ARISE=true fails, ARISE=false says ARISE was off and points at none of
    ARISE's tools or files."""
    scripts = tmp_path / "repo" / "run_scripts"
    scripts.mkdir(parents=True)
    shutil.copy(REPO / "run_scripts" / "cpu_smoke_arise.sh", scripts)
    (scripts / "arise.sh").write_text(  # the run: plain GRPO metrics whatever it was asked
        'mkdir -p "$(dirname "$VERL_FILE_LOGGER_PATH")"\n'
        f"printf '%s\\n' '{json.dumps({'step': 1, 'data': GRPO_STEP})}' > \"$VERL_FILE_LOGGER_PATH\"\n"
    )
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "tiny_assets.json").write_text("{}")
    env = {
        **os.environ,
        "ARISE": arise,
        "OUT_DIR": str(tmp_path / "out"),
        "TINY_DIR": str(tiny),
        "PYTHON": sys.executable,
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.run(
        ["bash", str(scripts / "cpu_smoke_arise.sh")], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    out = proc.stdout
    assert "[cpu_smoke] done" in out and "[verdict]" in out, out + proc.stderr
    if arise == "true":
        assert proc.returncode == 1 and "[verdict] FAIL: no ARISE activity" in out, out
    else:
        assert proc.returncode == 0, out + proc.stderr
        assert "ARISE was off in this run (plain GRPO): nothing to judge" in out
        assert "inspect_run" not in out and "library" not in out and "tools.report" not in out, out


TOOL_KEYS = {"arise/tool_calls": 1.5, "arise/tool_error_rate": 0.1, "arise/tool_s": 0.2}


def test_grpo_run_with_the_tool_and_dropped_rows_is_still_arise_off(tmp_path):
    """The trainer logs arise/rows_dropped and the tool's arise/tool_* with ARISE off too: they are no
    sign of ARISE (a GRPO-with-tool baseline is OFF where GRPO was expected, a FAIL where ARISE was)."""
    step = {**GRPO_STEP, **TOOL_KEYS, "arise/rows_dropped": 0.0, "arise/val_rows_dropped": 0.0}
    path = _write(tmp_path / "m.jsonl", {1: dict(step), 2: dict(step)})
    proc = _run("--expect", "grpo", "--scale", "tiny", path)
    assert proc.returncode == 0 and "[verdict] OFF: ARISE was off" in proc.stdout, proc.stdout
    assert "arise/tool_calls" in proc.stdout  # the tool is judged in a GRPO run too
    proc = _run("--scale", "tiny", path)
    assert proc.returncode == 1 and "no ARISE activity" in proc.stdout, proc.stdout


def test_tool_run_that_never_calls_the_tool_fails():
    rows = {s: _step(1 if s == 1 else 2, **TOOL_KEYS) for s in range(1, 11)}
    assert _status(verdict.judge(rows, "gpu"), "arise/tool_calls") == "OK"
    assert _status(verdict.judge(rows, "gpu"), "arise/tool_error_rate") == "OK"
    idle = {s: {**r, "arise/tool_calls": 0.0} for s, r in rows.items()}
    checks = verdict.judge(idle, "gpu")
    assert _status(checks, "arise/tool_calls") == "FAIL"
    assert verdict.outcome(checks)[0] == "FAIL"
    failing = {s: {**r, "arise/tool_error_rate": 0.9} for s, r in rows.items()}
    assert _status(verdict.judge(failing, "gpu"), "arise/tool_error_rate") == "WARN"
    # a single-turn run has no tool checks at all
    assert not [c for c in verdict.judge(_gpu_run(), "gpu") if c.metric.startswith("arise/tool")]
