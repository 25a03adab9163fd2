"""The evaluation's metric parsing and Table-1 layout (pure functions; the run itself is in tests/e2e)."""

import json

import pytest

from recipe.arise.evaluate import collect_results, combine, read_validation_metrics, table_rows, write_outputs

METRICS = {
    "val-core/aime24/acc/mean@4": 0.5,
    "val-aux/aime24/acc/std@4": 0.1,
    "val-aux/aime24/skill_used/mean@4": 0.75,
    "val-aux/aime24/score/mean@4": 1.2,
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
    assert results["aime24"] == {"pass@1": 0.5, "k": 4, "skill_use": 0.75, "reward": 1.2}
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
    assert "arise,aime24,0.5,0.75,1.2,4" in (tmp_path / "a" / "eval.csv").read_text()
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
