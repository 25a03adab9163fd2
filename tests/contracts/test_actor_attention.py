"""The actor's attention backend (docs/gpu.md: attention backend), on both stacks' transformers
(conftest.py: ``[cpu]`` 5.10.4, ``[gpu]`` 5.9).

verl builds the actor with ``AutoConfig.from_pretrained(path, attn_implementation=...)`` from
``model.override_config.attn_implementation`` (default flash_attention_2, verl/workers/config/
model.py) and then ``from_pretrained(path, config=...)``. The run scripts set sdpa, which torch
provides. Checked here on a tiny random Qwen3 saved to disk, loaded the way verl loads it, in a
subprocess on the stack's transformers:
- sdpa on padded micro-batches (the scripts' REMOVE_PADDING=False, verl's non-rmpad forward:
  right-padded ids with an attention mask) gives each sequence's own log-probs;
- sdpa on a packed micro-batch (verl's use_remove_padding: one row, attention_mask=None,
  position_ids restarting per sequence, use_cache=False) does too: transformers builds a
  block-diagonal mask from the position ids;
- flash_attention_2 without the flash-attn package fails when the model is built (the crash the
  README's GPU install would hit with verl's default).
"""

import importlib.util
import json

import pytest

PROBE = r"""
import json, sys, tempfile
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

LENGTHS = (7, 12, 5)
torch.manual_seed(0)
config = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128)
path = tempfile.mkdtemp()
Qwen3ForCausalLM(config).save_pretrained(path)

def load(attn):
    config = AutoConfig.from_pretrained(path, attn_implementation=attn)  # as HFModelConfig does
    return AutoModelForCausalLM.from_pretrained(path, config=config, torch_dtype=torch.float32).eval()

generator = torch.Generator().manual_seed(1)
sequences = [torch.randint(0, 256, (n,), generator=generator) for n in LENGTHS]
model = load("sdpa")
with torch.no_grad():
    reference = [model(input_ids=s[None], use_cache=False).logits[0] for s in sequences]
    width = max(LENGTHS)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    padded = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
    padded_diff = max(
        (padded[row, : len(seq)] - ref).abs().max().item() for row, (seq, ref) in enumerate(zip(sequences, reference))
    )
    ids = torch.cat(sequences)[None]
    positions = torch.cat([torch.arange(len(s)) for s in sequences])[None]
    packed = model(input_ids=ids, attention_mask=None, position_ids=positions, use_cache=False).logits[0]
    leaky = model(input_ids=ids, use_cache=False).logits[0]  # no restart: attends across sequences
    flat = torch.cat(reference)
try:
    load("flash_attention_2")
    fa2_error = None
except ImportError as exc:
    fa2_error = str(exc)
print(json.dumps({
    "transformers": transformers.__version__,
    "attn": model.config._attn_implementation,
    "padded_diff": padded_diff,
    "packed_diff": (packed - flat).abs().max().item(),
    "leaky_diff": (leaky - flat).abs().max().item(),
    "fa2_error": fa2_error,
}))
"""


@pytest.fixture(scope="module")
def result(stack):
    state = json.loads(stack.run(PROBE).strip().splitlines()[-1])
    assert state["transformers"] == stack.version("transformers")  # the stack's own transformers ran
    return state


def test_sdpa_padded_micro_batch(result):
    assert result["attn"] == "sdpa"
    assert result["padded_diff"] < 1e-5


def test_sdpa_packed_micro_batch(result):
    assert result["packed_diff"] < 1e-5
    assert result["leaky_diff"] > 1e-3  # the check can tell the difference


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed")
def test_flash_attention_2_needs_the_flash_attn_package(result):
    assert result["fa2_error"] is not None and "flash" in result["fa2_error"].lower()
