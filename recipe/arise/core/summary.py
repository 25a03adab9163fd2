"""The summary rollout O_{G+1}: its prompt, its request, and the skill it yields.

Shared by the two places a summary is generated: the trainer after the generation wave, and,
with ``arise.summary.stream``, the reward manager as soon as a group's G rewards are in
(``recipe.arise.core.stream``). Either way the skill comes out of :func:`summary_skills`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from recipe.arise.core.library_entry import Provenance
from recipe.arise.core.prompts import summary_messages
from recipe.arise.core.skill import INVALID, MAX_DOC_CHARS, OVERLONG, SkillDoc, fallback_skill, parse_summary

__all__ = ["summary_prompt_ids", "summary_sampling_params", "generate_summary", "summary_skills"]


def chat_ids(tokenizer, messages, chat_template_kwargs: dict | None = None) -> list[int]:
    kwargs = dict(chat_template_kwargs or {})
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, **kwargs)
    return list(ids["input_ids"] if not isinstance(ids, list) else ids)


def summary_prompt_ids(
    tokenizer, group: dict[str, Any], cfg, chat_template_kwargs: dict | None = None, env_domain: str | None = None
) -> list[int]:
    """The chat-templated summary prompt for one group (its question and tau+ traces). A trace
    with ``tool_turns`` is a multi-turn transcript (``recipe.arise.core.transcript``), already
    bounded by ``cfg.transcript_chars``; if one in the prompt has them, the tool rule is added. A
    trace marked ``env`` is an environment episode's transcript (bounded the same way): the prompt
    then names ``env_domain`` (``arise.env.summary_domain``) instead of math reasoning, no tool rule."""
    traces = [t["text"] for t in group["traces"]]
    env = [bool(t.get("env", False)) for t in group["traces"]]
    multi = [bool(t.get("tool_turns", 0)) or e for t, e in zip(group["traces"], env, strict=True)]
    clips = [cfg.transcript_chars if m else cfg.trace_clip_chars for m in multi]
    kwargs: dict[str, Any] = {"tool_use": any(multi[: cfg.max_traces]) and not any(env[: cfg.max_traces])}
    if any(env[: cfg.max_traces]):
        if not env_domain:
            raise ValueError("an environment episode's summary needs its domain (arise.env.summary_domain)")
        kwargs["domain"] = env_domain
    messages = summary_messages(group["question"], traces, max_traces=cfg.max_traces, clip_chars=clips, **kwargs)
    return chat_ids(tokenizer, messages, chat_template_kwargs)


def summary_sampling_params(cfg) -> dict[str, Any]:
    return {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}


async def generate_summary(client, prompt_ids: list[int], cfg) -> list[int]:
    """One summary request on the rollout servers (verl's ``LLMServerClient``); its token ids.
    Raises on error or after ``cfg.timeout_s``."""
    output = await asyncio.wait_for(
        client.generate(request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=summary_sampling_params(cfg)),
        timeout=cfg.timeout_s,
    )
    return list(output.token_ids)


def summary_skills(
    tokenizer, groups: Sequence[dict[str, Any]], outputs: Sequence[Any], prompt_tokens: int, cfg, step: int, logger
) -> tuple[list[tuple[SkillDoc, Provenance]], dict[str, int]]:
    """The new skills of the summary outputs (per group: token ids, or the exception it raised):
    parsed from JSON, else (``cfg.fallback``) abstracted from the best trace; and the counts. As
    App. D.1, the ``trace_abstract`` fallback is for a reply that is not valid JSON: a document that
    parsed but stays over the 220-char cap after clipping (and, with ``on_overlong: shrink``,
    shrinking) is discarded (``discarded``), and a request that errored or timed out yields no
    skill (``failed``)."""
    stats = {"attempts": len(groups), "parsed": 0, "fallback": 0, "discarded": 0, "failed": 0}
    stats.update(prompt_tokens=int(prompt_tokens), response_tokens=0)
    new_skills: list[tuple[SkillDoc, Provenance]] = []
    for group, output in zip(groups, outputs, strict=True):
        if isinstance(output, BaseException) or output is None:
            logger.warning(f"ARISE summary rollout failed (no skill from it): {output!r}")
            stats["failed"] += 1
            continue
        ids = list(getattr(output, "token_ids", output))
        text = tokenizer.decode(ids, skip_special_tokens=True)
        stats["response_tokens"] += len(ids)
        skill, outcome = parse_summary(text, shrink=cfg.on_overlong == "shrink")
        origin = "json"
        if skill is not None:
            stats["parsed"] += 1
        elif outcome == OVERLONG:
            stats["discarded"] += 1
            logger.warning(
                f"ARISE summary of group {group['uid']} discarded (arise/summary_discarded): its skill parsed but is "
                f"over {MAX_DOC_CHARS} chars after clipping (arise.summary.on_overlong={cfg.on_overlong}, App. D.1)"
            )
        elif outcome == INVALID and cfg.fallback:
            skill, origin = fallback_skill(group["traces"][0]["text"]), "fallback"
            stats["fallback"] += 1
        if skill is not None:
            used = group["traces"][: cfg.max_traces]
            provenance = Provenance(
                origin=origin,
                step=step,
                uid=group["uid"],
                query=group["question"],
                rewards=tuple(t["reward"] for t in used),
            )
            new_skills.append((skill, provenance))
    return new_skills, stats
