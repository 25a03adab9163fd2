"""Tests of the analysis tools: ``recipe.arise.tools.inspect_run`` (library table) and ``recipe.arise.tools.report``
(HTML + PNG report), on small synthetic runs built here.  The two "smoke run" tests take a real run
folder instead when ``ARISE_SMOKE_DIR`` names one (e.g. the OUT_DIR of run_scripts/cpu_smoke_arise.sh)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import Provenance
from recipe.arise.core.library_log import read_log, write_step_log
from recipe.arise.core.skill import SkillDoc
from recipe.arise.tools import inspect_run as insp
from recipe.arise.tools import report as rep

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TYPES = ("algebra", "geometry", "number_theory", "combinatorics")
LONG_INSIGHT = "Write every quantity in terms of one unknown and reduce it all to a single equation"


def doc(name: str, ptype: str = "algebra", insight: str | None = None) -> SkillDoc:
    return SkillDoc(
        name, ptype, insight or f"Insight for {name.replace('_', ' ')}", ("First do this", "Then that"), "Plug in"
    ).validate()


def build_run(
    root: Path, steps: int = 6, phase1: int = 3, metrics_keys: tuple[str, ...] | None = None, query: str | None = None
) -> dict:
    """A run folder shaped like the trainer's output: checkpoints/global_step_{2,4,6}/arise/
    library.parquet, checkpoints/arise/library_log/step_*.parquet and metrics.jsonl. With ``query``
    the new skills are distilled from it (provenance "json", query group uid = ``query``)."""
    seeds = [doc("seed_setup", "algebra", LONG_INSIGHT), doc("seed_casework", "combinatorics")]
    lib = SkillLibrary(cache_capacity=4, reservoir_capacity=5, seed_skills=seeds)
    ckpt = root / "checkpoints"
    log_root = ckpt / "arise"
    lines = []
    saved = {}
    for step in range(1, steps + 1):
        phase = 1 if step <= phase1 else 2
        new = [doc(f"skill_{step}_{j}", TYPES[(step + j) % len(TYPES)]) for j in range(2)]
        if step > 1:
            new.append(doc("skill_1_0", "algebra"))  # a duplicate every step after the first
        if query is not None:
            new = [(d, Provenance("json", step, uid=query, query=query, rewards=(2.0, 1.0))) for d in new]
        obs = []
        if phase == 2:  # used skills: the first cache entry does well, the last one badly
            ids = lib.cache_ids()
            obs = [(ids[0], 2.0)] * 3 + [(ids[-1], 0.0)] + [(ids[1], 1.0)]
        rewards = [r for _, r in obs] + [0.0, 1.0, 1.0]
        events = lib.step(obs, new, step=step, global_rewards=rewards)
        write_step_log(log_root, step, phase, events, lib)
        if step % 2 == 0:
            p = ckpt / f"global_step_{step}" / "arise" / "library.parquet"
            lib.save(p)
            saved[step] = SkillLibrary.load(p)
        data = {
            "arise/phase": float(phase),
            "arise/skill_use_rate": 0.0 if phase == 1 else 0.5 + 0.1 * (step - phase1),
            "arise/gate_pass_rate": 0.0 if phase == 1 else 0.6,
            "arise/frac_reward_2": 0.0 if phase == 1 else 0.2,
            "arise/acc": 0.3 + 0.05 * step,
            "arise/reward_mean": 0.3 + 0.08 * step,
            "arise/summary_parse_rate": 0.9,
            "actor/pg_loss": -0.1,
        }
        if metrics_keys is not None:
            data = {k: v for k, v in data.items() if k in metrics_keys}
        lines.append(json.dumps({"step": step, "data": data}))
    (root / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return {"root": root, "lib": lib, "saved": saved, "log_root": log_root}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_run(tmp_path_factory.mktemp("run"))


def cli(capsys, *argv) -> tuple[int, str, str]:
    rc = insp.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def json_rows(capsys, *argv) -> list[dict]:
    rc, out, err = cli(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)["rows"]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def assert_valid_png(path: Path, min_bytes: int = 8_000) -> None:
    import matplotlib.image as mpimg

    w, h = png_size(path)
    assert w >= 400 and h >= 250, (path, w, h)
    assert path.stat().st_size >= min_bytes, (path, path.stat().st_size)
    img = mpimg.imread(path)  # decodes the whole image
    assert img.shape[0] == h and img.shape[1] == w
    assert float(img[..., :3].std()) > 0.02  # not a blank canvas


# ----------------------------------------------------------------------------- inspect


def test_resolve_library_path_variants(run):
    root = run["root"]
    latest = root / "checkpoints" / "global_step_6" / "arise" / "library.parquet"
    assert insp.resolve_library_path(latest) == latest
    assert (
        insp.resolve_library_path(root / "checkpoints" / "global_step_4")
        == root / "checkpoints" / "global_step_4" / "arise" / "library.parquet"
    )
    assert insp.resolve_library_path(root / "checkpoints") == latest  # latest global_step_N
    assert insp.resolve_library_path(root) == latest  # run folder -> checkpoints/
    assert (
        insp.resolve_library_path(root / "checkpoints" / "global_step_2" / "arise")
        == root / "checkpoints" / "global_step_2" / "arise" / "library.parquet"
    )


def test_resolve_ignores_temp_files_and_unfinished_checkpoints(tmp_path):
    r = build_run(tmp_path, steps=4)
    ckpt = tmp_path / "checkpoints"
    good = ckpt / "global_step_4" / "arise" / "library.parquet"
    # an interrupted save leaves a hidden temp file next to the library, and a newer checkpoint
    # folder that only holds a temp file: neither may be taken for the library
    (good.parent / ".library.parquet.abcd1234.tmp").write_bytes(b"PAR1 partial")
    (ckpt / "global_step_6" / "arise").mkdir(parents=True)
    (ckpt / "global_step_6" / "arise" / ".library.parquet.zz.tmp").write_bytes(b"PAR1")
    assert insp.resolve_library_path(ckpt) == good
    assert insp.load_library(ckpt)[1] == r["saved"][4]


def test_a_checkpoints_root_resolves_to_the_step_verl_would_resume(tmp_path):
    """After a kill during a save, global_step_6 holds a library but verl's tracker still says 4:
    inspect shows the library a resume would load, not the interrupted save's."""
    r = build_run(tmp_path, steps=6)
    ckpt = tmp_path / "checkpoints"
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    assert insp.resolve_library_path(ckpt) == ckpt / "global_step_4" / "arise" / "library.parquet"
    assert insp.load_library(tmp_path)[1] == r["saved"][4]
    (ckpt / "latest_checkpointed_iteration.txt").write_text("6")
    assert insp.resolve_library_path(ckpt) == ckpt / "global_step_6" / "arise" / "library.parquet"


