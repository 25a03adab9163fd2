"""The skill layer's scoring requests on verl's rollout servers, beside :mod:`~recipe.arise.adapters.skill_layer`.

The routing id of a group's scoring batch, a request's skill-token log-probs for train_manager, and
the pmi baselines (``arise.selection.score_norm=pmi``): one query-free request per skill and library
version, computed once per worker process and shared by every group that needs it.
"""

from __future__ import annotations

import asyncio
import collections
import zlib
from uuid import uuid4

import numpy as np

from recipe.arise.core.scoring import (
    QUERY_FREE_MESSAGES,
    scoring_requests,
    scoring_suffix,
    skill_score,
    skill_token_logprobs,
)

# a scoring request (the agent loop's, the gate's rescoring, exact IG): its prompt log-probs only, one
# token generated, no text needed. detokenize off: vLLM would decode the token of every prompt log-prob
# entry (``OutputProcessor``: a tokenizer only ``if sampling_params.detokenize``), i.e. the whole prompt
SCORING_PARAMS = {
    "max_tokens": 1,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "prompt_logprobs": 0,
    "detokenize": False,
}
# vLLM's own SamplingParams keys: verl's SGLang server hands the dict on to SGLang's
# ``SamplingParams(**params)``, which refuses unknown keys (SGLang decodes no prompt log-prob tokens
# unless asked, so there is nothing to switch off there)
VLLM_ONLY_KEYS = ("detokenize", "skip_reading_prefix_cache")
_MAX_BASELINES = 4096  # bound on remembered baselines per worker process
# score_norm=pmi: (library version, skill id, query-free context) -> future of the skill's mean log-prob
# in that context (the agent loop's template and tools, the suffix), computed once per worker process
# and version and shared by its queries
_BASELINES: collections.OrderedDict[tuple, asyncio.Future] = collections.OrderedDict()


def engine_params(params: dict, config) -> dict:
    """A copy of ``params`` for the run's rollout engine: ``config`` is the rollout config (the agent
    loop's ``rollout_config``) or the trainer's whole config; an engine other than vLLM (or one not
    named) gets them without :data:`VLLM_ONLY_KEYS`."""
    rollout = getattr(getattr(config, "actor_rollout_ref", None), "rollout", None) or config
    if getattr(rollout, "name", None) in (None, "vllm"):
        return dict(params)
    return {key: value for key, value in params.items() if key not in VLLM_ONLY_KEYS}


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def token_logprobs(output, prefix_len: int, total_len: int) -> list[float] | None:
    """The skill tokens' prompt log-probs of one scoring request, or None if unusable."""
    try:
        values = [
            float(v) for v in skill_token_logprobs(output.extra_fields.get("prompt_logprobs"), prefix_len, total_len)
        ]
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return values if all(np.isfinite(values)) else None


def scoring_request_ids(rollout, n: int) -> list[str]:
    """The ``request_id`` of each of a batch's ``n`` scoring requests: one id for all of them.

    verl routes by ``request_id`` (``GlobalRequestLoadBalancer``: the replica an id was first
    given, else the least loaded), so one id sends the batch to one replica, where the requests
    read each other's prefix cache; with an id each they spread over the replicas and only those
    landing beside the first could. verl's ``LLMServerClient`` gives the engine a fresh uuid per
    request (``_vllm_request_id``), so shared ids never meet in an engine; with
    ``rollout.full_determinism`` it passes the id through, and vLLM appends a random suffix to
    every request id it is given (``InputProcessor.assign_request_id``); another engine then
    gets one id per request (its requests then spread, as verl routes them by the id's hash)."""
    route = f"arise-scoring-{uuid4().hex}"
    if getattr(rollout, "full_determinism", False) and getattr(rollout, "name", None) != "vllm":
        return [f"{route}-{i}" for i in range(n)]
    return [route] * n


async def pmi_baselines(layer, cfg, cache, version, counts) -> list[float]:
    """score_norm=pmi: each cache skill's mean log-prob in the query-free context
    (``scoring.QUERY_FREE_MESSAGES`` rendered by the agent loop as it renders a query: its template,
    its tools, the same suffix; ``layer`` a :class:`~recipe.arise.adapters.skill_layer.SkillLayer`),
    one request per skill per library version and context in this worker process, shared by all
    its queries (each agent-loop worker computes its own). The group that finds a skill's baseline
    missing computes it (its cost in that group's ``counts``); the others await the same future.
    A failure is not kept: the next group tries again."""
    prefix = layer.scoring_prefix([dict(m) for m in QUERY_FREE_MESSAGES], scoring_suffix(cfg.selection.train_manager))
    context = zlib.crc32(str(prefix).encode())
    running = asyncio.get_running_loop()
    keys = [(version, skill_id, context) for skill_id, _ in cache]
    futures, missing = [], []
    for i, key in enumerate(keys):
        future = _BASELINES.get(key) if version is not None else None
        if future is None or (not future.done() and future.get_loop() is not running):
            future = running.create_future()
            missing.append(i)
            if version is not None:
                _BASELINES[key] = future
        futures.append(future)
    while len(_BASELINES) > _MAX_BASELINES:
        _BASELINES.popitem(last=False)
    if missing:
        job = asyncio.ensure_future(_compute_baselines(layer, cfg, prefix, [cache[i] for i in missing], counts))
        job.add_done_callback(lambda done: _settle(done, [futures[i] for i in missing], [keys[i] for i in missing]))
    return list(await asyncio.gather(*[_baseline(f) for f in futures]))


async def _baseline(future: asyncio.Future) -> float:
    if future.done():  # its value (a future of an earlier event loop is read, never awaited)
        return future.result()
    # shielded: a group that times out leaves the shared computation running for the others
    return await asyncio.shield(future)


async def _compute_baselines(layer, cfg, prefix, cache, counts) -> list[float]:
    """The mean log-prob of each skill of ``cache`` after the query-free context ``prefix``: the
    scoring requests of a query, with the query left out (the same skill tokens, suffix and routing)."""
    requests = scoring_requests(layer.tokenizer, prefix, [text for _, text in cache], cfg.selection.max_skill_tokens)
    outputs = await layer.score_requests(requests, SCORING_PARAMS, layer.reads_prefix_cache(cfg), counts)
    return [
        skill_score(out.extra_fields.get("prompt_logprobs"), len(prefix), len(ids), "mean")
        for out, ids in zip(outputs, requests, strict=True)
    ]


def _settle(job: asyncio.Future, futures: list[asyncio.Future], keys: list[tuple]) -> None:
    """Hand the pmi baselines computed by ``job`` to the futures the groups await; on a failure
    (or cancellation) forget them, so a later group computes them again."""
    error = RuntimeError("pmi baselines cancelled") if job.cancelled() else job.exception()
    for i, (future, key) in enumerate(zip(futures, keys, strict=True)):
        if error is not None and _BASELINES.get(key) is future:
            del _BASELINES[key]
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
            future.exception()  # retrieved here: a group that already gave up awaits it no more
        else:
            future.set_result(job.result()[i])


__all__ = [
    "SCORING_PARAMS",
    "VLLM_ONLY_KEYS",
    "common_prefix_len",
    "engine_params",
    "pmi_baselines",
    "scoring_request_ids",
    "token_logprobs",
]
