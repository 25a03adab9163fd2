"""``arise_agent``: verl's single-turn agent loop plus the ARISE manager's Download channel.

Per query group (once, shared by the group's trajectories through a per-worker future): read the
cache from the library replica and score every cache skill with the policy on the rollout engine
(``arise.selection.score_top_m`` = M > 0: only the M skills of highest library utility).
Per trajectory: the control arm (``arise.selection.control_share`` of each Phase II training
group goes unaided), then the epsilon draw and the confidence gate (Eq. 3), then ``SKILL:{json}``
is prepended to the user turn, unless the injected prompt would not fit ``rollout.prompt_length``.
What was chosen travels on as a :class:`~recipe.arise.core.trajectory.TrajectoryInfo` in
``extra_fields`` to the reward manager and into the batch. A scoring failure (an engine error, a
timeout, unusable numbers) sends the group's trajectories unaided and is counted, never raised.
The scoring requests' routing and the pmi baselines: :mod:`recipe.arise.adapters.scoring_requests`.

With ``arise.selection.train_manager`` the chosen skill instead opens the assistant turn
(``SKILL:{json}\\n`` then the solution), in exactly the tokens it was scored with, and its tokens are
policy tokens of the response (mask 1, rollout log-probs from the scoring request), so GRPO trains
the Manager's score log pi(skill | query) too (:meth:`ARISEAgentLoop._run_manager_trained`).
"""

from __future__ import annotations

import asyncio
import collections
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

from recipe.arise.adapters.library_replica import get_replica
from recipe.arise.adapters.scoring_requests import (
    SCORING_PARAMS,
    common_prefix_len,
    pmi_baselines,
    scoring_request_ids,
    token_logprobs,
)
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.calibration import resolve_temperature
from recipe.arise.core.prompts import format_skill_injection, inject_skill
from recipe.arise.core.scoring import (
    computed_ids_match,
    computed_rows,
    merge_cached_rows,
    scoring_prefix_ids,
    scoring_requests,
    scoring_suffix,
    skill_score,
)
from recipe.arise.core.selection import finite_scores, is_control_session, select_skill_detailed, top_m_candidates
from recipe.arise.core.skill import SkillDoc
from recipe.arise.core.trajectory import ScoredSkill, SelectedSkill, TrajectoryInfo

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

# id(trainer config) -> (that config, its ARISEConfig); the config is held so its id cannot be
# reused by a later config while the entry exists (a freed config's id once served a stale entry)
_CONFIGS: dict[int, tuple[Any, ARISEConfig]] = {}
_GROUPS: collections.OrderedDict[tuple, asyncio.Future] = collections.OrderedDict()
_MAX_GROUPS = 4096  # bound on remembered groups per worker process
_WARNED: set[str] = set()


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


