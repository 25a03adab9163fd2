"""bench/bench_trainer_modes.py without a launch: the step-time ratios per mode (the overhead bench's
interleaving and interval on the wall-clock step times), the wall-clock watch of a run's metrics,
the learning-effect line and its pairing by seed, the trainer mode passed to every learning-effect
launch, and the plot from a saved results.json."""

import json
import math
import re
import statistics
import sys
from pathlib import Path

import pytest
from file_module import load_file

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_file(REPO / "bench" / "bench_trainer_modes.py", "bench_trainer_modes_t")


LINE = re.compile(
    r"^async learning effect: ARISE - GRPO (colocate_async|separate_async) ([+-]\d\.\d{3}) ± (\d\.\d{3}) "
    r"vs sync ([+-]\d\.\d{3}) ± (\d\.\d{3}) over (\d+) seeds$"
)


def test_the_learning_effect_line_as_the_issue_states_it(bench):
    line = bench.effect_line("colocate_async", [0.40, 0.30, 0.35], [0.45, 0.38, 0.40])
    match = LINE.match(line)
    assert match, line
    mode, x, y, sx, sy, n = match.groups()
    assert mode == "colocate_async" and n == "3"
    assert float(x) == pytest.approx(0.35, abs=5e-4) and float(y) == pytest.approx(0.05, abs=5e-4)
    assert float(sx) == pytest.approx(statistics.fmean([0.45, 0.38, 0.40]), abs=5e-4)
    assert float(sy) == pytest.approx(statistics.stdev([0.45, 0.38, 0.40]), abs=5e-4)
    # a negative gap keeps its sign; one seed has sd 0
    assert LINE.match(bench.effect_line("separate_async", [-0.1], [0.2])).groups()[1:] == (
        "-0.100",
        "0.000",
        "+0.200",
        "0.000",
        "1",
    )


def test_the_line_needs_gaps_paired_by_seed(bench):
    with pytest.raises(ValueError, match="paired by seed"):
        bench.effect_line("colocate_async", [0.4, 0.3], [0.4])
    with pytest.raises(ValueError, match="paired by seed"):
        bench.effect_line("colocate_async", [], [])


def test_both_gaps_come_from_the_seeds_where_all_four_runs_finished(bench):
    mode = {"arise": {0: 0.8, 1: 0.7, 2: 0.9}, "grpo": {0: 0.4, 2: 0.5}}  # grpo seed 1 failed
    sync = {"arise": {0: 0.85, 1: 0.8, 2: 0.75}, "grpo": {0: 0.45, 1: 0.4}}  # sync seed 2 not run
    seeds, gap, sync_gap = bench.paired_gap(mode, sync)
    assert seeds == [0]
    assert gap == pytest.approx([0.4]) and sync_gap == pytest.approx([0.4])
    assert bench.paired_gap({}, sync) == ([], [], [])


def test_the_gap_difference_has_a_paired_t_interval(bench):
    gap, sync_gap = [0.40, 0.30, 0.35], [0.45, 0.38, 0.40]
    d, low, high = bench.gap_difference(gap, sync_gap)
    diffs = [-0.05, -0.08, -0.05]
    half = 4.303 * statistics.stdev(diffs) / math.sqrt(3)
    assert (d, low, high) == pytest.approx((statistics.fmean(diffs), d - half, d + half))
    assert "the gap differs from sync's" in bench.describe_difference("colocate_async", (d, low, high))
    assert "the gap holds" in bench.describe_difference("colocate_async", (0.01, -0.1, 0.12))
    d, low, high = bench.gap_difference([0.3], [0.4])
    assert d == pytest.approx(-0.1) and math.isnan(low) and math.isnan(high)
    assert "no interval" in bench.describe_difference("separate_async", (d, low, high))


def test_a_runs_step_time_is_its_mean_wall_clock_step(bench):
    steps = [{"bench/wall_s": 10.0, "timing_s/step": 8.0}, {"bench/wall_s": 12.0}, {"bench/wall_s": math.nan}]
    assert bench.wall_step_time(steps) == pytest.approx(11.0)
    with pytest.raises(ValueError, match="wall-clock"):
        bench.wall_step_time([{"timing_s/step": 8.0}])


FAKE_SCRIPT = """
import json, os, sys, time
# verl's file logger: one unbuffered row per step once the step is done
with open(os.environ["VERL_FILE_LOGGER_PATH"], "wb", buffering=0) as f:
    for step, pause in ((1, 0.2), (2, 0.6), (3, 1.2)):
        time.sleep(pause)
        f.write(json.dumps({"step": step, "data": {"timing_s/step": pause / 2}}).encode() + b"\\n")
print("mode", os.environ.get("TRAINER_MODE"), "args", sys.argv[1:])
time.sleep(0.5)  # the run's shutdown
"""


