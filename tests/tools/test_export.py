"""The evolved library as a file: ``python -m recipe.arise.tools.inspect_run RUN --export skills.jsonl``, read
back by ``arise.library.load_from``; and evaluation with ``LIBRARY=final|seeds|none|<file>``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import Contrast, Provenance
from recipe.arise.core.library_jsonl import export_rows, library_from_jsonl, load_library_file
from recipe.arise.core.library_store import LibraryFormatError
from recipe.arise.core.skill import SkillDoc, load_seed_skills
from recipe.arise.tools import inspect_run as insp

REPO = Path(__file__).resolve().parents[2]


def _doc(i: int) -> SkillDoc:
    return SkillDoc(f"skill_{i}", "algebra", f"Insight number {i}", ("First do this", "Then that"), "Plug in")


def _evolved_library() -> SkillLibrary:
    lib = SkillLibrary(cache_capacity=4, reservoir_capacity=6, seed_skills=load_seed_skills()[:2], seed_trial_uses=0)
    for step in range(1, 7):
        new = [
            (_doc(step * 10 + j), Provenance("json", step, f"uid-{step}", f"What is {step}+{j}?", (2.0, 1.0)))
            for j in range(2)
        ]
        ids = lib.cache_ids()
        obs = [(ids[0], 2.0), (ids[-1], 0.0), (ids[1], 1.0)]
        contrasts = [Contrast(ids[0], 3, 3, 2, 1), Contrast(ids[1], 3, 1, 2, 1)]
        lib.step(obs, new, step, global_rewards=[2.0, 0.0, 1.0, 1.0], contrasts=contrasts)
    lib.cache[0].ig_exact, lib.cache[0].ig_step = 0.75, 6
    return lib


def _entry_state(lib: SkillLibrary) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "position"} for r in lib.to_records()]


def test_export_then_load_from_round_trip(tmp_path, capsys):
    lib = _evolved_library()
    lib.save(tmp_path / "library.parquet")
    out = tmp_path / "skills.jsonl"
    assert insp.main([str(tmp_path / "library.parquet"), "--export", str(out)]) == 0
    assert f"wrote {len(lib)} skill(s)" in capsys.readouterr().out
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == len(lib)
    first = lines[0]
    e = lib.cache[0]
    assert first["skill"] == e.doc.to_dict() and first["utility"] == e.utility and first["uses"] == e.usage_count
    assert first["uplift"] == pytest.approx(e.uplift) and first["uplift_se"] == pytest.approx(e.uplift_se)
    assert first["provenance"]["origin"] == e.origin and first["ig_exact"] == 0.75
    assert first["ig_proxy"] == pytest.approx(lib.ig_proxy(e.skill_id))
    # what arise.library.load_from does with it: the same entries under the run's settings
    back, changes, ev = load_library_file(out, cache_capacity=4, reservoir_capacity=6, seed_trial_uses=0)
    assert changes == {} and ev.evicted == [] and ev.overflow == []
    assert _entry_state(back) == _entry_state(lib)
    assert back.next_id > max(int(x.skill_id[1:]) for x in lib.entries())
    # and it keeps working: the next skill gets a fresh id, the stats go on accumulating
    ev = back.step([(back.cache_ids()[0], 2.0)], [_doc(999)], 7)
    assert ev.added and ev.added[0] not in {x.skill_id for x in lib.entries()}


def test_load_from_a_jsonl_fits_the_runs_capacities(tmp_path):
    lib = _evolved_library()
    path = tmp_path / "skills.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in export_rows(lib)))
    small, ev = library_from_jsonl(path, cache_capacity=2, reservoir_capacity=3, rank_by="utility")
    assert len(small.cache) == 2 and len(small.reservoir) == 3
    lowest_two = sorted(lib.cache, key=lambda e: (e.utility, e.usage_count, e.created_step, e.skill_id))[:2]
    assert set(ev.evicted) == {e.skill_id for e in lowest_two}
    assert len(ev.overflow) == len(lib.reservoir) + 2 - 3


def test_bare_skill_documents_load_as_new_skills(tmp_path):
    path = tmp_path / "seeds.jsonl"
    path.write_text("\n".join(json.dumps(d.to_dict()) for d in load_seed_skills()) + "\n\n")
    lib, _ = library_from_jsonl(path)
    assert lib.cache_docs() == load_seed_skills() and lib.cache_ids()[0] == "s000001"
    assert all(e.utility == 0.0 and e.origin == "external" for e in lib.cache)


@pytest.mark.parametrize(
    "line,match",
    [
        ("{not json", r"line 2: not valid JSON"),
        ("[1, 2]", r"line 2: not a JSON object"),
        ('{"id": "s9"}', r"line 2: field 'skill': missing"),
        ('{"skill": {"skill_name": "a"}}', r"line 2: field 'skill.problem_type': missing"),
        ('{"skill": SKILL, "utility": "high"}', r"line 2: field 'utility': must be a finite number"),
        ('{"skill": SKILL, "uses": -1}', r"line 2: field 'uses': must be an integer >= 0"),
        ('{"skill": SKILL, "tier": "attic"}', r"line 2: field 'tier'"),
        ('{"skill": SKILL, "utilty": 1.0}', r"line 2: field 'utilty': unknown field"),
        ('{"skill": SKILL, "counts": {"uplift_n": 1.5}}', r"line 2: field 'counts.uplift_n'"),
        ('{"skill": SKILL, "provenance": {"origin": "dream"}}', r"line 2: field 'provenance.origin'"),
        ('{"skill": SKILL, "id": "s000001"}', r"line 2: field 'id': 's000001' is also the id of line 1"),
        ('{"skill": FIRST}', r"line 2: field 'skill': the same skill as line 1"),
    ],
)
def test_bad_lines_name_the_file_the_line_and_the_field(tmp_path, line, match):
    first = _doc(1).to_dict()
    line = line.replace("SKILL", json.dumps(_doc(2).to_dict())).replace("FIRST", json.dumps(first))
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"skill": first, "id": "s000001"}) + "\n" + line + "\n")
    with pytest.raises(LibraryFormatError, match=r"bad\.jsonl: " + match):
        library_from_jsonl(path)


def test_export_honours_the_selection_and_inspect_reads_a_jsonl(tmp_path, capsys):
    lib = _evolved_library()
    lib.save(tmp_path / "library.parquet")
    out = tmp_path / "best.jsonl"
    assert insp.main([str(tmp_path / "library.parquet"), "--sort", "utility", "--top", "2", "--export", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    best = sorted(lib.entries(), key=lambda e: -e.utility)[:2]
    assert {x["id"] for x in lines} == {e.skill_id for e in best}
    capsys.readouterr()
    assert insp.main([str(out), "--json"]) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)["rows"]} == {e.skill_id for e in best}
    assert insp.main([str(tmp_path / "missing"), "--export", str(out)]) == 2


# ------------------------------------------------------------------ evaluation: LIBRARY=...


EVAL_ENV = {"MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507", "PYTHON": sys.executable, "PRINT_OVERRIDES": "1"}


def _eval(env: dict) -> subprocess.CompletedProcess:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "USER")}
    return subprocess.run(
        ["bash", str(REPO / "run_scripts" / "eval_arise.sh")],
        env={**keep, **EVAL_ENV, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _library_keys(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        for key in (
            "arise.enable",
            "arise.library.from_checkpoint",
            "arise.library.load_from",
            "trainer.experiment_name",
        ):
            if line.startswith(key + "="):
                out[key] = line.split("=", 1)[1]
    return out


@pytest.mark.parametrize("library", ["", "final", "seeds", "none", "FILE"])
def test_eval_arise_library_option(tmp_path, library):
    path = tmp_path / "skills.jsonl"
    path.write_text(json.dumps(_doc(1).to_dict()) + "\n")
    env = {"CKPT": "/ckpt/global_step_2000"}
    if library:
        env["LIBRARY"] = str(path) if library == "FILE" else library
    proc = _eval(env)
    assert proc.returncode == 0, proc.stderr
    keys = _library_keys(proc.stdout)
    expected = {
        "": ("True", "True", None, "eval_arise"),  # the checkpoint's library: today's behaviour
        "final": ("True", "True", None, "eval_arise"),
        "seeds": ("True", "False", "null", "eval_arise_seeds"),
        "none": ("False", None, None, "eval_no_skills"),
        "FILE": ("True", "False", f"'{path}'", "eval_arise_skills"),
    }[library]
    got = tuple(keys.get(k) for k in ("arise.enable", "arise.library.from_checkpoint", "arise.library.load_from"))
    assert (*got, keys["trainer.experiment_name"]) == expected
    assert "trainer.resume_from_path='/ckpt/global_step_2000'" in proc.stdout  # the weights, whatever the library


def test_eval_arise_library_final_needs_a_checkpoint():
    proc = _eval({"LIBRARY": "final"})
    assert proc.returncode == 2 and "--library final evaluates a checkpoint's library" in proc.stderr
    proc = _eval({})  # without a checkpoint the default is the seeds
    assert proc.returncode == 0 and _library_keys(proc.stdout)["arise.library.load_from"] == "null"


def test_eval_library_keys_compose_into_the_config(tmp_path):
    """The keys LIBRARY sets exist in the trainer config (hydra would refuse unknown ones)."""
    from recipe.arise.core.arise_config import ARISEConfig
    from recipe.arise.tools import preflight

    path = tmp_path / "skills.jsonl"
    path.write_text(json.dumps(_doc(1).to_dict()) + "\n")
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "USER")}
    env = {**keep, **EVAL_ENV, "CKPT": "/ckpt/global_step_2000", "LIBRARY": str(path)}
    entry, overrides = preflight.script_overrides(REPO / "run_scripts" / "eval_arise.sh", env=env)
    arise = ARISEConfig.from_trainer_config(preflight.compose(entry, overrides))
    assert arise.library.from_checkpoint is False and arise.library.load_from == str(path)
