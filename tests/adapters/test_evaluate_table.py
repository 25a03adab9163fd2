"""The evaluation tool: metric parsing, Table-1 layout, the run's overrides (the run itself: tests/e2e)."""

import json
from pathlib import Path

import pytest

from recipe.arise.tools.evaluate import (
    collect_results,
    combine,
    markdown_table,
    read_validation_metrics,
    table_rows,
    write_outputs,
)

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
    """The evaluated benchmarks only (no column of dashes for AMC 23 / AIME 25), in Table 1's order."""
    titles, cells = table_rows(collect_results(METRICS))
    assert titles == ["AIME 24", *(f"Omni {d}" for d in ("Algebra", "Number Theory", "Combinatorics", "Geometry"))] + [
        "Omni Avg.",
        "my_set",
    ]
    row = dict(zip(titles, cells, strict=False))
    assert row["AIME 24"] == "50.0"
    assert row["Omni Avg."] == "35.0"  # (20 + 30 + 40 + 50) / 4
    assert row["my_set"] == "25.0"


def test_the_papers_column_set_when_all_seven_were_evaluated():
    paper = ("amc23", "aime24", "aime25") + tuple(f"omni_math_{d}" for d in ("algebra", "number_theory"))
    paper += ("omni_math_combinatorics", "omni_math_geometry")
    full = {s: {"pass@1": 0.5, "k": 4} for s in paper}
    titles, cells = table_rows(full)
    assert titles[:3] == ["AMC 23", "AIME 24", "AIME 25"] and titles[-1] == "Omni Avg." and len(titles) == 8
    assert "evaluated benchmarks only" not in "\n".join(markdown_table([("arise", full)]))
    one = markdown_table([("arise", {"my_set": {"pass@1": 0.25, "k": 2}})])
    assert one[-2:] == ["|---|---|", "| arise | 25.0 |"] and "—" not in one[-1]
    assert "evaluated benchmarks only" in one[1]
    # several runs: the union of what they evaluated; a run without one of them gets a dash
    two = markdown_table([("a", {"aime24": {"pass@1": 0.5, "k": 4}}), ("b", {"amc23": {"pass@1": 0.25, "k": 4}})])
    assert two[-4:] == ["| Method | AMC 23 | AIME 24 |", "|---|---|---|", "| a | — | 50.0 |", "| b | 25.0 | — |"]


def test_omni_average_needs_all_four_domains():
    results = collect_results({k: v for k, v in METRICS.items() if "geometry" not in k})
    titles = table_rows(results)[0]
    assert "Omni Avg." not in titles and "Omni Geometry" not in titles


def test_outputs_and_combine(tmp_path):
    write_outputs(collect_results(METRICS), tmp_path / "a", "arise")
    write_outputs({"aime24": {"pass@1": 0.4, "k": 4}}, tmp_path / "b", "grpo")
    data = json.loads((tmp_path / "a" / "eval.json").read_text())
    assert data["method"] == "arise" and data["results"]["aime24"]["pass@1"] == 0.5
    assert "arise,aime24,0.5,0.75,1.0,0.41,1.2,4" in (tmp_path / "a" / "eval.csv").read_text()
    table = tmp_path / "t" / "table.md"
    combine([tmp_path / "a", tmp_path / "b"], tmp_path / "t")
    lines = table.read_text().splitlines()
    assert lines[-2].startswith("| arise | 50.0 |") and lines[-1].startswith("| grpo | 40.0 | — |")
    with pytest.raises(FileNotFoundError, match="eval.json"):
        combine([tmp_path], tmp_path / "t2")


def test_combine_cli_names_what_is_wrong_and_where_it_wrote(tmp_path, capsys):
    from recipe.arise.tools import evaluate

    for run in ("x/ev", "y/ev", "z"):  # three runs with the same label, two with the same folder name
        write_outputs({"aime24": {"pass@1": 0.4, "k": 4}}, tmp_path / run, "arise")
    out = tmp_path / "tables"
    assert evaluate.main(["--combine", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nowhere: no such folder" in err and "Traceback" not in err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "eval.json").write_text("{")
    assert evaluate.main(["--combine", str(tmp_path / "bad"), "--out", str(out)]) == 2
    assert "bad/eval.json: not an evaluation result" in capsys.readouterr().err
    runs = [str(tmp_path / r) for r in ("x/ev", "y/ev", "z")]
    assert evaluate.main(["--combine", *runs, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().splitlines()[-1] == f"[eval] wrote {out / 'table.md'}"
    rows = [line.split(" | ")[0] for line in (out / "table.md").read_text().splitlines() if line.startswith("| arise")]
    assert rows == [f"| arise ({runs[0]})", f"| arise ({runs[1]})", "| arise (z)"]  # no two rows alike


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

    def fake_run(cmd, env, log_path, verbose=False):
        calls.append((cmd, {"env": env, "log": log_path}))
        metrics = env["VERL_FILE_LOGGER_PATH"]
        assert any(metrics in arg for arg in cmd if arg.startswith("++ray_kwargs"))
        row = {"step": 0, "data": {"val-core/aime24/acc/mean@4": 0.25}}
        Path(metrics).write_text(json.dumps(row) + "\n")
        return 0

    monkeypatch.setattr(evaluate, "run_validation", fake_run)
    out = tmp_path / "out"
    rc = evaluate.main(
        ["--model", "m", "--data", str(tmp_path / "a.parquet"), "--k", "4", "--out", str(out), "--skip-preflight"]
    )
    assert rc == 0 and len(calls) == 1
    cmd, kwargs = calls[0]
    assert cmd[1:3] == ["-m", "recipe.arise.adapters.main_arise"] and kwargs["log"] == out / "eval.log"
    assert json.loads((out / "eval.json").read_text())["results"]["aime24"]["pass@1"] == 0.25


def test_print_overrides_starts_nothing(tmp_path, monkeypatch, capsys):
    from recipe.arise.tools import evaluate

    monkeypatch.setattr(evaluate, "run_validation", lambda *a, **k: pytest.fail("started a run"))
    rc = evaluate.main(["--model", "m", "--data", "/nowhere/x.parquet", "--out", str(tmp_path), "--print-overrides"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and lines[0] == "ENTRY=recipe.arise.adapters.main_arise"
    assert "trainer.val_only=True" in lines and not (tmp_path / "val_metrics.jsonl").exists()
