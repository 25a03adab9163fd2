"""bench/bench_step_overhead.py's statistics: the step-time ratio's interval over paired, interleaved
repetitions, and the loop that repeats the arms until that interval is within +-3% (or says it is not)."""

import math
import random
from pathlib import Path

import pytest
from file_module import load_file

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_file(REPO / "bench" / "bench_step_overhead.py", "bench_step_overhead_t")


def test_the_ratio_is_a_ratio_of_means_with_a_delta_method_interval(bench):
    arise, grpo = [20.0, 22.0, 19.0], [19.0, 21.0, 18.5]
    ratio, low, high = bench.ratio_interval(arise, grpo)
    assert ratio == pytest.approx(61.0 / 58.5)
    # by hand: residuals a - R b, their sd, / (sqrt(3) * mean(b)), times t_{0.975, 2} = 4.303
    residuals = [a - ratio * b for a, b in zip(arise, grpo, strict=True)]
    m = sum(residuals) / 3
    sd = math.sqrt(sum((r - m) ** 2 for r in residuals) / 2)
    half = 4.303 * sd / (math.sqrt(3) * (58.5 / 3))
    assert (low, high) == pytest.approx((ratio - half, ratio + half))


def test_pairing_removes_the_drift_both_arms_share(bench):
    """A machine that slows down over the invocation (the bench's case: 14.74 then 11.78 s per GRPO
    step) moves both arms of a repetition alike; the paired interval stays narrow."""
    drift = [14.7, 11.8, 16.0, 12.5, 13.9]
    grpo = [d for d in drift]
    arise = [1.05 * d * (1 + e) for d, e in zip(drift, [0.004, -0.006, 0.002, -0.003, 0.005], strict=True)]
    ratio, low, high = bench.ratio_interval(arise, grpo)
    assert low < 1.05 < high and bench.within((ratio, low, high))
    # the same numbers unpaired (GRPO's order shuffled against ARISE's) give a far wider interval
    shuffled = [grpo[i] for i in (3, 0, 4, 1, 2)]
    _, low_u, high_u = bench.ratio_interval(arise, shuffled)
    assert high_u - low_u > 5 * (high - low) and not bench.within((ratio, low_u, high_u))


def test_one_pair_has_no_interval_and_bad_input_is_refused(bench):
    ratio, low, high = bench.ratio_interval([21.0], [20.0])
    assert ratio == pytest.approx(1.05) and math.isnan(low) and math.isnan(high)
    assert not bench.within((ratio, low, high))
    assert "no interval" in bench.describe((ratio, low, high))
    with pytest.raises(ValueError, match="paired"):
        bench.ratio_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="not > 0"):
        bench.ratio_interval([1.0], [0.0])


def test_the_interval_covers_the_true_ratio_about_95_percent_of_the_time(bench):
    rng = random.Random(7)
    covered = 0
    for _ in range(2000):
        load = [rng.uniform(12.0, 16.0) for _ in range(5)]
        grpo = [x * rng.gauss(1.0, 0.04) for x in load]
        arise = [1.05 * x * rng.gauss(1.0, 0.04) for x in load]
        _, low, high = bench.ratio_interval(arise, grpo)
        covered += low <= 1.05 <= high
    assert 0.92 <= covered / 2000 <= 0.98


def test_the_arms_are_interleaved_until_the_interval_is_within_target(bench):
    order = []
    noise = iter([0.0, 0.0, 0.02, -0.02, 0.005, -0.005] + [0.0] * 40)

    def run(arm, rep):
        order.append((rep, arm))
        return 20.0 * (1.05 if arm == "ARISE" else 1.0) * (1 + next(noise))

    results, intervals, reached = bench.interleaved(["GRPO", "ARISE"], run, lambda v: v, 3, 10, say=lambda _: None)
    assert order[:4] == [(0, "GRPO"), (0, "ARISE"), (1, "ARISE"), (1, "GRPO")]  # the order reversed every rep
    assert reached and 3 <= len(results["GRPO"]) == len(results["ARISE"]) < 10  # stopped once precise
    ratio, low, high = intervals["ARISE"]
    assert max(high - ratio, ratio - low) <= 0.03 * ratio


def test_the_cap_ends_a_noisy_bench_unresolved(bench):
    rng = random.Random(1)

    def run(arm, rep):
        return rng.uniform(11.0, 15.0)  # +-15% between runs, unpaired: never within +-3% in 4 reps

    lines = []
    results, intervals, reached = bench.interleaved(["GRPO", "ARISE"], run, lambda v: v, 2, 4, say=lines.append)
    assert not reached and len(results["ARISE"]) == 4 and len(lines) == 4
    assert "ARISE/GRPO" in lines[-1] and "95% interval" in lines[-1]
    assert not bench.within(intervals["ARISE"])


def _fake_steps(step_s: float, arise: bool) -> list[dict]:
    """Two measured steps of a run's metrics.jsonl (what run_once returns)."""
    extra = {"arise/queries": 2.0, "arise/trajectories": 16.0, "arise/skill_use_rate": 0.75} if arise else {}
    lengths = {"prompt_length/mean": 147.0, "response_length/mean": 1354.0}
    return [{"timing_s/step": step_s, "timing_s/gen": step_s / 2, **lengths, **extra}] * 2


@pytest.mark.parametrize("paper", [True, False])
def test_the_report_prints_the_interval_beside_each_ratio(bench, monkeypatch, capsys, tmp_path, paper):
    """Both modes' report on fake runs (no verl run): the last line is the ratio with its interval."""
    rng = random.Random(3)
    monkeypatch.setattr(
        bench,
        "run_once",
        lambda arm, arise, *a, **k: _fake_steps(20.0 * (1.04 if arise else 1.0) * rng.gauss(1.0, 0.005), arise),
    )
    monkeypatch.setattr(bench, "with_positions", lambda tiny, positions, work: tiny)
    facts = {
        "prompt": 147.0,
        "prompt_range": (140, 150),
        "response": 1354,
        "skill_tokens": 31.0,
        "skill_range": (28, 33),
    }
    monkeypatch.setattr(bench, "paper_setup", lambda args, work, tiny: ({}, [], facts))
    args = ["--reps", "3", "--max-reps", "6"] + (["--paper-proportions", "--stream-arm"] if paper else [])
    monkeypatch.setattr(bench, "tiny_assets", lambda: tmp_path)
    bench.main(args + ["--work", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("ARISE/GRPO step-time ratio: 1.0") and "95% interval" in out[-1]
    assert any("every ratio's 95% interval within +-3%" in line for line in out)
    if paper:
        assert any(line.startswith("ARISE streamed/GRPO step-time ratio:") for line in out)
