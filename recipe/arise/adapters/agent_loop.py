"""``arise_agent``: verl's single-turn agent loop plus the ARISE manager's Download channel.

Per query group (once, shared by the group's trajectories through a per-worker future): read the
cache from the skill pool and score every cache skill with the policy on the rollout engine
(``arise.selection.score_top_m`` = M > 0: only the M skills of highest library utility).
Per trajectory: the control arm (``arise.selection.control_share`` of each Phase II training
group goes unaided), then the epsilon draw and the confidence gate (Eq. 3), then ``SKILL:{json}``
is prepended to the user turn, unless the injected prompt would not fit ``rollout.prompt_length``.
What was chosen travels on in ``extra_fields`` (``arise_*`` keys) to the reward manager and into
the batch. A scoring failure (an engine error, a timeout, unusable numbers) sends the group's
trajectories unaided and is counted, never raised.

With ``arise.selection.train_manager`` the chosen skill instead opens the assistant turn
(``SKILL:{json}\\n`` then the solution), in exactly the tokens it was scored with, and its tokens are
policy tokens of the response (mask 1, rollout log-probs from the scoring request), so GRPO trains
the Manager's score log pi(skill | query) too (:meth:`ARISEAgentLoop._run_manager_trained`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import os
import time
import zlib
from typing import Any
from uuid import uuid4

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.utils.profiler import simple_timer

from recipe.arise.adapters.library_replica import get_pool
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.calibration import resolve_temperature
from recipe.arise.core.prompts import format_skill_injection, inject_skill
from recipe.arise.core.scoring import (
    computed_ids_match,
    computed_rows,
    merge_cached_rows,
    query_free_prefix_ids,
    scoring_prefix_ids,
    scoring_requests,
    scoring_suffix,
    skill_score,
    skill_token_logprobs,
)
from recipe.arise.core.selection import finite_scores, is_control_session, select_skill_detailed, top_m_candidates
from recipe.arise.core.skill import SkillDoc

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

# id(trainer config) -> (that config, its ARISEConfig); the config is held so its id cannot be
# reused by a later config while the entry exists (a freed config's id once served a stale entry)
_CONFIGS: dict[int, tuple[Any, ARISEConfig]] = {}
_GROUPS: collections.OrderedDict[tuple, asyncio.Future] = collections.OrderedDict()
_MAX_GROUPS = 4096  # bound on remembered groups per worker process
_WARNED: set[str] = set()
# score_norm=pmi: (library version, skill id, train_manager) -> future of the skill's mean log-prob in
# the query-free context, computed once per worker process and version and shared by its queries
_BASELINES: collections.OrderedDict[tuple, asyncio.Future] = collections.OrderedDict()


def _common_prefix_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def arise_config(trainer_config) -> ARISEConfig:
    """The ARISE section of a trainer config, parsed once per config object (the agent loop is
    instantiated per trajectory)."""
    cached = _CONFIGS.get(id(trainer_config))
    if cached is None or cached[0] is not trainer_config:
        cached = (trainer_config, ARISEConfig.from_trainer_config(trainer_config))
        _CONFIGS[id(trainer_config)] = cached
    return cached[1]


def _doc(text: str) -> SkillDoc:
    return SkillDoc.from_dict(json.loads(text))


def _rng(*parts) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(str(p).encode()) for p in parts])


def query_key(messages) -> str:
    """A stable name for a query: its messages' content. The seeded draws are keyed by
    (seed, step, query, session) — not verl's per-run random uid — so a run resumed from a
    checkpoint (verl restores the data order) draws what the uninterrupted run would have."""
    return f"{zlib.crc32(json.dumps(list(messages), sort_keys=True, default=str).encode()):08x}"


@dataclasses.dataclass(frozen=True)
class ScoredSkill:
    """train_manager: what the group's scoring request saw of one skill. ``prefix_ids`` is
    chat(query) + ``SKILL:``, ``skill_ids`` the scored skill tokens, ``logprobs`` their per-token
    log-probs from the request's prompt log-probs (None when the engine's numbers were unusable)."""

    prefix_ids: list[int]
    skill_ids: list[int]
    logprobs: list[float] | None


def default_info(phase: int, validate: bool) -> dict[str, Any]:
    """The ``arise_*`` fields every trajectory carries (the reward manager and metrics read them)."""
    return {
        "arise_phase": phase,
        "arise_validate": validate,
        "arise_skill_id": "",
        "arise_selected": False,
        "arise_control": False,  # in the group's unaided control arm
        "arise_gate_passed": None,
        "arise_explored": False,
        "arise_max_prob": None,
        "arise_scores": [],
        "arise_scoring_failed": False,
        "arise_scores_nonfinite": 0,
        "arise_skill_overlong": False,  # a chosen skill was dropped: the prompt would not fit
        "arise_skill_tokens": 0,
        # train_manager: the skill line is the first arise_skill_tokens tokens of the response
        "arise_skill_in_response": False,
        "arise_scorer": False,  # this trajectory ran the group's scoring (its cost is counted here)
        "arise_scoring_s": 0.0,
        "arise_scoring_tokens": 0,  # scoring prompt tokens prefilled (computed) for the group
        "arise_scoring_cached_tokens": 0,  # ... read from vLLM's prefix cache instead
        "arise_scoring_rescored": 0,  # scoring requests sent again without the prefix cache
    }


@register("arise_agent")
class ARISEAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        cfg = arise_config(self.config)
        pool = get_pool() if cfg.enable else None
        if pool is None:
            return await super().run(sampling_params, **kwargs)

        snapshot = await pool.snapshot.remote()
        validate = snapshot["mode"] == "val"
        step = int(kwargs.get("global_steps", 0) or 0)
        phase = 2 if validate else cfg.phase(step)
        info = default_info(phase, validate)
        messages = list(kwargs["raw_prompt"])
        active = phase == 2 and bool(snapshot["cache"]) and (cfg.validation.active or not validate)
        if active:
            chosen = await self._select(cfg, snapshot, messages, kwargs, validate, info)
            # ---- train_manager: the skill opens the response, scored and trained there
            if chosen is not None and cfg.selection.train_manager:
                output = await self._run_manager_trained(sampling_params, kwargs, messages, chosen[0], chosen[2], info)
                if output is not None:
                    return output
                chosen = None  # it did not fit or its numbers were unusable: unaided (counted)
            # ---- end train_manager
            if chosen is not None:
                skill_id, doc = chosen[0], chosen[1]
                injected = inject_skill(messages, doc)
                if await self._fits(injected):
                    messages = injected
                    info["arise_skill_id"] = skill_id
                    info["arise_skill_tokens"] = len(
                        self.tokenizer.encode(format_skill_injection(doc) + "\n", add_special_tokens=False)
                    )
                else:
                    info["arise_skill_overlong"] = True
        output = await super().run(sampling_params, **{**kwargs, "raw_prompt": messages})
        output.extra_fields.update(info)
        return output

    async def _fits(self, messages) -> bool:
        """Whether the prompt fits ``rollout.prompt_length`` (verl left-truncates longer prompts,
        cutting the chat header): verl filtered the dataset without the skill's tokens."""
        ids = await self.loop.run_in_executor(
            None, lambda: self.continuous_token_builder.build_initial_tokens(messages)
        )
        return len(ids) <= self.prompt_length

    async def _select(self, cfg, snapshot, messages, kwargs, validate, info):
        sel = cfg.selection
        uid = str(kwargs.get("uid", uuid4().hex))
        session = int(kwargs.get("session_id", 0))
        step = kwargs.get("global_steps", 0)
        cache = snapshot["cache"]
        n = self.rollout_config.val_kwargs.n if validate else self.rollout_config.n
        if not validate and is_control_session(session, n, sel.control_share):
            info["arise_control"] = True
            return None

        qkey = query_key(messages)
        if sel.random:  # ablation (b): no scoring, no gate
            index = int(_rng(cfg.seed, step, qkey, session).integers(len(cache)))
            info.update(arise_selected=True, arise_gate_passed=True)
            return cache[index][0], _doc(cache[index][1])

        # score_top_m: only the M cache skills of highest utility are scored and are candidates
        utilities = snapshot.get("utilities")
        if sel.score_top_m and utilities is None and "utilities" not in _WARNED:
            _WARNED.add("utilities")
            logger.warning(
                "arise.selection.score_top_m is set but the skill pool publishes no utilities: "
                "the first M cache skills are scored"
            )
        candidates = top_m_candidates(len(cache), sel.score_top_m, utilities)
        # every session of a query (rollout.n in training, val_kwargs.n at evaluation) carries the
        # same uid, so the group's scoring runs once and its sessions await one future
        key = (uid, snapshot["version"], validate)
        future = _GROUPS.get(key)
        if future is None:
            future = asyncio.ensure_future(
                self._score_group(cfg, [cache[i] for i in candidates], messages, snapshot["version"])
            )
            _GROUPS[key] = future
            while len(_GROUPS) > _MAX_GROUPS:
                _GROUPS.popitem(last=False)
            # the trajectory that started the group's scoring carries its cost (once per group)
            info["arise_scorer"] = True
        scores, seconds, counts, error, scored = await future
        if info["arise_scorer"]:
            info.update(
                arise_scoring_s=seconds,
                arise_scoring_tokens=counts["tokens"],
                arise_scoring_cached_tokens=counts["cached"],
                arise_scoring_rescored=counts["rescored"],
            )
        if error is not None:
            info["arise_scoring_failed"] = True
            return None
        scores, nonfinite = finite_scores(scores)
        info["arise_scores_nonfinite"] = nonfinite
        if not np.isfinite(scores).any():
            info["arise_scoring_failed"] = True
            return None
        epsilon = sel.val_epsilon if validate else sel.epsilon
        draw_parts = (cfg.seed, step, qkey) if sel.granularity == "query" else (cfg.seed, step, qkey, session)
        choice = select_skill_detailed(
            scores,
            temperature=resolve_temperature(sel.temperature, snapshot.get("sigma"), sel.initial_temperature),
            epsilon=epsilon,
            gate=sel.gate if sel.use_gate else 0.0,
            rng=_rng(*draw_parts),
        )
        info.update(
            arise_scores=[float(s) for s in scores],
            arise_max_prob=choice.max_prob,
            arise_gate_passed=bool(choice.gate_passed),
            arise_explored=bool(choice.explored),
        )
        if choice.index is None:
            return None
        info["arise_selected"] = True
        skill_id, text = cache[candidates[choice.index]]
        if sel.train_manager:
            return skill_id, _doc(text), scored[choice.index]
        return skill_id, _doc(text)

    def _scoring_reads_prefix_cache(self, cfg) -> bool:
        """arise.selection.scoring_prefix_cache on a vLLM engine with its prefix cache enabled."""
        rollout = self.rollout_config
        return bool(
            cfg.selection.scoring_prefix_cache
            and getattr(rollout, "name", None) == "vllm"
            and getattr(rollout, "enable_prefix_caching", False)
        )

    async def _score_group(
        self, cfg, cache, messages, version=None
    ) -> tuple[list[float], float, dict, str | None, list | None]:
        """(scores, seconds, token counts, error, per-skill :class:`ScoredSkill` with train_manager
        else None). Never raises: an error goes back as text. Token counts: ``tokens`` the scoring
        prompts' tokens prefilled, ``cached`` those read from the prefix cache instead, ``rescored``
        the requests sent again without the cache (the pmi baselines this group computed included).
        ``version``: the library version of ``cache`` (the key of the pmi baselines; None: computed
        for this group alone)."""
        started = time.perf_counter()
        counts = {"tokens": 0, "cached": 0, "rescored": 0}
        train_manager = cfg.selection.train_manager
        norm = cfg.selection.score_norm
        try:
            prefix = scoring_prefix_ids(
                self.tokenizer, messages, scoring_suffix(train_manager), **self.apply_chat_template_kwargs
            )
            requests = scoring_requests(
                self.tokenizer, prefix, [text for _, text in cache], cfg.selection.max_skill_tokens
            )
            jobs = [self._score_requests(requests, _SCORING_PARAMS, self._scoring_reads_prefix_cache(cfg), counts)]
            if norm == "pmi":
                jobs.append(_pmi_baselines(self, cfg, cache, version, counts))
            outputs, *baselines = await asyncio.wait_for(asyncio.gather(*jobs), timeout=cfg.selection.scoring_timeout_s)
            baselines = baselines[0] if baselines else [None] * len(cache)
            scores = [
                skill_score(out.extra_fields.get("prompt_logprobs"), len(prefix), len(ids), norm, baseline)
                for out, ids, baseline in zip(outputs, requests, baselines, strict=True)
            ]
            scored = None
            if train_manager:
                scored = [
                    ScoredSkill(prefix, ids[len(prefix) :], _token_logprobs(out, len(prefix), len(ids)))
                    for out, ids in zip(outputs, requests, strict=True)
                ]
        except Exception as e:  # the engine errored or timed out: the group goes unaided
            logger.warning(f"ARISE skill scoring failed, the group goes unaided: {e!r}")
            return [], time.perf_counter() - started, counts, repr(e)[:200], None
        return scores, time.perf_counter() - started, counts, None, scored

    async def _score_requests(self, requests, params, read_cache, counts) -> list:
        """One output per scoring request, each with the prompt log-probs of all its tokens (verl's
        layout: L entries for a prompt of L tokens, entry j the log-prob of token j + 1).

        All requests of the batch carry one routing id (:func:`_scoring_request_ids`), so they land
        on one replica. Without the prefix cache (vLLM's default for a ``prompt_logprobs`` request)
        they all go at once, each prefilling query + skill. With it, the first goes alone, as usual
        (every row computed), and puts its blocks in the cache; the others then read them
        (``skip_reading_prefix_cache=False``) and prefill only from the first block they do not
        share with it: the skill, minus the JSON head all skills begin with. vLLM gives no prompt
        log-probs for the positions a request read from the cache: its V1 model runner returns the
        whole prompt's rows with uninitialised memory there, its V2 runner only the computed rows
        (``scoring.computed_rows``, told apart by length, per request). The rows a request read are
        taken from the first request (or another one already complete) where the two prompts agree
        up to the row's token: row j (the log-prob of token j + 1) needs tokens 0..j + 1 equal. A
        request whose hit reaches past every such agreement (the cache held its blocks from
        elsewhere, e.g. the same question twice in a batch), that reports no ``num_cached_tokens``,
        or whose rows fit neither layout (or disagree with verl's ``prompt_ids``) is sent again
        without the cache (``counts["rescored"]``). ``detokenize=False``: no text is needed, and
        vLLM then does not decode the cached rows' token ids."""
        ids = _scoring_request_ids(self.rollout_config, len(requests))

        def send(i, sampling_params):
            return self.server_manager.generate(
                request_id=ids[i], prompt_ids=requests[i], sampling_params=dict(sampling_params)
            )

        if not read_cache or len(requests) < 2:
            counts["tokens"] += sum(len(r) for r in requests)
            return list(await asyncio.gather(*[send(i, params) for i in range(len(requests))]))
        first = await send(0, params)
        counts["tokens"] += len(requests[0])
        reading = {**params, "skip_reading_prefix_cache": False, "detokenize": False}
        outputs = [first, *await asyncio.gather(*[send(i, reading) for i in range(1, len(requests))])]
        # a row read from the cache comes from a request whose rows are all known (the first, or one
        # completed here) and whose tokens agree up to that row's token
        complete, pending, attempt = [0], [], {}
        for i in range(1, len(requests)):
            fields, length = outputs[i].extra_fields, len(requests[i])
            hit, rows = fields.get("num_cached_tokens"), fields.get("prompt_logprobs")
            valid = isinstance(hit, int) and not isinstance(hit, bool) and 0 <= hit < length
            attempt[i] = length - hit if valid else length  # what it prefilled
            if not valid or rows is None:
                continue
            token_ids = fields.get("prompt_ids")
            if computed_rows(rows, length, hit) is None or (
                token_ids is not None and not computed_ids_match(token_ids, requests[i], hit)
            ):
                _warn_once(
                    "layout",
                    f"ARISE scoring: a request with {length} prompt tokens, {hit} of them cached, got "
                    f"{len(rows)} prompt log-probs (expected {length} or {length - hit}); such requests "
                    "are scored again without the prefix cache (arise/scoring_rescored)",
                )
                continue
            if hit == 0:  # nothing read from the cache: every row its own, in either layout
                counts["tokens"] += length
                complete.append(i)
            else:
                pending.append((i, hit))
        progress = True
        while pending and progress:
            progress, waiting = False, []
            for i, hit in pending:
                source = max(complete, key=lambda c: _common_prefix_len(requests[i], requests[c]))
                if hit > _common_prefix_len(requests[i], requests[source]) - 1:
                    waiting.append((i, hit))
                    continue
                fields = outputs[i].extra_fields
                fields["prompt_logprobs"] = merge_cached_rows(
                    outputs[source].extra_fields["prompt_logprobs"], fields["prompt_logprobs"], len(requests[i]), hit
                )
                counts["tokens"] += len(requests[i]) - hit
                counts["cached"] += hit
                complete.append(i)
                progress = True
            pending = waiting
        again = sorted(set(range(1, len(requests))) - set(complete))
        if again:
            redone = await asyncio.gather(*[send(i, params) for i in again])
            for i, out in zip(again, redone, strict=True):
                outputs[i] = out
                counts["tokens"] += attempt[i] + len(requests[i])
            counts["rescored"] += len(again)
        return outputs

    # ------------------------------------------------------------------ train_manager
    async def _run_manager_trained(
        self, sampling_params: dict[str, Any], kwargs: dict, messages: list, skill_id: str, scored, info: dict
    ) -> AgentLoopOutput | None:
        """The trajectory with the skill at the start of the assistant turn (train_manager).

        prompt = chat(query); response = ``SKILL:`` + the scored skill tokens + ``\\n`` + the
        generated solution, built with verl's Continuous Token merge like ``SingleTurnAgentLoop``.
        Mask 1 on the skill tokens (exactly the scored ones, so GRPO moves s_k), 0 on the
        ``SKILL:`` and ``\\n`` format tokens (forced, the same for every skill); rollout log-probs of
        the skill tokens from the scoring request. Returns None (the caller goes unaided, counted)
        when the skill line leaves no room in ``rollout.response_length``, when the engine's numbers
        for it were unusable, or when verl's prompt is not the scoring context.
        """
        prompt_ids = await self.ct_build_initial_tokens(messages)
        head = scored.prefix_ids[len(prompt_ids) :]  # the "SKILL:" tokens
        if scored.prefix_ids[: len(prompt_ids)] != prompt_ids or not head:
            logger.warning("ARISE train_manager: verl's prompt is not the scoring context; unaided")
            info["arise_scoring_failed"] = True
            return None
        if scored.logprobs is None:
            info["arise_scores_nonfinite"] = max(1, int(info["arise_scores_nonfinite"]))
            return None
        newline = list(self.tokenizer.encode("\n", add_special_tokens=False))
        lead = head + list(scored.skill_ids) + newline
        if len(lead) >= self.response_length:
            info["arise_skill_overlong"] = True
            return None

        params = dict(sampling_params)
        budget = self.response_length - len(lead)
        params["max_tokens"] = min(int(params.get("max_tokens", budget)), budget)
        priority = int(kwargs.get("priority", 0) or 0)
        metrics = {}
        with simple_timer("generate_sequences", metrics):
            deterministic = getattr(self.rollout_config, "full_determinism", False)
            output = await self.server_manager.generate(
                request_id=f"det-{priority}" if deterministic else uuid4().hex,
                prompt_ids=prompt_ids + lead,
                sampling_params=params,
                priority=priority,
            )
        if metrics.get("num_preempted") is None:
            metrics["num_preempted"] = (
                output.num_preempted if getattr(output, "num_preempted", None) is not None else -1
            )

        generated = list(output.token_ids)
        want_logprobs = bool(output.log_probs) or bool(sampling_params.get("logprobs"))
        lead_logprobs = [0.0] * len(head) + [float(x) for x in scored.logprobs] + [0.0] * len(newline)
        merge, mask, logprobs = await self.ct_merge_assistant_token(
            prompt_ids,
            lead + generated,
            [],
            [] if want_logprobs else None,
            assistant_logprobs=lead_logprobs + list(output.log_probs or []) if want_logprobs else None,
        )
        start = len(mask) - merge.appended_token_count  # where the appended (lead) tokens begin
        for i in [*range(len(head)), *range(len(head) + len(scored.skill_ids), len(lead))]:
            mask[start + i] = 0  # format tokens: no loss (their log-probs are already 0.0)
        response_ids = merge.token_ids[len(merge.token_ids) - len(mask) :]
        prompt_ids = merge.token_ids[: len(merge.token_ids) - len(mask)]
        limit = self.response_length
        routed = getattr(output, "routed_experts", None)
        result = AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:limit],
            response_mask=mask[:limit],
            response_logprobs=logprobs[:limit] if logprobs is not None else None,
            routed_experts=routed[: len(prompt_ids) + limit] if routed is not None else None,
            multi_modal_data={},
            num_turns=2,
            metrics=metrics,
            extra_fields=dict(output.extra_fields or {}),
        )
        result.extra_fields.update({"turn_scores": [], "tool_rewards": []})
        info.update(arise_skill_id=skill_id, arise_skill_in_response=True, arise_skill_tokens=len(lead))
        result.extra_fields.update(info)
        return result


