"""The calibrated gate (recipe.arise.core.calibration): sigma_i*, the window's exact pass rate, edge cases."""

import math

import numpy as np
import pytest

from recipe.arise.core.calibration import (
    PAPER_SKILL_USE,
    calibrate,
    critical_temperature,
    critical_temperatures,
    max_prob_quantiles,
    paper_target_use,
    pass_rate,
    resolve_temperature,
)
from recipe.arise.core.selection import select_skill_detailed, selection_probs


def _passes(scores, sigma, delta):
    rng = np.random.default_rng(0)
    return select_skill_detailed(scores, temperature=sigma, epsilon=0.0, gate=delta, rng=rng).gate_passed


def _window(n=200, k=10, spread=0.3, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(-2.0, spread, size=k) for _ in range(n)]


def test_paper_target_interpolates_the_table_and_clamps():
    for delta, use in PAPER_SKILL_USE:
        assert paper_target_use(delta) == pytest.approx(use)
    assert paper_target_use(0.30) == pytest.approx((0.816 + 0.730) / 2)
    assert paper_target_use(0.05) == pytest.approx(0.893) and paper_target_use(0.9) == pytest.approx(0.417)


@pytest.mark.parametrize("delta", [0.15, 0.35, 0.55])
def test_sigma_star_is_the_gate_boundary(delta):
    for scores in _window(n=30):
        star = critical_temperature(scores, delta)
        assert 0 < star < math.inf
        assert selection_probs(scores, star).max() == pytest.approx(delta, abs=1e-9)
        assert _passes(scores, star * (1 - 1e-6), delta) and not _passes(scores, star * (1 + 1e-6), delta)


@pytest.mark.parametrize("target", [0.0, 0.1, 0.417, 0.73, 0.893, 1.0])
@pytest.mark.parametrize("spread", [0.05, 0.3, 1.0])
def test_calibrated_sigma_gives_the_target_pass_rate_on_the_window(target, spread):
    window = _window(spread=spread)
    delta = 0.35
    result = calibrate(critical_temperatures(window, delta), target)
    measured = np.mean([_passes(s, result.sigma, delta) for s in window])
    assert measured == pytest.approx(result.rate)
    assert abs(measured - target) <= 0.5 / len(window) + 1e-12  # exact up to one vector's share


def test_pass_rate_is_monotone_in_sigma_and_calibration_in_target():
    stars = critical_temperatures(_window(), 0.35)
    sigmas = np.geomspace(0.01, 10, 60)
    rates = [pass_rate(s, stars) for s in sigmas]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    assert rates[0] == 1.0 and rates[-1] == 0.0
    calibrated = [calibrate(stars, t).sigma for t in np.linspace(0.05, 0.95, 10)]
    assert all(a >= b for a, b in zip(calibrated, calibrated[1:], strict=False))  # more use needs a colder softmax


def test_sigma_star_is_monotone_in_delta():
    scores = _window(n=1)[0]
    stars = [critical_temperature(scores, d) for d in (0.15, 0.25, 0.35, 0.45, 0.55)]
    assert all(a > b for a, b in zip(stars, stars[1:], strict=False))


def test_all_equal_scores_never_pass_above_one_over_n():
    scores = [-1.0] * 5
    assert critical_temperature(scores, 0.35) == 0.0
    assert not any(_passes(scores, s, 0.35) for s in (1e-3, 1.0, 1e3))
    assert critical_temperature(scores, 0.2) == math.inf  # delta <= 1/n: always passes
    assert critical_temperature([-1.0, -1.0, -3.0], 0.5) == 0.0  # two-way tie at the top, delta >= 1/2
    assert 0 < critical_temperature([-1.0, -1.0, -3.0], 0.45) < math.inf


