"""Probe code shared by the contract tests' vLLM subprocesses (importable as ``vllm_probe`` there:
tests/contracts/conftest.py puts this folder on their PYTHONPATH). It imports vLLM lazily, so each
stack's probe uses that stack's vLLM."""

from __future__ import annotations


def prompt_logprob_request(processor, prompt: list[int], detokenize: bool) -> None:
    """Add request ``"r"`` asking for ``prompt``'s log-probs (one token each, one output token) to a
    vLLM ``OutputProcessor``."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import EngineCoreRequest

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=detokenize)
    fields = dict(request_id="r", external_req_id="r", prompt_token_ids=prompt, sampling_params=params)
    fields["arrival_time"] = 0.0
    # the fields a text request leaves unset (no image, pooling, LoRA, cache salt, data-parallel rank)
    fields.update(dict.fromkeys(("mm_features", "pooling_params", "lora_request", "cache_salt", "data_parallel_rank")))
    processor.add_request(EngineCoreRequest(**fields), None)
