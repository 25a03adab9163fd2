"""Every request that only wants prompt log-probs (the agent loop's skill scoring, the pmi baselines,
the gate's rescoring, exact IG, ``tools/calibrate``) asks vLLM not to detokenize: with
``detokenize=True`` (vLLM's default) its output processor decodes the token of every prompt log-prob
entry, i.e. the whole prompt, for text nobody reads. verl's vLLM server passes the dict on as
``SamplingParams(**params)``, and vLLM accepts the key on both stacks
(``tests/contracts/test_scoring_prefix_cache_contract.py``). SGLang's ``SamplingParams`` has no such
key and refuses it: another engine gets the requests without vLLM's own keys.
"""

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from byte_tokenizer import ByteTokenizer
from skill_layer_host import scoring_context_of

REPO = Path(__file__).resolve().parents[2]


def _keys_of(node) -> dict[str, ast.AST]:
    if isinstance(node, ast.Dict):
        return {k.value: v for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)}
    return {kw.arg: kw.value for kw in node.keywords if kw.arg}


def test_every_prompt_logprobs_request_in_the_source_sets_detokenize_false():
    """A dict literal or ``SamplingParams(...)`` call asking for prompt log-probs anywhere in recipe/arise."""
    found, missing = [], []
    for path in sorted((REPO / "recipe" / "arise").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Dict | ast.Call):
                continue
            keys = _keys_of(node)
            if "prompt_logprobs" not in keys:
                continue
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            found.append(where)
            value = keys.get("detokenize")
            if not (isinstance(value, ast.Constant) and value.value is False):
                missing.append(where)
    assert found, "no prompt_logprobs request found: the scan is broken"
    assert not missing, f"prompt_logprobs requests without detokenize=False: {missing}"


# ---------------------------------------------------------------- the agent loop, on fake replicas
from recipe.arise.adapters.scoring_requests import SCORING_PARAMS, VLLM_ONLY_KEYS, engine_params  # noqa: E402
from recipe.arise.adapters.skill_layer import SkillLayer  # noqa: E402
from recipe.arise.core.arise_config import ARISEConfig  # noqa: E402
from recipe.arise.core.skill import load_seed_skills  # noqa: E402

CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(load_seed_skills(), start=1)]


class RecordingServer:
    """verl's ``LLMServerClient.generate``: records each request's sampling params; every prompt
    position computed (no cache hit), V1 layout."""

    def __init__(self):
        self.params = []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.params.append(dict(sampling_params))
        rows = [[-0.5] for _ in range(len(prompt_ids) - 1)] + [[0.0]]
        return SimpleNamespace(token_ids=[0], extra_fields={"num_cached_tokens": 0, "prompt_logprobs": rows})


class TokenBuilder:
    """The host loop's Continuous Token builder: the chat template of :class:`ByteTokenizer`."""

    def build_initial_tokens(self, messages, tools=None):
        return ByteTokenizer().apply_chat_template(messages)


def _loop(engine: str):
    """The Download component (``SkillLayer``) of an agent loop whose rollout engine is ``engine``."""
    server = RecordingServer()
    rollout = SimpleNamespace(name=engine, enable_prefix_caching=True, full_determinism=False)
    host = SimpleNamespace(
        tokenizer=ByteTokenizer(),
        continuous_token_builder=TokenBuilder(),
        server_manager=server,
        rollout_config=rollout,
    )
    return SkillLayer(host), server


@pytest.mark.parametrize("norm", ["mean", "pmi"])
@pytest.mark.parametrize("prefix_cache", [True, False])
def test_the_agent_loops_scoring_requests_all_carry_detokenize_false(norm, prefix_cache):
    loop, server = _loop("vllm")
    cfg = ARISEConfig.from_dict(
        {"selection": {"max_skill_tokens": 1000, "score_norm": norm, "scoring_prefix_cache": prefix_cache}}
    )
    scores, _, _, error, _ = asyncio.run(loop.score_group(cfg, CACHE, [{"role": "user", "content": "What is 2+2?"}]))
    assert error is None and len(scores) == len(CACHE)
    assert len(server.params) >= len(CACHE) * (2 if norm == "pmi" else 1)
    assert all(p.get("detokenize") is False and p["prompt_logprobs"] == 0 for p in server.params)


