import dataclasses
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe.arise.core.skill import (
    DEFAULT_CHECK,
    MAX_DOC_CHARS,
    PROBLEM_TYPES,
    SkillDoc,
    fallback_skill,
    load_seed_skills,
    parse_skill,
    parse_summary,
)

GOOD = {
    "skill_name": "base_matching",
    "problem_type": "algebra",
    "key_insight": "Equal powers of a base have equal exponents",
    "method": ["Rewrite with one base", "Equate exponents"],
    "check": "Plug in",
}


def assert_valid(doc):
    assert isinstance(doc, SkillDoc)
    doc.validate()
    assert len(doc.to_json()) <= MAX_DOC_CHARS
    assert doc.problem_type in PROBLEM_TYPES
    assert 2 <= len(doc.method) <= 3
    assert len(doc.skill_name) <= 40 and len(doc.key_insight) <= 160 and len(doc.check) <= 100
    assert all(0 < len(s) <= 100 for s in doc.method)


# ----------------------------------------------------------------- SkillDoc


def test_to_json_compact_schema_order():
    doc = SkillDoc.from_dict(GOOD)
    text = doc.to_json()
    assert text.startswith('{"skill_name":"base_matching","problem_type":"algebra","key_insight":')
    assert ", " not in text and ": " not in text
    assert list(json.loads(text)) == ["skill_name", "problem_type", "key_insight", "method", "check"]
    assert SkillDoc.from_dict(json.loads(text)) == doc
    assert doc.to_dict() == GOOD
    assert isinstance(doc.method, tuple)


def test_to_json_keeps_unicode():
    doc = SkillDoc("x", "general", "use π and ≤", ("a", "b"), "c")
    assert "π" in doc.to_json() and "\\u" not in doc.to_json()