def test_single_candidate_and_neg_inf_and_nan_entries():
    assert critical_temperature([-2.0], 0.99) == math.inf  # one candidate: p = 1
    assert critical_temperature([-2.0, -np.inf, -np.inf], 0.99) == math.inf  # -inf gets no mass
    assert critical_temperature([-2.0, -np.inf, -2.5], 0.35) == pytest.approx(critical_temperature([-2.0, -2.5], 0.35))
    assert critical_temperature([-2.0, np.nan, -2.5], 0.35) == pytest.approx(critical_temperature([-2.0, -2.5], 0.35))
    assert math.isnan(critical_temperature([], 0.35))
    assert math.isnan(critical_temperature([np.nan, np.nan], 0.35))
    assert math.isnan(critical_temperature([-np.inf, -np.inf], 0.35))
    assert critical_temperature([np.inf, -1.0], 0.9) == math.inf
    assert critical_temperature([np.inf, np.inf, -1.0], 0.9) == 0.0


def test_calibrate_edge_cases():
    assert calibrate([], 0.7).sigma is None and calibrate([np.nan], 0.7).groups == 0
    degenerate = calibrate([0.0, math.inf, math.inf], 0.5)  # no sigma changes anything
    assert degenerate.sigma is None and degenerate.rate == pytest.approx(2 / 3)
    one = calibrate([2.0], 0.73)  # one group: pass (rate 1) is nearer 0.73 than reject
    assert one.sigma < 2.0 and one.rate == 1.0
    tie = calibrate([1.0, 2.0], 0.75)  # rates 1, 0.5, 0: 0.5 and 1 tie at 0.25, the higher wins
    assert tie.rate == 1.0
    with pytest.raises(ValueError):
        calibrate([1.0], 1.5)
    with pytest.raises(ValueError):
        critical_temperatures([[0.0, 1.0]], -0.1)


def test_resolve_temperature():
    assert resolve_temperature(0.5, 2.0, 1.0) == 0.5  # a number is the literal fixed sigma
    assert resolve_temperature("auto", 2.0, 1.0) == 2.0
    assert resolve_temperature("auto", None, 1.0) == 1.0
    with pytest.raises(ValueError):
        resolve_temperature("hot", None, 1.0)


def test_max_prob_quantiles():
    q = max_prob_quantiles([[0.0, 0.0], [0.0, -100.0], [np.nan], [-np.inf]], 1.0, qs=(0.0, 1.0))
    assert q[0.0] == pytest.approx(0.5) and q[1.0] == pytest.approx(1.0)


# ------------------------------------------------------------------ the trainer's calibrator


def test_gate_calibrator_window_update_and_state_roundtrip():
    from recipe.arise.core.calibration import GateCalibrator

    cal = GateCalibrator(delta=0.35, target=0.73, window=50, initial=1.0)
    assert cal.sigma == 1.0 and cal.update() == 1.0  # nothing scored yet: the initial sigma
    window = _window(n=80, spread=0.5)
    assert cal.add(window[:30] + [[np.nan], []]) == 30  # unscorable vectors are dropped
    cal.add(window[30:])
    assert len(cal.window) == 50  # the last 50 groups
    sigma = cal.update()
    rate = np.mean([_passes(s, sigma, 0.35) for s in window[30:]])
    assert rate == pytest.approx(cal.last.rate) and abs(rate - 0.73) <= 0.01 + 1e-12
    restored = GateCalibrator(delta=0.35, target=0.73, window=50, initial=1.0)
    import json

    restored.restore(json.loads(json.dumps(cal.state())))
    assert restored.sigma == sigma and list(restored.window) == list(cal.window)
    other_delta = GateCalibrator(delta=0.45, target=0.58, window=50, initial=1.0)
    assert "window dropped" in other_delta.restore(cal.state()) and not other_delta.window
    fixed = GateCalibrator(delta=0.35, target=0.73, window=50, initial=1.0, fixed=2.0)
    fixed.restore(cal.state())
    fixed.add(window)
    assert fixed.update() == 2.0 and fixed.sigma == 2.0  # a fixed sigma is never calibrated


