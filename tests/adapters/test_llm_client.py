"""ARISE's async rollout client (recipe/arise/adapters/llm_client.py) against a fake rollout server that
aborts a request once: a scoring request comes back whole with its ``prompt_logprobs``, a generation
request keeps verl's partial-rollout resume; the colocate_async trainer hands this client out."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient
from verl.workers.rollout.replica import TokenOutput

from recipe.arise.adapters.llm_client import ARISEAsyncLLMClient
from recipe.arise.adapters.scoring_requests import SCORING_PARAMS

PROMPT = [11, 12, 13]
LOGPROBS = [None, {12: -0.5}, {13: -0.25}]


class FakeServer:
    """A vLLM replica that aborts the first request (a weight sync), then answers."""

    def __init__(self, first: TokenOutput, then: TokenOutput):
        self.answers = [first, then]
        self.calls: list[tuple[list[int], dict]] = []

    async def _generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.calls.append((list(prompt_ids), dict(sampling_params)))
        return self.answers.pop(0)

    @property
    def generate(self):  # a Ray actor method: .remote(...) returns something to await
        return SimpleNamespace(remote=self._generate)


def _client(cls, server: FakeServer):
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "response_length": 8}}})
    client = cls(config=config, load_balancer_handle=None)

    async def acquire(request_id, **extra):
        return "s0", server

    client._acquire_server = acquire
    client._release_server = lambda server_id, request_id=None: None
    client.retry_s = 0.0
    return client


def _scoring_server() -> FakeServer:
    aborted = TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted", extra_fields={"global_steps": 1})
    fields = {"global_steps": 2, "prompt_logprobs": LOGPROBS, "prompt_ids": PROMPT, "num_cached_tokens": 2}
    return FakeServer(aborted, TokenOutput(token_ids=[7], log_probs=[-1.0], stop_reason="length", extra_fields=fields))


def _score(client):
    return asyncio.run(client.generate("q0", prompt_ids=PROMPT, sampling_params=dict(SCORING_PARAMS)))


def test_an_aborted_scoring_request_is_sent_again_whole_and_keeps_its_prompt_logprobs():
    server = _scoring_server()
    out = _score(_client(ARISEAsyncLLMClient, server))
    assert out.extra_fields["prompt_logprobs"] == LOGPROBS
    assert out.extra_fields["num_cached_tokens"] == 2  # the skill layer's prefix-cache merge reads it
    assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == 2
    # the same prompt and one token both times: nothing of the aborted prefill is kept
    assert [c[0] for c in server.calls] == [PROMPT, PROMPT]
    assert [c[1]["max_tokens"] for c in server.calls] == [1, 1]


def test_verls_async_client_loses_the_prompt_logprobs():
    """Why the subclass exists (finding A of issue 41): the same exchange through verl's client."""
    out = _score(_client(FullyAsyncLLMServerClient, _scoring_server()))
    assert "prompt_logprobs" not in out.extra_fields


def test_a_generation_request_keeps_verls_partial_rollout_resume():
    partial = TokenOutput(
        token_ids=[5, 6], log_probs=[-0.1, -0.2], stop_reason="aborted", extra_fields={"global_steps": 1}
    )
    rest = TokenOutput(token_ids=[7], log_probs=[-0.3], stop_reason="completed", extra_fields={"global_steps": 2})
    server = FakeServer(partial, rest)
    params = {"max_tokens": 8, "temperature": 1.0}
    out = asyncio.run(_client(ARISEAsyncLLMClient, server).generate("g0", prompt_ids=PROMPT, sampling_params=params))
    assert out.token_ids == [5, 6, 7] and out.log_probs == [-0.1, -0.2, -0.3]
    assert out.stop_reason == "completed"
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (1, 2)
    assert server.calls[1] == (PROMPT + [5, 6], {"max_tokens": 6, "temperature": 1.0})  # resumed from the prefix
    assert params == {"max_tokens": 8, "temperature": 1.0}  # the caller's dict untouched


@pytest.mark.parametrize("value,scoring", [(0, True), (5, True), (None, False)])
def test_a_request_is_scoring_when_it_asks_for_prompt_logprobs(value, scoring):
    from recipe.arise.adapters.llm_client import is_scoring

    assert is_scoring({"max_tokens": 1, "prompt_logprobs": value}) is scoring
    assert is_scoring({"max_tokens": 1}) is False