def test_run_once_times_each_step_by_its_rows_arrival(bench, tmp_path, monkeypatch):
    """The wall-clock step is the time between two rows (step 1, the warm-up, dropped), not verl's
    timing_s/step; the launch gets the mode and the overrides."""
    script = tmp_path / "fake.py"
    script.write_text(FAKE_SCRIPT)
    shim = tmp_path / "fake.sh"
    shim.write_text(f'exec "{sys.executable}" {script} "$@"\n')
    monkeypatch.setattr(bench.overhead, "SCRIPT", shim)
    args = type("Args", (), {"steps": 3, "phase1_steps": 0})()
    out = tmp_path / "run"
    steps = bench.overhead.run_once(
        "colocate_async", True, args, tmp_path, out, {"TRAINER_MODE": "colocate_async"}, ["a=1"], lock=None
    )
    assert [m["timing_s/step"] for m in steps] == [0.3, 0.6]
    walls = [m["bench/wall_s"] for m in steps]
    # each row arrives at least its pause after the one before (less one poll of 0.25 s); a loaded
    # machine only adds to that
    assert 0.35 <= walls[0] < 5.0 and 0.95 <= walls[1] < 5.0 and walls[1] > walls[0]
    assert "mode colocate_async args ['a=1']" in (out / "console.log").read_text()


def test_a_failed_launch_names_its_logs(bench, tmp_path, monkeypatch):
    shim = tmp_path / "fail.sh"
    shim.write_text("exit 3\n")
    monkeypatch.setattr(bench.overhead, "SCRIPT", shim)
    args = type("Args", (), {"steps": 3, "phase1_steps": 0})()
    with pytest.raises(SystemExit, match=r"run failed \(sync\).*console.log"):
        bench.overhead.run_once("sync", True, args, tmp_path, tmp_path / "run", {}, [])


def test_speed_prints_each_async_ratio_to_sync_with_its_interval(bench, tmp_path, monkeypatch, capsys):
    """The modes are interleaved (sync first, reversed every other repetition) and each async
    mode's wall-clock step time is divided by sync's, with the overhead bench's paired interval."""
    seconds = {"sync": [20.0, 22.0, 21.0], "colocate_async": [18.0, 20.2, 19.0], "separate_async": [21.0, 23.5, 22.0]}
    order = []

    def run_once(mode, arise, args, tiny, out, env, overrides, lock=None):
        assert arise and env["TRAINER_MODE"] == mode and lock == bench.LOCK
        rep = sum(1 for m in order if m == mode)
        order.append(mode)
        return [{"bench/wall_s": seconds[mode][rep], "timing_s/step": 1.0}]

    monkeypatch.setattr(bench.overhead, "tiny_assets", lambda: tmp_path)
    monkeypatch.setattr(bench.overhead, "with_positions", lambda tiny, positions, work: tiny)
    facts = {"prompt": 147.0, "response": 1380, "skill_tokens": 31.0, "prompt_range": (140, 147)}
    monkeypatch.setattr(bench.overhead, "paper_setup", lambda args, work, tiny: ({"BATCH": "2"}, ["x=1"], facts))
    monkeypatch.setattr(bench.overhead, "run_once", run_once)
    args = type("Args", (), dict(steps=3, reps=3, max_reps=3, target=0.001, group=8, batch=2, positions=1536))()
    result = bench.speed(args, tmp_path)
    assert order[:3] == ["sync", "colocate_async", "separate_async"] and order[3:6] == order[2::-1]
    out = capsys.readouterr().out
    for mode in ("colocate_async", "separate_async"):
        expected = bench.overhead.ratio_interval(seconds[mode], seconds["sync"])
        assert tuple(result["ratios"][mode]) == pytest.approx(expected)
        assert f"{mode}/sync step-time ratio: {bench.overhead.describe(expected)}" in out
    assert "NOT RESOLVED" in out  # +-0.1% is out of reach of these numbers
    assert result["seconds_per_step"]["sync"] == seconds["sync"]
    # started again in the same folder, the finished runs are reused, none launched again
    order.clear()
    assert bench.speed(args, tmp_path)["ratios"] == result["ratios"] and order == []
    assert "reusing" in capsys.readouterr().out