def test_a_resume_sets_aside_the_step_logs_past_its_checkpoint(tmp_path):
    from recipe.arise.core.library_log import set_aside_steps_after

    build_run(tmp_path, steps=6)
    log_root = tmp_path / "checkpoints" / "arise"
    moved = set_aside_steps_after(log_root, 4)
    assert sorted(p.name for p in moved) == ["step_00000005.parquet", "step_00000006.parquet"]
    assert all(p.is_file() for p in moved)  # kept, not deleted
    assert int(read_log(log_root).step.max()) == 4
    assert set_aside_steps_after(log_root, 4) == []


def test_table_lists_every_entry_in_library_order(run, capsys):
    lib = run["saved"][6]
    rc, out, err = cli(capsys, run["root"] / "checkpoints")
    assert rc == 0 and err == ""
    assert "global_step_6" in out and f"cache {len(lib.cache)}/4" in out and f"reservoir {len(lib.reservoir)}/5" in out
    header = next(line for line in out.splitlines() if line.startswith("tier"))
    for col in ("id", "name", "type", "utility", "uses", "age", "IG", "key insight"):
        assert col in header
    body = [line for line in out.splitlines() if line.startswith(("cache ", "reservoir "))]
    assert [line.split()[1] for line in body] == lib.cache_ids() + [e.skill_id for e in lib.reservoir]
    for e in lib.entries():
        line = next(b for b in body if b.split()[1] == e.skill_id)
        assert e.doc.skill_name in line and f"{e.utility:.4f}" in line


