"""Framework-free parts of the verl adapters: config section, scoring arithmetic, tau+, library log."""

import json

import pytest
from byte_tokenizer import ByteTokenizer

from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_log import library_digest, read_log, record_resume, write_step_log
from recipe.arise.core.scoring import SCORING_SUFFIX, scoring_requests, skill_logprob_sum
from recipe.arise.core.skill import load_seed_skills


def test_config_defaults_are_the_paper_table():
    cfg = ARISEConfig()
    assert (cfg.selection.initial_temperature, cfg.selection.epsilon, cfg.selection.gate) == (1.0, 0.1, 0.35)
    assert cfg.selection.temperature == "auto"  # sigma calibrated to the paper's skill use (docs/design.md)
    assert cfg.selection.max_skill_tokens == 128
    assert (cfg.library.cache_capacity, cfg.library.reservoir_capacity, cfg.library.ema_beta) == (10, 100, 0.9)
    assert (cfg.summary.temperature, cfg.summary.top_p, cfg.summary.max_tokens, cfg.summary.max_chars) == (
        0.7,
        0.95,
        192,
        220,
    )
    assert cfg.phase1_steps == 500 and cfg.reward.skill_bonus == 1.0
    assert len(load_seed_skills(cfg.library.seed_skills)) == 5


def test_yaml_matches_dataclass_defaults():
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "recipe" / "arise" / "config" / "arise_trainer.yaml"
    section = yaml.safe_load(path.read_text())["arise"]
    assert ARISEConfig.from_dict(section) == ARISEConfig()


def test_phase_boundary():
    cfg = ARISEConfig(phase1_steps=3)
    assert [cfg.phase(s) for s in (1, 2, 3, 4, 5)] == [1, 1, 1, 2, 2]


def test_unknown_and_bad_keys_fail_clearly():
    with pytest.raises(ValueError, match="arise.selection: gat"):
        ARISEConfig.from_dict({"selection": {"gat": 0.3}})
    with pytest.raises(ValueError, match="gate"):
        ARISEConfig.from_dict({"selection": {"gate": 1.5}})
    with pytest.raises(ValueError, match="granularity"):
        ARISEConfig.from_dict({"selection": {"granularity": "batch"}})
    with pytest.raises(ValueError, match="on_overlong"):
        ARISEConfig.from_dict({"summary": {"on_overlong": "truncate"}})
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="score_top_m"):
            ARISEConfig.from_dict({"selection": {"score_top_m": bad}})
    assert ARISEConfig().selection.score_top_m == 0  # the paper: every cache skill is scored
    assert ARISEConfig.from_dict({"selection": {"score_top_m": 3}}).selection.score_top_m == 3


def test_missing_section_means_disabled():
    assert ARISEConfig.from_trainer_config({}).enable is False


def test_skill_logprob_sum_uses_verl_prompt_logprob_layout():
    # prompt = 3 prefix tokens + 2 skill tokens; entry j is the log-prob of token j+1, plus a pad entry
    prompt_logprobs = [[-0.1], [-0.2], [-0.3], [-0.4], [0.0]]
    assert skill_logprob_sum(prompt_logprobs, prefix_len=3, total_len=5) == pytest.approx(-0.7)
    with pytest.raises(ValueError):
        skill_logprob_sum(prompt_logprobs, prefix_len=5, total_len=5)
    with pytest.raises(ValueError):
        skill_logprob_sum([[-1.0]], prefix_len=1, total_len=5)


def test_scoring_requests_share_the_prefix_and_truncate_skills():
    prefix = [1, 2, 3]
    requests = scoring_requests(ByteTokenizer(), prefix, ["abc", "x" * 500], max_tokens=128)
    assert all(r[:3] == prefix for r in requests)
    assert len(requests[0]) == 6 and len(requests[1]) == 3 + 128
    assert SCORING_SUFFIX.endswith("SKILL:")


def test_positive_advantage_sessions():
    from recipe.arise.adapters.trainer import positive_advantage_sessions

    assert positive_advantage_sessions([0, 1, 2, 2]) == [2, 3]
    assert positive_advantage_sessions([1, 1, 1]) == []  # zero variance: no tau+
    assert positive_advantage_sessions([0, 0, 1]) == [2]


def test_library_log_round_trip_and_resume_record(tmp_path):
    library = SkillLibrary(seed_skills=load_seed_skills())
    sid = library.cache[0].skill_id
    events = library.step([(sid, 2.0)], [], step=1)
    write_step_log(tmp_path, 1, 2, events, library)
    log = read_log(tmp_path)
    assert set(log.event) == {"updated", "state"}
    assert log[(log.event == "state")].skill_id.nunique() == 5
    record_resume(tmp_path, 1, "x.parquet", library)
    line = json.loads((tmp_path / "resumes.jsonl").read_text().splitlines()[-1])
    assert line["digest"] == library_digest(library) and line["entries"] == 5
    library.step([(sid, 0.0)], [], step=2)
    assert library_digest(library) != line["digest"]