def test_every_learning_effect_launch_runs_under_the_mode(tmp_path, monkeypatch):
    """bench_learning_effect's --trainer-mode reaches the launch as TRAINER_MODE (sync by default),
    and a mode's default output folder is its own."""
    sys.path.insert(0, str(REPO / "bench"))
    import bench_learning_effect as effect

    args = effect.parse_args(["--trainer-mode", "separate_async", "--steps", "4", "--arms", "arise", "grpo"])
    assert args.out == "outputs/bench_learning_effect_separate_async"
    assert effect.parse_args([]).trainer_mode == "sync" and effect.parse_args([]).out == "outputs/bench_learning_effect"
    with pytest.raises(SystemExit):
        effect.parse_args(["--trainer-mode", "async"])
    seen = {}

    def fake_run(cmd, cwd, env, capture_output, text):
        seen.update(env)
        rows = [{"step": s, "data": {"val-core/transfer_joxi/acc/mean@4": 0.5}} for s in (0, 4)]
        Path(env["OUT_DIR"], "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return type("Proc", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    monkeypatch.setattr(effect.subprocess, "run", fake_run)
    (tmp_path / "run").mkdir()
    effect.launch("arise", 0, tmp_path / "run", tmp_path, args)
    assert seen["TRAINER_MODE"] == "separate_async" and seen["ARISE"] == "true"


def test_the_plot_reads_a_saved_results_file(bench, tmp_path):
    curves = {m: {"arise": [{0: 0.3, 4: 0.6}], "grpo": [{0: 0.3, 4: 0.4}]} for m in bench.MODES}
    results = {
        "speed": {
            "seconds_per_step": {"sync": [20.0, 21.0], "colocate_async": [18.0, 19.0], "separate_async": [22.0, 21.0]},
            "ratios": {"colocate_async": [0.9, 0.85, 0.95], "separate_async": [1.05, math.nan, math.nan]},
        },
        "learning": {"curves": curves, "lines": ["x"]},
    }
    saved = json.loads(json.dumps(results))  # the steps become strings, the nan stays
    bench.plot(saved, tmp_path / "modes.png")
    assert (tmp_path / "modes.png").stat().st_size > 10_000


def test_each_part_keeps_the_other_parts_results(bench, tmp_path):
    """Two invocations in one --work, one per part, may finish in either order: each writes its part
    into the file as it is then, so neither loses the other's."""
    path = tmp_path / "results.json"
    bench.save(path, "learning", {"lines": ["a"]})
    bench.save(path, "speed", {"ratios": {}})
    bench.save(path, "learning", {"lines": ["b"]})
    assert json.loads(path.read_text()) == {"learning": {"lines": ["b"]}, "speed": {"ratios": {}}}


def test_learning_pairs_each_async_mode_with_sync_and_counts_failed_runs(bench, tmp_path, monkeypatch, capsys):
    """Fake launches: every mode's ARISE and GRPO per seed, one run failing (counted, shown, its seed
    left out of that mode's line only), and the line per async mode from the seeds all four runs share."""
    final = {("sync", "arise"): 0.8, ("sync", "grpo"): 0.4, ("colocate_async", "arise"): 0.75}
    final[("colocate_async", "grpo")] = 0.45
    launched = []

    def launch(arm, seed, out, assets, le):
        launched.append((le.trainer_mode, arm, seed))
        if (le.trainer_mode, arm, seed) == ("colocate_async", "grpo", 1):
            raise SystemExit("colocate_async grpo seed 1 failed (exit 1)")
        out.mkdir(parents=True, exist_ok=True)
        acc = final[(le.trainer_mode, arm)] + 0.01 * seed
        rows = [{"step": s, "data": {"val-core/transfer_joxi/acc/mean@4": v}} for s, v in ((0, 0.3), (4, acc))]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return out / "metrics.jsonl"

    monkeypatch.setattr(bench.effect, "world_assets", lambda families, sft_steps: tmp_path)
    monkeypatch.setattr(bench.effect, "launch", launch)
    args = type("Args", (), dict(learning_seeds=[0, 1], learning_steps=4, eval_every=4))()
    args.learning_modes = ["colocate_async", "sync"]
    result = bench.learning(args, tmp_path)
    # seeds outermost, sync first on even seeds, the order reversed on odd ones
    assert [m for m, _, s in launched if s == 0][::2] == ["sync", "colocate_async"]
    assert [m for m, _, s in launched if s == 1][::2] == ["colocate_async", "sync"]
    assert result["failed"] == ["colocate_async grpo seed 1"]
    assert result["lines"] == [bench.effect_line("colocate_async", [0.3], [0.4])]
    out = capsys.readouterr().out
    assert "1 run(s) failed, left out: colocate_async grpo seed 1" in out and "FAILED colocate_async grpo" in out


def test_the_learning_modes_must_include_sync(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--skip-speed", "--learning-modes", "colocate_async"])
    assert "--learning-modes needs sync" in capsys.readouterr().err
