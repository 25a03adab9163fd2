"""Tiny local assets for the CPU end-to-end run: tokenizer, model, math task, warm start.

Nothing is downloaded. The task is single-digit addition with the answer in ``\\boxed{}``; a
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

INSTRUCTION = "Put the final answer within \\boxed{}."

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
        "key_insight": "Addition is commutative so add the smaller number to the larger",
        "method": ["Order the two numbers", "Add the smaller to the larger"],
        "check": "Add in the other order",
    },
]


def question(a: int, b: int) -> str:
    return f"What is {a} plus {b}? {INSTRUCTION}"


def solution(a: int, b: int) -> str:
    return f"{a} plus {b} is {a + b}. The answer is \\boxed{{{a + b}}}."


def all_pairs(max_sum: int = 9) -> list[tuple[int, int]]:
    return [(a, b) for a in range(10) for b in range(10) if a + b <= max_sum]


def make_rows(pairs, split: str) -> list[dict]:
    rows = []
    for i, (a, b) in enumerate(pairs):
        q = question(a, b)
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


def build_tokenizer(out_dir: Path, corpus: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    hf_tok.chat_template = (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
        "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    hf_tok.padding_side = "left"
    hf_tok.save_pretrained(out_dir)
    return hf_tok


def build_model(tokenizer, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=((len(tokenizer) + 63) // 64) * 64,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # vLLM-CPU attention rejects head_dim=16
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(cfg)
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


def warm_start(model, tokenizer, stages, seed: int, lr: float = 3e-3) -> float:
    """Plain supervised warm start; ``stages`` is a list of (examples, steps, batch_size).

    Examples are (user prompt, assistant answer) pairs, loss on the answer only. Stages are
    interleaved step by step so batches of short and long examples are not padded together.
    """
    import torch

    rng = random.Random(seed)
    schedule = []
    for index, (examples, steps, batch_size) in enumerate(stages):
        schedule += [(index, batch_size)] * steps
    rng.shuffle(schedule)
    encoded = [_encode(tokenizer, examples) for examples, _, _ in stages]
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


def build_tiny_assets(out_dir: str | os.PathLike, sft_steps: int = 250, seed: int = 0) -> dict:
    """Write model/, data/train.parquet, data/val.parquet under ``out_dir``; return their paths."""
    import pandas as pd

    from recipe.arise.prompts import build_summary_prompt, inject_skill
    from recipe.arise.skill import load_seed_skills

    started = time.time()
    out = Path(out_dir)
    model_dir, data_dir = out / "model", out / "data"
    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)

    pairs = all_pairs()
    rng.shuffle(pairs)
    train_rows = make_rows(pairs, "train")
    val_rows = make_rows(pairs[:12], "test")
    pd.DataFrame(train_rows).to_parquet(data_dir / "train.parquet")
    pd.DataFrame(val_rows).to_parquet(data_dir / "val.parquet")

    seeds = load_seed_skills()
    skill_texts = [s.to_json() for s in seeds] + [json.dumps(s, separators=(",", ":")) for s in _TINY_SKILLS]
    corpus = [question(a, b) + " " + solution(a, b) for a, b in pairs]
    corpus += [build_summary_prompt(question(a, b), [solution(a, b)]) for a, b in pairs[:10]]
    corpus += [
        inject_skill([{"role": "user", "content": question(a, b)}], s)[0]["content"]
        for (a, b) in pairs[:10]
        for s in seeds
    ]
    corpus += skill_texts * 5
    tokenizer = build_tokenizer(model_dir, corpus)

    model = build_model(tokenizer, seed)
    # Mostly arithmetic (plain and skill-prefixed prompts), some summary -> skill-JSON pairs.
    arithmetic = [(question(a, b), solution(a, b)) for a, b in pairs]
    with_skill = [
        (inject_skill([{"role": "user", "content": question(a, b)}], rng.choice(seeds))[0]["content"], solution(a, b))
        for a, b in pairs
    ]
    # Tuned so the sampled accuracy starts near 50%: groups then have reward variance, tau+ is
    # non-empty and RL has room to improve. (Teaching the skill-JSON format too made the tiny
    # model much worse at both; the summary rollout then relies on the trace_abstract fallback.)
    stages = [(arithmetic, sft_steps, 32), (with_skill, sft_steps * 2 // 5, 16)]
    loss = warm_start(model, tokenizer, stages, seed=seed)
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--sft-steps", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    info = build_tiny_assets(args.out_dir, sft_steps=args.sft_steps, seed=args.seed)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
