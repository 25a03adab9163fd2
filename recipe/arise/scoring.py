"""Skill scoring (Eq. 2), backend-independent parts.

The score of every cache skill for one query is computed on the rollout engine: one request per
skill with prompt = [query prefix] + [skill tokens] and ``prompt_logprobs=0, max_tokens=1``.

Eq. 2 writes s_k as the *sum* of the skill's token log-probabilities. With ~50-80 skill tokens the
sums of different skills differ by tens of nats, so softmax(s / sigma=1) is one-hot and the
confidence gate delta=0.35 never rejects; the paper's reported skill-use rates (89% / 73% / 42% at
delta 0.15 / 0.35 / 0.55) need a spread-out distribution. The authors' released code scores with
the length-normalised (mean per-token) log-probability, under which sigma=1 and delta=0.35 give
exactly that. ``arise.selection.score_norm`` picks: ``mean`` (default) or ``sum``.

Cost: by default vLLM does not read the prefix cache for a request that asks for
``prompt_logprobs`` (``SamplingParams.__post_init__`` sets ``skip_reading_prefix_cache =
prompt_logprobs is not None``, because cached tokens get no prompt log-probs), so each of the 10
requests of a query would prefill the whole query + skill. ``arise.selection.scoring_prefix_cache``
(default on) sends the first as usual and lets the others read the query's blocks, taking the rows
they read from the first (recipe/arise/agent_loop.py, ``_score_requests``; docs/gpu.md).

With ``arise.selection.train_manager`` the skill is injected at the start of the assistant turn
and trained there, so the scoring context is the assistant turn itself: chat(query) + ``SKILL:``
(:data:`MANAGER_SCORING_SUFFIX`, no leading newline), and the scored tokens are exactly the
response tokens the policy gradient reaches (docs/design.md: Training the Manager).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from recipe.arise.selection import truncate_skill_for_scoring

# The manager scores a skill as the continuation of the query turn, in the same "SKILL:" form
# that injection uses (docs/design.md: scoring order (query, skill) vs injection order).
SCORING_SUFFIX = "\nSKILL:"
# train_manager: the skill opens the assistant turn, so the scoring context is that turn's start
MANAGER_SCORING_SUFFIX = "SKILL:"
SCORE_NORMS = ("mean", "sum")


def scoring_suffix(train_manager: bool) -> str:
    """The text between the chat-formatted query and the skill tokens, per injection mode."""
    return MANAGER_SCORING_SUFFIX if train_manager else SCORING_SUFFIX


def scoring_prefix_ids(
    tokenizer: Any, messages: Sequence[dict], suffix: str = SCORING_SUFFIX, **chat_kwargs
) -> list[int]:
    """Token ids of the query context: the chat-formatted conversation up to the assistant turn,
    then ``suffix`` (tokenized on its own, as the injected skill line is)."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, **chat_kwargs)
    if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids) + tokenizer.encode(suffix, add_special_tokens=False)


def scoring_requests(
    tokenizer: Any, prefix_ids: list[int], skill_texts: Sequence[str], max_tokens: int
) -> list[list[int]]:
    """Prompt ids per skill: prefix + the skill text truncated to ``max_tokens`` tokens."""
    return [prefix_ids + truncate_skill_for_scoring(text, tokenizer, max_tokens) for text in skill_texts]


def skill_token_logprobs(prompt_logprobs: Sequence[Sequence[float]], prefix_len: int, total_len: int) -> list[float]:
    """The log-probs of prompt tokens ``prefix_len .. total_len-1``, one per token.

    ``prompt_logprobs`` is verl's layout (``extract_prompt_logprobs``): entry ``j`` holds the
    log-prob of prompt token ``j + 1`` (the first token has none), plus one padding entry.
    """
    if total_len <= prefix_len:
        raise ValueError("empty skill continuation")
    if len(prompt_logprobs) < total_len - 1:
        raise ValueError(f"prompt_logprobs has {len(prompt_logprobs)} entries, need {total_len - 1}")
    return [prompt_logprobs[j - 1][0] for j in range(prefix_len, total_len)]


def skill_logprob_sum(prompt_logprobs: Sequence[Sequence[float]], prefix_len: int, total_len: int) -> float:
    """Sum the log-probs of prompt tokens ``prefix_len .. total_len-1`` (layout as above)."""
    return float(sum(skill_token_logprobs(prompt_logprobs, prefix_len, total_len)))


def skill_score(
    prompt_logprobs: Sequence[Sequence[float]], prefix_len: int, total_len: int, norm: str = "mean"
) -> float:
    """s_k under ``norm``: the sum of the skill tokens' log-probs, or their mean.

    Returns NaN when the engine's numbers are unusable (a missing or non-numeric entry), so the
    caller can treat that one skill as unscorable instead of failing the whole query group.
    """
    if norm not in SCORE_NORMS:
        raise ValueError(f"score norm must be one of {SCORE_NORMS}, got {norm!r}")
    try:
        total = skill_logprob_sum(prompt_logprobs, prefix_len, total_len)
    except (TypeError, IndexError, KeyError):
        return math.nan
    return total / (total_len - prefix_len) if norm == "mean" else total