def test_json_rows_match_library(run, capsys):
    lib = run["saved"][6]
    rows = json_rows(capsys, run["root"])
    assert [r["id"] for r in rows] == [e.skill_id for e in lib.entries()]
    assert [r["tier"] for r in rows] == ["cache"] * len(lib.cache) + ["reservoir"] * len(lib.reservoir)
    assert lib.last_step == 6
    for r in rows:
        e = lib.get(r["id"])
        assert r["utility"] == e.utility and r["uses"] == e.usage_count
        assert r["age"] == 6 - e.created_step
        assert r["ig"] == lib.ig_proxy(e.skill_id)
        assert r["doc"] == e.doc.to_json() and r["name"] == e.doc.skill_name and r["type"] == e.doc.problem_type
    assert any(r["ig"] is not None for r in rows) and any(r["uses"] > 0 for r in rows)


def test_age_falls_back_to_max_updated_step(run):
    lib = SkillLibrary.from_state_dict(run["saved"][6].state_dict())
    lib.last_step = None
    ref = max(max(e.updated_step, e.created_step) for e in lib.entries())
    assert insp.library_reference_step(lib) == ref
    assert {r["id"]: r["age"] for r in insp.library_rows(lib)} == {
        e.skill_id: ref - e.created_step for e in lib.entries()
    }


@pytest.mark.parametrize(
    "sort, key, reverse",
    [("utility", "utility", True), ("uses", "uses", True), ("age", "age", True), ("name", "name", False)],
)
def test_sorting(run, capsys, sort, key, reverse):
    rows = json_rows(capsys, run["root"], "--sort", sort)
    values = [r[key] for r in rows]
    assert values == sorted(values, reverse=reverse)
    assert len(rows) == len(run["saved"][6])


def test_sort_ig_puts_unknown_last(run, capsys):
    rows = json_rows(capsys, run["root"], "--sort", "ig")
    known = [r["ig"] for r in rows if r["ig"] is not None]
    assert known and known == sorted(known, reverse=True)
    n = len(known)
    assert all(r["ig"] is None for r in rows[n:]) and all(r["ig"] is not None for r in rows[:n])


def test_filters_and_top(run, capsys):
    lib = run["saved"][6]
    assert [r["id"] for r in json_rows(capsys, run["root"], "--tier", "cache")] == lib.cache_ids()
    assert [r["id"] for r in json_rows(capsys, run["root"], "--tier", "reservoir")] == [
        e.skill_id for e in lib.reservoir
    ]
    alg = json_rows(capsys, run["root"], "--type", "algebra")
    assert alg and {r["id"] for r in alg} == {e.skill_id for e in lib.entries() if e.doc.problem_type == "algebra"}
    named = json_rows(capsys, run["root"], "--name", "SKILL_5")
    assert named and all("skill_5" in r["name"] for r in named)
    assert {r["id"] for r in named} == {e.skill_id for e in lib.entries() if "skill_5" in e.doc.skill_name}
    top = json_rows(capsys, run["root"], "--sort", "utility", "--top", "2")
    best = sorted(lib.entries(), key=lambda e: -e.utility)[:2]
    assert [r["utility"] for r in top] == [e.utility for e in best]
    rc, out, _ = cli(capsys, run["root"], "--name", "no_such_skill")
    assert rc == 0 and "(no entries match)" in out


def test_truncated_vs_full_docs(tmp_path, capsys):
    r = build_run(tmp_path, steps=2)
    p = tmp_path / "checkpoints" / "global_step_2"
    rc, out, _ = cli(capsys, p)
    assert rc == 0 and LONG_INSIGHT not in out and LONG_INSIGHT[:40] in out and "..." in out
    rc, out, _ = cli(capsys, p, "--full")
    assert rc == 0 and LONG_INSIGHT in out
    seed = r["saved"][2].get("s000001")
    assert f"doc:    {seed.doc.to_json()}" in out and '"First do this"' in out


