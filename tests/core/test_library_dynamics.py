"""The library dynamics under the summary cadence (bench/bench_library_dynamics.py at a small scale).

The facts the defaults rely on (docs/performance.md#library-dynamics-and-the-summary-cadence):
seeds kept by ``seed_trial_uses`` reach Phase II and are tried there, and are flushed in Phase I
without it; one summary per group with tau+ (Alg. 1) turns the cache into a FIFO whose new skills
are evicted before their first use, while 2 per step gives every new skill a full trial.
"""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from file_module import load_file

from recipe.arise.core.selection import selection_probs

bench = load_file(Path(__file__).resolve().parents[2] / "bench" / "bench_library_dynamics.py", "bench_library_dynamics")

SMALL = bench.SimConfig(phase1_steps=40, phase2_steps=30, groups=64, seed=3)


@pytest.fixture(scope="module")
def runs():
    return {
        (cadence, keep): bench.simulate(replace(SMALL, max_per_step=cadence, seed_trial_uses=keep))
        for cadence, keep in ((-1, 8), (2, 8), (2, 0))
    }


def test_seed_protection_carries_the_seeds_into_phase_ii(runs):
    kept, off = runs[(2, 8)], runs[(2, 0)]
    assert kept["seeds_cache_nw"] == 5 and kept["seeds_tried"] == 5
    assert off["seeds_cache_nw"] == 0 and off["seeds_tried"] == 0
    # without protection Phase I's 5 free slots become 10: the cache is then all recent summaries
    assert off["phase1_tried"] > kept["phase1_tried"]


def test_all_groups_makes_the_cache_a_fifo_two_per_step_gives_a_trial(runs):
    every, two = runs[(-1, 8)], runs[(2, 8)]
    assert every["added_p2"] > 10 * two["added_p2"]
    assert every["turnover_p2"] >= 2 * two["turnover_p2"]
    assert every["turnover_p1"] >= 2 * two["turnover_p1"]
    assert every["stay_p2"] < 1 < 3 * two["stay_p2"] and two["stay_p2"] > 2
    # Alg. 1's cadence: most new skills leave the cache before a single use
    assert every["uses_before_exit"] == 0 and every["exit_unused"] > 0.5
    # capped: every new skill is used, at least a trial's worth (trial_uses = 8) before it leaves
    assert two["uses_before_exit"] >= 8 and two["exit_unused"] == 0 and two["new_used"] > 0.9


def test_model_is_calibrated(runs):
    r = runs[(2, 8)]
    assert abs(r["tau_plus_p1"] - SMALL.tau_plus) < 0.05  # the --tau-plus flag holds in Phase I
    assert 0.65 < r["gate_rate"] < 0.85  # App. E.1: 73% skill use at delta = 0.35
    assert r["library_nw"] <= SMALL.cache_capacity + SMALL.reservoir_capacity
    rng = np.random.default_rng(0)
    scores = rng.normal(0.0, 2.0, size=(4, 10))
    expected = np.stack([selection_probs(row, 1.0) for row in scores])
    np.testing.assert_allclose(bench._softmax_rows(scores), expected, rtol=1e-12)


def test_recommend_prefers_fewer_summaries_within_noise():
    base = {"added_p1": 0.0, "used_quality_se": 0.01}
    results = {
        "all/kept": {**base, "added_p1": 40.0, "added_p2": 40.0, "used_quality": 0.30},
        "2/kept": {**base, "added_p1": 2.0, "added_p2": 2.0, "used_quality": 0.40},
        "1/kept": {**base, "added_p1": 1.0, "added_p2": 1.0, "used_quality": 0.395},
        "1/off": {**base, "added_p1": 1.0, "added_p2": 1.0, "used_quality": 0.9},
    }
    assert bench.recommend(results)[0] == "1"
    results["1/kept"]["used_quality"] = 0.30
    assert bench.recommend(results)[0] == "2"
