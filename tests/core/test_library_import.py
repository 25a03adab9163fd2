"""Skills imported from a JSONL file (``arise.library.load_from``, ``inspect_run``) pass the validation
every summarised skill passes (``SkillDoc.validate``: field lengths, 2-3 steps, the 220-character
document); one that does not is an error naming the file, the line and the field."""

from __future__ import annotations

import json

import pytest

from recipe.arise.core.library_jsonl import library_from_jsonl, load_library_file
from recipe.arise.core.library_store import LibraryFormatError
from recipe.arise.core.skill import MAX_DOC_CHARS, SkillDoc, load_seed_skills

GOOD = SkillDoc("good_skill", "algebra", "Factor first", ("Factor", "Solve each factor"), "Plug back in").to_dict()


def _write(tmp_path, skill: dict, bare: bool = False):
    path = tmp_path / "skills.jsonl"
    second = skill if bare else {"skill": skill, "utility": 0.5}
    path.write_text(json.dumps({"skill": GOOD}) + "\n" + json.dumps(second) + "\n")
    return path


@pytest.mark.parametrize(
    "change,match",
    [
        ({"key_insight": "x" * 1000}, r"field 'skill\.key_insight': must be non-empty and at most 160 chars"),
        ({"skill_name": "Not Snake Case"}, r"field 'skill\.skill_name': must be non-empty snake_case"),
        ({"problem_type": "topology"}, r"field 'skill\.problem_type': must be one of"),
        ({"method": ["only one step"]}, r"field 'skill\.method': must have 2-3 steps, got 1"),
        ({"method": ["a", "b", "c", "d"]}, r"field 'skill\.method': must have 2-3 steps, got 4"),
        ({"method": ["a", "y" * 101]}, r"field 'skill\.method'\[1\]: must be non-empty and at most 100 chars"),
        ({"check": ""}, r"field 'skill\.check': must be non-empty"),
        # every field within its own limit, the document over the cap
        (
            {"key_insight": "k" * 150, "method": ["m" * 90, "n" * 90], "check": "c" * 90},
            rf"field 'skill': document: to_json\(\) is \d+ chars, exceeds the {MAX_DOC_CHARS}-char cap",
        ),
    ],
)
@pytest.mark.parametrize("bare", [False, True], ids=["line", "bare_document"])
def test_an_invalid_skill_names_the_file_the_line_and_the_field(tmp_path, change, match, bare):
    path = _write(tmp_path, {**GOOD, "skill_name": "other_skill", **change}, bare=bare)
    with pytest.raises(LibraryFormatError, match=r"skills\.jsonl: line 2: " + match):
        library_from_jsonl(path)
    with pytest.raises(LibraryFormatError, match=r"line 2: " + match):  # arise.library.load_from's path
        load_library_file(path, cache_capacity=10, reservoir_capacity=100)


def test_valid_skills_load_and_one_invalid_line_refuses_the_file(tmp_path):
    path = tmp_path / "seeds.jsonl"
    lines = [json.dumps({"skill": d.to_dict()}) + "\n" for d in load_seed_skills()]
    path.write_text("".join(lines))
    lib, _ = library_from_jsonl(path)
    assert lib.cache_docs() == load_seed_skills()
    path.write_text("".join(lines) + json.dumps({"skill": {**GOOD, "check": "c" * 101}}) + "\n")
    with pytest.raises(LibraryFormatError, match=rf"line {len(lines) + 1}: field 'skill\.check'"):
        library_from_jsonl(path)


def test_the_jsonl_reader_uses_only_the_librarys_public_api():
    """library_jsonl builds a SkillLibrary from outside: it must not reach into private fields (issue 34),
    so a change inside the library cannot break the reader silently."""
    import ast
    from pathlib import Path

    import recipe.arise.core.library_jsonl as mod

    tree = ast.parse(Path(mod.__file__).read_text())
    private = sorted(
        f"line {n.lineno}: .{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
    )
    assert not private, private