def test_step_metrics_count_top_utility_skills_measured_harmful():
    from recipe.arise.adapters.trainer_metrics import StepState, step_metrics
    from recipe.arise.core.library_entry import Contrast, StepEvents

    lib = SkillLibrary(seed_skills=load_seed_skills()[:4])
    top = lib.cache_ids()[0]
    for sid, u in zip(lib.cache_ids(), (0.86, 0.5, 0.4, 0.1), strict=True):
        lib.get(sid).utility = u
    for _ in range(12):  # 6 aided with 3 right vs 2 control both right, in 12 groups: uplift -0.5
        lib.get(top).add_contrast(Contrast(top, 6, 3, 2, 2))
    m = step_metrics(lib, 2, [], StepEvents(step=1), StepState(), 0.0, True)
    assert m["arise/utility_uplift_disagree"] == 1.0


def test_step_metrics_read_the_observation_records():
    """The per-trajectory metrics from the posted records: the reward manager's facts (reward,
    tokens) and the agent loop's (skill, control arm, gate, scoring cost) under each one's name."""
    from recipe.arise.adapters.trainer_metrics import StepState, step_metrics
    from recipe.arise.core.library_entry import StepEvents
    from recipe.arise.core.observation import Observation
    from recipe.arise.core.trajectory import TrajectoryInfo

    aided = TrajectoryInfo(phase=2, skill_id="s1", selected=True, gate_passed=True, scores=[-1.0, -2.0])
    scorer = TrajectoryInfo(**{**vars(aided), "scorer": True, "scoring_s": 0.5, "scoring_tokens": 40})
    rejected = TrajectoryInfo(phase=2, gate_passed=False, scores=[-1.0, -1.1], skill_overlong=True)
    control = TrajectoryInfo(phase=2, control=True, scoring_failed=True, scores_nonfinite=2)
    obs = [
        Observation("q1", 2.0, True, scorer, prompt_tokens=30, response_tokens=7),
        Observation("q1", 0.0, False, aided, prompt_tokens=30, response_tokens=5),
        Observation("q1", 1.0, True, control, prompt_tokens=20, response_tokens=3),
        Observation("q2", 0.0, False, rejected, prompt_tokens=20, response_tokens=9),
    ]
    state = StepState(summary_streamed=1, ig_skipped=2, ig={"s1": 0.25})
    state.summary.add({"attempts": 2, "parsed": 1, "fallback": 1})
    lib = SkillLibrary(seed_skills=load_seed_skills()[:2])
    m = step_metrics(lib, 2, obs, StepEvents(step=3), state, 0.0, True)
    assert m["arise/skill_use_rate"] == 0.5 and m["arise/control_rate"] == 0.25
    assert m["arise/gate_pass_rate"] == pytest.approx(2 / 3)  # of the 3 scored trajectories
    assert (m["arise/scoring_failures"], m["arise/scores_nonfinite"], m["arise/skill_overlong"]) == (1.0, 2.0, 1.0)
    assert m["arise/reward_mean"] == 0.75 and m["arise/acc"] == 0.5 and m["arise/queries"] == 2.0
    assert (m["arise/prompt_tokens"], m["arise/response_tokens"], m["arise/scoring_tokens"]) == (100.0, 24.0, 40.0)
    assert m["arise/scoring_s"] == 0.5 and m["arise/summary_parse_rate"] == 0.5 and m["arise/summary_streamed"] == 1
    assert m["arise/ig_skipped"] == 2.0 and m["arise/ig_exact_mean"] == 0.25 and m["arise/phase2_groups"] == 2.0


def test_step_metrics_and_console_line_count_orphaned_observations():
    """An observation whose skill the library dropped since its selection is counted per step
    (arise/observations_orphaned) and named in the console line, not lost silently."""
    from recipe.arise.adapters.trainer_metrics import StepState, console_line, step_metrics
    from recipe.arise.core.library_entry import StepEvents

    lib = SkillLibrary(seed_skills=load_seed_skills()[:2])
    m = step_metrics(lib, 2, [], StepEvents(step=3, orphaned=["s000009", "s000009"]), StepState(), 0.0, True)
    assert m["arise/observations_orphaned"] == 2.0
    assert "| orphaned obs 2 |" in console_line(3, 6, m)
    quiet = step_metrics(lib, 2, [], StepEvents(step=3), StepState(), 0.0, True)
    assert quiet["arise/observations_orphaned"] == 0.0 and "orphaned" not in console_line(3, 6, quiet)


def test_a_step_that_drained_no_observation_logs_no_accuracy():
    """Under async (every group still in flight) or at the first step after a resume a maintenance
    can drain no observation: no arise/acc or arise/reward_mean (a 0 would read as every answer
    wrong), and the console line says so with the count."""
    from recipe.arise.adapters.trainer_metrics import StepState, console_line, step_metrics
    from recipe.arise.core.library_entry import StepEvents
    from recipe.arise.core.observation import Observation
    from recipe.arise.core.trajectory import TrajectoryInfo

    lib = SkillLibrary(seed_skills=load_seed_skills()[:2])
    empty = step_metrics(lib, 2, [], StepEvents(step=3), StepState(), 0.0, True)
    assert "arise/acc" not in empty and "arise/reward_mean" not in empty and empty["arise/trajectories"] == 0.0
    assert "| acc - (0 obs) | mean R - |" in console_line(3, 6, empty)
    info = TrajectoryInfo(phase=2)
    obs = [Observation("q1", 1.0, True, info), Observation("q1", 0.0, False, info)]
    full = step_metrics(lib, 2, obs, StepEvents(step=3), StepState(), 0.0, True)
    assert "| acc 0.500 (2 obs) | mean R 0.500 |" in console_line(3, 6, full)
