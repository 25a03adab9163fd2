"""bench/bench_learning_effect.py --env without a launch: the argument handling, the curve read from
an environment's validation metrics (``val-core/env/<env>/<task type>/acc/mean@n``), the launch's
environment, and a whole bench on a fake launch down to its PNG, results.json and last line."""

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import bench_learning_effect as effect  # noqa: E402

ENV_LINE = re.compile(r"^ARISE - GRPO final success \(twx\): ([+-]\d\.\d{3}) ± (\d\.\d{3}) over (\d+) seeds$")


def env_rows(success: dict[int, float], skill_use: float | None = None) -> list[dict]:
    """Metrics rows as verl's file logger writes them for an env run: a validation at each step of
    ``success`` (with verl's other statistics of acc beside mean@n), training metrics between."""
    rows = []
    for step, won in success.items():
        data = {
            "val-core/env/twx/coin/acc/mean@4": won,
            "val-core/env/twx/coin/acc/best@4/mean": min(1.0, won + 0.3),
            "val-aux/env/twx/coin/env_turns/mean@4": 2.0,
        }
        if skill_use is not None:
            data["val-aux/env/twx/coin/skill_used/mean@4"] = skill_use
        if step:
            data |= {"arise/env_success": 0.5, "actor/grad_norm": 1.0}
        rows.append({"step": step, "data": data})
    return rows


def write_metrics(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_env_arguments():
    args = effect.parse_args(["--env", "twx", "--seeds", "0", "--steps", "8", "--eval-every", "4"])
    assert args.env == "twx" and args.arms == ["arise", "grpo"] and args.out == "outputs/bench_learning_effect_env_twx"
    assert effect.held_out_sources(args) == "env/twx/"
    mode = effect.parse_args(["--env", "twx", "--trainer-mode", "colocate_async"])
    assert mode.out == "outputs/bench_learning_effect_env_twx_colocate_async"
    # the math worlds keep theirs
    plain = effect.parse_args([])
    assert plain.env is None and plain.families == 6 and effect.held_out_sources(plain) == "transfer_"
    assert effect.parse_args(["--tool"]).out == "outputs/bench_learning_effect_tool"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "twx", "--tool"], "one agent"),
        (["--env", "twx", "--families", "3"], "math worlds"),
        (["--env", "twx", "--sft-steps", "100"], "--assets DIR built by `python -m recipe.arise.cpu.tiny_env DIR"),
        (["--env", "alfworld"], "invalid choice"),
    ],
)
def test_env_arguments_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        effect.parse_args(argv)
    assert message in capsys.readouterr().err


def test_the_curve_is_the_envs_val_core_success(tmp_path):
    path = write_metrics(tmp_path / "metrics.jsonl", env_rows({0: 0.25, 4: 0.5, 8: 0.75}, skill_use=0.6))
    steps, curve, rows = effect.read_curve(path, "env/twx/")
    assert steps == [0, 4, 8] and curve == {0: 0.25, 4: 0.5, 8: 0.75}  # mean@n, not best@n
    assert rows[4]["arise/env_success"] == 0.5
    assert effect.final_skill_use(path, 8, "env/twx/") == pytest.approx(0.6)
    assert effect.final_skill_use(write_metrics(tmp_path / "g.jsonl", env_rows({0: 0.3})), 0, "env/twx/") is None


def test_the_curve_averages_task_types(tmp_path):
    rows = [{"step": 0, "data": {"val-core/env/twx/coin/acc/mean@4": 0.2, "val-core/env/twx/twc/acc/mean@4": 0.6}}]
    assert effect.read_curve(write_metrics(tmp_path / "m.jsonl", rows), "env/twx/")[1] == {0: pytest.approx(0.4)}


def test_a_validation_of_other_sources_is_an_error_naming_them(tmp_path):
    """A math world's reading of an env run (or the reverse) is a clear error, not an empty curve."""
    path = write_metrics(tmp_path / "metrics.jsonl", env_rows({0: 0.25, 4: 0.5}))
    with pytest.raises(ValueError, match=r"transfer_\*.*val-core/env/twx/coin/acc/mean@4"):
        effect.read_curve(path)
    with pytest.raises(ValueError, match="env/scienceworld/"):
        effect.read_curve(path, "env/scienceworld/")
    # no validation logged (yet): no curve, no error
    training_only = write_metrics(tmp_path / "t.jsonl", [{"step": 1, "data": {"x": 1.0}}])
    assert effect.read_curve(training_only, "env/twx/")[1] == {}