def test_gate_calibrator_warns_about_a_fixed_sigma_that_never_lets_skills_through():
    from recipe.arise.core.calibration import GateCalibrator

    fixed = GateCalibrator(delta=0.35, target=0.73, window=8, initial=1.0, fixed=1.0, patience=10)
    warnings = [fixed.watch(0.0) for _ in range(9)]
    assert not any(warnings)
    assert "below 5%" in fixed.watch(0.02)  # the 10th consecutive step
    assert fixed.watch(0.0) is None  # once per streak
    assert [fixed.watch(r) for r in [0.5] + [1.0] * 10][-1].count("above 99%") == 1
    auto = GateCalibrator(delta=0.35, target=0.73, window=8, initial=1.0)
    assert not any(auto.watch(0.0) for _ in range(20))


def test_gate_calibrator_pass_rate_over_the_last_window_queries():
    from recipe.arise.core.calibration import GateCalibrator

    gate = GateCalibrator(delta=0.35, target=0.73, window=4, initial=1.0)
    assert math.isnan(gate.observe([]))
    assert gate.observe([1.0, 0.0]) == 0.5
    assert gate.observe([1.0, 1.0, 1.0]) == 0.75  # the first outcome left the window of 4
    assert gate.observe([0.5]) == pytest.approx(0.875)
    with pytest.raises(ValueError, match="share in"):
        gate.observe([2.0])


def test_the_gate_is_calibrated_on_every_generated_groups_query():
    """observed_queries: one per query group, in recording order, from every observation that
    carries one — the groups dynamic sampling drops included (they are in the observations, not in
    the kept batch; calibrating on the kept batch set sigma too strict: docs/design.md)."""
    pytest.importorskip("verl")
    from recipe.arise.adapters.trainer_gate import observed_queries

    def q(text):
        return [{"role": "user", "content": text}]

    obs = [
        {"uid": "a", "messages": q("A")},
        {"uid": "b", "messages": q("B")},  # a group dynamic sampling will drop: still here
        {"uid": "a", "messages": q("A")},
        {"uid": "c"},  # no query posted (calibration=window): skipped
    ]
    assert observed_queries(obs) == [q("A"), q("B")]


def _stub_trainer(selection=None, phase1_steps=2):
    pytest.importorskip("verl")
    from types import SimpleNamespace

    from recipe.arise.adapters.trainer import ARISETrainer
    from recipe.arise.core.arise_config import ARISEConfig

    cfg = ARISEConfig.from_dict({"phase1_steps": phase1_steps, "selection": selection or {}})
    trainer = SimpleNamespace(arise=cfg, global_steps=0, _arise_metrics={})
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


def _observations(vectors, control_every=4):
    out = []
    for g, scores in enumerate(vectors):
        for session in range(4):
            control = session % control_every == 0
            out.append(
                {
                    "uid": f"q{g}",
                    "phase": 2,
                    "control": control,
                    "scored": not control,
                    "scores": [] if control else scores,
                }
            )
    return out


def test_trainer_calibrates_on_one_vector_per_phase2_group_and_reports_sigma():
    trainer = _stub_trainer({"calibration": "window"})
    vectors = _window(n=40, spread=0.4)
    phase1 = [{"uid": "p", "phase": 1, "scored": False, "scores": []}]
    trainer._calibrate_gate(_observations(vectors) + phase1)
    assert len(trainer._gate.window) == 40  # one per group, not one per trajectory
    sigma = trainer._gate.sigma
    target = trainer.arise.selection.gate_target
    assert target == pytest.approx(0.73)
    assert abs(np.mean([_passes(v, sigma, 0.35) for v in vectors]) - target) <= 0.5 / 40 + 1e-12
    trainer._arise_metrics = {"arise/gate_pass_rate": 0.7}
    m = trainer._gate_metrics(2, 1.0, _observations(vectors))
    assert m["arise/sigma"] == 1.0 and m["arise/gate_target"] == pytest.approx(0.73)
    assert m["arise/calibration_groups"] == 40.0
    # per query, the share of its scored trajectories that passed (control trajectories are not scored)
    obs = _observations(vectors[:3])
    for o in obs:
        o["gate_passed"] = o["uid"] != "q2"
    trainer._gate.recent.clear()  # the call above observed 40 queries with no pass
    m = trainer._gate_metrics(2, 1.0, obs)
    assert m["arise/gate_pass_rate_recent"] == pytest.approx(2 / 3) and m["arise/gate_recent_queries"] == 3.0
    assert "arise/gate_pass_rate_recent" not in trainer._gate_metrics(1, 1.0, obs)  # Phase II only