def test_another_engine_gets_no_vllm_only_keys():
    loop, server = _loop("sglang")
    cfg = ARISEConfig.from_dict({"selection": {"max_skill_tokens": 1000}})
    scores, _, _, error, _ = asyncio.run(loop.score_group(cfg, CACHE, [{"role": "user", "content": "What is 2+2?"}]))
    assert error is None and np.isfinite(scores).all()
    assert server.params and all(not set(VLLM_ONLY_KEYS) & set(p) for p in server.params)
    assert all(p["prompt_logprobs"] == 0 and p["max_tokens"] == 1 for p in server.params)


def test_engine_params_reads_the_rollout_or_the_trainer_config():
    trainer_cfg = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(name="vllm")))
    assert engine_params(SCORING_PARAMS, trainer_cfg)["detokenize"] is False
    assert engine_params(SCORING_PARAMS, SimpleNamespace(name="vllm")) == SCORING_PARAMS
    sglang = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(name="sglang")))
    assert "detokenize" not in engine_params(SCORING_PARAMS, sglang)
    params = engine_params(SCORING_PARAMS, trainer_cfg)
    params["max_tokens"] = 7  # a copy: the shared constant stays as it is
    assert SCORING_PARAMS["max_tokens"] == 1


# ---------------------------------------------------------------- the trainer: gate rescoring, exact IG
def _trainer(engine="vllm"):
    from recipe.arise.adapters.trainer_metrics import StepState
    from recipe.arise.adapters.trainers import ARISETrainer
    from recipe.arise.core.library import SkillLibrary

    cfg = ARISEConfig.from_dict({"phase1_steps": 2, "selection": {"max_skill_tokens": 40}, "ig": {"max_traces": 4}})
    trainer = SimpleNamespace(
        arise=cfg,
        global_steps=0,
        _arise_metrics={},
        tokenizer=ByteTokenizer(),
        config=SimpleNamespace(data={}, actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(name=engine))),
        library=SkillLibrary(seed_skills=load_seed_skills(None)),
        _step_state=StepState(),
    )
    for name in (
        "_init_gate",
        "_gate_file",
        "_calibrate_gate_on_queries",
        "_remember_queries",
        "_exact_ig",
        "_ig_context",
        "_generate_all",  # the real one: the requests go out through the client below
    ):
        setattr(trainer, name, getattr(ARISETrainer, name).__get__(trainer))
    sent = []

    class Client:
        async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
            sent.append(dict(sampling_params))
            rows = [[-1.0] for _ in range(len(prompt_ids) - 1)] + [[0.0]]
            return SimpleNamespace(token_ids=[0], extra_fields={"prompt_logprobs": rows})

    trainer.get_llm_client = lambda: Client()
    trainer._scoring_context = scoring_context_of(trainer.tokenizer)
    trainer._init_gate()
    return trainer, sent


def test_the_gates_rescoring_requests_carry_detokenize_false():
    trainer, sent = _trainer()
    trainer._remember_queries([[{"role": "user", "content": f"q{i}"}] for i in range(4)])
    trainer._calibrate_gate_on_queries(2)
    assert sent and all(p.get("detokenize") is False and p["prompt_logprobs"] == 0 for p in sent)


def test_the_exact_ig_requests_carry_detokenize_false():
    trainer, sent = _trainer()
    group = {
        "uid": "g1",
        "messages": [{"role": "user", "content": "What is 1 plus 2?"}],
        "traces": [{"text": "", "reward": 1.0, "ids": [ord(c) for c in "three"], "skill_id": None}],
        "unaided": [{"reward": 1.0, "ids": [ord(c) for c in "three"]}],
    }
    ig, _skipped = trainer._exact_ig([group], step=100)
    assert ig
    assert sent and all(p.get("detokenize") is False and p["prompt_logprobs"] == 0 for p in sent)


def test_the_trainers_requests_to_another_engine_carry_no_vllm_only_keys():
    trainer, sent = _trainer("sglang")
    trainer._remember_queries([[{"role": "user", "content": "q"}]])
    trainer._calibrate_gate_on_queries(2)
    assert sent and all(not set(VLLM_ONLY_KEYS) & set(p) for p in sent)
