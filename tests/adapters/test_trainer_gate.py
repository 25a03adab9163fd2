"""The trainer's calibrated gate (recipe.arise.adapters.trainer_gate) and the agent loop's use of the
published sigma; the calibration arithmetic itself is tested in tests/core/test_calibration.py."""

import numpy as np
import pytest

from recipe.arise.core.observation import Observation
from recipe.arise.core.trajectory import TrajectoryInfo


def test_the_gate_is_calibrated_on_every_generated_groups_query():
    """observed_queries: one per query group, in recording order, from every observation that
    carries one — the groups dynamic sampling drops included (they are in the observations, not in
    the kept batch; calibrating on the kept batch set sigma too strict: docs/design.md)."""
    from recipe.arise.adapters.trainer_gate import observed_queries

    def q(text):
        return [{"role": "user", "content": text}]

    obs = [
        Observation("a", 1.0, True, messages=q("A")),
        Observation("b", 0.0, False, messages=q("B")),  # a group dynamic sampling will drop: still here
        Observation("a", 0.0, False, messages=q("A")),
        Observation("c", 1.0, True),  # no query posted (calibration=window): skipped
    ]
    assert observed_queries(obs) == [q("A"), q("B")]


def _stub_trainer(selection=None, phase1_steps=2):
    from types import SimpleNamespace

    from recipe.arise.adapters.trainers import ARISETrainer
    from recipe.arise.core.arise_config import ARISEConfig

    cfg = ARISEConfig.from_dict({"phase1_steps": phase1_steps, "selection": selection or {}})
    trainer = SimpleNamespace(arise=cfg, global_steps=0)
    for name in (
        "_init_gate",
        "_gate_calibrates",
        "_gate_rescores",
        "_gate_file",
        "_restore_gate",
        "_save_gate",
        "_calibrate_gate",
        "_calibrate_gate_on_queries",
        "_remember_queries",
        "_gate_metrics",
    ):
        setattr(trainer, name, getattr(ARISETrainer, name).__get__(trainer))
    trainer._init_gate()
    return trainer


def _observations(vectors, control_every=4, passed=lambda uid: None):
    """Phase II groups of 4, one per score vector; control-arm trajectories carry no vector (not
    scored); ``passed(uid)``: the gate's decision on each scored trajectory of group ``uid``."""
    out = []
    for g, scores in enumerate(vectors):
        for session in range(4):
            control = session % control_every == 0
            uid = f"q{g}"
            scored = [] if control else [float(x) for x in scores]
            record = TrajectoryInfo(phase=2, control=control, scores=scored, gate_passed=passed(uid))
            out.append(Observation(uid, 1.0, True, record))
    return out


def test_trainer_calibrates_on_one_vector_per_phase2_group_and_reports_sigma(gate_passes, score_window):
    trainer = _stub_trainer({"calibration": "window"})
    vectors = score_window(n=40, spread=0.4)
    phase1 = [Observation("p", 1.0, True, TrajectoryInfo(phase=1))]
    trainer._calibrate_gate(_observations(vectors) + phase1)
    assert len(trainer._gate.window) == 40  # one per group, not one per trajectory
    sigma = trainer._gate.sigma
    target = trainer.arise.selection.gate_target
    assert target == pytest.approx(0.73)
    assert abs(np.mean([gate_passes(v, sigma, 0.35) for v in vectors]) - target) <= 0.5 / 40 + 1e-12
    m = trainer._gate_metrics(2, 1.0, _observations(vectors), 0.7)
    assert m["arise/sigma"] == 1.0 and m["arise/gate_target"] == pytest.approx(0.73)
    assert m["arise/calibration_groups"] == 40.0
    # per query, the share of its scored trajectories that passed (control trajectories are not scored)
    obs = _observations(vectors[:3], passed=lambda uid: uid != "q2")
    trainer._gate.recent.clear()  # the call above observed 40 queries with no pass
    m = trainer._gate_metrics(2, 1.0, obs, 0.7)
    assert m["arise/gate_pass_rate_recent"] == pytest.approx(2 / 3) and m["arise/gate_recent_queries"] == 3.0
    assert "arise/gate_pass_rate_recent" not in trainer._gate_metrics(1, 1.0, obs, 0.7)  # Phase II only


@pytest.mark.parametrize(
    "selection",
    [{"temperature": 1.0}, {"use_gate": False}, {"random": True}, {}],
    ids=["fixed", "no-gate", "random", "rescore"],
)
def test_trainer_leaves_sigma_alone_when_nothing_is_calibrated(selection, score_window):
    trainer = _stub_trainer(selection)
    trainer._calibrate_gate(_observations(score_window(n=20)))
    assert trainer._gate.sigma == 1.0 and not trainer._gate.window


def test_trainer_saves_sigma_beside_the_library_and_restores_it(tmp_path, score_window):
    from types import SimpleNamespace

    trainer = _stub_trainer({"calibration": "window"})
    trainer._calibrate_gate(_observations(score_window(n=20, spread=0.4)))
    folder = tmp_path / "global_step_6" / "arise"
    folder.mkdir(parents=True)
    trainer._save_gate(str(folder))
    resumed = _stub_trainer({"calibration": "window"})
    resumed.global_steps = 6
    resumed.config = SimpleNamespace(
        trainer=SimpleNamespace(resume_mode="resume_path", resume_from_path=str(tmp_path / "global_step_6"))
    )
    resumed._restore_gate()
    assert resumed._gate.sigma == trainer._gate.sigma and len(resumed._gate.window) == 20
    # evaluation of a saved library (arise.library.load_from) takes the sigma beside it
    evaluated = _stub_trainer({"calibration_window": 5})
    evaluated.arise.library.load_from = str(folder / "library.parquet")
    evaluated._restore_gate()
    assert evaluated._gate.sigma == trainer._gate.sigma


