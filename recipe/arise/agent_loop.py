"""``arise_agent``: verl's single-turn agent loop plus the ARISE manager's Download channel.

Per query group (once, shared by the group's G trajectories through a per-worker future): read
the cache from the skill pool and score every cache skill with the policy on the rollout engine.
Per trajectory: the epsilon draw and the confidence gate (Eq. 3), then ``SKILL:{json}`` is
prepended to the user turn. What was chosen travels on in ``extra_fields`` (``arise_*`` keys)
to the reward manager and into the batch.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
import zlib
from typing import Any
from uuid import uuid4

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from recipe.arise.arise_config import ARISEConfig
from recipe.arise.pool import get_pool
from recipe.arise.prompts import format_skill_injection, inject_skill
from recipe.arise.scoring import scoring_prefix_ids, scoring_requests, skill_logprob_sum
from recipe.arise.selection import select_skill_detailed
from recipe.arise.skill import SkillDoc

_CONFIGS: dict[int, ARISEConfig] = {}
_GROUPS: collections.OrderedDict[tuple, asyncio.Future] = collections.OrderedDict()
_MAX_GROUPS = 4096  # bound on remembered groups per worker process


def arise_config(trainer_config) -> ARISEConfig:
    key = id(trainer_config)
    if key not in _CONFIGS:
        _CONFIGS[key] = ARISEConfig.from_trainer_config(trainer_config)
    return _CONFIGS[key]


def _doc(text: str) -> SkillDoc:
    return SkillDoc.from_dict(json.loads(text))


def _rng(*parts) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(str(p).encode()) for p in parts])


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
        info: dict[str, Any] = {
            "arise_phase": phase,
            "arise_validate": validate,
            "arise_skill_id": "",
            "arise_selected": False,
            "arise_gate_passed": None,
            "arise_explored": False,
            "arise_max_prob": None,
            "arise_scores": [],
            "arise_skill_tokens": 0,
            "arise_scoring_s": 0.0,
            "arise_scoring_tokens": 0,
        }
        messages = list(kwargs["raw_prompt"])
        active = phase == 2 and bool(snapshot["cache"]) and (cfg.validation.active or not validate)
        if active:
            chosen = await self._select(cfg, snapshot, messages, kwargs, validate, info)
            if chosen is not None:
                skill_id, doc = chosen
                messages = inject_skill(messages, doc)
                info["arise_skill_id"] = skill_id
                info["arise_skill_tokens"] = len(
                    self.tokenizer.encode(format_skill_injection(doc) + "\n", add_special_tokens=False)
                )
        output = await super().run(sampling_params, **{**kwargs, "raw_prompt": messages})
        output.extra_fields.update(info)
        return output

    async def _select(self, cfg, snapshot, messages, kwargs, validate, info):
        sel = cfg.selection
        uid = str(kwargs.get("uid", uuid4().hex))
        session = int(kwargs.get("session_id", 0))
        step = kwargs.get("global_steps", 0)
        cache = snapshot["cache"]
        n = self.rollout_config.val_kwargs.n if validate else self.rollout_config.n
        if not validate and session < round(sel.mix_unaided * n):
            return None  # forced unaided trajectory of a mixed group

        if sel.random:  # ablation (b): no scoring, no gate
            index = int(_rng(cfg.seed, step, uid, session).integers(len(cache)))
            info.update(arise_selected=True, arise_gate_passed=True)
            return cache[index][0], _doc(cache[index][1])

        key = (uid, snapshot["version"], validate)
        future = _GROUPS.get(key)
        if future is None:
            future = asyncio.ensure_future(self._score_group(cfg, cache, messages))
            _GROUPS[key] = future
            while len(_GROUPS) > _MAX_GROUPS:
                _GROUPS.popitem(last=False)
        scores, seconds, scoring_tokens = await future
        epsilon = sel.val_epsilon if validate else sel.epsilon
        draw_parts = (cfg.seed, step, uid) if sel.granularity == "query" else (cfg.seed, step, uid, session)
        choice = select_skill_detailed(
            scores,
            temperature=sel.temperature,
            epsilon=epsilon,
            gate=sel.gate if sel.use_gate else 0.0,
            rng=_rng(*draw_parts),
        )
        info.update(
            arise_scores=[float(s) for s in scores],
            arise_max_prob=choice.max_prob,
            arise_gate_passed=bool(choice.gate_passed),
            arise_explored=bool(choice.explored),
            # count a group's scoring once
            arise_scoring_s=seconds if session == 0 else 0.0,
            arise_scoring_tokens=scoring_tokens if session == 0 else 0,
        )
        if choice.index is None:
            return None
        info["arise_selected"] = True
        skill_id, text = cache[choice.index]
        return skill_id, _doc(text)

    async def _score_group(self, cfg, cache, messages) -> tuple[list[float], float, int]:
        started = time.perf_counter()
        prefix = scoring_prefix_ids(self.tokenizer, messages, **self.apply_chat_template_kwargs)
        requests = scoring_requests(self.tokenizer, prefix, [text for _, text in cache], cfg.selection.max_skill_tokens)
        params = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "prompt_logprobs": 0}
        outputs = await asyncio.gather(
            *[
                self.server_manager.generate(request_id=uuid4().hex, prompt_ids=ids, sampling_params=dict(params))
                for ids in requests
            ]
        )
        scores = [
            skill_logprob_sum(out.extra_fields["prompt_logprobs"], len(prefix), len(ids))
            for out, ids in zip(outputs, requests, strict=True)
        ]
        return scores, time.perf_counter() - started, sum(len(ids) for ids in requests)


__all__ = ["ARISEAgentLoop", "arise_config"]
