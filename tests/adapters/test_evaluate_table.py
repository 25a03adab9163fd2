"""The evaluation tool: metric parsing, Table-1 layout, the run's overrides (the run itself: tests/e2e)."""

import json
from pathlib import Path

import pytest

from recipe.arise.tools.evaluate import collect_results, combine, read_validation_metrics, table_rows, write_outputs

METRICS = {
    "val-core/aime24/acc/mean@4": 0.5,
    "val-aux/aime24/acc/std@4": 0.1,
    "val-aux/aime24/skill_used/mean@4": 0.75,
    "val-aux/aime24/score/mean@4": 1.2,
    "val-aux/aime24/skill_scored/mean@4": 1.0,
    "val-aux/aime24/max_p/mean@4": 0.41,
    "val-core/aime24/acc/mean@2": 0.9,  # a smaller k must not win
    "val-core/omni_math_algebra/acc/mean@4": 0.2,
    "val-core/omni_math_number_theory/acc/mean@4": 0.3,
    "val-core/omni_math_combinatorics/acc/mean@4": 0.4,
    "val-core/omni_math_geometry/acc/mean@4": 0.5,
    "val-core/my_set/acc/mean@4": 0.25,
    "val-aux/num_turns/mean": 2.0,
}


def test_collect_results_keeps_largest_k_and_skill_use():
    results = collect_results(METRICS)
    assert results["aime24"] == {
        "pass@1": 0.5,
        "k": 4,
        "skill_use": 0.75,
        "reward": 1.2,
        "scored": 1.0,
        "max_p": 0.41,
    }
    assert set(results) == {
        "aime24",
        "omni_math_algebra",
        "omni_math_number_theory",
        "omni_math_combinatorics",
        "omni_math_geometry",
        "my_set",
    }


def test_table_layout_and_omni_macro_average():
    titles, cells = table_rows(collect_results(METRICS))
    assert titles[:3] == ["AMC 23", "AIME 24", "AIME 25"]
    row = dict(zip(titles, cells, strict=False))
    assert row["AMC 23"] == "—" and row["AIME 24"] == "50.0"
    assert row["Omni Avg."] == "35.0"  # (20 + 30 + 40 + 50) / 4
    assert titles[-1] == "my_set" and row["my_set"] == "25.0"


def test_omni_average_needs_all_four_domains():
    results = collect_results({k: v for k, v in METRICS.items() if "geometry" not in k})
    row = dict(zip(*table_rows(results), strict=False))
    assert row["Omni Avg."] == "—"


def test_outputs_and_combine(tmp_path):
    write_outputs(collect_results(METRICS), tmp_path / "a", "arise")
    write_outputs({"aime24": {"pass@1": 0.4, "k": 4}}, tmp_path / "b", "grpo")
    data = json.loads((tmp_path / "a" / "eval.json").read_text())
    assert data["method"] == "arise" and data["results"]["aime24"]["pass@1"] == 0.5
    assert "arise,aime24,0.5,0.75,1.0,0.41,1.2,4" in (tmp_path / "a" / "eval.csv").read_text()
    table = tmp_path / "t" / "table.md"
    combine([tmp_path / "a", tmp_path / "b"], tmp_path / "t")
    lines = table.read_text().splitlines()
    assert lines[4].startswith("| arise | — | 50.0 |") and lines[5].startswith("| grpo | — | 40.0 |")
    with pytest.raises(FileNotFoundError, match="eval.json"):
        combine([tmp_path], tmp_path / "t2")


def test_read_validation_metrics_errors_clearly(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"step": 1, "data": {"actor/loss": 1.0}}) + "\n")
    with pytest.raises(ValueError, match="no validation metrics"):
        read_validation_metrics(path)
    path.write_text(path.read_text() + json.dumps({"step": 1, "data": METRICS}) + "\n")
    assert read_validation_metrics(path)["val-core/aime24/acc/mean@4"] == 0.5


