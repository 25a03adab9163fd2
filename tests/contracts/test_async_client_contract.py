"""What ARISE's async rollout client (recipe/arise/adapters/llm_client.py) relies on in verl's rollout clients
(verl/workers/rollout/llm_server.py) and its colocate_async trainer:

- ``FullyAsyncLLMServerClient.generate`` rebuilds the answer across resumes and keeps of the server's
  ``extra_fields`` only the weight versions and ``num_cached_tokens``: a scoring request's
  ``prompt_logprobs`` (and ``prompt_ids``) are lost, aborted or not. This is why ARISE's client
  exists; the day verl keeps them, the subclass can go;
- an aborted answer (``stop_reason`` "aborted") is resumed: the prompt plus the tokens so far, the
  remaining ``max_tokens``, the versions of the first and last answer (what generation requests
  keep through ARISE's client);
- ``LLMServerClient.generate``, which the subclass sends scoring requests through, returns the
  server's answer with its ``extra_fields`` intact (plus min/max versions);
- ``LLMServerManager.get_client(client_cls=...)`` makes ``client_cls(config=, load_balancer_handle=)``,
  and verl's colocate_async trainer asks it for ``FullyAsyncLLMServerClient`` (what
  ``ARISEColocateAsyncTrainer.get_llm_client`` replaces).

Run on the stack's own code with a fake replica in place of the load balancer and the vLLM server.
"""

import json

import pytest

PROBE = r"""
import asyncio, json, types
from omegaconf import OmegaConf
from verl.workers.rollout import llm_server
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient, LLMServerManager
from verl.workers.rollout.replica import TokenOutput

LOGPROBS = [None, {"12": -0.5}]
FIELDS = {"global_steps": 2, "prompt_logprobs": LOGPROBS, "prompt_ids": [11, 12], "num_cached_tokens": 1}

class Server:
    def __init__(self, answers):
        self.answers, self.calls = list(answers), []
    async def _generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.calls.append([list(prompt_ids), dict(sampling_params)])
        return self.answers.pop(0)
    @property
    def generate(self):
        return types.SimpleNamespace(remote=self._generate)

config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "response_length": 8}}})

def client(cls, server):
    c = cls(config=config, load_balancer_handle=None)
    async def acquire(request_id, **extra):
        return "s0", server
    c._acquire_server = acquire
    c._release_server = lambda server_id, request_id=None: None
    return c

async def sleep(seconds):  # verl waits 1 s before a resume
    pass
llm_server.asyncio.sleep = sleep

def run(cls, answers, params):
    server = Server(answers)
    out = asyncio.run(client(cls, server).generate("r0", prompt_ids=[11, 12], sampling_params=params))
    return {"fields": sorted(out.extra_fields), "extra": {k: out.extra_fields.get(k) for k in
            ("num_cached_tokens", "min_global_steps", "max_global_steps")},
            "tokens": out.token_ids, "stop": out.stop_reason, "calls": server.calls}

scoring = {"max_tokens": 1, "prompt_logprobs": 0}
answer = lambda: TokenOutput(token_ids=[7], log_probs=[-1.0], stop_reason="length", extra_fields=dict(FIELDS))
aborted = lambda toks: TokenOutput(token_ids=toks, log_probs=[-0.1] * len(toks), stop_reason="aborted",
                                   extra_fields={"global_steps": 1})
result = {
    "async_whole": run(FullyAsyncLLMServerClient, [answer()], dict(scoring)),
    "async_aborted": run(FullyAsyncLLMServerClient, [aborted([]), answer()], dict(scoring)),
    "async_resume": run(FullyAsyncLLMServerClient, [aborted([5, 6]), answer()], {"max_tokens": 8}),
    "plain": run(LLMServerClient, [answer()], dict(scoring)),
}

made = []
class Probe(LLMServerClient):
    def __init__(self, config, load_balancer_handle, **kwargs):
        made.append(sorted(["config", "load_balancer_handle", *kwargs]))
manager = object.__new__(LLMServerManager)
manager.config, manager.global_load_balancer = config, None
manager.get_client(client_cls=Probe)
result["made"] = made

from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
asked = []
stub = types.SimpleNamespace(llm_server_manager=types.SimpleNamespace(get_client=lambda **kw: asked.append(kw)))
PPOTrainerColocateAsync.get_llm_client(stub)
result["colocate_client"] = [kw["client_cls"].__name__ for kw in asked]
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def probe(stack):
    return json.loads(stack.run(PROBE).strip().splitlines()[-1])


def test_the_async_client_drops_the_prompt_logprobs(probe):
    for case in ("async_whole", "async_aborted"):
        fields = probe[case]["fields"]
        assert "prompt_logprobs" not in fields and "prompt_ids" not in fields, (case, fields)
        assert probe[case]["extra"]["num_cached_tokens"] == 1  # the first prefill that reported one


def test_the_async_client_resumes_an_aborted_generation_from_its_prefix(probe):
    resume = probe["async_resume"]
    assert resume["calls"] == [[[11, 12], {"max_tokens": 8}], [[11, 12, 5, 6], {"max_tokens": 6}]]
    assert resume["tokens"] == [5, 6, 7] and resume["stop"] == "length"
    assert (resume["extra"]["min_global_steps"], resume["extra"]["max_global_steps"]) == (1, 2)


def test_the_plain_client_returns_the_servers_extra_fields(probe):
    plain = probe["plain"]
    assert {"prompt_logprobs", "prompt_ids", "num_cached_tokens"} <= set(plain["fields"])
    assert plain["extra"]["min_global_steps"] == plain["extra"]["max_global_steps"] == 2


def test_get_client_makes_the_given_class_and_colocate_async_asks_for_the_async_client(probe):
    assert probe["made"] == [["config", "load_balancer_handle"]]
    assert probe["colocate_client"] == ["FullyAsyncLLMServerClient"]
