"""The actor's attention backend (docs/gpu.md: attention backend).

verl builds the actor with ``AutoConfig.from_pretrained(path, attn_implementation=...)`` from
``model.override_config.attn_implementation`` (default flash_attention_2, verl/workers/config/
model.py) and then ``from_pretrained(path, config=...)``. The run scripts set sdpa, which torch
provides. Checked here on a tiny random Qwen3 saved to disk, loaded the way verl loads it:
- sdpa on padded micro-batches (the scripts' REMOVE_PADDING=False, verl's non-rmpad forward:
  right-padded ids with an attention mask) gives each sequence's own log-probs;
- sdpa on a packed micro-batch (verl's use_remove_padding: one row, attention_mask=None,
  position_ids restarting per sequence, use_cache=False) does too: transformers builds a
  block-diagonal mask from the position ids;
- flash_attention_2 without the flash-attn package fails when the model is built (the crash the
  README's GPU install would hit with verl's default).
"""

import importlib.util

import pytest
import torch

LENGTHS = (7, 12, 5)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
    )
    path = tmp_path_factory.mktemp("qwen3_tiny")
    Qwen3ForCausalLM(config).save_pretrained(path)
    return path


def _load(path, attn):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, attn_implementation=attn)  # as HFModelConfig does
    return AutoModelForCausalLM.from_pretrained(path, config=config, torch_dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def sequences():
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (n,), generator=generator) for n in LENGTHS]


def _reference(model, sequences):
    with torch.no_grad():
        return [model(input_ids=s[None], use_cache=False).logits[0] for s in sequences]


def test_sdpa_padded_micro_batch(model_dir, sequences):
    model = _load(model_dir, "sdpa")
    assert model.config._attn_implementation == "sdpa"
    width = max(LENGTHS)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
    for row, (seq, ref) in enumerate(zip(sequences, _reference(model, sequences), strict=True)):
        torch.testing.assert_close(logits[row, : len(seq)], ref, atol=1e-5, rtol=1e-5)


def test_sdpa_packed_micro_batch(model_dir, sequences):
    model = _load(model_dir, "sdpa")
    ids = torch.cat(sequences)[None]
    positions = torch.cat([torch.arange(len(s)) for s in sequences])[None]
    with torch.no_grad():
        packed = model(input_ids=ids, attention_mask=None, position_ids=positions, use_cache=False).logits[0]
        leaky = model(input_ids=ids, use_cache=False).logits[0]  # no restart: attends across sequences
    reference = torch.cat(_reference(model, sequences))
    torch.testing.assert_close(packed, reference, atol=1e-5, rtol=1e-5)
    assert (leaky - reference).abs().max() > 1e-3  # the check can tell the difference


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed")
def test_flash_attention_2_needs_the_flash_attn_package(model_dir):
    with pytest.raises(ImportError, match="(?i)flash"):
        _load(model_dir, "flash_attention_2")