def _args(tmp_path, **kw):
    from recipe.arise.tools import evaluate

    base = dict(
        data=[str(tmp_path / "a.parquet")],
        model="org/model",
        k=4,
        decoding="sampled",
        temperature=0.6,
        top_p=0.95,
        label="arise",
        out=str(tmp_path / "out"),
        checkpoint=None,
        library=None,
        no_skills=False,
        overrides=["actor_rollout_ref.rollout.name=sglang", "trainer.val_only=False"],
    )
    base.update(kw)
    return evaluate.argparse.Namespace(**base)


def test_build_overrides_layers(tmp_path, monkeypatch):
    from recipe.arise.tools.evaluate import build_overrides

    (tmp_path / "a.parquet").touch()
    (tmp_path / "model").mkdir()
    monkeypatch.chdir(tmp_path)
    overrides = build_overrides(_args(tmp_path, model="model", out="rel_out", checkpoint="ck/global_step_4"))
    # 1. defaults (verl leaves rollout.name at ???), 2. pass-through, 3. the tool's own keys last
    assert overrides[0] == "actor_rollout_ref.rollout.name=vllm"
    assert overrides[1:3] == ["actor_rollout_ref.rollout.name=sglang", "trainer.val_only=False"]
    assert overrides.index("trainer.val_only=True") > 2
    text = "\n".join(overrides)
    assert f"actor_rollout_ref.model.path='{tmp_path}/model'" in text  # a local model made absolute
    assert f"trainer.resume_from_path='{tmp_path}/ck/global_step_4'" in text
    assert (
        f"++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='{tmp_path}/rel_out/val_metrics.jsonl'"
        in text
    )
    assert f"hydra.run.dir='{tmp_path}/rel_out/hydra'" in text
    assert f"trainer.default_local_dir='{tmp_path}/rel_out/trainer_state'" in text
    hub = build_overrides(_args(tmp_path))
    assert "actor_rollout_ref.model.path='org/model'" in hub  # a hub id stays as given
    with pytest.raises(FileNotFoundError, match="b.parquet"):
        build_overrides(_args(tmp_path, data=[str(tmp_path / "b.parquet")]))


def test_eval_runs_in_the_callers_cwd(tmp_path, monkeypatch, capsys):
    """No cwd switch (a relative MODEL_PATH keeps working); the metrics path travels both ways."""
    from recipe.arise.tools import evaluate

    (tmp_path / "a.parquet").touch()
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs))
        metrics = kwargs["env"]["VERL_FILE_LOGGER_PATH"]
        assert any(metrics in arg for arg in cmd if arg.startswith("++ray_kwargs"))
        row = {"step": 0, "data": {"val-core/aime24/acc/mean@4": 0.25}}
        Path(metrics).write_text(json.dumps(row) + "\n")
        return evaluate.subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(evaluate.subprocess, "run", fake_run)
    out = tmp_path / "out"
    rc = evaluate.main(
        ["--model", "m", "--data", str(tmp_path / "a.parquet"), "--k", "4", "--out", str(out), "--skip-preflight"]
    )
    assert rc == 0 and len(calls) == 1
    cmd, kwargs = calls[0]
    assert "cwd" not in kwargs and cmd[1:3] == ["-m", "recipe.arise.adapters.main_arise"]
    assert json.loads((out / "eval.json").read_text())["results"]["aime24"]["pass@1"] == 0.25


def test_print_overrides_starts_nothing(tmp_path, monkeypatch, capsys):
    from recipe.arise.tools import evaluate

    monkeypatch.setattr(evaluate.subprocess, "run", lambda *a, **k: pytest.fail("started a run"))
    rc = evaluate.main(["--model", "m", "--data", "/nowhere/x.parquet", "--out", str(tmp_path), "--print-overrides"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and lines[0] == "ENTRY=recipe.arise.adapters.main_arise"
    assert "trainer.val_only=True" in lines and not (tmp_path / "val_metrics.jsonl").exists()
