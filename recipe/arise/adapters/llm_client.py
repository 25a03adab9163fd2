"""The rollout client of ARISE's async trainers: verl's partial-rollout client that keeps scoring answers whole.

verl's async trainers hand out :class:`FullyAsyncLLMServerClient`, which resumes a request aborted
at a weight sync from the tokens generated so far. It rebuilds the answer and copies back only the
weight versions and ``num_cached_tokens`` of the server's ``extra_fields``: the ``prompt_logprobs``
of a scoring request (the skill layer's, the gate's rescoring, the exact IG) are lost, aborted or
not (tests/contracts/test_async_client_contract.py). A scoring request is one prefill
(``max_tokens: 1``, :data:`~recipe.arise.adapters.scoring_requests.SCORING_PARAMS`): nothing of an
aborted one is worth keeping, so :class:`ARISEAsyncLLMClient` sends it through verl's plain client
and sends it again whole while the answer says aborted. Generation requests (solutions, summaries)
keep verl's resume.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

ABORTED = ("aborted", "abort")  # the stop reasons verl's resume loop reads as an abort
RETRY_S = 1.0  # between an aborted scoring request and its re-send (verl's resume waits 1 s too)


def is_scoring(sampling_params: dict[str, Any]) -> bool:
    """A request that wants its prompt's log-probs (0 asks for the chosen tokens' only)."""
    return sampling_params.get("prompt_logprobs") is not None


class ARISEAsyncLLMClient(FullyAsyncLLMServerClient):
    """verl's partial-rollout client; a scoring request goes through the plain client, whole, again
    after each abort, so its ``extra_fields`` (``prompt_logprobs``, ``num_cached_tokens``) come back."""

    retry_s = RETRY_S

    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):
        if not is_scoring(sampling_params):
            return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        aborts = 0
        while True:
            output = await LLMServerClient.generate(
                self, request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs
            )
            if output.stop_reason not in ABORTED:
                if aborts:
                    logger.info(f"ARISE: scoring request {request_id} answered after {aborts} abort(s)")
                return output
            aborts += 1  # the engine paused for a weight sync: it parks the re-send until it resumes
            await asyncio.sleep(self.retry_s)
