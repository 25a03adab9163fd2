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
  long half of its cos/sin cache), the short ones otherwise.

So with ``max_model_len`` > 4096 every rollout uses the long factors while the actor uses the short
ones for micro-batches of sequences no longer than 4096 tokens; with ``max_model_len`` <= 4096 both
use the short factors.
"""

import json
import re

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
picked = {}
for seq_len in (original - 1, original, original + 1, maximum):
    position_ids = torch.arange(seq_len)[None]
    cos, _ = rope(x, position_ids)
    inv = rope.inv_freq
    picked[seq_len] = ("short" if torch.allclose(inv, 1.0 / (torch.tensor(short) * base)) else
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
    assert actor["picked"] == {
        str(ORIGINAL - 1): "short",
        str(ORIGINAL): "short",  # positions 0..original-1: still the short factors
        str(ORIGINAL + 1): "long",
        str(MAXIMUM): "long",
    }
    assert actor["scaling"] == pytest.approx(actor["expected_scaling"])


def test_the_actor_rule_in_the_source(source):
    rope = source("modeling_rope_utils.py", "transformers")
    update = rope[rope.index("def longrope_frequency_update") :][:2500]
    assert "seq_len = torch.max(position_ids) + 1" in update
    assert "if seq_len > original_max_position_embeddings:" in update
    phi3 = source("models/phi3/modeling_phi3.py", "transformers")
    assert re.search(r"@dynamic_rope_update[^\n]*\n\s+def forward\(self, x, position_ids\)", phi3)


def test_vllm_picks_by_max_model_len_at_start(source):
    rope = source("model_executor/layers/rotary_embedding/phi3_long_rope_scaled_rope.py", "vllm")
    assert "max_model_len = get_current_vllm_config().model_config.max_model_len" in rope
    assert "self.use_long_rope = max_model_len > original_max_position_embeddings" in rope
    forward = rope[rope.index("    def forward(") :]
    assert re.search(
        r"if self\.use_long_rope:\s*k = self\.original_max_position_embeddings\s*"
        r"long_prompt_offset = torch\.full_like\(positions, k\)\.long\(\)\s*"
        r"idx = torch\.add\(positions, long_prompt_offset\)",
        forward,
    )  # every position of every request: the long half of the cache
    assert re.search(r"long_short_cache = torch\.cat\(\[short_cache, long_cache\], dim=0\)", rope)


def test_vllm_builds_it_for_longrope_configs(source):
    init = source("model_executor/layers/rotary_embedding/__init__.py", "vllm")
    branch = init[init.index('elif scaling_type == "longrope":') :][:1200]
    assert 'original_max_position = rope_parameters["original_max_position_embeddings"]' in branch
    assert "Phi3LongRoPEScaledRotaryEmbedding(" in branch