@pytest.mark.parametrize(
    "selection",
    [{"temperature": 1.0}, {"use_gate": False}, {"random": True}, {}],
    ids=["fixed", "no-gate", "random", "rescore"],
)
def test_trainer_leaves_sigma_alone_when_nothing_is_calibrated(selection):
    trainer = _stub_trainer(selection)
    trainer._calibrate_gate(_observations(_window(n=20)))
    assert trainer._gate.sigma == 1.0 and not trainer._gate.window


def test_trainer_saves_sigma_beside_the_library_and_restores_it(tmp_path):
    from types import SimpleNamespace

    trainer = _stub_trainer({"calibration": "window"})
    trainer._calibrate_gate(_observations(_window(n=20, spread=0.4)))
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

    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.skill import load_seed_skills

    class Tok:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

        def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, **kwargs):
            return self.encode("".join(f"U:{m['content']}" for m in messages) + "|A:")

    trainer = _stub_trainer({"max_skill_tokens": 40, "calibration": mode})
    trainer.tokenizer = Tok()
    trainer.config = SimpleNamespace(data={})
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
    pytest.importorskip("verl")
    import asyncio
    from types import SimpleNamespace

    from recipe.arise.adapters.agent_loop import ARISEAgentLoop, TrajectoryInfo
    from recipe.arise.adapters.library_replica import LibraryReplica
    from recipe.arise.core.arise_config import ARISEConfig
    from recipe.arise.core.skill import load_seed_skills

    cache = [(f"s{i}", doc.to_json()) for i, doc in enumerate(load_seed_skills(None))]

    class Tok:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

        def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, **kwargs):
            return self.encode("".join(f"U:{m['content']}" for m in messages) + "|A:")

    class Server:  # the first skill scores -1.0 per token, the others -1.3
        async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
            lp = -1.0 if bytes(prompt_ids[-20:]).decode() in cache[0][1] else -1.3
            return SimpleNamespace(extra_fields={"prompt_logprobs": [[lp]] * len(prompt_ids)})

    loop = SimpleNamespace(
        tokenizer=Tok(),
        apply_chat_template_kwargs={},
        server_manager=Server(),
        rollout_config=SimpleNamespace(n=1, val_kwargs=SimpleNamespace(n=1)),
    )
    for name in ("_select", "_score_group", "_score_requests", "_scoring_reads_prefix_cache"):
        setattr(loop, name, getattr(ARISEAgentLoop, name).__get__(loop))
    cfg = ARISEConfig.from_dict({"selection": {"epsilon": 0.0, "control_share": 0.0, "max_skill_tokens": 1000}})
    pool = LibraryReplica()

    def gate_passed(sigma, uid):
        pool.publish(uid, cache, sigma=sigma)
        info = TrajectoryInfo(phase=2)
        msgs = [{"role": "user", "content": "1+2?"}]
        asyncio.run(loop._select(cfg, pool.snapshot(), msgs, {"uid": str(uid), "global_steps": 3}, False, info))
        return info.gate_passed

    # 5 skills, a 0.3 nat/token lead: max p = 0.29 at sigma 1 (rejected), 0.65 at sigma 0.2
    assert not gate_passed(None, 1)  # auto before any calibration: initial_temperature 1.0
    assert gate_passed(0.2, 2)
    assert pool.snapshot()["sigma"] == 0.2
    assert pool.publish(3, cache) and pool.snapshot()["sigma"] == 0.2  # kept until republished
    fixed = ARISEConfig.from_dict({"selection": {"temperature": 1.0, "epsilon": 0.0, "control_share": 0.0}})
    cfg = fixed
    assert not gate_passed(0.2, 4)  # a number is the literal sigma, whatever was published