def test_errors_exit_2_naming_the_path(tmp_path, capsys):
    missing = tmp_path / "nope" / "library.parquet"
    rc, out, err = cli(capsys, missing)
    assert rc == 2 and str(missing) in err and out == ""
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file")
    rc, _, err = cli(capsys, bad)
    assert rc == 2 and str(bad) in err and "parquet" in err
    empty_ckpt = tmp_path / "ckpt" / "global_step_3"
    empty_ckpt.mkdir(parents=True)
    rc, _, err = cli(capsys, tmp_path / "ckpt")
    assert rc == 2 and "global_step_3" in err
    rc, _, err = cli(capsys, tmp_path / "ckpt" / "global_step_3")
    assert rc == 2 and str(empty_ckpt) in err
    # a library truncated in a checkpoint folder: the message names the file inside
    r = build_run(tmp_path / "run", steps=2)
    lp = tmp_path / "run" / "checkpoints" / "global_step_2" / "arise" / "library.parquet"
    lp.write_bytes(lp.read_bytes()[: lp.stat().st_size // 2])
    rc, _, err = cli(capsys, tmp_path / "run" / "checkpoints")
    assert rc == 2 and str(lp) in err
    assert r["lib"] is not None


def test_module_entry_point(run):
    out = subprocess.run(
        [sys.executable, "-m", "recipe.arise.tools.inspect_run", str(run["root"]), "--sort", "utility", "--top", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    best = max(run["saved"][6].entries(), key=lambda e: (e.utility, -e.created_step))
    assert best.skill_id in out.stdout and best.doc.skill_name in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "recipe.arise.tools.inspect_run", "/nonexistent/x.parquet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "/nonexistent/x.parquet" in bad.stderr


# ------------------------------------------------------------------------------ report


@pytest.fixture(scope="module")
def report(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return rep.build_report(run["root"], out)


def test_report_writes_valid_pngs_and_html(report):
    expected = {
        "library_size",
        "events",
        "rates",
        "coevolution",
        "utility_distribution",
        "utility_trajectories",
        "utility_vs_uplift",
        "html",
    }
    assert set(report) == expected
    for name, path in report.items():
        assert path.is_file()
        if name != "html":
            assert path.suffix == ".png"
            assert_valid_png(path)
    html = report["html"].read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == len(expected) - 1  # self-contained
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")


def test_report_content(run, report):
    html = report["html"].read_text(encoding="utf-8")
    lib = run["saved"][6]
    top = max(lib.entries(), key=lambda e: (e.utility, e.skill_id))
    assert top.doc.skill_name in html and top.skill_id in html and top.doc.key_insight in html
    assert "First do this" in html  # the method steps of the documents
    # the top-skills table lists the final entries by utility, with the IG proxy of the checkpoint
    table = html[html.index("Top skills by utility") :]
    positions = sorted((table.index(f"<code>{e.skill_id}</code>"), e.utility) for e in lib.entries())
    order = [u for _, u in positions]
    assert order == sorted(order, reverse=True) and len(order) == len(lib)
    assert f"{lib.ig_proxy(top.skill_id):.3f}" in table
    # phase boundary from arise/phase (steps 3 -> 4), totals from the log
    assert "between steps 3 and 4" in html and "x = 3.5" in html
    df = rep.read_library_log(rep.find_log_dir(run["root"]))
    n_dup = int((df["event"] == "duplicate").sum())
    assert n_dup >= 3 and f"duplicates dropped: {n_dup}" in html
    assert f"new skills: {int((df['event'] == 'added').sum())}" in html
    missing = html[html.index("metric keys missing") :].split("</tr>")[0]
    assert "arise/summary_fallback_rate" in missing and "arise/skill_use_rate" not in missing


def test_phase_boundary_sources(run):
    metrics, _ = rep.read_metrics(run["root"] / "metrics.jsonl")
    assert rep.phase_boundary(metrics)[0] == 3.5
    assert rep.phase_boundary(metrics, phase1_steps=2)[0] == 2.5
    df = rep.read_library_log(rep.find_log_dir(run["root"]))
    assert rep.phase_boundary({}, df)[0] == 3.5  # from the log's phase column
    assert rep.phase_boundary({1: {"arise/phase": 2.0}, 2: {"arise/phase": 2.0}})[0] is None


def test_report_without_metrics_and_with_partial_metrics(tmp_path):
    r = build_run(tmp_path / "a", steps=4, phase1=2)
    (tmp_path / "a" / "metrics.jsonl").unlink()
    out = rep.build_report(tmp_path / "a", tmp_path / "out_a")
    assert "rates" not in out and "coevolution" not in out
    for key in ("library_size", "events", "utility_distribution", "utility_trajectories"):
        assert_valid_png(out[key])
    html = out["html"].read_text(encoding="utf-8")
    assert "none found" in html and "not available" in html
    assert "x = 2.5" in html  # boundary from the log's phase column
    assert max(r["lib"].entries(), key=lambda e: e.utility).doc.skill_name in html

    build_run(tmp_path / "b", steps=4, phase1=2, metrics_keys=("arise/phase", "arise/skill_use_rate"))
    with open(tmp_path / "b" / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "data": {"arise/skill_use')  # a torn last line
    out = rep.build_report(tmp_path / "b", tmp_path / "out_b", phase1_steps=1)
    assert "rates" in out and "coevolution" not in out
    assert_valid_png(out["rates"])
    html = out["html"].read_text(encoding="utf-8")
    assert "arise/gate_pass_rate" in html[html.index("metric keys missing") :]
    assert "line 5: skipped" in html and "x = 1.5" in html


def test_report_log_dir_options_and_errors(run, tmp_path, capsys):
    log_root = run["log_root"]
    a = rep.build_report(
        tmp_path / "elsewhere", tmp_path / "o1", metrics=run["root"] / "metrics.jsonl", log_dir=log_root
    )
    b = rep.build_report(tmp_path / "elsewhere", tmp_path / "o2", log_dir=log_root / "library_log")
    assert a["html"].is_file() and b["html"].is_file() and "rates" in a and "rates" not in b
    # no library log at all: a clear error, exit status 2 from the CLI
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(rep.ReportError, match="no library log"):
        rep.build_report(empty)
    assert rep.main([str(empty)]) == 2
    assert "no library log" in capsys.readouterr().err
    assert rep.main([str(run["root"]), "--metrics", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    # the CLI writes into RUN_DIR/report by default; temp files of the log writer are ignored
    run_copy = tmp_path / "copy"
    shutil.copytree(run["root"], run_copy)
    (run_copy / "checkpoints" / "arise" / "library_log" / ".tmp_abc.parquet").write_bytes(b"partial")
    assert rep.main([str(run_copy)]) == 0
    printed = capsys.readouterr().out
    assert str(run_copy / "report" / "report.html") in printed
    assert (run_copy / "report" / "library_size.png").is_file()


# Model text that would add markup or template code if the page were built without escaping, or
# if a value were ever rendered as template source ({{ 'inj' ~ 'ected' }} would print "injected").
EVIL = (
    "<script>alert(1)</script></table></td><b>\"double\" & 'single'</b> {{ 7*7 }} {{ 'inj' ~ 'ected' }}"
    " {% if true %}TPL{% endif %} {# c #}"
)


class _Page(HTMLParser):
    """The element sequence (tags and attributes) and the text of a page."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, tuple(sorted((k, v) for k, v in attrs if k not in ("src", "href", "id")))))

    def handle_endtag(self, tag):
        self.elements.append(("/" + tag,))

    def handle_data(self, data):
        self.text.append(data)


def _report_with_model_text(root: Path, out: Path, text: str) -> str:
    """A report of a run whose skill documents, names and source questions are all ``text``."""
    import pandas as pd

    build_run(root, steps=4, phase1=2, query=text)
    fields = {"skill_name": text, "problem_type": text, "key_insight": text, "method": [text, text], "check": text}
    for f in sorted((root / "checkpoints" / "arise" / "library_log").glob("step_*.parquet")):
        df = pd.read_parquet(f)  # the log's text is the model's; the report must not trust it to be valid
        df["skill_name"] = df["problem_type"] = text
        df["doc"] = json.dumps(fields)
        df.to_parquet(f)
    page = rep.build_report(root, out)["html"].read_text(encoding="utf-8")
    return re.sub(r"base64,[A-Za-z0-9+/=]*", "base64,", page)  # the PNGs are not under test here


def test_model_text_cannot_inject_markup_or_template_code(tmp_path):
    plain = _report_with_model_text(tmp_path / "plain", tmp_path / "out_plain", "plain text")
    evil = _report_with_model_text(tmp_path / "evil", tmp_path / "out_evil", EVIL)
    # the same elements as with harmless text: nothing added, nothing closed early
    assert _Page(evil).elements == _Page(plain).elements
    assert "<script" not in evil and EVIL not in evil
    # ...and the text reads back as the model wrote it, once per cell: name, type, insight, two steps and
    # check per table row; name, query group and question per generated skill in the provenance list
    top_table = plain[plain.index("Top skills by utility") :]
    rows, sources = top_table.count("<tr>") - 1, plain.count("<li id=")  # less the table's header
    assert rows >= 5 and sources >= 5
    assert "".join(_Page(evil).text).count(EVIL) == 6 * rows + 3 * sources
    assert "injected" not in evil  # values are data, never template source


# ----------------------------------------------------------------- a whole run folder


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    """A run folder as the trainer leaves it: $ARISE_SMOKE_DIR when set, else a synthetic one
    (8 steps, Phase II from step 5, checkpoints every 2 steps)."""
    env = os.environ.get("ARISE_SMOKE_DIR")
    if env:
        root = Path(env)
        assert (root / "checkpoints" / "arise" / "library_log").is_dir(), f"ARISE_SMOKE_DIR={env}: no library log"
        return root
    root = tmp_path_factory.mktemp("smoke")
    build_run(root, steps=8, phase1=4)
    return root


def test_smoke_run_inspect(smoke, capsys):
    steps = sorted(
        int(p.name.split("_")[-1])
        for p in (smoke / "checkpoints").glob("global_step_*")
        if (p / "arise" / "library.parquet").is_file()
    )
    lib = SkillLibrary.load(smoke / "checkpoints" / f"global_step_{steps[-1]}" / "arise" / "library.parquet")
    rows = json_rows(capsys, smoke / "checkpoints", "--tier", "cache")
    assert [r["id"] for r in rows] == lib.cache_ids()
    rc, out, _ = cli(capsys, smoke)
    assert rc == 0 and all(sid in out for sid in lib.cache_ids())


def test_smoke_run_report(smoke, tmp_path):
    out = rep.build_report(smoke, tmp_path)  # never writes into the run folder
    assert {"library_size", "events", "rates", "utility_distribution", "html"} <= set(out)
    for name, path in out.items():
        assert tmp_path in path.parents
        if name != "html":
            assert_valid_png(path)
    html = out["html"].read_text(encoding="utf-8")
    df = rep.read_library_log(rep.find_log_dir(smoke))
    last = int(df["step"].max())
    final = df[(df["event"] == "state") & (df["step"] == last)]
    top = final.sort_values("utility", ascending=False).iloc[0]
    assert str(top["skill_name"]) in html and str(top["skill_id"]) in html
    metrics, _ = rep.read_metrics(smoke / "metrics.jsonl")
    phases = [metrics[s].get("arise/phase") for s in sorted(metrics)]
    if 1.0 in phases and 2.0 in phases:
        assert "Phase I/II boundary</th><td>x = " in html


def _harmful_top_skill_library():
    """A cache whose highest-utility skill measured harmful beside the control arm (the README's CPU run:
    utility 0.86, uplift -0.154 +- 0.064), and a low-utility one equally harmful (not flagged)."""
    from recipe.arise.core.library_entry import Contrast

    lib = SkillLibrary(seed_skills=[doc(f"skill_{i}") for i in range(4)])
    top, mid1, mid2, low = lib.cache_ids()
    for sid, u in ((top, 0.86), (mid1, 0.5), (mid2, 0.4), (low, 0.01)):
        lib.get(sid).utility = u
    for sid in (top, low):
        for _ in range(12):  # 12 groups of 6 aided (3 right) vs 2 control (both right)
            assert lib.get(sid).add_contrast(Contrast(sid, 6, 3, 2, 2))
    return lib, top


def test_inspect_and_report_flag_a_top_utility_skill_measured_harmful(tmp_path, capsys):
    from recipe.arise.core.library_entry import utility_uplift_disagreement
    from recipe.arise.tools.report_figures import _disagreement_note

    lib, top = _harmful_top_skill_library()
    assert utility_uplift_disagreement(lib.cache) == [top]  # the low-utility harmful one is not in the top half
    lib.save(tmp_path / "library.parquet")
    rc, out, _ = cli(capsys, tmp_path / "library.parquet")
    assert rc == 0 and "utility vs uplift: 1 cache skill(s)" in out and top in out
    flagged = [line for line in out.splitlines() if line.split()[:2] == ["cache", top]]
    assert flagged and "!" in flagged[0]
    rows = json_rows(capsys, tmp_path / "library.parquet")
    assert [r["id"] for r in rows if r["utility_uplift_disagree"]] == [top]
    assert top in _disagreement_note(lib)
    build_run(tmp_path / "run", steps=2)
    html = rep.build_report(tmp_path / "run", tmp_path / "out")["html"].read_text(encoding="utf-8")
    assert "utility vs uplift" in html and "entirely below 0" in html