def _token_logprobs(output, prefix_len: int, total_len: int) -> list[float] | None:
    """The skill tokens' prompt log-probs of one scoring request, or None if unusable."""
    try:
        values = [
            float(v) for v in skill_token_logprobs(output.extra_fields.get("prompt_logprobs"), prefix_len, total_len)
        ]
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return values if all(np.isfinite(values)) else None


def _scoring_request_ids(rollout, n: int) -> list[str]:
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


async def _pmi_baselines(loop, cfg, cache, version, counts) -> list[float]:
    """score_norm=pmi: each cache skill's mean log-prob in the query-free context
    (``scoring.query_free_prefix_ids``), one request per skill per library version in this
    worker process, shared by all its queries (each agent-loop worker computes its own). The
    group that finds a skill's baseline missing computes it (its cost in that group's
    ``counts``); the others await the same future. A failure is not kept: the next group
    tries again."""
    train_manager = cfg.selection.train_manager
    running = asyncio.get_running_loop()
    keys = [(version, skill_id, train_manager) for skill_id, _ in cache]
    futures, missing = [], []
    for i, key in enumerate(keys):
        future = _BASELINES.get(key) if version is not None else None
        if future is None or (not future.done() and future.get_loop() is not running):
            future = running.create_future()
            missing.append(i)
            if version is not None:
                _BASELINES[key] = future
        futures.append(future)
    while len(_BASELINES) > _MAX_GROUPS:
        _BASELINES.popitem(last=False)
    if missing:
        job = asyncio.ensure_future(_compute_baselines(loop, cfg, [cache[i] for i in missing], counts))
        job.add_done_callback(lambda done: _settle(done, [futures[i] for i in missing], [keys[i] for i in missing]))
    return list(await asyncio.gather(*[_baseline(f) for f in futures]))


