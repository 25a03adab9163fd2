"""Prompt construction: skill injection (App. C.4) and the summary rollout prompt
O_{G+1} (App. D.1, Figure 4).  Framework free."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from .skill import SkillDoc

__all__ = [
    "SKILL_PREFIX",
    "SUMMARY_MAX_TRACES",
    "SUMMARY_CLIP_CHARS",
    "SUMMARY_TEMPLATE",
    "format_skill_injection",
    "inject_skill",
    "build_summary_prompt",
    "summary_messages",
]

SKILL_PREFIX = "SKILL:"
SUMMARY_MAX_TRACES = 2
SUMMARY_CLIP_CHARS = 400

# Figure 4 of the paper, line breaks of the typeset box joined into sentences, the
# LaTeX en dash "2--3" written as "2-3".
SUMMARY_TEMPLATE = (
    "You are a skill distiller for math reasoning.\n"
    "Given one question and trajectories from the same rollout group, summarize ONE reusable skill.\n"
    "\n"
    "Question: {question}\n"
    "\n"
    "Group trajectories:\n"
    "{trajectories}\n"
    "\n"
    "Output MUST be a valid JSON object and nothing else (no markdown/code fences). Schema:\n"
    '{{"skill_name", "problem_type", "key_insight", "method", "check"}}\n'
    "\n"
    "Rules:\n"
    "- Be generic and transferable; do not copy specific numbers.\n"
    "- Keep the whole skill within 220 characters.\n"
    "- key_insight is the most important field.\n"
    "- method must contain 2-3 concise steps.\n"
    "- Focus on improving correctness, not style."
)


def format_skill_injection(skill: SkillDoc) -> str:
    """The injected line: ``SKILL:`` + compact skill JSON (no trailing newline)."""
    if not isinstance(skill, SkillDoc):
        raise TypeError(f"skill must be a SkillDoc, got {type(skill).__name__}")
    return SKILL_PREFIX + skill.to_json()


def inject_skill(messages: Sequence[dict[str, Any]], skill: SkillDoc | None) -> list[dict[str, Any]]:
    """Return a new message list whose last user turn is ``SKILL:{json}\\n<original>``.

    The input is never mutated.  ``skill=None`` returns an unchanged (deep) copy.
    Raises ValueError if there is no user turn (only when a skill is given)."""
    out = [copy.deepcopy(dict(m)) for m in messages]
    if skill is None:
        return out
    for i in range(len(out) - 1, -1, -1):
        if out[i].get("role") == "user":
            content = out[i].get("content", "")
            if not isinstance(content, str):
                raise ValueError("the last user turn's content must be a string to inject a skill")
            out[i]["content"] = format_skill_injection(skill) + "\n" + content
            return out
    raise ValueError("cannot inject a skill: messages contain no user turn")


def _clip(text: str, limit: int) -> str:
    text = str(text).strip()
    return text[:limit]


def build_summary_prompt(
    question: str,
    traces: Sequence[str],
    max_traces: int = SUMMARY_MAX_TRACES,
    clip_chars: int = SUMMARY_CLIP_CHARS,
) -> str:
    """Figure-4 summary prompt with the first ``max_traces`` successful traces, each
    clipped to its first ``clip_chars`` characters and labelled ``[SUCCESS #k]``.

    Raises ValueError when ``traces`` is empty (the paper skips O_{G+1} when tau+ is empty)."""
    traces = [t for t in traces if t is not None]
    if not traces:
        raise ValueError("build_summary_prompt needs at least one successful trace (tau+ is empty)")
    if int(max_traces) < 1 or int(clip_chars) < 1:
        raise ValueError("max_traces and clip_chars must be >= 1")
    lines = [f"[SUCCESS #{k}] {_clip(t, int(clip_chars))}" for k, t in enumerate(traces[: int(max_traces)], start=1)]
    return SUMMARY_TEMPLATE.format(question=str(question).strip(), trajectories="\n".join(lines))


def summary_messages(question: str, traces: Sequence[str], **kwargs: Any) -> list[dict[str, str]]:
    """The summary prompt as a single user turn (for the chat template)."""
    return [{"role": "user", "content": build_summary_prompt(question, traces, **kwargs)}]
