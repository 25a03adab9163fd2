"""Skill scoring s_k = sum_l log pi(m_k^(l) | q, m_k^(<l)) (Eq. 2), backend-independent parts.

The score of every cache skill for one query is computed on the rollout engine: one request per
skill with prompt = [query prefix] + [skill tokens] and ``prompt_logprobs=0, max_tokens=1``. The
query prefix is identical for all skills of a query, so vLLM's prefix cache shares it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recipe.arise.selection import truncate_skill_for_scoring

# The manager scores a skill as the continuation of the query turn, in the same "SKILL:" form
# that injection uses (docs/design.md: scoring order (query, skill) vs injection order).
SCORING_SUFFIX = "\nSKILL:"


def scoring_prefix_ids(tokenizer: Any, messages: Sequence[dict], **chat_kwargs) -> list[int]:
    """Token ids of the query context: the chat-formatted conversation up to the assistant turn."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, **chat_kwargs)
    if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids) + tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False)


def scoring_requests(
    tokenizer: Any, prefix_ids: list[int], skill_texts: Sequence[str], max_tokens: int
) -> list[list[int]]:
    """Prompt ids per skill: prefix + the skill text truncated to ``max_tokens`` tokens."""
    return [prefix_ids + truncate_skill_for_scoring(text, tokenizer, max_tokens) for text in skill_texts]


def skill_logprob_sum(prompt_logprobs: Sequence[Sequence[float]], prefix_len: int, total_len: int) -> float:
    """Sum the log-probs of prompt tokens ``prefix_len .. total_len-1``.

    ``prompt_logprobs`` is verl's layout (``extract_prompt_logprobs``): entry ``j`` holds the
    log-prob of prompt token ``j + 1`` (the first token has none), plus one padding entry.
    """
    if total_len <= prefix_len:
        raise ValueError("empty skill continuation")
    if len(prompt_logprobs) < total_len - 1:
        raise ValueError(f"prompt_logprobs has {len(prompt_logprobs)} entries, need {total_len - 1}")
    return float(sum(prompt_logprobs[j - 1][0] for j in range(prefix_len, total_len)))
