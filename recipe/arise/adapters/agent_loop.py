"""``arise_agent``: verl's single-turn agent loop carrying the ARISE skill layer.

Download (scoring, control arm, epsilon, gate, injection, the trajectory record) is
:class:`~recipe.arise.adapters.skill_layer.SkillLayer`, which any agent loop composes
(docs/agent_loops.md); here it wraps verl's ``SingleTurnAgentLoop.run`` unchanged: the chosen skill
is prepended to the user turn and verl builds, generates and merges as usual.

With ``arise.selection.train_manager`` the chosen skill instead opens the assistant turn
(``SKILL:{json}\\n`` then the solution), in exactly the tokens it was scored with, and its tokens are
policy tokens of the response (mask 1, rollout log-probs from the scoring request), so GRPO trains
the Manager's score log pi(skill | query) too. That also runs verl's own ``run`` (multimodal fields,
metrics and all): only its one engine request is continued after the skill line
(:class:`_SkillLineServer`), then the format tokens' mask is set to 0 (:meth:`ARISEAgentLoop._run_skill_in_response`).
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from recipe.arise.adapters.rollout_failures import recorded
from recipe.arise.adapters.skill_layer import Plan, SkillLayer, arise_config, query_key
from recipe.arise.core.scoring import scoring_suffix
from recipe.arise.core.trajectory import ScoredSkill, SelectedSkill, TrajectoryInfo

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))


@register("arise_agent")
class ARISEAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        # an exception escaping the session is told to the trainer (rollout_failures), then raised
        return await recorded(self._run_session(sampling_params, kwargs), kwargs)

    async def _run_session(self, sampling_params: dict[str, Any], kwargs: dict) -> AgentLoopOutput:
        layer = SkillLayer(self, skill_in_response=True)
        plan = await layer.prepare(kwargs)
        if plan.in_response is not None:
            output = await self._run_skill_in_response(sampling_params, plan)
            if output is not None:
                return layer.finish(output, plan)
            # it did not fit or its numbers were unusable: unaided (counted in plan.info)
        return layer.finish(await super().run(sampling_params, **plan.kwargs), plan)

    # ------------------------------------------------------------------ train_manager
    async def _run_skill_in_response(self, sampling_params: dict[str, Any], plan: Plan) -> AgentLoopOutput | None:
        """The trajectory with the skill at the start of the assistant turn (train_manager).

        prompt = chat(query); response = ``SKILL:`` + the scored skill tokens + ``\\n`` + the
        generated solution: verl's ``SingleTurnAgentLoop.run`` on the unaided prompt, its engine
        request continued after the skill line. Mask 1 on the skill tokens (exactly the scored
        ones, so GRPO moves s_k), 0 on the ``SKILL:`` and ``\\n`` format tokens (forced, the same for
        every skill); rollout log-probs of the skill tokens from the scoring request. Returns None
        (the caller goes unaided, counted) when the skill line leaves no room in
        ``rollout.response_length`` or when the engine's numbers for it were unusable; when verl's
        prompt is not the scoring context the request goes out unaided (counted as a scoring failure).
        """
        chosen, info = plan.in_response, plan.info
        scored = chosen.scored
        if scored.logprobs is None:
            info.scores_nonfinite = max(1, info.scores_nonfinite)
            return None
        head = list(self.tokenizer.encode(scoring_suffix(True), add_special_tokens=False))
        newline = list(self.tokenizer.encode("\n", add_special_tokens=False))
        server = _SkillLineServer(self.server_manager, scored, head, newline, self.response_length)
        if len(server.lead) >= self.response_length:
            info.skill_overlong = True
            return None
        self.server_manager = server  # this loop object runs one trajectory: nothing else sees it
        try:
            output = await super().run(sampling_params, **plan.kwargs)
        finally:
            self.server_manager = server.inner
        if not server.continued:
            logger.warning("ARISE train_manager: verl's prompt is not the scoring context; unaided")
            info.scoring_failed = True
            return output
        lead, head = server.lead, len(server.head)
        start = output.response_mask.index(1) if 1 in output.response_mask else len(output.response_mask)
        if output.response_ids[start : start + len(lead)] != lead[: len(output.response_ids) - start]:
            raise RuntimeError(
                "ARISE train_manager: verl's single-turn merge no longer puts the engine's tokens at the start "
                "of the response (tests/contracts/test_single_turn_run_contract.py)"
            )
        for i in [*range(head), *range(head + len(scored.skill_ids), len(lead))]:
            if start + i < len(output.response_mask):
                output.response_mask[start + i] = 0  # format tokens: no loss (their log-probs are 0.0)
        info.skill_id, info.skill_in_response, info.skill_tokens = chosen.skill_id, True, len(lead)
        return output


class _SkillLineServer:
    """verl's server manager for one train_manager trajectory: its generation request (verl's
    prompt, which must be the scoring context) is continued after the skill line ``lead``
    (``SKILL:`` + the scored skill tokens + ``\\n``), with ``lead``'s room taken off ``max_tokens``;
    the answer's tokens are ``lead`` + the generated ones, their log-probs the scoring request's
    (0.0 on the format tokens) + the engine's. A prompt other than the scoring context goes out as
    it is (``continued`` stays False)."""

    def __init__(self, inner, scored: ScoredSkill, head: list[int], newline: list[int], response_length: int):
        self.inner, self.scored, self.response_length = inner, scored, response_length
        self.head, self.lead = head, head + list(scored.skill_ids) + newline
        # verl's prompt must be the scoring context's chat part: the scoring prefix less "SKILL:"
        self.prompt = scored.prefix_ids[: len(scored.prefix_ids) - len(head)]
        self.context = bool(head) and scored.prefix_ids[len(self.prompt) :] == head
        self.continued = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        if self.continued or not self.context or list(prompt_ids) != self.prompt:
            return await self.inner.generate(
                request_id=request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs
            )
        self.continued = True
        params = dict(sampling_params)
        budget = self.response_length - len(self.lead)
        params["max_tokens"] = min(int(params.get("max_tokens", budget)), budget)
        output = await self.inner.generate(
            request_id=request_id, prompt_ids=list(prompt_ids) + self.lead, sampling_params=params, **kwargs
        )
        answer = copy.copy(output)  # verl's TokenOutput (or a test's stand-in), the engine's fields kept
        answer.token_ids = self.lead + list(output.token_ids)
        answer.log_probs = None
        if output.log_probs or sampling_params.get("logprobs"):
            skill = [float(x) for x in self.scored.logprobs]
            newline = len(self.lead) - len(self.head) - len(skill)
            answer.log_probs = [0.0] * len(self.head) + skill + [0.0] * newline + list(output.log_probs or [])
        return answer


__all__ = ["ARISEAgentLoop", "ScoredSkill", "SelectedSkill", "TrajectoryInfo", "arise_config", "query_key"]
