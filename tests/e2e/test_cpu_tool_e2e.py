"""End to end: the tool agent (``TOOL=python``: verl's multi-turn ToolAgentLoop with ARISE's skill
layer, ``arise_tool_agent``, and the sandboxed python tool) through the real verl 0.9.1 trainer on
CPU, with the tiny tool assets (recipe/arise/cpu/tiny_tool.py: warm-started on the tool-call format
only, every taught answer a copy of what the tool printed).

``tool_run`` is ``TOOL=python run_scripts/cpu_smoke_arise.sh`` with its defaults (6 steps, Phase I
steps 1-2, checkpoints at 2, 4 and 6). ``ARISE_TOOL_SMOKE_OUT`` names a complete run of that command
to read (CI's, or one made by hand); without it (or with an incomplete run there) the fixture runs
the command itself with ``OUT_DIR`` under pytest's tmp. Nothing is forced: tool calls, their results
in the answers, skills, parsed summaries and R=2 come from the model's own rollouts.

The resume is not relaunched here: restoring a run is the trainer's (the checkpoint's library, the
library log, the data order), the same for every agent loop, and the agent loops keep nothing
across steps; tests/e2e/test_faults_e2e.py kills and resumes a real run. Here every checkpoint of
the tool run holds the library the log recorded at that step: what a resume restores. (One launch,
~2-4 min of CI on 2 cores, saved.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import smoke_run

from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_log import read_log

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
STEPS, PHASE1, PHASE2, CHECKPOINTS = 6, (1, 2), (3, 4, 5, 6), (2, 4, 6)


def _library(run: Path, step: int) -> SkillLibrary:
    return SkillLibrary.load(run / "checkpoints" / f"global_step_{step}" / "arise" / "library.parquet")


def incomplete(run: Path) -> str | None:
    """Why ``run`` is not a complete default ``TOOL=python`` smoke run (None: it is)."""
    why, cfg = smoke_run.incomplete(run, STEPS)
    if why:
        return why
    if cfg.actor_rollout_ref.rollout.agent.default_agent_loop != "arise_tool_agent":
        return "not a tool run (default_agent_loop is not arise_tool_agent)"
    if not cfg.arise.enable or cfg.arise.phase1_steps != len(PHASE1):
        return "not the default ARISE settings"
    return None


@pytest.fixture(scope="module")
def tool_run(tmp_path_factory) -> Path:
    """The README's tool run: CI's (ARISE_TOOL_SMOKE_OUT) when complete, else the command run here."""
    out = tmp_path_factory.mktemp("tool_run")  # the README's tool command with OUT_DIR under tmp, if run here
    tool_command = lambda to: smoke_run.launch(to, TOOL="python")  # noqa: E731
    return smoke_run.reuse_or_run("ARISE_TOOL_SMOKE_OUT", incomplete, tool_command, out)


def test_the_tool_agent_ran_with_the_python_tool(tool_run):
    cfg = smoke_run.config(tool_run).actor_rollout_ref.rollout
    assert cfg.multi_turn.enable and cfg.multi_turn.format == "hermes"
    assert Path(cfg.multi_turn.tool_config_path).name == "python_tool.yaml"
    m = smoke_run.metrics(tool_run)
    assert [m[s]["arise/phase"] for s in sorted(m)] == [1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
    for step, x in m.items():
        assert x["actor/grad_norm"] > 0.0, step  # the policy was really updated
        # the tool was called in every step, and ran (a sandbox failure would be an error)
        assert x["arise/tool_calls"] > 0.0, step
        assert x["arise/tool_error_rate"] < 0.5, (step, x["arise/tool_error_rate"])
        # verl's turn count: a trajectory that called the tool and read its result has >= 4 turns
        # (user, the call, the tool result, the answer); one that did not has 2
        assert x["num_turns/max"] >= 4, step


def test_tool_results_are_read_into_right_answers(tool_run):
    """The warm start teaches only to copy the tool's printed number: right answers (R >= 1) in
    every step come from right calls whose result the model read."""
    m = smoke_run.metrics(tool_run)
    assert all(m[s]["critic/score/max"] >= 1.0 for s in m), {s: m[s]["critic/score/max"] for s in m}


def test_skills_selected_and_injected_in_phase_2(tool_run):
    m = smoke_run.metrics(tool_run)
    for step in PHASE1:
        assert m[step]["arise/skill_use_rate"] == 0.0 and m[step]["arise/frac_reward_2"] == 0.0
    p2 = [m[s] for s in PHASE2]
    used = sum(x["arise/skill_use_rate"] * x["arise/trajectories"] for x in p2)
    assert 0 < used < sum(x["arise/trajectories"] for x in p2)
    assert max(x["arise/prompt_overhead_tokens"] for x in p2) > 0  # SKILL:{json} went into the prompt
    assert max(x["arise/scoring_s"] for x in p2) > 0.0  # scored on the rollout engine, tools in context
    assert all(x["arise/scoring_failures"] == 0 for x in p2)
    assert all(x["arise/skill_overlong"] == 0 for x in p2)
    assert max(x["arise/frac_reward_2"] for x in p2) > 0.0  # R=2: right with an injected skill


def test_summaries_of_tool_traces_parse(tool_run):
    """tau+ traces are multi-turn (every one called the tool): their transcripts' summaries parse
    into skills, and those skills name the computation the transcript shows (the tool rule)."""
    m = smoke_run.metrics(tool_run)
    assert sum(m[s]["arise/summary_attempts"] for s in m) > 0
    assert sum(m[s]["arise/summary_parsed"] for s in m) > 0
    assert all(m[s]["arise/summary_failed"] == 0 for s in m)
    parsed = [e for e in _library(tool_run, STEPS).entries() if e.origin == "json"]
    assert parsed and all(e.provenance.query and e.provenance.rewards for e in parsed)
    assert any("python" in " ".join(e.doc.method) for e in parsed), [e.doc.to_json() for e in parsed]


def test_the_verdict_judges_the_tool_metrics(tool_run):
    proc = subprocess.run(
        [sys.executable, "-m", "recipe.arise.tools.verdict", "--scale", "tiny", "--expect", "arise", str(tool_run)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "arise/tool_calls" in proc.stdout, proc.stdout


def test_every_checkpoint_holds_the_library_a_resume_restores(tool_run):
    log = read_log(tool_run / "checkpoints" / "arise")
    for step in CHECKPOINTS:
        state = log[(log.step == step) & (log.event == "state")]
        assert len(state) > 0, step
        assert sorted(state.skill_id) == sorted(e.skill_id for e in _library(tool_run, step).entries()), step
