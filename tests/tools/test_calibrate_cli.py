"""recipe.arise.tools.calibrate: data and library loading, the training's scoring, the printed table.

The vLLM engine is replaced by a fake that returns prompt log-probs in verl's layout; the real
engine run is a manual step (docs/design.md: the calibrated gate)."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from byte_tokenizer import ByteTokenizer

from recipe.arise.core.calibration import GATE_FILE, critical_temperatures, pass_rate
from recipe.arise.core.scoring import SCORING_SUFFIX, score_queries
from recipe.arise.core.selection import select_skill_detailed
from recipe.arise.tools import calibrate as cli


def _dataset(tmp_path, n=12):
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} plus 1?"}], "data_source": "x"} for i in range(n)]
    path = tmp_path / "train.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_load_queries_samples_rows_and_names_a_bad_file(tmp_path):
    path = _dataset(tmp_path)
    queries = cli.load_queries(path, 5, seed=1)
    assert len(queries) == 5 and all(q[0]["role"] == "user" for q in queries)
    assert cli.load_queries(path, 5, seed=1) == queries and len(cli.load_queries(path, 0)) == 12
    bad = tmp_path / "bad.parquet"
    pd.DataFrame([{"question": "q"}]).to_parquet(bad)
    with pytest.raises(ValueError, match="bad.parquet: no 'prompt' column"):
        cli.load_queries(bad, 3)


def test_load_skills_seeds_or_a_library_with_its_saved_sigma(tmp_path):
    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.skill import load_seed_skills

    texts, sigma = cli.load_skills(None, None)
    assert len(texts) == 5 and sigma is None and json.loads(texts[0])
    folder = tmp_path / "arise"
    folder.mkdir()
    SkillLibrary(seed_skills=load_seed_skills(None)).save(str(folder / "library.parquet"))
    (folder / GATE_FILE).write_text(json.dumps({"sigma": 0.42}))
    texts2, sigma2 = cli.load_skills(str(folder / "library.parquet"), None)
    assert texts2 == texts and sigma2 == 0.42


def test_score_queries_is_the_agent_loops_scoring():
    tok = ByteTokenizer()
    skills = ['{"a": 1}', '{"bb": 22}']
    seen = []

    def engine(prompts):  # token j gets log-prob -j/1000: the mean depends on where the skill sits
        seen.extend(prompts)
        return [[[-(j + 1) / 1000.0] for j in range(len(ids) - 1)] + [[0.0]] for ids in prompts]

    vectors = score_queries(engine, tok, [[{"role": "user", "content": "hi"}]], skills, max_skill_tokens=4)
    prefix = tok.encode("U:hi|A:" + SCORING_SUFFIX)
    assert seen[0] == prefix + tok.encode(skills[0])[:4]  # the training's prefix and truncation
    expected = np.mean([-j / 1000.0 for j in range(len(prefix), len(prefix) + 4)])
    assert vectors == [[pytest.approx(expected), pytest.approx(expected)]]


def test_gate_report_and_table():
    rng = np.random.default_rng(0)
    vectors = [list(rng.normal(-2, 0.3, size=5)) for _ in range(40)] + [[math.nan] * 5]
    report = cli.gate_report(vectors, sigma=1.0, delta=0.35, target=0.73)
    assert report["queries"] == 41 and report["scorable"] == 40 and report["candidates"] == 5
    passed = [
        select_skill_detailed(v, temperature=1.0, epsilon=0, gate=0.35, rng=rng).gate_passed for v in vectors[:40]
    ]
    assert report["pass_rate"] == pytest.approx(np.mean(passed))
    sigma = report["calibrated_sigma"]
    assert pass_rate(sigma, critical_temperatures(vectors, 0.35)) == report["calibrated_pass_rate"]
    assert abs(report["calibrated_pass_rate"] - 0.73) <= 1 / 80
    assert [row["delta"] for row in report["paper_deltas"]] == [0.15, 0.25, 0.35, 0.45, 0.55]
    text = cli.format_report(report)
    assert "40/41 queries scored against 5 skills" in text and "| 0.35 | 0.730 |" in text
    assert f"sigma={sigma:.4g}" in text


def test_main_prints_the_report(tmp_path, monkeypatch, capsys):
    path = _dataset(tmp_path)
    rng = np.random.default_rng(1)

    def fake_engine(model, args):
        def run(prompts):
            return [[[float(rng.normal(-2, 0.5))]] * len(ids) for ids in prompts]

        return run

    monkeypatch.setattr(cli, "vllm_engine", fake_engine)
    import transformers

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: ByteTokenizer())
    out = tmp_path / "report.json"
    assert cli.main(["--model", "m", "--data", str(path), "--queries", "8", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "8/8 queries scored against 5 skills" in printed and "gate pass rate at sigma=1" in printed
    assert len(json.loads(out.read_text())["scores"]) == 8


def test_score_queries_pmi_takes_each_skill_relative_to_its_query_free_baseline():
    from recipe.arise.core import scoring

    assert "pmi" in scoring.SCORE_NORMS  # arise.selection.score_norm's pmi: a missing norm fails here
    tok = ByteTokenizer()
    free = scoring.query_free_prefix_ids(tok, SCORING_SUFFIX)

    def engine(prompts):  # -1 per token after a query, -3 after the query-free context
        return [[[-3.0 if ids[: len(free)] == free else -1.0]] * len(ids) for ids in prompts]

    vectors = score_queries(engine, tok, [[{"role": "user", "content": "hi"}]], ['{"a": 1}'], score_norm="pmi")
    assert vectors == [[pytest.approx(2.0)]]


def test_a_failed_request_gives_a_nan_score():
    vectors = score_queries(
        lambda prompts: [None] * len(prompts), ByteTokenizer(), [[{"role": "user", "content": "x"}]], ["{}"]
    )
    assert math.isnan(vectors[0][0])
