"""ARISE's Download channel as a component any verl agent loop composes (docs/agent_loops.md).

Per query group (once, shared by the group's trajectories through a per-worker future): read the
cache from the library replica and score every cache skill with the policy on the rollout engine
(``arise.selection.score_top_m`` = M > 0: only the M skills of highest library utility), in exactly
the context the hosting loop builds: its Continuous Token builder renders the messages with its
tool schemas (``tools``), then ``SKILL:`` and the skill tokens. Per trajectory: the control arm
(``arise.selection.control_share`` of each Phase II training group goes unaided), then the epsilon
draw and the confidence gate (Eq. 3), then ``SKILL:{json}`` is prepended to the last user turn,
unless the injected prompt would not fit ``rollout.prompt_length``. What was chosen travels on as a
:class:`~recipe.arise.core.trajectory.TrajectoryInfo` in ``extra_fields`` to the reward manager and
into the batch. An engine failure (an error of the engine or of Ray, a timeout, unusable numbers)
sends the group's trajectories unaided and is counted; a programming error (``TypeError``,
``KeyError``, ...) propagates, and any exception escaping the loop is recorded for the trainer,
which stops on a programming error (:mod:`recipe.arise.adapters.rollout_failures`). The scoring
requests' routing and the pmi baselines: :mod:`recipe.arise.adapters.scoring_requests`.

A loop gains ARISE in one step, :func:`with_skills` around its own ``run``::

    @register("my_arise_loop")
    class MyARISELoop(MyLoop):
        async def run(self, sampling_params, **kwargs):
            return await with_skills(self, super().run, sampling_params, kwargs)
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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from uuid import uuid4

import numpy as np

from recipe.arise.adapters.library_replica import get_replica, group_snapshot
from recipe.arise.adapters.rollout_failures import PROGRAMMING_ERRORS, is_programming_error, recorded
from recipe.arise.adapters.scoring_context import ScoringContext
from recipe.arise.adapters.scoring_requests import (
    SCORING_PARAMS,
    common_prefix_len,
    engine_params,
    pmi_baselines,
    scoring_request_ids,
    token_logprobs,
)
from recipe.arise.adapters.skill_host import AGENT_LOOPS, VERL_LOOPS, SkillLayerHost, check_agent_loop
from recipe.arise.adapters.validation_rows import is_validation_sample
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.calibration import resolve_temperature
from recipe.arise.core.prompts import format_skill_injection, inject_skill
from recipe.arise.core.scoring import (
    computed_ids_match,
    computed_rows,
    merge_cached_rows,
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
# reused by a later config while the entry exists (a freed config's id once served a stale entry).
# A worker sees one trainer config (tests a few): the oldest entries go beyond _MAX_CONFIGS.
_CONFIGS: dict[int, tuple[Any, ARISEConfig]] = {}
_MAX_CONFIGS = 8
_GROUPS: collections.OrderedDict[tuple, asyncio.Future] = collections.OrderedDict()
_MAX_GROUPS = 4096  # bound on remembered groups per worker process
_WARNED: set[str] = set()


def arise_config(trainer_config) -> ARISEConfig:
    """The ARISE section of a trainer config, parsed once per config object (the agent loop is
    instantiated per trajectory)."""
    cached = _CONFIGS.get(id(trainer_config))
    if cached is None or cached[0] is not trainer_config:
        cached = (trainer_config, ARISEConfig.from_trainer_config(trainer_config))
        _CONFIGS.pop(id(trainer_config), None)
        _CONFIGS[id(trainer_config)] = cached
        while len(_CONFIGS) > _MAX_CONFIGS:
            del _CONFIGS[next(iter(_CONFIGS))]
    return cached[1]


def _doc(text: str) -> SkillDoc:
    return SkillDoc.from_dict(json.loads(text))


def _rng(*parts) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(str(p).encode()) for p in parts])


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning(message)


def query_key(messages) -> str:
    """A stable name for a query: its messages' content. The seeded draws are keyed by
    (seed, step, query, session) — not verl's per-run random uid — so a run resumed from a
    checkpoint (verl restores the data order) draws what the uninterrupted run would have."""
    return f"{zlib.crc32(json.dumps(list(messages), sort_keys=True, default=str).encode()):08x}"


@dataclasses.dataclass
class Plan:
    """What :meth:`SkillLayer.prepare` decided for one trajectory. ``kwargs``: the loop's run
    arguments with ``raw_prompt`` holding the skill when one is injected; ``info``: the record
    (None when ARISE is off or has no library in this process: nothing is recorded);
    ``in_response``: with train_manager, the chosen skill the loop puts at the start of the
    response (then ``kwargs`` holds no skill)."""

    kwargs: dict
    info: TrajectoryInfo | None = None
    in_response: SelectedSkill | None = None


class SkillLayer:
    """ARISE's Download for one trajectory of the hosting agent loop ``host`` (a verl
    ``AgentLoopBase``; what is read of it: :class:`~recipe.arise.adapters.skill_host.SkillLayerHost`).
    ``tools``: the tool schemas the host renders its prompt with (None: none). ``skill_in_response``:
    the host implements train_manager (only ``arise_agent``); any other host refuses it."""

    def __init__(self, host: SkillLayerHost, tools: Sequence[dict] | None = None, skill_in_response: bool = False):
        self.host = host
        self.tools = list(tools) if tools is not None else None
        self.skill_in_response = skill_in_response

    # the host's pieces scoring uses (read through, so a test host's later changes are seen)
    @property
    def tokenizer(self):
        return self.host.tokenizer

    @property
    def rollout_config(self):
        return self.host.rollout_config

    @property
    def server_manager(self):
        return self.host.server_manager

    # ------------------------------------------------------------------ the loop-facing API
    async def prepare(self, kwargs: dict) -> Plan:
        """Snapshot, phase, control arm, scoring, epsilon, gate and injection for the trajectory
        whose run arguments are ``kwargs`` (verl's dataset fields, ``raw_prompt`` the messages)."""
        cfg = arise_config(self.host.config)
        replica = get_replica() if cfg.enable else None
        if replica is None:
            return Plan(kwargs=kwargs)
        if cfg.selection.train_manager and not self.skill_in_response:
            raise ValueError(
                f"arise.selection.train_manager=true needs an agent loop that puts the skill into the response "
                f"(arise_agent); {type(self.host).__name__} injects it into the user turn: set "
                "arise.selection.train_manager=false (docs/agent_loops.md)"
            )
        uid = kwargs.get("uid")
        snapshot = await group_snapshot(replica, None if uid is None else str(uid))  # one version per group
        validate = is_validation_sample(kwargs)  # the row's flag: training goes on while the trainer validates
        step = int(kwargs.get("global_steps", 0) or 0)
        phase = 2 if validate else cfg.phase(step)
        info = TrajectoryInfo(phase=phase, validate=validate, library_version=int(snapshot["version"]))
        plan = Plan(kwargs=kwargs, info=info)
        messages = list(kwargs["raw_prompt"])
        if not (phase == 2 and bool(snapshot["cache"]) and (cfg.validation.active or not validate)):
            return plan
        chosen = await self.select(cfg, snapshot, messages, kwargs, validate, plan.info)
        if chosen is None:
            return plan
        if cfg.selection.train_manager:
            plan.in_response = chosen
            return plan
        injected = inject_skill(messages, chosen.doc)
        if await self.fits(injected):
            plan.kwargs = {**kwargs, "raw_prompt": injected}
            plan.info.skill_id = chosen.skill_id
            plan.info.skill_tokens = len(
                self.tokenizer.encode(format_skill_injection(chosen.doc) + "\n", add_special_tokens=False)
            )
        else:
            plan.info.skill_overlong = True
        return plan

    @staticmethod
    def finish(output, plan: Plan):
        """Put the trajectory's ARISE record into ``output.extra_fields``; returns ``output``."""
        if plan.info is not None:
            output.extra_fields.update(plan.info.to_extra_fields())
        return output

    @property
    def context(self) -> ScoringContext:
        """The scoring context of the host: its Continuous Token builder, its tools (the trainer's
        calibration and exact IG build the same, :mod:`recipe.arise.adapters.scoring_context`)."""
        return ScoringContext(self.host.continuous_token_builder, self.tokenizer, self.tools)

    def context_ids(self, messages: Sequence[dict]) -> list[int]:
        """The prompt the host builds for ``messages``."""
        return self.context.chat_ids(messages)

    def scoring_prefix(self, messages: Sequence[dict], suffix: str) -> list[int]:
        """The scoring context: the host's prompt, then ``suffix`` tokenized on its own."""
        return self.context.prefix(messages, suffix)

    async def fits(self, messages) -> bool:
        """Whether the prompt fits ``rollout.prompt_length`` (verl left-truncates longer prompts,
        cutting the chat header): verl filtered the dataset without the skill's tokens."""
        ids = await self.host.loop.run_in_executor(None, lambda: self.context_ids(messages))
        return len(ids) <= self.rollout_config.prompt_length

    # ------------------------------------------------------------------ selection
    async def select(self, cfg, snapshot, messages, kwargs, validate, info: TrajectoryInfo) -> SelectedSkill | None:
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
                self.score_group(cfg, [cache[i] for i in candidates], messages, snapshot["version"])
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

    # ------------------------------------------------------------------ scoring
    def reads_prefix_cache(self, cfg) -> bool:
        """arise.selection.scoring_prefix_cache on a vLLM engine with its prefix cache enabled."""
        rollout = self.rollout_config
        return bool(
            cfg.selection.scoring_prefix_cache
            and getattr(rollout, "name", None) == "vllm"
            and getattr(rollout, "enable_prefix_caching", False)
        )

    async def score_group(
        self, cfg, cache, messages, version=None
    ) -> tuple[list[float], float, dict, str | None, list | None]:
        """(scores, seconds, token counts, error, per-skill :class:`ScoredSkill` with train_manager
        else None). An engine failure goes back as text (the group goes unaided); a programming
        error (:data:`PROGRAMMING_ERRORS`) propagates. Token counts: ``tokens`` the scoring
        prompts' tokens prefilled, ``cached`` those read from the prefix cache instead, ``rescored``
        the requests sent again without the cache (the pmi baselines this group computed included).
        ``version``: the library version of ``cache`` (the key of the pmi baselines; None: computed
        for this group alone)."""
        started = time.perf_counter()
        counts = {"tokens": 0, "cached": 0, "rescored": 0}
        train_manager = cfg.selection.train_manager
        norm = cfg.selection.score_norm
        prefix = self.scoring_prefix(messages, scoring_suffix(train_manager))
        requests = scoring_requests(self.tokenizer, prefix, [text for _, text in cache], cfg.selection.max_skill_tokens)
        try:
            jobs = [self.score_requests(requests, SCORING_PARAMS, self.reads_prefix_cache(cfg), counts)]
            if norm == "pmi":
                jobs.append(pmi_baselines(self, cfg, cache, version, counts))
            outputs, *baselines = await asyncio.wait_for(asyncio.gather(*jobs), timeout=cfg.selection.scoring_timeout_s)
        except Exception as e:
            if is_programming_error(e):  # ours, not the engine's: never "group unaided" (rollout_failures)
                raise
            logger.warning(f"ARISE skill scoring failed, the group goes unaided: {e!r}")
            return [], time.perf_counter() - started, counts, repr(e)[:200], None
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
        return scores, time.perf_counter() - started, counts, None, scored

    async def score_requests(self, requests, params, read_cache, counts) -> list:
        """One output per scoring request, each with the prompt log-probs of all its tokens (verl's
        layout: L entries for a prompt of L tokens, entry j the log-prob of token j + 1).

        All requests of the batch carry one routing id (``scoring_request_ids``), so they land
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
                request_id=ids[i],
                prompt_ids=requests[i],
                sampling_params=engine_params(sampling_params, self.rollout_config),
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


async def with_skills(
    loop,
    run: Callable[..., Awaitable[Any]],
    sampling_params: dict[str, Any],
    kwargs: dict,
    tools: Sequence[dict] | None = None,
):
    """The one step that gives an agent loop ARISE: ``run`` (the loop's own ``run``, e.g.
    ``super().run``) on the messages with the chosen skill injected, the record in the output's
    ``extra_fields``. ``tools``: the tool schemas ``loop`` renders its prompt with (default: its
    ``tool_schemas`` attribute, as verl's ``ToolAgentLoop`` has), so skills are scored in exactly
    the context the loop builds."""
    layer = SkillLayer(loop, tools if tools is not None else getattr(loop, "tool_schemas", None))

    async def session():
        plan = await layer.prepare(kwargs)
        return layer.finish(await run(sampling_params, **plan.kwargs), plan)

    return await recorded(session(), kwargs)  # an exception is told to the trainer (rollout_failures)


__all__ = [
    "AGENT_LOOPS",
    "PROGRAMMING_ERRORS",
    "VERL_LOOPS",
    "Plan",
    "SkillLayer",
    "SkillLayerHost",
    "arise_config",
    "check_agent_loop",
    "query_key",
    "with_skills",
]
