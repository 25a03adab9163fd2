"""ARISE's async rollout client (recipe/arise/adapters/llm_client.py) against a fake rollout server that
aborts a request once: a scoring request comes back whole with its ``prompt_logprobs``, a generation
request keeps verl's partial-rollout resume; the colocate_async trainer hands this client out. Through
the real ``arise_agent`` loop, a trajectory aborted mid-generation keeps its skill and scores."""

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


# ---------------------------------------------------------------- a partial rollout through the agent loop

MESSAGES = [{"role": "user", "content": "What is 1 plus 2? Put the final answer within \\boxed{}."}]


class AbortsAGeneration:
    """A rollout replica behind ARISE's client: scoring requests get -1 per prompt token (-0.1 on the
    favourite skill's); the first generation request is aborted after ``partial`` (a weight sync),
    the next ones answer ``rest``. Records every request's prompt."""

    def __init__(self, favourite: list[int], partial: list[int], rest: list[int]):
        self.favourite, self.partial, self.rest = favourite, partial, rest
        self.scoring: list[list[int]] = []
        self.generation: list[list[int]] = []

    async def _generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        if sampling_params.get("prompt_logprobs") is not None:
            self.scoring.append(list(prompt_ids))
            lp = -0.1 if list(prompt_ids[-len(self.favourite) :]) == self.favourite else -1.0
            rows = [[lp] for _ in prompt_ids[1:]] + [[0.0]]  # verl's layout: entry j scores token j + 1
            return TokenOutput(
                token_ids=[0],
                log_probs=[0.0],
                stop_reason="length",
                extra_fields={"global_steps": 1, "prompt_logprobs": rows},
            )
        self.generation.append(list(prompt_ids))
        if len(self.generation) == 1:
            return TokenOutput(
                token_ids=self.partial,
                log_probs=[-0.5] * len(self.partial),
                stop_reason="aborted",
                extra_fields={"global_steps": 1},
            )
        return TokenOutput(
            token_ids=self.rest,
            log_probs=[-0.5] * len(self.rest),
            stop_reason="completed",
            extra_fields={"global_steps": 2},
        )

    @property
    def generate(self):
        return SimpleNamespace(remote=self._generate)


def test_an_aborted_trajectory_keeps_its_skill_and_scores_and_resumes_its_prompt(tmp_path, monkeypatch):
    """Issue 41: a trajectory aborted at a weight sync and resumed (partial rollout) keeps the skill
    it was given and its scores: the abort never reaches the agent loop (ARISE's client resumes the
    request from its prompt plus the tokens so far), so there is no second selection, no second
    scoring pass, and the resumed request's prompt is the one with the skill injected."""
    from skill_layer_host import build_loop

    import recipe.arise.adapters.skill_layer as skill_layer_module
    from recipe.arise.adapters.agent_loop import ARISEAgentLoop
    from recipe.arise.core.prompts import inject_skill
    from recipe.arise.core.skill import load_seed_skills
    from recipe.arise.core.trajectory import TrajectoryInfo
    from recipe.arise.cpu.tiny import build_tokenizer

    seeds = load_seed_skills()
    cache = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(seeds, start=1)]
    tokenizer = build_tokenizer(tmp_path, [MESSAGES[0]["content"], *(text for _, text in cache)])
    favourite = tokenizer.encode(cache[2][1], add_special_tokens=False)
    partial, rest = (
        tokenizer.encode(" 1 plus", add_special_tokens=False),
        tokenizer.encode(" 2 is 3", add_special_tokens=False),
    )
    server = AbortsAGeneration(favourite, partial, rest)
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "name": "vllm",
                    "n": 2,
                    "val_kwargs": {"n": 1},
                    "prompt_length": 1024,
                    "response_length": 64,
                },
            },
            "arise": {
                "phase1_steps": 0,
                "selection": {"epsilon": 0.0, "use_gate": False, "control_share": 0.0, "max_skill_tokens": 1000},
            },
        }
    )
    client = _client(ARISEAsyncLLMClient, server)
    client.config = config
    reads, prepared = [], []

    async def snapshot():
        reads.append(1)
        return {"version": 1, "cache": cache}

    monkeypatch.setattr(
        skill_layer_module, "get_replica", lambda: SimpleNamespace(snapshot=SimpleNamespace(remote=snapshot))
    )
    prepare = skill_layer_module.SkillLayer.prepare

    async def counted(self, kwargs):
        prepared.append(kwargs["session_id"])
        return await prepare(self, kwargs)

    monkeypatch.setattr(skill_layer_module.SkillLayer, "prepare", counted)

    async def group():
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
        outputs = []
        for session in (0, 1):
            loop = build_loop(ARISEAgentLoop, tokenizer, client, config)
            outputs.append(
                await loop.run(dict(params), raw_prompt=MESSAGES, uid="q-abort", session_id=session, global_steps=3)
            )
        return outputs, loop

    (aborted, whole), loop = asyncio.run(group())
    infos = [TrajectoryInfo.from_extra_fields(o.extra_fields) for o in (aborted, whole)]
    # one selection per session, one library read and one scoring pass for the group: none redone
    assert prepared == [0, 1] and len(reads) == 1 and len(server.scoring) == len(cache)
    assert infos[0].skill_id == infos[1].skill_id == cache[2][0] and infos[0].selected
    assert infos[0].scores == infos[1].scores and len(infos[0].scores) == len(cache)
    # the resumed request: the prompt with the skill injected, plus the tokens so far
    injected = loop.continuous_token_builder.build_initial_tokens(inject_skill(MESSAGES, seeds[2]))
    assert server.generation[:2] == [injected, injected + partial]
    assert aborted.prompt_ids == injected and aborted.response_ids == partial + rest
    assert (aborted.extra_fields["min_global_steps"], aborted.extra_fields["max_global_steps"]) == (1, 2)
