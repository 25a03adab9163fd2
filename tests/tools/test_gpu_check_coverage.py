"""gpu_check's second verdict: did the two launches resume, validate and measure the exact IG?"""

import json

from recipe.arise.tools import gpu_check_coverage as coverage


def _write(path, steps):
    lines = [json.dumps({"step": s, "data": data}) for s, data in steps.items()]
    path.write_text("\n".join(lines) + "\n")


def _run(tmp_path, launch1, launch2, capsys):
    if launch1 is not None:
        _write(tmp_path / "metrics.launch1.jsonl", launch1)
    _write(tmp_path / "metrics.jsonl", launch2)
    code = coverage.main(["--resumed-at", "2", "--steps", "4", "--ig-every", "2", str(tmp_path / "metrics.jsonl")])
    return code, capsys.readouterr().out


VAL = {"val-core/aime24/acc/mean@1": 0.1}
IG = {"arise/ig_exact_mean": 0.02, "arise/ig_skipped": 0.0}


def test_a_resumed_validated_run_with_ig_passes(tmp_path, capsys):
    code, out = _run(tmp_path, {1: {}, 2: {**VAL, **IG}}, {3: {}, 4: {**VAL, **IG}}, capsys)
    assert code == 0, out
    assert "OK   resume" in out and "2 -> 3" in out and out.count("exact IG, launch") == 2


def test_a_launch_that_started_over_fails_the_resume(tmp_path, capsys):
    code, out = _run(tmp_path, {1: {}, 2: {**VAL, **IG}}, {1: {}, 2: {}, 3: {}, 4: {**VAL, **IG}}, capsys)
    assert code == 1 and "FAIL resume" in out and "2 -> 1" in out


def test_one_launch_only_fails_the_resume(tmp_path, capsys):
    code, out = _run(tmp_path, None, {1: {}, 2: {**VAL, **IG}}, capsys)
    assert code == 1 and "FAIL resume" in out and "1 launch" in out


def test_missing_validation_and_unmeasured_ig_fail(tmp_path, capsys):
    no_ig = {"arise/ig_skipped": 8.0}  # every trace skipped: no arise/ig_exact_mean
    code, out = _run(tmp_path, {1: {}, 2: {**VAL, **IG}}, {3: {}, 4: no_ig}, capsys)
    assert code == 1
    assert "FAIL validation at step 4" in out and "OK   validation at step 2" in out
    assert "FAIL exact IG, launch 2" in out and "0/1 steps, 8 skipped" in out


def test_unreadable_metrics_exit_2_naming_the_line(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "data": {}}\nnot json\n')
    code = coverage.main(["--resumed-at", "2", "--steps", "4", "--ig-every", "2", str(tmp_path / "metrics.jsonl")])
    assert code == 2 and "metrics.jsonl line 2" in capsys.readouterr().err
    assert coverage.main(["--resumed-at", "2", "--steps", "4", "--ig-every", "2", str(tmp_path / "none.jsonl")]) == 2
