"""The tiny CPU world's model and tokenizer are the paper's model family (recipe/arise/cpu/tiny.py).

Built without the warm start (seconds): a tiny ``Qwen3ForCausalLM`` and a tokenizer that loads,
from disk beside its config.json, as the ``Qwen2Tokenizer`` Qwen3 checkpoints use, with
Qwen3-4B-Instruct-2507's non-thinking chat format. The end-to-end runs use the warm-started build
of the same functions.
"""

import json

import pytest

from recipe.arise.cpu import tiny as tiny_mod


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from transformers import AutoConfig, AutoTokenizer

    out = tmp_path_factory.mktemp("tiny")
    corpus = [tiny_mod.question(a, b, s) + " " + tiny_mod.solution(a, b) for a, b, s in tiny_mod.all_problems()]
    tokenizer = tiny_mod.build_tokenizer(out, corpus)
    model = tiny_mod.build_model(tokenizer, seed=0)
    model.save_pretrained(out)  # config.json names the architecture, as vLLM reads it
    return out, model, AutoTokenizer.from_pretrained(out), AutoConfig.from_pretrained(out)


def test_the_model_is_a_tiny_qwen3(built):
    out, model, _, config = built
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert config.model_type == "qwen3" and config.architectures == ["Qwen3ForCausalLM"]
    attn = model.model.layers[0].self_attn
    assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (config.head_dim,)  # Qwen3's per-head norms
    assert attn.q_proj.bias is None  # no attention bias (Qwen2 has one)
    assert config.head_dim * config.num_attention_heads == config.hidden_size
    assert config.num_key_value_heads < config.num_attention_heads  # grouped-query attention
    assert config.tie_word_embeddings and config.rope_parameters["rope_theta"] == 5_000_000.0
    assert config.vocab_size % 64 == 0 and config.max_position_embeddings == 1024
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3"


def test_the_tokenizer_loads_as_qwen3s_and_encodes_as_trained(built):
    out, _, tokenizer, _ = built
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"  # what transformers gives a qwen3 config.json
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.bos_token is None and tokenizer.padding_side == "left"
    # digits one by one (Qwen's pre-tokenizer), "\n" one token (verl's Qwen continuous-token builder)
    assert len(tokenizer.encode("1234", add_special_tokens=False)) == 4
    assert len(tokenizer.encode("\n", add_special_tokens=False)) == 1
    for token in [*tiny_mod.SPECIAL_TOKENS, *tiny_mod.ADDED_TOKENS]:
        assert tokenizer.encode(token, add_special_tokens=False) == [tokenizer.convert_tokens_to_ids(token)]
    text = tiny_mod.question(3, 4, 1)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_the_chat_template_is_qwen3_chatml_without_thinking(built):
    _, _, tokenizer, _ = built

    def render(messages, **kw):
        return tokenizer.apply_chat_template(messages, tokenize=False, **kw)

    q = tiny_mod.question(2, 5, 0)
    assert render([{"role": "user", "content": q}], add_generation_prompt=True) == (
        f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
    )  # no default system prompt, no <think> block opened
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": q},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "add", "arguments": {"a": 2}}}]},
        {"role": "tool", "content": "7"},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "\\boxed{7}"},
    ]
    assert render(chat) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        f"<|im_start|>user\n{q}<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n7\n</tool_response>\n<tool_response>\nok\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n\\boxed{7}<|im_end|>\n"
    )
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    with_tools = render(chat[:2], tools=tools)
    assert with_tools.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "add", "parameters": {}}}\n</tools>' in with_tools


def test_the_cache_is_keyed_by_the_model_family(tmp_path, monkeypatch):
    built_in = []
    monkeypatch.setattr(tiny_mod, "build_tiny_assets", lambda out: built_in.append(out) or _fake_build(out))
    target = tiny_mod.cached_assets(tmp_path)
    assert target.name == f"tiny-qwen3-{tiny_mod.assets_key()}" and len(built_in) == 1
    assert tiny_mod.cached_assets(tmp_path) == target and len(built_in) == 1  # built once, then reused


def _fake_build(out):
    (out / "tiny_assets.json").write_text("{}")
    return {"model": str(out / "model")}