@pytest.mark.parametrize("mode", ["rescore", "window"])
def test_the_steps_queries_are_scored_against_the_next_cache(mode):
    from types import SimpleNamespace

    from byte_tokenizer import ByteTokenizer
    from skill_layer_host import scoring_context_of

    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.skill import load_seed_skills

    trainer = _stub_trainer({"max_skill_tokens": 40, "calibration": mode})
    trainer.tokenizer = ByteTokenizer()
    trainer.config = SimpleNamespace(data={})
    trainer._scoring_context = scoring_context_of(trainer.tokenizer)
    trainer.library = SkillLibrary(seed_skills=load_seed_skills(None))
    rng = np.random.default_rng(3)

    def generate_all(prompts, params, timeout_s):
        assert params["prompt_logprobs"] == 0 and params["max_tokens"] == 1
        outs = []
        for ids in prompts:  # every token of a request gets one log-prob: a per-request score
            lp = float(rng.normal(-2.0, 0.5))
            outs.append(SimpleNamespace(extra_fields={"prompt_logprobs": [[lp]] * len(ids)}))
        return outs

    trainer._generate_all = generate_all
    # the last Phase I step in both modes (Phase II starts calibrated); every later step with rescore
    assert not trainer._gate_rescores(1) and trainer._gate_rescores(2)
    assert trainer._gate_rescores(3) == (mode == "rescore")
    trainer._remember_queries([[{"role": "user", "content": f"q{i}"}] for i in range(50)])
    trainer._remember_queries([[{"role": "user", "content": f"q{i}"}] for i in range(60, 100)])
    trainer._remember_queries([[{"role": "user", "content": "q0"}]])  # seen again: now the most recent
    recent = [m[0]["content"] for m in trainer._gate_queries.values()]
    assert len(recent) == 64 and recent[-1] == "q0" and recent[:3] == ["q27", "q28", "q29"]
    trainer._gate_queries = type(trainer._gate_queries)(list(trainer._gate_queries.items())[:30])
    for step in (2, 3):
        trainer._calibrate_gate_on_queries(step)
        assert len(trainer._gate_queries) == 30 and trainer._gate.sigma != 1.0
        assert trainer._gate.last.rate == pytest.approx(0.73, abs=1 / 60)
    # rescore: the new cache's vectors replace the window (older ones saw another cache)
    assert len(trainer._gate.window) == (30 if mode == "rescore" else 60)


def test_the_agent_loop_uses_the_published_sigma():
    import asyncio
    from types import SimpleNamespace

    from skill_layer_host import skill_layer

    from recipe.arise.adapters.library_replica import LibraryReplica
    from recipe.arise.core.arise_config import ARISEConfig
    from recipe.arise.core.skill import load_seed_skills
    from recipe.arise.core.trajectory import TrajectoryInfo

    cache = [(f"s{i}", doc.to_json()) for i, doc in enumerate(load_seed_skills(None))]

    class Server:  # the first skill scores -1.0 per token, the others -1.3
        async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
            lp = -1.0 if bytes(prompt_ids[-20:]).decode() in cache[0][1] else -1.3
            return SimpleNamespace(extra_fields={"prompt_logprobs": [[lp]] * len(prompt_ids)})

    loop = skill_layer(Server(), n=1)
    cfg = ARISEConfig.from_dict({"selection": {"epsilon": 0.0, "control_share": 0.0, "max_skill_tokens": 1000}})
    pool = LibraryReplica()

    def gate_passed(sigma, uid):
        pool.publish(uid, cache, sigma=sigma)
        info = TrajectoryInfo(phase=2)
        msgs = [{"role": "user", "content": "1+2?"}]
        asyncio.run(loop.select(cfg, pool.snapshot(), msgs, {"uid": str(uid), "global_steps": 3}, False, info))
        return info.gate_passed

    # 5 skills, a 0.3 nat/token lead: max p = 0.29 at sigma 1 (rejected), 0.65 at sigma 0.2
    assert not gate_passed(None, 1)  # auto before any calibration: initial_temperature 1.0
    assert gate_passed(0.2, 2)
    assert pool.snapshot()["sigma"] == 0.2
    assert pool.publish(3, cache) and pool.snapshot()["sigma"] == 0.2  # kept until republished
    fixed = ARISEConfig.from_dict({"selection": {"temperature": 1.0, "epsilon": 0.0, "control_share": 0.0}})
    cfg = fixed
    assert not gate_passed(0.2, 4)  # a number is the literal sigma, whatever was published


def test_a_fixed_sigma_that_keeps_the_gate_shut_is_warned_about_from_the_steps_pass_rate(caplog, score_window):
    """_gate_metrics watches the step's arise/gate_pass_rate, which the trainer hands it (no hidden
    read of the step's other metrics): a fixed sigma with the gate shut for ``patience`` steps warns."""
    import logging

    trainer = _stub_trainer({"temperature": 1.0})
    obs = _observations(score_window(n=3), passed=lambda uid: False)
    with caplog.at_level(logging.WARNING, logger="recipe.arise.adapters.trainer_gate"):
        for _ in range(trainer._gate.patience - 1):
            trainer._gate_metrics(2, 1.0, obs, 0.0)
        assert "pass rate has been below 5%" not in caplog.text
        trainer._gate_metrics(2, 1.0, obs, 0.5)  # an ordinary step resets the streak
        for _ in range(trainer._gate.patience):
            trainer._gate_metrics(2, 1.0, obs, 0.0)
    assert caplog.text.count("pass rate has been below 5%") == 1
