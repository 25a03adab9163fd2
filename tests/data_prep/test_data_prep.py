"""Tests for data_prep/ (run from the repo root: python -m pytest tests/data_prep -p no:cacheprovider).

Raw data comes from the ``raw_root`` fixture (tests/conftest.py): the hand-written rows in
tests/fixtures/raw (a few records in each raw format, same layout as the local copies), then --
marked ``shared_data``, deselected when absent -- the full local copies in ../shared/data/raw
(or $ARISE_SHARED_DIR/data/raw).  EXPECTED holds the counts of each.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipe.arise.data_prep import aime24, aime25, amc23, deepscaler, math500, omni_math
from recipe.arise.data_prep.common import (
    INSTRUCTION,
    SCHEMA,
    AnswerError,
    DataPrepError,
    normalize_answer,
    read_records,
    run_main,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

_OMNI_SHARED = {"algebra": 814, "geometry": 601, "combinatorics": 457, "number_theory": 410, "other": 539}
#: what each raw folder must give (fixtures: tests/fixtures/raw; shared: the full local copies)
EXPECTED = {
    "fixtures": {
        "rows": {"aime24": 6, "aime25": 4, "amc23": 4, "math500": 8, "omni_math": 8},
        "omni_domains": {"algebra": 1, "geometry": 1, "combinatorics": 1, "number_theory": 2, "other": 3},
        "aime24_problems": [(c, n) for c in ("AIME I", "AIME II") for n in (1, 2, 3)],
        # deepscaler components: raw records, malformed, exact duplicates, their sources, bad json rows
        "deepscaler": (4 + 8, 2, 2, {"aime": 4, "math": 4}, (4, 7)),
        "amc_json": (4, 2),  # deepscaler/test/amc.json: 2023 rows kept, other years filtered out
    },
    "shared": {
        "rows": {"aime24": 30, "aime25": 30, "amc23": 40, "math500": 500, "omni_math": 2821},
        "omni_domains": _OMNI_SHARED,
        "aime24_problems": [(c, n) for c in ("AIME I", "AIME II") for n in range(1, 16)],
        "deepscaler": (975 + 7474, 4, 266, {"aime": 975, "math": 7204}, (886, 1009, 5328, 5330)),
        "amc_json": (40, 43),
    },
}


def raw(raw_root: Path, rel: str) -> Path:
    p = raw_root / rel
    assert p.exists(), f"missing raw file {p}"
    return p


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def check_rows(path: Path, data_source: str, split: str) -> list[dict]:
    table = pq.read_table(path)
    assert table.schema.equals(SCHEMA), f"{path}: schema differs\n{table.schema}"
    rows = table.to_pylist()
    for i, r in enumerate(rows):
        assert r["data_source"] == data_source
        assert r["ability"] == "math"
        assert r["reward_model"]["style"] == "rule"
        gt = r["reward_model"]["ground_truth"]
        assert isinstance(gt, str) and gt.strip() == gt and gt
        assert not (gt.startswith("$") and gt.endswith("$") and "$" not in gt[1:-1])  # "$a$ OR $b$" is kept
        assert len(r["prompt"]) == 1 and r["prompt"][0]["role"] == "user"
        q = r["extra_info"]["question"]
        assert q and r["prompt"][0]["content"] == q + "\n" + INSTRUCTION
        assert r["extra_info"]["split"] == split
        assert r["extra_info"]["index"] == i
    return rows


# ----------------------------------------------------------------------------------------------
# answer normalisation
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw_ans, kwargs, expected",
    [
        (27.0, {}, "27"),
        ("27.0", {}, "27.0"),  # strings are kept (only float *values* are converted)
        (27, {}, "27"),
        (0.5, {}, "0.5"),
        (-3.0, {}, "-3"),
        (" 204 \n", {}, "204"),
        ("012", {"strip_leading_zeros": True}, "12"),
        ("000", {"strip_leading_zeros": True}, "0"),
        ("012", {}, "012"),
        ("0.5", {"strip_leading_zeros": True}, "0.5"),
        ("$\\frac{40}{9}$", {}, "\\frac{40}{9}"),
        ("$$x^2$$", {}, "x^2"),
        ("\\(\\boxed{4489}\\)", {}, "4489"),
        ("\\[\n\\boxed{\\frac{\\pi}{4}}\n\\]", {}, "\\frac{\\pi}{4}"),
        ("$\\boxed{n^2-n-1}$", {}, "n^2-n-1"),
        ("The number is \\(\\boxed{6}\\).", {}, "6"),
        ("\x0crac{7}{12}", {}, "\\frac{7}{12}"),
        ("\theta", {}, "\\theta"),
        ("$a$ and $b$", {}, "$a$ and $b$"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", {}, "\\left( 3, \\frac{\\pi}{2} \\right)"),
        (["9.6\n"], {}, "9.6"),
        (["2", "$3$"], {}, "2, 3"),
        ([1.0, ""], {}, "1"),
    ],
)
def test_normalize_answer(raw_ans, kwargs, expected):
    assert normalize_answer(raw_ans, **kwargs) == expected


@pytest.mark.parametrize("bad", [None, "", "   ", [], [None, ""], True, {"a": 1}, float("nan"), object()])
def test_normalize_answer_rejects(bad):
    with pytest.raises(AnswerError):
        normalize_answer(bad)


def test_normalize_integral_floats_property():
    import hypothesis

    st = hypothesis.strategies

    @hypothesis.given(st.integers(min_value=-(10**12), max_value=10**12))
    @hypothesis.settings(max_examples=200, deadline=None)
    def prop(n):
        assert normalize_answer(float(n)) == str(n)
        assert normalize_answer(n) == str(n)
        assert normalize_answer(normalize_answer(float(n))) == str(n)

    prop()


# ----------------------------------------------------------------------------------------------
# Omni-MATH domain mapping
# ----------------------------------------------------------------------------------------------


def test_map_omni_domain_rules():
    m = omni_math.map_omni_domain
    assert m(["Mathematics -> Discrete Mathematics -> Combinatorics"]) == "combinatorics"
    assert m(["Mathematics -> Algebra -> Other", "Mathematics -> Number Theory -> Congruences"]) == "number_theory"
    assert m(["Mathematics -> Geometry -> Plane Geometry", "Mathematics -> Algebra -> X"]) == "geometry"
    assert m(["Mathematics -> Algebra -> Linear Algebra -> Matrices"]) == "algebra"
    assert (
        m(["Mathematics -> Number Theory -> X", "Mathematics -> Discrete Mathematics -> Combinatorics"])
        == "combinatorics"
    )
    assert m(["Mathematics -> Precalculus -> Trigonometric Functions"]) == "other"
    assert m(["Mathematics -> Calculus -> Integral Calculus"]) == "other"
    assert m(["Mathematics -> Applied Mathematics -> Probability"]) == "other"
    assert m(["Mathematics -> Discrete Mathematics -> Graph Theory"]) == "other"
    assert m([]) == "other" and m(None) == "other"
    assert m('["Mathematics -> Geometry -> Solid Geometry"]') == "geometry"


def test_omni_domain_counts_match_sources_md(raw_root, raw_kind):
    path = raw(raw_root, "omni_math_rule/omni_math_rule.jsonl")
    recs = [json.loads(line) for line in path.open()]
    counts = Counter(omni_math.map_omni_domain(r["domain"]) for r in recs)
    assert counts == EXPECTED[raw_kind]["omni_domains"]  # shared: the counts SOURCES.md states


# ----------------------------------------------------------------------------------------------
# building every dataset from the local raw files (built once per session)
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory, raw_root, raw_kind):
    out = tmp_path_factory.mktemp(f"arise_data_{raw_kind}")
    logs = {}
    jobs = [
        (deepscaler, "deepscaler/train_components", "train"),
        (aime24, "aime24_qwen25math/test.jsonl", "eval"),
        (aime25, "aime25/test.jsonl", "eval"),
        (amc23, "amc23_qwen25math/test.jsonl", "eval"),
        (math500, "math500/test.jsonl", "eval"),
        (omni_math, "omni_math_rule/omni_math_rule.jsonl", "eval"),
    ]
    import contextlib
    import io

    for mod, rel, sub in jobs:
        so, se = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
            mod.main(["--local", str(raw(raw_root, rel)), "--out", str(out / sub)])
        logs[mod.DATA_SOURCE] = so.getvalue() + se.getvalue()
    return out, logs


@pytest.mark.parametrize("name", ["aime24", "aime25", "amc23", "math500", "omni_math"])
def test_eval_sets(built, raw_kind, name):
    out, _ = built
    n_rows = EXPECTED[raw_kind]["rows"][name]
    rows = check_rows(out / "eval" / f"{name}.parquet", name, "test")
    assert len(rows) == n_rows
    assert len({r["extra_info"]["question"] for r in rows}) >= n_rows - 5


def test_aime_answers_and_metadata(built, raw_kind):
    out, _ = built
    for name, year in (("aime24", 2024), ("aime25", 2025)):
        rows = read_rows(out / "eval" / f"{name}.parquet")
        for r in rows:
            gt = r["reward_model"]["ground_truth"]
            assert re.fullmatch(r"0|[1-9]\d{0,2}", gt), gt  # integer 0..999 without leading zeros
            assert r["extra_info"]["year"] == year
    a24 = read_rows(out / "eval" / "aime24.parquet")
    got = sorted((r["extra_info"]["contest"], r["extra_info"]["problem_number"]) for r in a24)
    assert got == sorted(EXPECTED[raw_kind]["aime24_problems"])
    assert a24[0]["reward_model"]["ground_truth"] == "204"
    # leading zeros were stripped but the raw value is kept for auditing
    assert any(r["extra_info"]["raw_answer"].startswith("0") for r in a24)


def test_amc_answers_are_integer_strings(built):
    out, _ = built
    rows = read_rows(out / "eval" / "amc23.parquet")
    assert rows[0]["reward_model"]["ground_truth"] == "27"
    assert rows[0]["extra_info"]["raw_answer"] == "27.0"
    assert all(re.fullmatch(r"-?\d+", r["reward_model"]["ground_truth"]) for r in rows)
    assert {r["extra_info"]["year"] for r in rows} == {2023}


def test_amc23_from_deepscaler_amc_json_is_filtered_to_2023(built, raw_root, raw_kind, tmp_path, capsys):
    kept, filtered = EXPECTED[raw_kind]["amc_json"]
    amc23.main(["--local", str(raw(raw_root, "deepscaler/test/amc.json")), "--out", str(tmp_path)])
    rows = check_rows(tmp_path / "amc23.parquet", "amc23", "test")
    assert len(rows) == kept
    assert f"filtered out {filtered} rows" in capsys.readouterr().out
    ref = read_rows(built[0] / "eval" / "amc23.parquet")
    assert sorted(r["reward_model"]["ground_truth"] for r in rows) == sorted(
        r["reward_model"]["ground_truth"] for r in ref
    )


def test_aime25_cross_check_sources_agree(built, raw_root, tmp_path):
    aime25.main(["--local", str(raw(raw_root, "aime25_deepscaler_format/aime-2025.json")), "--out", str(tmp_path)])
    a = [r["reward_model"]["ground_truth"] for r in read_rows(tmp_path / "aime25.parquet")]
    b = [r["reward_model"]["ground_truth"] for r in read_rows(built[0] / "eval" / "aime25.parquet")]
    assert a == b


def test_math500(built):
    rows = read_rows(built[0] / "eval" / "math500.parquet")
    assert rows[0]["reward_model"]["ground_truth"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert rows[0]["extra_info"]["unique_id"] == "test/precalculus/807.json"
    assert rows[0]["extra_info"]["subject"] == "Precalculus" and rows[0]["extra_info"]["level"] == 2


def test_omni_outputs(built, raw_kind):
    out, logs = built
    rows = read_rows(out / "eval" / "omni_math.parquet")
    counts = Counter(r["extra_info"]["domain"] for r in rows)
    assert counts == EXPECTED[raw_kind]["omni_domains"]
    assert all(r["data_source"] == "omni_math" for r in rows)
    for dom in ("algebra", "number_theory", "combinatorics", "geometry"):
        sub = check_rows(out / "eval" / f"omni_math_{dom}.parquet", f"omni_math_{dom}", "test")
        assert len(sub) == counts[dom]
        assert {r["extra_info"]["domain"] for r in sub} == {dom}
    r0 = rows[0]["extra_info"]
    assert isinstance(r0["domain_paths"], list) and isinstance(r0["difficulty"], float) and r0["source"]
    assert "\\frac{7}{12}" in {r["reward_model"]["ground_truth"] for r in rows}  # repaired "\x0crac"
    assert not any("\x0c" in r["reward_model"]["ground_truth"] for r in rows)
    log = logs["omni_math"]
    assert "WARNING" in log and "Omni-MATH-Rule subset" in log
    assert f"{counts['other']} of {len(rows)} rows fall outside" in log


def _expected_deepscaler_components(raw_root: Path):
    recs = []
    for comp in ("aime", "math"):
        recs += json.loads(raw(raw_root, f"deepscaler/train_components/{comp}.json").read_text())
    good = [r for r in recs if isinstance(r["answer"], str) and r["answer"].strip() and r["problem"].strip()]
    return len(recs), len(recs) - len(good), len(good) - len({r["problem"].strip() for r in good})


def test_deepscaler_components(built, raw_root, raw_kind):
    out, logs = built
    n_raw, n_bad, n_dup = _expected_deepscaler_components(raw_root)
    exp_raw, exp_bad, exp_dup, sources, bad_rows = EXPECTED[raw_kind]["deepscaler"]
    assert (n_raw, n_bad, n_dup) == (exp_raw, exp_bad, exp_dup)
    rows = check_rows(out / "train" / "deepscaler.parquet", "deepscaler", "train")
    assert len(rows) == n_raw - n_bad - n_dup
    assert Counter(r["extra_info"]["source"] for r in rows) == sources
    log = logs["deepscaler"]
    assert "NOT the paper's DeepScaleR-Preview set" in log and "MISSING components: amc, omni_math, still" in log
    assert f"dropped {n_dup} exact duplicate problems" in log
    assert f"malformed rows skipped: {n_bad}" in log
    for row_no in bad_rows:
        assert f"math.json row {row_no}:" in log
    aime_rows = [r for r in rows if r["extra_info"]["source"] == "aime"]
    assert max(r["extra_info"]["year"] for r in aime_rows) == 2023  # no AIME 2024/2025 overlap
    assert all(re.fullmatch(r"0|[1-9]\d*", r["reward_model"]["ground_truth"]) for r in aime_rows)


def test_deepscaler_components_flag(raw_root, raw_kind, tmp_path, capsys):
    comp = raw(raw_root, "deepscaler/train_components")
    deepscaler.main(["--components", str(comp), "--out", str(tmp_path), "--no-dedupe"])
    n_raw, n_bad, _dup, _sources, _rows = EXPECTED[raw_kind]["deepscaler"]
    assert pq.ParquetFile(tmp_path / "deepscaler.parquet").metadata.num_rows == n_raw - n_bad
    assert "NOT the paper's" in capsys.readouterr().err


def test_uniform_schema_across_all_outputs(built):
    out, _ = built
    files = sorted(out.glob("*/*.parquet"))
    assert len(files) >= 10
    tables = [pq.read_table(f) for f in files]
    combined = pa.concat_tables(tables)  # raises if any schema differs
    assert combined.schema.equals(SCHEMA)
    # pandas round trip
    import pandas as pd

    df = pd.read_parquet(out / "eval" / "aime24.parquet")
    assert list(df.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert df.iloc[0]["prompt"][0]["role"] == "user"
    assert df.iloc[0]["reward_model"]["ground_truth"] == "204"
    # verl's RLHFDataset concatenates its parquet files with datasets.concatenate_datasets
    try:
        import datasets
    except ImportError:
        return
    ds = [datasets.load_dataset("parquet", data_files=str(f), split="train") for f in files if "eval" in str(f)]
    assert len(datasets.concatenate_datasets(ds)) == sum(len(d) for d in ds)


# ----------------------------------------------------------------------------------------------
# malformed input
# ----------------------------------------------------------------------------------------------


def _write_jsonl(path: Path, lines: list) -> Path:
    with path.open("w") as fh:
        for x in lines:
            fh.write((x if isinstance(x, str) else json.dumps(x)) + "\n")
    return path


def test_bad_rows_jsonl_are_reported_and_skipped(tmp_path, capsys):
    src = _write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"problem": "good one", "answer": "$\\frac12$"},  # row 0
            {"problem": "no answer key"},  # row 1
            {"problem": "null answer", "answer": None},  # row 2
            {"problem": "   ", "answer": "3"},  # row 3
            {"problem": "dict answer", "answer": {"x": 1}},  # row 4
            {"problem": "float answer", "answer": 27.0},  # row 5 (fine)
            "{not json",  # row 6
            {"problem": "list answer", "answer": ["5"]},  # row 7 (fine)
            {"problem": "empty string answer", "answer": ""},  # row 8
            {"problem": 12, "answer": "1"},  # row 9
        ],
    )
    math500.main(["--local", str(src), "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    rows = read_rows(tmp_path / "o" / "math500.parquet")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["\\frac12", "27", "5"]
    assert [r["extra_info"]["source_row"] for r in rows] == [0, 5, 7]
    assert "malformed rows skipped: 7" in out
    for row, reason in [
        (1, "missing answer"),
        (2, "missing answer (null)"),
        (3, "empty problem"),
        (4, "unsupported answer type dict"),
        (6, "invalid JSON"),
        (8, "empty answer"),
        (9, "problem is int"),
    ]:
        assert re.search(rf"bad\.jsonl row {row} \(line {row + 1}\): {re.escape(reason)}", out), (row, out)


def test_bad_rows_parquet_reported(tmp_path, capsys):
    src = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table(
            {"problem": ["ok", "", "ok2", None], "answer": ["1", "2", None, "4"], "domain": [["a"], [], None, []]}
        ),
        src,
    )
    omni_math.main(["--local", str(src), "--out", str(tmp_path / "o")])
    cap = capsys.readouterr()
    assert "bad.parquet row 1: empty problem" in cap.out
    assert "bad.parquet row 2: missing answer (null)" in cap.out
    assert "bad.parquet row 3: missing problem (null)" in cap.out
    assert pq.ParquetFile(tmp_path / "o" / "omni_math.parquet").metadata.num_rows == 1
    assert "expected 4428" in cap.err


def test_on_bad_error_raises(tmp_path):
    src = _write_jsonl(tmp_path / "x.jsonl", [{"problem": "p", "answer": "1"}, {"problem": "q", "answer": None}])
    with pytest.raises(DataPrepError, match=r"x\.jsonl row 1 \(line 2\): missing answer"):
        aime24.main(["--local", str(src), "--out", str(tmp_path / "o"), "--on-bad", "error"])
    assert not (tmp_path / "o" / "aime24.parquet").exists()


def test_missing_column_is_a_clear_error(tmp_path, capsys):
    src = _write_jsonl(tmp_path / "nocol.jsonl", [{"problem": "p", "solution": "s"}])
    with pytest.raises(DataPrepError, match=r"nocol\.jsonl: missing required column 'answer'"):
        amc23.main(["--local", str(src), "--out", str(tmp_path / "o")])
    src2 = _write_jsonl(tmp_path / "nodomain.jsonl", [{"problem": "p", "answer": "1"}])
    assert run_main(omni_math.main, ["--local", str(src2), "--out", str(tmp_path / "o")]) == 2
    assert "nodomain.jsonl: missing required column 'domain'" in capsys.readouterr().err
    src3 = tmp_path / "noprob.parquet"
    pq.write_table(pa.table({"question_text": ["p"], "answer": ["1"]}), src3)
    with pytest.raises(DataPrepError, match=r"noprob\.parquet: missing required column 'problem'"):
        math500.main(["--local", str(src3), "--out", str(tmp_path / "o")])


def test_read_records_folder_and_formats(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text(json.dumps([{"problem": "p1", "answer": 1}]))
    _write_jsonl(d / "b.jsonl", [{"problem": "p2", "answer": "2"}, {"problem": "p3", "answer": "3"}])
    pq.write_table(pa.table({"problem": ["p4"], "answer": ["4"]}), d / "c.parquet")
    (d / "ignored.txt").write_text("x")
    recs = read_records(d)
    assert [r.data["problem"] for r in recs] == ["p1", "p2", "p3", "p4"]
    assert [(Path(r.file).name, r.row) for r in recs] == [
        ("a.json", 0),
        ("b.jsonl", 0),
        ("b.jsonl", 1),
        ("c.parquet", 0),
    ]
    with pytest.raises(DataPrepError, match="input not found"):
        read_records(tmp_path / "nope.jsonl")


# ----------------------------------------------------------------------------------------------
# HF hub path (datasets mocked: no network)
# ----------------------------------------------------------------------------------------------


def test_hf_hub_path_uses_datasets_lazily(tmp_path, monkeypatch):
    calls = []
    rows = [
        {"problem": f"p{y}{i}", "answer": float(i), "url": f"https://aops/{y}_AMC_12A_Problems/Problem_{i}"}
        for y in (2022, 2023)
        for i in range(1, 4)
    ]

    def load_dataset(repo, *args, split=None, **kw):
        calls.append((repo, args, split))
        if repo == "opencompass/AIME2025":  # question/answer columns, one config per contest
            return [{"question": f"q{args[0]}{i}", "answer": f"0{i}"} for i in range(2)]
        return rows

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    amc23.main(["--out", str(tmp_path)])
    assert calls == [("AI-MO/aimo-validation-amc", (), "train")]
    got = read_rows(tmp_path / "amc23.parquet")
    assert [r["reward_model"]["ground_truth"] for r in got] == ["1", "2", "3"]
    assert got[0]["extra_info"]["source_file"] == "hf://AI-MO/aimo-validation-amc:train"
    # several configs are concatenated (opencompass/AIME2025 style)
    calls.clear()
    aime25.main(
        ["--out", str(tmp_path), "--hf-repo", "opencompass/AIME2025", "--hf-config", "I,II", "--hf-split", "test"]
    )
    assert calls == [("opencompass/AIME2025", ("I",), "test"), ("opencompass/AIME2025", ("II",), "test")]
    got = read_rows(tmp_path / "aime25.parquet")
    assert [r["extra_info"]["question"] for r in got] == ["qI0", "qI1", "qII0", "qII1"]
    assert [r["reward_model"]["ground_truth"] for r in got] == ["0", "1", "0", "1"]


# ----------------------------------------------------------------------------------------------
# CLI / shell
# ----------------------------------------------------------------------------------------------


def test_modules_do_not_import_heavy_deps():
    code = (
        "import sys; import recipe.arise.data_prep.common, recipe.arise.data_prep.deepscaler, "
        "recipe.arise.data_prep.aime24, recipe.arise.data_prep.aime25, "
        "recipe.arise.data_prep.amc23, recipe.arise.data_prep.omni_math, recipe.arise.data_prep.math500; "
        "bad = [m for m in ('torch', 'verl', 'datasets', 'transformers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


def test_cli_module_invocation(raw_root, tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipe.arise.data_prep.aime25",
            "--local",
            str(raw(raw_root, "aime25/test.jsonl")),
            "--out",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and (tmp_path / "aime25.parquet").exists()
    bad = _write_jsonl(tmp_path / "nocol.jsonl", [{"problem": "p"}])
    r = subprocess.run(
        [sys.executable, "-m", "recipe.arise.data_prep.aime25", "--local", str(bad), "--out", str(tmp_path / "o")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "error:" in r.stderr and "missing required column 'answer'" in r.stderr


def test_prepare_all_local(raw_root, raw_kind, tmp_path):
    env = dict(os.environ, DATA_DIR=str(tmp_path / "arise"), PYTHON=sys.executable)
    r = subprocess.run(
        ["bash", str(REPO_ROOT / "data_prep" / "prepare_all.sh"), "--local", str(raw_root)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    exp = EXPECTED[raw_kind]
    n_raw, n_bad, n_dup, _sources, _rows = exp["deepscaler"]
    expected = {"train/deepscaler.parquet": n_raw - n_bad - n_dup}
    expected.update({f"eval/{name}.parquet": n for name, n in exp["rows"].items()})
    expected.update({f"eval/omni_math_{d}.parquet": exp["omni_domains"][d] for d in omni_math.DOMAINS})
    for rel, n in expected.items():
        p = tmp_path / "arise" / rel
        assert pq.ParquetFile(p).metadata.num_rows == n, rel
        assert re.search(rf"^\s+{n}\s+{re.escape(str(p))}$", r.stdout, re.M), rel
    assert not list((tmp_path / "arise").glob("*/.*tmp"))  # atomic writes leave no temp files


# ----------------------------------------------------------------------------------------------
# verl
# ----------------------------------------------------------------------------------------------


def test_parquet_loads_with_verl_rlhf_dataset(built, raw_kind, tiny_chat_tokenizer):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset  # verl is required: an import error fails

    out, _ = built
    files = [str(out / "eval" / f"{n}.parquet") for n in ("aime24", "aime25", "amc23", "omni_math_geometry")]
    cfg = OmegaConf.create(
        {
            "cache_dir": str(out / "verl_cache"),
            "prompt_key": "prompt",
            "max_prompt_length": 4096,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "truncation": "error",
            "return_raw_chat": True,
        }
    )
    ds = RLHFDataset(data_files=files, tokenizer=tiny_chat_tokenizer, config=cfg, processor=None)
    exp = EXPECTED[raw_kind]
    assert len(ds) == sum(exp["rows"][n] for n in ("aime24", "aime25", "amc23")) + exp["omni_domains"]["geometry"]
    item = ds[0]
    assert item["data_source"] == "aime24"
    assert item["raw_prompt"][0]["role"] == "user" and item["raw_prompt"][0]["content"].endswith(INSTRUCTION)
    assert item["reward_model"]["ground_truth"] == "204"
    assert ds[len(ds) - 1]["data_source"] == "omni_math_geometry"
