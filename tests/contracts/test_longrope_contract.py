"""Phi-3 LongRoPE (Phi-4-mini-instruct: ``rope_type`` "longrope", original_max_position_embeddings
4096) in the actor (transformers) and in the rollout engine (vLLM), on both stacks: the two pick
the short or long rescale factors by different rules, which the preflight's Phi-4-mini check
relies on (rollout and actor log-probs differ when they pick differently).

- transformers 5.9 / 5.10 (``dynamic_rope_update`` -> ``longrope_frequency_update``,
  modeling_rope_utils.py): per forward call, the long factors iff ``max(position_ids) + 1 >
  original_max_position_embeddings`` (the longest sequence of the micro-batch), the short ones
  otherwise; the attention scaling is the same either way. Run here on a tiny ``Phi3RotaryEmbedding``.
- vLLM 0.24 / 0.28 (``Phi3LongRoPEScaledRotaryEmbedding``, model_executor/layers/rotary_embedding/
  phi3_long_rope_scaled_rope.py): once, at engine start, the long factors for every position of
  every request iff ``max_model_len > original_max_position_embeddings`` (positions offset into the
  long half of its cos/sin cache), the short ones otherwise. Run here through ``get_rope`` under a
  config of each ``max_model_len``, on a query whose rotated values show the factors used.

So with ``max_model_len`` > 4096 every rollout uses the long factors while the actor uses the short
ones for micro-batches of sequences no longer than 4096 tokens; with ``max_model_len`` <= 4096 both
use the short factors.
"""

import json

import pytest

ORIGINAL, MAXIMUM, HEAD_DIM = 16, 64, 8

PROBE = r"""
import json, math, sys
import torch
import transformers
from transformers import Phi3Config
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

original, maximum, head_dim = map(int, sys.argv[1:4])
short, long = [1.0, 1.5, 2.0, 2.5], [4.0, 8.0, 16.0, 32.0]
config = Phi3Config(vocab_size=32, hidden_size=head_dim * 2, num_attention_heads=2, num_key_value_heads=2,
                    num_hidden_layers=1, intermediate_size=16, max_position_embeddings=maximum,
                    original_max_position_embeddings=original,
                    rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                     "short_factor": short, "long_factor": long})
rope = Phi3RotaryEmbedding(config)
base = 10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim)
x = torch.zeros(1, 1, head_dim)
calls = {str(n): torch.arange(n)[None] for n in (original - 1, original, original + 1, maximum)}
# a micro-batch of one long row and one short row (padded with position 0), then a short call again
short_row = torch.cat([torch.arange(5), torch.zeros(original - 4, dtype=torch.long)])
calls["micro_batch_with_one_long_row"] = torch.stack([short_row, torch.arange(original + 1)])
calls["short_again"] = torch.arange(original - 1)[None]
picked = {}
for name, position_ids in calls.items():  # in this order: the rope's state carries over between calls
    rope(x, position_ids)
    inv = rope.inv_freq
    picked[name] = ("short" if torch.allclose(inv, 1.0 / (torch.tensor(short) * base)) else
                    "long" if torch.allclose(inv, 1.0 / (torch.tensor(long) * base)) else "neither")
print(json.dumps({"transformers": transformers.__version__, "picked": picked,
                  "scaling": rope.attention_scaling,
                  "expected_scaling": math.sqrt(1 + math.log(maximum / original) / math.log(original))}))
"""


@pytest.fixture(scope="module")
def actor(stack):
    out = stack.run(PROBE, str(ORIGINAL), str(MAXIMUM), str(HEAD_DIM))
    state = json.loads(out.strip().splitlines()[-1])
    assert state["transformers"] == stack.version("transformers")
    return state


def test_the_actor_picks_by_the_longest_position_in_the_forward_call(actor):
    picked = {n: actor["picked"][n] for n in map(str, (ORIGINAL - 1, ORIGINAL, ORIGINAL + 1, MAXIMUM))}
    assert picked == {
        str(ORIGINAL - 1): "short",
        str(ORIGINAL): "short",  # positions 0..original-1: still the short factors
        str(ORIGINAL + 1): "long",
        str(MAXIMUM): "long",
    }
    assert actor["scaling"] == pytest.approx(actor["expected_scaling"])


def test_the_actor_rule_is_per_call_over_the_whole_micro_batch(actor):
    # the longest row decides for every row of the micro-batch (its short row too) ...
    assert actor["picked"]["micro_batch_with_one_long_row"] == "long"
    # ... and only for that call: the next call of short rows is back on the short factors
    assert actor["picked"]["short_again"] == "short"


VLLM_PROBE = r"""
import json, math, sys, types
import torch
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.model_executor.layers import rotary_embedding
from vllm.model_executor.layers.rotary_embedding import get_rope

original, maximum, head_dim = map(int, sys.argv[1:4])
short, long = [1.0, 1.5, 2.0, 2.5], [4.0, 8.0, 16.0, 32.0]
params = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short, "long_factor": long,
          "original_max_position_embeddings": original}
base = 10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim)
mscale = math.sqrt(1 + math.log(maximum / original) / math.log(original))
expected = {name: 1.0 / (torch.tensor(f) * base) for name, f in (("short", short), ("long", long))}

def picked(rope, positions):
    # a query of ones in the first rotary half comes out as cos(position * inv_freq) * mscale there
    query = torch.zeros(len(positions), head_dim)
    query[:, : head_dim // 2] = 1.0
    out, _ = rope(torch.tensor(positions), query, query.clone())
    found = []
    for row, p in zip(out, positions):
        cos = row[: head_dim // 2]
        match = [n for n, inv in expected.items() if torch.allclose(cos, torch.cos(p * inv) * mscale, atol=1e-5)]
        found.append(match[0] if len(match) == 1 else "neither")
    return found

state = {}
for max_model_len in (original, original + 1):
    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    config.model_config = types.SimpleNamespace(max_model_len=max_model_len)  # all the rope reads of it
    rotary_embedding._ROPE_DICT.clear()  # get_rope caches by shape and parameters, not by max_model_len
    with set_current_vllm_config(config):
        rope = get_rope(head_dim, maximum, True, params, torch.float32)
    positions = [1, 2, original - 1, original, maximum - 1]  # used after the config is gone: fixed at start
    state[max_model_len] = {"type": type(rope).__name__, "picked": picked(rope, positions)}
print(json.dumps(state))
"""


@pytest.fixture(scope="module")
def rollout(stack):
    out = stack.run(VLLM_PROBE, str(ORIGINAL), str(MAXIMUM), str(HEAD_DIM))
    return {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def test_vllm_picks_by_max_model_len_at_start(rollout):
    # every position of every request, short ones included: the long factors iff max_model_len > original
    assert rollout[ORIGINAL + 1]["picked"] == ["long"] * 5
    assert rollout[ORIGINAL]["picked"][:3] == ["short"] * 3  # positions the short half of the cache holds


def test_vllm_builds_it_for_longrope_configs(rollout):
    # rope_type "longrope" with original_max_position_embeddings in the rope parameters
    assert {state["type"] for state in rollout.values()} == {"Phi3LongRoPEScaledRotaryEmbedding"}