def test_frozen_and_method_tuple():
    doc = SkillDoc("a", "general", "k", ["s1", "s2"], "c")
    assert doc.method == ("s1", "s2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.skill_name = "b"  # type: ignore[misc]


@pytest.mark.parametrize(
    "patch,field",
    [
        ({"skill_name": None}, "skill_name"),
        ({"problem_type": "topology"}, "problem_type"),
        ({"key_insight": "x" * 161}, "key_insight"),
        ({"key_insight": 3}, "key_insight"),
        ({"method": ["only one"]}, "method"),
        ({"method": ["a", "b", "c", "d"]}, "method"),
        ({"method": "a; b"}, "method"),
        ({"method": ["a", 2]}, "method"),
        ({"method": ["a", "x" * 101]}, "method"),
        ({"check": "x" * 101}, "check"),
        ({"skill_name": "Not Snake"}, "skill_name"),
        ({"extra": 1}, "extra"),
    ],
)
def test_from_dict_strict_names_field(patch, field):
    d = {**GOOD, **patch}
    with pytest.raises(ValueError, match=field):
        SkillDoc.from_dict(d)


def test_from_dict_missing_field():
    d = dict(GOOD)
    del d["check"]
    with pytest.raises(ValueError, match="check"):
        SkillDoc.from_dict(d)


def test_from_dict_total_cap():
    d = {**GOOD, "key_insight": "k" * 150, "check": "c" * 60}
    with pytest.raises(ValueError, match="220"):
        SkillDoc.from_dict(d)


# --------------------------------------------------------------- parse_skill


def test_parse_plain_and_fenced_with_prose():
    raw = "Sure! Here is the skill:\n```json\n" + json.dumps(GOOD, indent=2) + "\n```\nHope it helps {not json}."
    assert parse_skill(raw) == SkillDoc.from_dict(GOOD)
    assert parse_skill(json.dumps(GOOD)) == SkillDoc.from_dict(GOOD)


def test_parse_braces_inside_strings_and_prefix_garbage():
    d = {**GOOD, "key_insight": "Use {a} and } and { freely"}
    raw = "noise { broken { stuff } " + json.dumps(d)
    doc = parse_skill(raw)
    assert doc is not None and doc.key_insight == "Use {a} and } and { freely"


def test_parse_first_valid_object_wins():
    bad = {"skill_name": "x"}  # missing fields
    raw = json.dumps(bad) + " then " + json.dumps(GOOD) + " and " + json.dumps({**GOOD, "skill_name": "other"})
    assert parse_skill(raw).skill_name == "base_matching"


def test_parse_normalises_problem_type():
    assert parse_skill(json.dumps({**GOOD, "problem_type": "Number Theory"})).problem_type == "number_theory"
    assert parse_skill(json.dumps({**GOOD, "problem_type": "number-theory"})).problem_type == "number_theory"
    assert parse_skill(json.dumps({**GOOD, "problem_type": "Topology"})).problem_type == "general"
    d = dict(GOOD)
    del d["problem_type"]
    assert parse_skill(json.dumps(d)).problem_type == "general"


def test_parse_snake_cases_and_clips_name():
    doc = parse_skill(json.dumps({**GOOD, "skill_name": "Exponential Base-Matching " + "x" * 60}))
    assert doc.skill_name.startswith("exponential_base_matching_")
    assert len(doc.skill_name) <= 40
    assert parse_skill(json.dumps({**GOOD, "skill_name": "!!!"})) is None


def test_parse_clips_fields():
    d = {**GOOD, "key_insight": "k" * 170, "method": ["a", "b"], "check": "c" * 5, "skill_name": "n"}
    assert parse_skill(json.dumps(d)) is None  # 160-char insight + overhead > 220 -> discarded
    d = {**GOOD, "key_insight": "k" * 10, "method": ["s" * 120, "t"], "check": "ok", "skill_name": "n"}
    doc = parse_skill(json.dumps(d))
    assert doc is not None and doc.method[0] == "s" * 100


def test_parse_summary_tells_a_discarded_document_from_invalid_json():
    """App. D.1: stage 3 discards a parsed document over 220 chars; only output without a valid JSON
    skill (malformed brackets, missing fields) is the fallback's case."""
    long = {**GOOD, "key_insight": "k" * 170, "skill_name": "n"}
    assert parse_summary(json.dumps(long)) == (None, "overlong")
    assert parse_summary(json.dumps(long), shrink=True)[1] == "parsed"
    assert parse_summary(json.dumps(long) + json.dumps(GOOD)) == (SkillDoc.from_dict(GOOD), "parsed")
    for bad in ('{"skill_name": "x", "key_insight": ', json.dumps({**GOOD, "method": ["one"]}), "prose", None):
        assert parse_summary(bad) == (None, "invalid")


def test_parse_more_than_three_steps_keeps_first_three():
    d = {**GOOD, "key_insight": "k", "method": ["a", "b", "c", "d", "e"]}
    assert parse_skill(json.dumps(d)).method == ("a", "b", "c")


def test_parse_fewer_than_two_steps_rejected():
    assert parse_skill(json.dumps({**GOOD, "method": ["only"]})) is None
    assert parse_skill(json.dumps({**GOOD, "method": []})) is None
    assert parse_skill(json.dumps({**GOOD, "method": ["a", ""]})) is None


def test_parse_method_string_split():
    for m in [
        "1. Rewrite bases 2. Equate exponents",
        "Rewrite bases; equate exponents",
        "Rewrite bases\nEquate exponents",
        "Rewrite bases. Equate exponents.",
    ]:
        doc = parse_skill(json.dumps({**GOOD, "method": m}))
        assert doc is not None and len(doc.method) == 2, m


def test_parse_default_check():
    d = dict(GOOD)
    del d["check"]
    assert parse_skill(json.dumps(d)).check == DEFAULT_CHECK
    assert parse_skill(json.dumps({**GOOD, "check": "  "})).check == DEFAULT_CHECK


def test_parse_over_cap_discard_vs_shrink():
    d = {  # the paper's own Figure-3 example: every field within its limit, total > 220
        "skill_name": "exponential_base_matching",
        "problem_type": "algebra",
        "key_insight": (
            "When both sides of an equation can be expressed as powers of the same base, set exponents equal"
        ),
        "method": [
            "Rewrite each side with a common base",
            "Set the exponents equal and solve",
            "Verify the solution satisfies the original",
        ],
        "check": "Substitute back into the original equation",
    }
    assert len(json.dumps(d, separators=(",", ":"))) > 220
    assert parse_skill(json.dumps(d)) is None
    doc = parse_skill(json.dumps(d), shrink=True)
    assert_valid(doc)


def test_parse_missing_required_and_wrong_types():
    for k in ("skill_name", "key_insight", "method"):
        d = dict(GOOD)
        del d[k]
        assert parse_skill(json.dumps(d)) is None
    assert parse_skill(json.dumps({**GOOD, "key_insight": 5})) is None
    assert parse_skill(json.dumps({**GOOD, "method": {"a": 1}})) is None
    assert parse_skill(json.dumps([GOOD])) is not None  # object inside an array is still found


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "no json here",
        "{" * 50_000,
        "[" * 10_000 + "]" * 10_000,
        '{"a":' * 5000 + "1" + "}" * 5000,
        "{}" * 30_000,
        '{"skill_name": "x", "key_insight": "' + "\\" * 40_000,
        None,
        12,
    ],
)
def test_parse_garbage_fast(raw):
    t = time.perf_counter()
    assert parse_skill(raw) is None
    assert time.perf_counter() - t < 2.0