def test_the_final_line_names_the_env_and_pairs_by_seed():
    args = effect.parse_args(["--env", "twx"])
    line = effect.effect_line({"arise": {0: 0.75, 1: 0.5, 2: 0.9}, "grpo": {0: 0.5, 2: 0.7}}, args)
    x, y, n = ENV_LINE.match(line).groups()
    assert (float(x), float(y), n) == (pytest.approx(0.225), pytest.approx(0.035, abs=5e-4), "2")
    assert ENV_LINE.match(effect.effect_line({"arise": {0: 0.25}, "grpo": {0: 0.5}}, args)).groups() == (
        "-0.250",
        "0.000",
        "1",
    )
    assert effect.effect_line({"arise": {0: 0.5}}, args) is None
    # the math worlds' lines are unchanged
    finals = {"arise": {0: 0.8}, "grpo": {0: 0.4}}
    line = effect.effect_line(finals, effect.parse_args([]))
    assert line == "ARISE - GRPO final accuracy: +0.400 ± 0.000 over 1 seeds"
    assert effect.effect_line(finals, effect.parse_args(["--tool"])).startswith("ARISE - GRPO final accuracy (tool):")


def test_every_env_launch_plays_the_env(tmp_path, monkeypatch):
    seen = {}

    def fake_run(cmd, cwd, env, capture_output, text):
        seen.update(env, cmd=cmd)
        write_metrics(Path(env["OUT_DIR"], "metrics.jsonl"), env_rows({0: 0.5, 4: 0.5}))
        return type("Proc", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    monkeypatch.setattr(effect.subprocess, "run", fake_run)
    args = effect.parse_args(["--env", "twx", "--steps", "4", "--eval-every", "4"])
    (tmp_path / "run").mkdir()
    assert effect.launch("grpo", 1, tmp_path / "run", tmp_path, args) == tmp_path / "run" / "metrics.jsonl"
    assert seen["ENV"] == "twx" and seen["TOOL"] == "" and seen["ARISE"] == "false"
    assert seen["TINY_DIR"] == str(tmp_path)
    assert seen["cmd"][:2] == ["flock", effect.LOCK] and "trainer.val_before_train=True" in seen["cmd"]
    assert "arise.seed=1" in seen["cmd"] and "trainer.test_freq=4" in seen["cmd"]
    # the math worlds' launches play no env
    seen.clear()
    math_args = effect.parse_args(["--steps", "4"])
    write_metrics(tmp_path / "m" / "metrics.jsonl", [])

    def fake_math(cmd, cwd, env, capture_output, text):
        seen.update(env)
        rows = [{"step": s, "data": {"val-core/transfer_joxi/acc/mean@4": 0.5}} for s in (0, 4)]
        write_metrics(Path(env["OUT_DIR"], "metrics.jsonl"), rows)
        return type("Proc", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    monkeypatch.setattr(effect.subprocess, "run", fake_math)
    effect.launch("arise", 0, tmp_path / "m", tmp_path, math_args)
    assert seen["ENV"] == ""


def test_a_whole_env_bench_on_fake_launches(tmp_path, monkeypatch, capsys):
    """Both arms launched on the env assets, the table, the PNG and results.json, the last line."""
    import pandas as pd

    assets = tmp_path / "assets"
    (assets / "data").mkdir(parents=True)
    pd.DataFrame({"data_source": ["env/twx/coin"] * 3, "x": [1, 2, 3]}).to_parquet(assets / "data" / "val.parquet")
    monkeypatch.setattr(effect, "env_assets", lambda env: assets if env == "twx" else None)
    success = {"arise": {0: 0.375, 4: 0.625, 8: 0.75}, "grpo": {0: 0.375, 4: 0.5, 8: 0.5}}
    launched = []

    def fake_launch(arm, seed, out, assets_dir, args):
        assert assets_dir == assets and args.env == "twx"
        launched.append((arm, seed))
        return write_metrics(out / "metrics.jsonl", env_rows(success[arm], skill_use=0.5 if arm == "arise" else None))

    monkeypatch.setattr(effect, "launch", fake_launch)
    out = tmp_path / "out"
    argv = ["--env", "twx", "--seeds", "0", "--steps", "8", "--eval-every", "4", "--out", str(out)]
    assert effect.main(argv) == 0
    assert launched == [("arise", 0), ("grpo", 0)]
    printed = capsys.readouterr().out
    assert "Held-out success (episodes won, mean over 1 task types" in printed
    assert "| arise | 1 | 0.375 ± 0.000 | 0.750 ± 0.000 |" in printed
    assert "families ['env/twx/coin']" in printed
    assert ENV_LINE.match(printed.strip().splitlines()[-1]).groups() == ("+0.250", "0.000", "1")
    assert (out / "learning_effect_env_twx.png").stat().st_size > 10_000
    results = json.loads((out / "results.json").read_text())
    assert results["families"] == ["env/twx/coin"] and results["paired_final_diff"] == [0.25]
    assert results["curves"]["grpo"] == [{"0": 0.375, "4": 0.5, "8": 0.5}]


def test_env_assets_without_held_out_games_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="no data/val.parquet"):
        effect.env_task_types(tmp_path)
