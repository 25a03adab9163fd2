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
from recipe.arise.core.selection import selection_probs


def test_paper_target_interpolates_the_table_and_clamps():
    for delta, use in PAPER_SKILL_USE:
        assert paper_target_use(delta) == pytest.approx(use)
    assert paper_target_use(0.30) == pytest.approx((0.816 + 0.730) / 2)
    assert paper_target_use(0.05) == pytest.approx(0.893) and paper_target_use(0.9) == pytest.approx(0.417)


@pytest.mark.parametrize("delta", [0.15, 0.35, 0.55])
def test_sigma_star_is_the_gate_boundary(delta, gate_passes, score_window):
    for scores in score_window(n=30):
        star = critical_temperature(scores, delta)
        assert 0 < star < math.inf
        assert selection_probs(scores, star).max() == pytest.approx(delta, abs=1e-9)
        assert gate_passes(scores, star * (1 - 1e-6), delta) and not gate_passes(scores, star * (1 + 1e-6), delta)


@pytest.mark.parametrize("target", [0.0, 0.1, 0.417, 0.73, 0.893, 1.0])
@pytest.mark.parametrize("spread", [0.05, 0.3, 1.0])
def test_calibrated_sigma_gives_the_target_pass_rate_on_the_window(target, spread, gate_passes, score_window):
    window = score_window(spread=spread)
    delta = 0.35
    result = calibrate(critical_temperatures(window, delta), target)
    measured = np.mean([gate_passes(s, result.sigma, delta) for s in window])
    assert measured == pytest.approx(result.rate)
    assert abs(measured - target) <= 0.5 / len(window) + 1e-12  # exact up to one vector's share


def test_pass_rate_is_monotone_in_sigma_and_calibration_in_target(score_window):
    stars = critical_temperatures(score_window(), 0.35)
    sigmas = np.geomspace(0.01, 10, 60)
    rates = [pass_rate(s, stars) for s in sigmas]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    assert rates[0] == 1.0 and rates[-1] == 0.0
    calibrated = [calibrate(stars, t).sigma for t in np.linspace(0.05, 0.95, 10)]
    assert all(a >= b for a, b in zip(calibrated, calibrated[1:], strict=False))  # more use needs a colder softmax


def test_sigma_star_is_monotone_in_delta(score_window):
    scores = score_window(n=1)[0]
    stars = [critical_temperature(scores, d) for d in (0.15, 0.25, 0.35, 0.45, 0.55)]
    assert all(a > b for a, b in zip(stars, stars[1:], strict=False))


def test_all_equal_scores_never_pass_above_one_over_n(gate_passes):
    scores = [-1.0] * 5
    assert critical_temperature(scores, 0.35) == 0.0
    assert not any(gate_passes(scores, s, 0.35) for s in (1e-3, 1.0, 1e3))
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


def test_gate_calibrator_window_update_and_state_roundtrip(gate_passes, score_window):
    from recipe.arise.core.calibration import GateCalibrator

    cal = GateCalibrator(delta=0.35, target=0.73, window=50, initial=1.0)
    assert cal.sigma == 1.0 and cal.update() == 1.0  # nothing scored yet: the initial sigma
    window = score_window(n=80, spread=0.5)
    assert cal.add(window[:30] + [[np.nan], []]) == 30  # unscorable vectors are dropped
    cal.add(window[30:])
    assert len(cal.window) == 50  # the last 50 groups
    sigma = cal.update()
    rate = np.mean([gate_passes(s, sigma, 0.35) for s in window[30:]])
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
