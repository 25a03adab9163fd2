import pytest

from recipe.arise.core.prompts import (
    SKILL_PREFIX,
    build_summary_prompt,
    format_skill_injection,
    inject_skill,
    summary_messages,
)
from recipe.arise.core.skill import load_seed_skills

SKILL = load_seed_skills()[0]


def test_format_injection():
    assert SKILL_PREFIX == "SKILL:"
    assert format_skill_injection(SKILL) == "SKILL:" + SKILL.to_json()


def test_inject_last_user_turn_and_no_mutation():
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "What is 1+1?"},
    ]
    orig = [dict(m) for m in msgs]
    out = inject_skill(msgs, SKILL)
    assert msgs == orig and out is not msgs
    assert out[3]["content"] == "SKILL:" + SKILL.to_json() + "\nWhat is 1+1?"
    assert out[:3] == orig[:3]


def test_inject_none_returns_copy():
    msgs = [{"role": "user", "content": "q"}]
    out = inject_skill(msgs, None)
    assert out == msgs and out is not msgs and out[0] is not msgs[0]


def test_inject_without_user_turn_raises():
    with pytest.raises(ValueError, match="user"):
        inject_skill([{"role": "system", "content": "s"}], SKILL)
    with pytest.raises(ValueError):
        inject_skill([], SKILL)


EXPECTED = """You are a skill distiller for math reasoning.
Given one question and trajectories from the same rollout group, summarize ONE reusable skill.

Question: What is 2+2?

Group trajectories:
[SUCCESS #1] AAAA
[SUCCESS #2] BBBB

Output MUST be a valid JSON object and nothing else (no markdown/code fences). Schema:
{"skill_name", "problem_type", "key_insight", "method", "check"}

Rules:
- Be generic and transferable; do not copy specific numbers.
- Keep the whole skill within 220 characters.
- key_insight is the most important field.
- method must contain 2-3 concise steps.
- Focus on improving correctness, not style."""


def test_summary_prompt_exact_template():
    assert build_summary_prompt("What is 2+2?", ["AAAA", "BBBB", "CCCC"]) == EXPECTED


def test_summary_prompt_clips_and_limits():
    p = build_summary_prompt("q", ["x" * 1000, "y" * 401, "z" * 10])
    assert "[SUCCESS #1] " + "x" * 400 + "\n" in p and "x" * 401 not in p
    assert "[SUCCESS #2] " + "y" * 400 + "\n" in p and "y" * 401 not in p
    assert "z" not in p.split("Group trajectories:")[1].split("Output")[0].replace("[SUCCESS", "")
    assert "[SUCCESS #3]" not in p
    one = build_summary_prompt("q", ["only"])
    assert "[SUCCESS #1] only\n" in one and "#2" not in one


def test_summary_prompt_braces_in_question_safe():
    p = build_summary_prompt("Find {x} in \\frac{1}{2}", ["{a}"])
    assert "Question: Find {x} in \\frac{1}{2}" in p and "[SUCCESS #1] {a}" in p


def test_summary_prompt_no_traces():
    with pytest.raises(ValueError):
        build_summary_prompt("q", [])


def test_summary_messages():
    msgs = summary_messages("What is 2+2?", ["AAAA", "BBBB"])
    assert msgs == [{"role": "user", "content": EXPECTED}]