@register("arise_agent")
class ARISEAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        cfg = arise_config(self.config)
        replica = get_replica() if cfg.enable else None
        if replica is None:
            return await super().run(sampling_params, **kwargs)

        snapshot = await replica.snapshot.remote()
        validate = snapshot["mode"] == "val"
        step = int(kwargs.get("global_steps", 0) or 0)
        phase = 2 if validate else cfg.phase(step)
        info = TrajectoryInfo(phase=phase, validate=validate)
        messages = list(kwargs["raw_prompt"])
        active = phase == 2 and bool(snapshot["cache"]) and (cfg.validation.active or not validate)
        if active:
            chosen = await self._select(cfg, snapshot, messages, kwargs, validate, info)
            # ---- train_manager: the skill opens the response, scored and trained there
            if chosen is not None and cfg.selection.train_manager:
                output = await self._run_manager_trained(
                    sampling_params, kwargs, messages, chosen.skill_id, chosen.scored, info
                )
                if output is not None:
                    return output
                chosen = None  # it did not fit or its numbers were unusable: unaided (counted)
            # ---- end train_manager
            if chosen is not None:
                injected = inject_skill(messages, chosen.doc)
                if await self._fits(injected):
                    messages = injected
                    info.skill_id = chosen.skill_id
                    info.skill_tokens = len(
                        self.tokenizer.encode(format_skill_injection(chosen.doc) + "\n", add_special_tokens=False)
                    )
                else:
                    info.skill_overlong = True
        output = await super().run(sampling_params, **{**kwargs, "raw_prompt": messages})
        output.extra_fields.update(info.to_extra_fields())
        return output

    async def _fits(self, messages) -> bool:
        """Whether the prompt fits ``rollout.prompt_length`` (verl left-truncates longer prompts,
        cutting the chat header): verl filtered the dataset without the skill's tokens."""
        ids = await self.loop.run_in_executor(
            None, lambda: self.continuous_token_builder.build_initial_tokens(messages)
        )
        return len(ids) <= self.prompt_length

    async def _select(self, cfg, snapshot, messages, kwargs, validate, info: TrajectoryInfo) -> SelectedSkill | None:
        """The skill for one trajectory (None: unaided); what happened goes into ``info``."""
        sel = cfg.selection
        uid = str(kwargs.get("uid", uuid4().hex))
        session = int(kwargs.get("session_id", 0))
        step = kwargs.get("global_steps", 0)
        cache = snapshot["cache"]
        n = self.rollout_config.val_kwargs.n if validate else self.rollout_config.n
        if not validate and is_control_session(session, n, sel.control_share):
            info.control = True
            return None

        qkey = query_key(messages)
        if sel.random:  # ablation (b): no scoring, no gate
            index = int(_rng(cfg.seed, step, qkey, session).integers(len(cache)))
            info.selected, info.gate_passed = True, True
            return SelectedSkill(cache[index][0], _doc(cache[index][1]))

        # score_top_m: only the M cache skills of highest utility are scored and are candidates
        utilities = snapshot.get("utilities")
        if sel.score_top_m and utilities is None:
            _warn_once(
                "utilities",
                "arise.selection.score_top_m is set but the library replica publishes no utilities: "
                "the first M cache skills are scored",
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
            info.scorer = True
        scores, seconds, counts, error, scored = await future
        if info.scorer:
            info.scoring_s = seconds
            info.scoring_tokens = counts["tokens"]
            info.scoring_cached_tokens = counts["cached"]
            info.scoring_rescored = counts["rescored"]
        if error is not None:
            info.scoring_failed = True
            return None
        scores, nonfinite = finite_scores(scores)
        info.scores_nonfinite = nonfinite
        if not np.isfinite(scores).any():
            info.scoring_failed = True
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
        info.scores = [float(s) for s in scores]
        info.max_prob = choice.max_prob
        info.gate_passed = bool(choice.gate_passed)
        info.explored = bool(choice.explored)
        if choice.index is None:
            return None
        info.selected = True
        skill_id, text = cache[candidates[choice.index]]
        return SelectedSkill(skill_id, _doc(text), scored[choice.index] if sel.train_manager else None)

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
            jobs = [self._score_requests(requests, SCORING_PARAMS, self._scoring_reads_prefix_cache(cfg), counts)]
            if norm == "pmi":
                jobs.append(pmi_baselines(self, cfg, cache, version, counts))
            outputs, *baselines = await asyncio.wait_for(asyncio.gather(*jobs), timeout=cfg.selection.scoring_timeout_s)
            baselines = baselines[0] if baselines else [None] * len(cache)
            scores = [
                skill_score(out.extra_fields.get("prompt_logprobs"), len(prefix), len(ids), norm, baseline)
                for out, ids, baseline in zip(outputs, requests, baselines, strict=True)
            ]
            scored = None
            if train_manager:
                scored = [
                    ScoredSkill(prefix, ids[len(prefix) :], token_logprobs(out, len(prefix), len(ids)))
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
        ids = scoring_request_ids(self.rollout_config, len(requests))

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
                source = max(complete, key=lambda c: common_prefix_len(requests[i], requests[c]))
                if hit > common_prefix_len(requests[i], requests[source]) - 1:
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
        self,
        sampling_params: dict[str, Any],
        kwargs: dict,
        messages: list,
        skill_id: str,
        scored: ScoredSkill,
        info: TrajectoryInfo,
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
            info.scoring_failed = True
            return None
        if scored.logprobs is None:
            info.scores_nonfinite = max(1, info.scores_nonfinite)
            return None
        newline = list(self.tokenizer.encode("\n", add_special_tokens=False))
        lead = head + list(scored.skill_ids) + newline
        if len(lead) >= self.response_length:
            info.skill_overlong = True
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
        info.skill_id, info.skill_in_response, info.skill_tokens = skill_id, True, len(lead)
        result.extra_fields.update(info.to_extra_fields())
        return result


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning(message)


__all__ = ["ARISEAgentLoop", "ScoredSkill", "SelectedSkill", "TrajectoryInfo", "arise_config"]
