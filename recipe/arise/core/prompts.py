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
    "SUMMARY_DOMAIN",
    "SUMMARY_TEMPLATE",
    "SUMMARY_TOOL_RULE",
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

# Added (one sentence) only when a trace shows tool calls (recipe.arise.core.transcript): the skill
# should keep which computation solved the problem. docs/design.md: multi-turn summary prompt.
SUMMARY_TOOL_RULE = "- If a trajectory calls tools, method must name the computation or code that solved the problem."
_METHOD_RULE = "- method must contain 2-3 concise steps.\n"
SUMMARY_TEMPLATE_TOOLS = SUMMARY_TEMPLATE.replace(_METHOD_RULE, _METHOD_RULE + SUMMARY_TOOL_RULE + "\n")
# Figure 4's domain; an environment episode's summary names its own (arise.env.summary_domain,
# docs/design.md: the summary prompt of environment episodes)
SUMMARY_DOMAIN = "math reasoning"


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
    clip_chars: int | Sequence[int] = SUMMARY_CLIP_CHARS,
    tool_use: bool = False,
    domain: str = SUMMARY_DOMAIN,
) -> str:
    """Figure-4 summary prompt with the first ``max_traces`` successful traces, each
    clipped to its first ``clip_chars`` characters (one limit, or one per trace: a multi-turn
    transcript has its own) and labelled ``[SUCCESS #k]``; ``tool_use`` adds
    :data:`SUMMARY_TOOL_RULE` to the rules; ``domain`` replaces Figure 4's "math reasoning" in its
    first sentence.

    Raises ValueError when ``traces`` is empty (the paper skips O_{G+1} when tau+ is empty)."""
    traces = list(traces)
    clips = [clip_chars] * len(traces) if isinstance(clip_chars, (int, float)) else list(clip_chars)
    if len(clips) != len(traces):
        raise ValueError(f"clip_chars has {len(clips)} limits for {len(traces)} traces")
    kept = [(t, c) for t, c in zip(traces, clips, strict=True) if t is not None]
    if not kept:
        raise ValueError("build_summary_prompt needs at least one successful trace (tau+ is empty)")
    if int(max_traces) < 1 or min(int(c) for _, c in kept) < 1:
        raise ValueError("max_traces and clip_chars must be >= 1")
    used = kept[: int(max_traces)]
    lines = [f"[SUCCESS #{k}] {_clip(t, int(c))}" for k, (t, c) in enumerate(used, start=1)]
    template = SUMMARY_TEMPLATE_TOOLS if tool_use else SUMMARY_TEMPLATE
    if domain != SUMMARY_DOMAIN:
        if not str(domain).strip():
            raise ValueError("the summary prompt's domain must be non-empty")
        head = f"skill distiller for {SUMMARY_DOMAIN}."
        template = template.replace(head, f"skill distiller for {str(domain).strip()}.", 1)
    return template.format(question=str(question).strip(), trajectories="\n".join(lines))


def summary_messages(question: str, traces: Sequence[str], **kwargs: Any) -> list[dict[str, str]]:
    """The summary prompt as a single user turn (for the chat template)."""
    return [{"role": "user", "content": build_summary_prompt(question, traces, **kwargs)}]
