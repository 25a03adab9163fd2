"""Tiny local assets for the CPU end-to-end run: tokenizer, model, math task, warm start.

The model is a tiny ``Qwen3ForCausalLM`` with a Qwen3-style tokenizer and Qwen3-4B-Instruct-2507's
(non-thinking) chat format, so the CPU run takes the same model family through verl and vLLM as
the paper's runs. Nothing is downloaded. The task is single-digit addition with the answer in ``\\boxed{}``; a
short supervised warm start teaches the format (and, with a few examples, the skill-JSON
format of the summary rollout) so that the RL run sees real correct answers, real
positive-advantage groups and real parsed skills — none of it forced by a test.

usage: python -m recipe.arise.cpu.tiny OUT_DIR [--sft-steps N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

from recipe.arise.cpu.asset_cache import build_cached, cache_root

INSTRUCTION = "Put the final answer within \\boxed{}."
# Qwen2/Qwen3 pre-tokenizer split (digits one by one), as transformers' Qwen2Tokenizer applies it
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)

# A few skill documents in the paper's schema, in the tokenizer's corpus so that skill JSON
# tokenizes compactly (the seed skills ship in recipe/arise/data).
_TINY_SKILLS = [
    {
        "skill_name": "count_up",
        "problem_type": "algebra",
        "key_insight": "Adding b to a is counting up b steps from a",
        "method": ["Start from the larger number", "Count up by the smaller one"],
        "check": "Substitute back to verify",
    },
    {
        "skill_name": "make_ten",
        "problem_type": "number_theory",
        "key_insight": "Split a number to complete a ten, then add the rest",
        "method": ["Find what completes ten", "Add the remainder"],
        "check": "Subtract to verify",
    },
    {
        "skill_name": "swap_order",
        "problem_type": "general",
        "key_insight": "Addition is commutative: add the smaller number to the larger",
        "method": ["Order the two numbers", "Add the smaller one"],
        "check": "Add in the other order",
    },
]


# Three phrasings of the same task. The phrasing is what the tiny manager learns relevance from:
# a 2-layer model cannot tie a whole skill document to one digit, but it can to a phrasing.
STYLES = ("What is {a} plus {b}?", "Add {a} and {b}.", "Compute the sum of {a} and {b}.")


def tiny_skill_for(style: int) -> dict:
    """The tiny world's skill for a phrasing (injected during the warm start)."""
    return _TINY_SKILLS[style]


def distilled_skill(a: int, b: int, style: int) -> dict:
    """What the warm start teaches the summary rollout O_{G+1} to write for a solved ``a + b``:
    the phrasing's skill, worded with the question's numbers — so every distilled skill is its
    own document (no single memorised string outscores the rest when the manager scores them)."""
    name, ptype = _TINY_SKILLS[style]["skill_name"], _TINY_SKILLS[style]["problem_type"]
    return {
        "skill_name": name,
        "problem_type": ptype,
        "key_insight": f"Adding {b} to {a} is counting up {b} steps from {a}",
        "method": [f"Start from {a}", f"Count up {b} times"],
        "check": f"Count back down to {a}",
    }


def question(a: int, b: int, style: int = 0) -> str:
    return f"{STYLES[style].format(a=a, b=b)} {INSTRUCTION}"


def solution(a: int, b: int, total: int | None = None) -> str:
    total = a + b if total is None else total
    return f"{a} plus {b} is {total}. The answer is \\boxed{{{total}}}."


# Warm-start answers are right with these probabilities (wrong ones are off by 1 or 2): unaided
# groups have reward variance, and a relevant injected skill (the one distilled from the
# question's phrasing) helps — a causal uplift for the control arm to measure, and R=2 beside R=1
# in one group. The 2-layer model learns them only in part: after the default 500 steps it samples
# (temperature 1) ~43% right answers unaided, ~45% with a seed and ~35% with a distilled skill in
# the prompt (docs/design.md). 0.55, not higher: the tiny Qwen3 learns the labels' rate more fully
# than a tiny Qwen2 did (at 0.75 it sampled ~55% right, leaving less room for RL).
P_CORRECT_UNAIDED = 0.55
P_CORRECT_RELEVANT_SKILL = 0.95
NOISY_COPIES = 8  # answers drawn per (problem, prompt) to realise those rates in the warm-start data