async def _baseline(future: asyncio.Future) -> float:
    if future.done():  # its value (a future of an earlier event loop is read, never awaited)
        return future.result()
    # shielded: a group that times out leaves the shared computation running for the others
    return await asyncio.shield(future)


async def _compute_baselines(loop, cfg, cache, counts) -> list[float]:
    """The mean log-prob of each skill of ``cache`` after the query-free context: the scoring
    requests of a query, with the query left out (the same skill tokens, suffix and routing)."""
    suffix = scoring_suffix(cfg.selection.train_manager)
    prefix = query_free_prefix_ids(loop.tokenizer, suffix, **loop.apply_chat_template_kwargs)
    requests = scoring_requests(loop.tokenizer, prefix, [text for _, text in cache], cfg.selection.max_skill_tokens)
    outputs = await loop._score_requests(requests, _SCORING_PARAMS, loop._scoring_reads_prefix_cache(cfg), counts)
    return [
        skill_score(out.extra_fields.get("prompt_logprobs"), len(prefix), len(ids), "mean")
        for out, ids in zip(outputs, requests, strict=True)
    ]


# a scoring request: its prompt log-probs only (one token generated, no text needed)
_SCORING_PARAMS = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "prompt_logprobs": 0}


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning(message)


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


__all__ = ["ARISEAgentLoop", "ScoredSkill", "arise_config", "default_info"]