def test_parse_binary_and_huge_prefix():
    assert parse_skill(bytes(range(256)) * 100) is None
    raw = ("x" * 30_000) + json.dumps(GOOD)  # beyond the 20k input cap
    assert parse_skill(raw) is None
    assert parse_skill(json.dumps(GOOD).encode()) == SkillDoc.from_dict(GOOD)


def test_parse_deeply_nested_skill_value():
    d = {**GOOD, "check": None, "extra": json.loads("[" * 100 + "]" * 100)}
    assert parse_skill(json.dumps(d)) is None or parse_skill(json.dumps(d)).check == DEFAULT_CHECK


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=200))
json_val = st.recursive(
    json_leaf, lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=10), c, max_size=5), max_leaves=20
)
skillish = st.fixed_dictionaries(
    {},
    optional={
        "skill_name": st.one_of(st.text(max_size=80), json_val),
        "problem_type": st.one_of(
            st.sampled_from(["Algebra", "number theory", "GEOMETRY", "calc", ""]), st.text(max_size=20)
        ),
        "key_insight": st.one_of(st.text(max_size=250), json_val),
        "method": st.one_of(st.lists(st.text(max_size=130), max_size=6), st.text(max_size=300), json_val),
        "check": st.one_of(st.text(max_size=130), json_val),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=3000), st.binary(max_size=3000).map(lambda b: b.decode("latin-1"))))
def test_fuzz_parse_arbitrary_text(text):
    doc = parse_skill(text)
    if doc is not None:
        assert_valid(doc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skillish, st.text(max_size=50), st.text(max_size=50), st.booleans())
def test_fuzz_parse_skill_like_json(d, pre, post, shrink):
    doc = parse_skill(pre + json.dumps(d, ensure_ascii=bool(len(pre) % 2)) + post, shrink=shrink)
    if doc is not None:
        assert_valid(doc)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=3000))
def test_fuzz_parse_nested(depth):
    raw = '{"skill_name":"a","key_insight":"b","method":["c","d"],"x":' + "[" * depth + "]" * depth + "}"
    t = time.perf_counter()
    doc = parse_skill(raw)
    assert time.perf_counter() - t < 1.0
    if doc is not None:
        assert_valid(doc)


# ------------------------------------------------------------------ fallback


@pytest.mark.parametrize(
    "trace",
    [
        "",
        "x",
        '"' * 1000,
        "\\" * 1000,
        "\x00\x01" * 500,
        "é∑π😀" * 300,
        "\ud800 lone surrogate " * 50,
        "Step 1: let x = 2.\n\n\tThen \\boxed{4}" * 40,
        None,
        b"\xff\xfe" * 100,
    ],
)
def test_fallback_pathological(trace):
    doc = fallback_skill(trace, "Number Theory")
    assert_valid(doc)
    assert doc.skill_name == "trace_abstract"
    assert doc.key_insight.startswith("Solve by: ")
    assert doc.problem_type == "number_theory"
    doc.to_json().encode("utf-8")  # storable


def test_fallback_truncates_collapsed_trace():
    doc = fallback_skill("We   set\n\nx = 3 and solve " * 20)
    assert "  " not in doc.key_insight and "\n" not in doc.key_insight
    assert doc.key_insight[len("Solve by: ") :].startswith("We set x = 3 and solve")
    assert len(doc.to_json()) >= 200  # uses the budget


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000), st.sampled_from(list(PROBLEM_TYPES) + ["weird", "Number Theory"]))
def test_fuzz_fallback(trace, ptype):
    assert_valid(fallback_skill(trace, ptype))


# --------------------------------------------------------------- seed skills


def test_seed_skills_file():
    seeds = load_seed_skills()
    assert [s.skill_name for s in seeds] == [
        "equation_setup",
        "modular_arithmetic_check",
        "case_enumeration",
        "symmetry_exploitation",
        "extremal_principle",
    ]
    assert [s.problem_type for s in seeds] == ["algebra", "number_theory", "general", "general", "general"]
    for s in seeds:
        assert_valid(s)


def test_seed_skills_bad_file(tmp_path):
    p = tmp_path / "seeds.json"
    with pytest.raises(ValueError, match="seeds.json"):
        load_seed_skills(p)  # missing
    p.write_text("{not json")
    with pytest.raises(ValueError, match="seeds.json.*invalid JSON"):
        load_seed_skills(p)
    p.write_text(json.dumps([GOOD, {**GOOD, "skill_name": "b", "method": ["one"]}]))
    with pytest.raises(ValueError, match=r"seeds.json: entry 1: field 'method'"):
        load_seed_skills(p)
    p.write_text(json.dumps([GOOD, GOOD]))
    with pytest.raises(ValueError, match="entry 1.*duplicate"):
        load_seed_skills(p)
    p.write_text(json.dumps({"skills": [GOOD]}))
    assert load_seed_skills(p) == [SkillDoc.from_dict(GOOD)]