def noisy_solutions(a: int, b: int, p_correct: float, rng: random.Random) -> list[str]:
    out = []
    for _ in range(NOISY_COPIES):
        total = a + b
        if rng.random() >= p_correct:
            total = max(0, total + rng.choice((-2, -1, 1, 2)))
            total = total if total != a + b else a + b + 1
        out.append(solution(a, b, total))
    return out


def all_pairs(max_sum: int = 9) -> list[tuple[int, int]]:
    return [(a, b) for a in range(10) for b in range(10) if a + b <= max_sum]


def all_problems(max_sum: int = 9) -> list[tuple[int, int, int]]:
    """(a, b, phrasing) for every pair with a + b <= max_sum and every phrasing."""
    return [(a, b, s) for a, b in all_pairs(max_sum) for s in range(len(STYLES))]


def make_rows(problems, split: str) -> list[dict]:
    rows = []
    for i, (a, b, s) in enumerate(problems):
        q = question(a, b, s)
        rows.append(
            {
                "data_source": "arise_tiny_addition",
                "prompt": [{"role": "user", "content": q}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": split, "index": i, "question": q},
            }
        )
    return rows


# Qwen3-4B-Instruct-2507's chat format (ChatML, non-thinking: no <think> block is opened), written
# for the tiny tokenizer: an optional system turn (with the tool list when ``tools`` are given),
# user/system turns, assistant turns with their <tool_call> blocks, consecutive tool results grouped
# in one user turn as <tool_response> blocks, then the generation prompt. A plain user prompt
# renders as "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n", as on the real model.
QWEN3_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- set content = message.content if message.content is string else '' %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + content }}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- set call = tool_call.function if tool_call.function is defined else tool_call %}"
    "{%- if content or not loop.first %}{{- '\\n' }}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + call.name + \'", "arguments": \' }}'
    "{{- call.arguments if call.arguments is string else call.arguments | tojson }}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen3's added (not special) tokens for tool calls and thinking: single tokens, as on the real model
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def build_tokenizer(out_dir: Path, corpus: list[str]):
    """A byte-level BPE tokenizer with Qwen3's pre-tokenizer, special tokens and chat template, saved
    as the ``Qwen2Tokenizer`` class Qwen3 checkpoints name (and transformers picks for a ``qwen3``
    config.json whatever tokenizer.json says: the merges must be learned under its splitting)."""
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    merges = [
        tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in json.loads(tok.to_str())["model"]["merges"]
    ]
    hf_tok = Qwen2Tokenizer(
        vocab=tok.get_vocab(),
        merges=merges,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    hf_tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    hf_tok.chat_template = QWEN3_CHAT_TEMPLATE
    hf_tok.save_pretrained(out_dir)
    return hf_tok


def build_model(tokenizer, seed: int, hidden: int = 128, layers: int = 2):
    """A tiny ``Qwen3ForCausalLM``: Qwen3-4B-Instruct-2507's architecture (q_norm/k_norm, no
    attention bias, grouped-query attention, explicit head_dim, tied embeddings, its RoPE base and
    RMSNorm epsilon) at 2 layers of width 128."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=((len(tokenizer) + 63) // 64) * 64,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 32,
        num_key_value_heads=max(1, hidden // 64),
        head_dim=32,  # vLLM-CPU attention rejects head_dim=16
        hidden_act="silu",
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0},
        attention_bias=False,
        use_sliding_window=False,
        max_window_layers=layers,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen3ForCausalLM(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def _encode(tokenizer, examples):
    encoded = []
    for user, answer in examples:
        prefix = tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True)
        if not isinstance(prefix, list):  # transformers 5 returns a BatchEncoding
            prefix = list(prefix["input_ids"])
        target = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
        encoded.append((prefix, target))
    return encoded


def warm_start(model, tokenizer, stages, seed: int, lr: float = 3e-3, encode=None) -> float:
    """Plain supervised warm start; ``stages`` is a list of (examples, steps, batch_size).

    Examples are (user prompt, assistant answer) pairs, loss on the answer only. Stages are
    interleaved step by step so batches of short and long examples are not padded together.
    ``encode(tokenizer, examples)`` -> [(prompt ids, target ids)] replaces the chat encoding
    (the learning-effect world adds a scoring-context stage, recipe/arise/cpu/world.py).
    """
    import torch

    rng = random.Random(seed)
    schedule = []
    for index, (examples, steps, batch_size) in enumerate(stages):
        schedule += [(index, batch_size)] * steps
    rng.shuffle(schedule)
    encoded = [(encode or _encode)(tokenizer, examples) for examples, _, _ in stages]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss = torch.zeros(())
    for index, batch_size in schedule:
        pool = encoded[index]
        batch = [pool[rng.randrange(len(pool))] for _ in range(batch_size)]
        width = max(len(p) + len(t) for p, t in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (p, t) in enumerate(batch):
            seq = p + t
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, len(p) : len(seq)] = torch.tensor(t)
            mask[row, : len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def build_tiny_assets(
    out_dir: str | os.PathLike,
    sft_steps: int = 500,
    seed: int = 0,
    skill_steps: int | None = None,
    summary_steps: int | None = None,
    hidden: int = 128,
    layers: int = 2,
) -> dict:
    """Write model/, data/train.parquet, data/val.parquet under ``out_dir``; return their paths.

    The warm start has three stages, interleaved: plain arithmetic (``sft_steps``), arithmetic
    with an injected skill in the user turn (``skill_steps``: the model learns to read past a
    ``SKILL:`` line), and the summary rollout's format (``summary_steps``: the Figure-4 prompt ->
    a skill JSON, so O_{G+1} parses). Defaults: 2/5 and 3/5 of ``sft_steps``.
    """
    import pandas as pd

    from recipe.arise.core.prompts import build_summary_prompt, inject_skill, summary_messages
    from recipe.arise.core.skill import SkillDoc, load_seed_skills

    started = time.time()
    out = Path(out_dir)
    model_dir, data_dir = out / "model", out / "data"
    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)

    problems = all_problems()
    rng.shuffle(problems)
    train_rows = make_rows(problems, "train")
    val_rows = make_rows(problems[:12], "test")
    pd.DataFrame(train_rows).to_parquet(data_dir / "train.parquet")
    pd.DataFrame(val_rows).to_parquet(data_dir / "val.parquet")

    seeds = load_seed_skills()
    skill_texts = [s.to_json() for s in seeds] + [json.dumps(s, separators=(",", ":")) for s in _TINY_SKILLS]
    corpus = [question(a, b, s) + " " + solution(a, b) for a, b, s in problems]
    corpus += [build_summary_prompt(question(a, b, s), [solution(a, b)]) for a, b, s in problems[:10]]
    corpus += [
        inject_skill([{"role": "user", "content": question(a, b, s)}], seed)[0]["content"]
        for (a, b, s) in problems[:10]
        for seed in seeds
    ]
    corpus += skill_texts * 5
    built = build_tokenizer(model_dir, corpus)
    model = build_model(built, seed, hidden=hidden, layers=layers)
    # Train with the tokenizer exactly as verl and vLLM load it: from disk, beside the model's
    # config.json (transformers picks the pre-tokenizer by model type), and check it agrees.
    model.config.save_pretrained(model_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for text in corpus[:20] + skill_texts:
        if tokenizer.encode(text, add_special_tokens=False) != built.encode(text, add_special_tokens=False):
            raise RuntimeError(f"the tiny tokenizer encodes differently after reloading: {text[:60]!r}")

    arithmetic = [
        (question(a, b, s), answer) for a, b, s in problems for answer in noisy_solutions(a, b, P_CORRECT_UNAIDED, rng)
    ]
    tiny_docs = [SkillDoc.from_dict(s) for s in _TINY_SKILLS]
    with_skill = []
    for a, b, s in problems:
        for k, doc in enumerate(seeds + tiny_docs):
            relevant = k == len(seeds) + s  # the tiny skill of this phrasing
            p = P_CORRECT_RELEVANT_SKILL if relevant else P_CORRECT_UNAIDED
            prompt = inject_skill([{"role": "user", "content": question(a, b, s)}], doc)[0]["content"]
            with_skill += [(prompt, answer) for answer in noisy_solutions(a, b, p, rng)[:2]]
        # the skills O_{G+1} writes (taught below) fill the cache in Phase II: the model also
        # reads them, one of its phrasing (relevant) and one of another, with other numbers
        pairs = all_pairs(max(x + y for x, y, _ in problems))
        for style, p in ((s, P_CORRECT_RELEVANT_SKILL), ((s + 1) % len(STYLES), P_CORRECT_UNAIDED)):
            doc = SkillDoc.from_dict(distilled_skill(*rng.choice(pairs), style))
            prompt = inject_skill([{"role": "user", "content": question(a, b, s)}], doc)[0]["content"]
            with_skill += [(prompt, answer) for answer in noisy_solutions(a, b, p, rng)[:2]]
    summaries = [
        (
            summary_messages(question(a, b, s), [solution(a, b)] * k, max_traces=2, clip_chars=400)[0]["content"],
            json.dumps(distilled_skill(a, b, s), separators=(",", ":")),
        )
        for a, b, s in problems
        for k in (1, 2)
    ]
    skill_steps = sft_steps * 2 // 5 if skill_steps is None else skill_steps
    summary_steps = sft_steps * 3 // 5 if summary_steps is None else summary_steps
    stages = [(arithmetic, sft_steps, 32), (with_skill, skill_steps, 16), (summaries, summary_steps, 8)]
    import torch

    threads = torch.get_num_threads()
    # one thread: these matrices are tiny, and torch's OpenMP threads spin-wait when other processes
    # share the cores (measured: 20 warm-start steps take 9 s on one thread, 179 s on two under load)
    torch.set_num_threads(1)
    try:
        loss = warm_start(model, tokenizer, stages, seed=seed)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(model_dir)
    info = {
        "model": str(model_dir),
        "train": str(data_dir / "train.parquet"),
        "val": str(data_dir / "val.parquet"),
        "vocab": len(tokenizer),
        "params": sum(p.numel() for p in model.parameters()),
        "warm_start_loss": round(loss, 4),
        "seconds": round(time.time() - started, 1),
    }
    (out / "tiny_assets.json").write_text(json.dumps(info, indent=2))
    return info


# The model family of the default assets: part of the cache key and of the folder's name, so that
# assets of another family (the earlier tiny Qwen2) are never picked up from the cache.
ASSETS_FAMILY = "qwen3"


def assets_key() -> str:
    """A hash of everything the default assets depend on: the model family, the sources that
    build them and the library versions that train and save the model."""
    import hashlib

    import tokenizers
    import torch
    import transformers

    here = Path(__file__).resolve()
    sources = [here, here.parents[1] / "core" / "prompts.py", here.parents[1] / "core" / "skill.py"]
    sources.append(here.parents[1] / "data" / "seed_skills.json")
    h = hashlib.sha256(ASSETS_FAMILY.encode())
    for path in sources:
        h.update(path.read_bytes())
    h.update(f"{torch.__version__} {transformers.__version__} {tokenizers.__version__}".encode())
    return h.hexdigest()[:16]


def cached_assets(root: str | os.PathLike | None = None) -> Path:
    """The default assets in a content-keyed cache (``$ARISE_CACHE`` or ``~/.cache/arise``), built
    on first use."""

    def build(folder: Path) -> None:
        info = {k: str(v) for k, v in build_tiny_assets(folder).items()}
        (folder / "tiny_assets.json").write_text(json.dumps(info, indent=2))

    return build_cached(cache_root(root) / f"tiny-{ASSETS_FAMILY}-{assets_key()}", build)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?", help="build here; omit with --cached")
    parser.add_argument(
        "--cached", action="store_true", help="print the default assets' folder in the cache, building it if needed"
    )
    parser.add_argument("--sft-steps", type=int, default=500)
    parser.add_argument("--skill-steps", type=int, default=None)
    parser.add_argument("--summary-steps", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.cached:
        print(cached_assets())
        return
    if not args.out_dir:
        parser.error("out_dir is required unless --cached")
    info = build_tiny_assets(
        args.out_dir,
        sft_steps=args.sft_steps,
        seed=args.seed,
        skill_steps=args.skill_steps,
        summary_steps=args.summary_steps,
        hidden=args.hidden,
        layers=args.layers,
    )
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
