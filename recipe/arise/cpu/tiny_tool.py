"""Tiny tool-use assets for the CPU end-to-end run of the tool agent (``TOOL=python``).

The same tiny ``Qwen3ForCausalLM``, task and skills as :mod:`recipe.arise.cpu.tiny`, with a
tokenizer whose corpus holds the python tool's schema as the chat template renders it, and a warm
start that ALSO teaches the tool-call FORMAT: a first assistant turn
``<tool_call>{"name": "python", "arguments": {"code": "print(A + B)"}}</tool_call>`` with the
question's numbers, and after the ``<tool_response>`` turn an answer that copies the tool's printed
number into ``\\boxed{}``. Never a rule: every answer it is taught is the number the tool printed
(a call copies the question's numbers wrongly at the plain tiny run's rates, so groups have reward
variance, and a relevant injected skill makes the right call likelier: R=2 beside R=1). The summary
rollout is taught on multi-turn transcripts (:mod:`recipe.arise.core.transcript`), as the trainer
renders them.

usage: python -m recipe.arise.cpu.tiny_tool OUT_DIR | --cached
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from recipe.arise.cpu import asset_cache, tiny

TOOL = "python"
# tiny's INSTRUCTION with the tool named (recipe/arise/data_prep/schema.py TOOL_INSTRUCTIONS says the
# same at length; the tiny tokenizer wants it short)
INSTRUCTION = "You may use the python tool. Put the final answer within \\boxed{}."
TOOL_CONFIG = Path(__file__).resolve().parents[1] / "config" / "python_tool.yaml"


def question(a: int, b: int, style: int = 0) -> str:
    return f"{tiny.STYLES[style].format(a=a, b=b)} {INSTRUCTION}"


def tool_schemas() -> list[dict]:
    """The tool list exactly as verl's ToolAgentLoop passes it to the chat template."""
    import yaml
    from verl.tools.schemas import OpenAIFunctionToolSchema

    tools = yaml.safe_load(TOOL_CONFIG.read_text())["tools"]
    return [
        OpenAIFunctionToolSchema.model_validate(t["tool_schema"]).model_dump(exclude_unset=True, exclude_none=True)
        for t in tools
    ]


def code_for(a: int, b: int) -> str:
    return f"print({a} + {b})"


def call_text(code: str) -> str:
    """The assistant's tool-call turn as Qwen3 (and the tiny chat template) writes it."""
    return "<tool_call>\n" + json.dumps({"name": TOOL, "arguments": {"code": code}}) + "\n</tool_call>"


def answer_text(printed: str) -> str:
    """The answer after the tool result: a copy of the printed number."""
    return f"The tool printed {printed}. The answer is \\boxed{{{printed}}}."


def noisy_call(a: int, b: int, p_correct: float, rng: random.Random) -> tuple[str, str]:
    """(code, what it prints): the question's numbers, or (1 - p_correct) of the time a slip copying
    the second one; the printed value is always what the code computes."""
    y = b
    if rng.random() >= p_correct:
        y = max(0, b + rng.choice((-2, -1, 1, 2)))
        y = y if y != b else b + 1
    return code_for(a, y), str(a + y)


def conversation(user: str, code: str, printed: str, answer: bool = True) -> list[dict]:
    msgs = [
        {"role": "user", "content": user},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": TOOL, "arguments": {"code": code}}}],
        },  # fmt: skip
        {"role": "tool", "content": printed},
    ]
    return msgs + [{"role": "assistant", "content": answer_text(printed)}] if answer else msgs


def distilled_skill(a: int, b: int, style: int) -> dict:
    """What the summary rollout is taught to write for a solved tool trace: tiny's skill of the
    phrasing, its method naming the computation (the summary prompt's tool rule)."""
    doc = tiny.distilled_skill(a, b, style)
    doc["method"] = [f"Run {code_for(a, b)} in python", "Box the printed number"]
    return doc


def make_rows(problems, split: str) -> list[dict]:
    rows = tiny.make_rows(problems, split)
    for row, (a, b, s) in zip(rows, problems, strict=True):
        q = question(a, b, s)
        row["prompt"] = [{"role": "user", "content": q}]
        row["extra_info"]["question"] = q
    return rows


def _render(tokenizer, messages, tools, add_generation_prompt=False) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True
    )
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def transcript(tokenizer, code: str, printed: str) -> str:
    """The trace as the trainer gives it to the summary prompt: the response's tokens (the call,
    the templated tool result with mask 0, the answer) through ``trace_transcript``."""
    from recipe.arise.core.transcript import trace_transcript

    def enc(text):
        return tokenizer.encode(text, add_special_tokens=False)

    eos = [tokenizer.eos_token_id]
    context = f"\n<|im_start|>user\n<tool_response>\n{printed}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    runs = [(enc(call_text(code)) + eos, 1), (enc(context), 0), (enc(answer_text(printed)) + eos, 1)]
    ids = [t for run, _ in runs for t in run]
    mask = [m for run, m in runs for _ in run]
    return trace_transcript(ids, mask, lambda x: tokenizer.decode(x, skip_special_tokens=True), 400, 200, 1600).text


def build_tool_assets(out_dir: str | os.PathLike, sft_steps: int = 400, seed: int = 0) -> dict:
    """Write model/, data/train.parquet, data/val.parquet under ``out_dir``; return their paths.

    Warm-start stages, interleaved: the call (``sft_steps``), reading the tool result into the
    answer (1/2), the call with an injected skill (1/2) and the summary of a tool transcript (3/4)."""
    import pandas as pd

    from recipe.arise.core.prompts import inject_skill, summary_messages
    from recipe.arise.core.skill import SkillDoc, load_seed_skills

    started = time.time()
    out, model_dir, data_dir = asset_cache.asset_dirs(out_dir)
    rng = random.Random(seed)
    tools = tool_schemas()

    problems = tiny.all_problems()
    rng.shuffle(problems)
    pd.DataFrame(make_rows(problems, "train")).to_parquet(data_dir / "train.parquet")
    pd.DataFrame(make_rows(problems[:12], "test")).to_parquet(data_dir / "val.parquet")

    seeds = load_seed_skills()
    docs = seeds + [SkillDoc.from_dict(s) for s in tiny._TINY_SKILLS]
    skill_texts = [d.to_json() for d in docs]

    def summary_prompt(a, b, s, k, code, printed):
        trace = transcript(built, code, printed)
        msg = summary_messages(question(a, b, s), [trace] * k, max_traces=2, clip_chars=1600, tool_use=True)
        return msg[0]["content"]

    # the tokenizer's corpus: whole rendered conversations (the tool list in the system turn), so
    # the schema and the call's JSON tokenize compactly; a first tokenizer renders the transcripts
    from recipe.arise.core.prompts import build_summary_prompt

    texts = [
        question(a, b, s) + " " + answer_text(str(a + b)) + " " + call_text(code_for(a, b)) for a, b, s in problems
    ]
    texts += [build_summary_prompt(question(a, b, s), ["TOOL CALL python: " + code_for(a, b)]) for a, b, s in problems]
    texts += [
        inject_skill([{"role": "user", "content": question(a, b, s)}], d)[0]["content"]
        for d in docs
        for (a, b, s) in problems[:4]
    ]
    texts += skill_texts * 5
    built = tiny.build_tokenizer(model_dir, texts)
    rendered = [
        built.apply_chat_template(
            conversation(question(a, b, s), code_for(a, b), str(a + b)), tools=tools, tokenize=False
        )
        for a, b, s in problems[:40]
    ]
    rendered += [summary_prompt(a, b, s, 1, code_for(a, b), str(a + b)) for a, b, s in problems[:20]]
    built = tiny.build_tokenizer(model_dir, texts + rendered)
    model = tiny.build_model(built, seed)
    model.config.save_pretrained(model_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)  # as verl and vLLM load it
    for text in rendered[:10] + skill_texts:
        if tokenizer.encode(text, add_special_tokens=False) != built.encode(text, add_special_tokens=False):
            raise RuntimeError(f"the tiny tokenizer encodes differently after reloading: {text[:60]!r}")

    def user_turn(a, b, s, doc=None):
        return inject_skill([{"role": "user", "content": question(a, b, s)}], doc)[0]["content"]

    calls, reads, with_skill, summaries = [], [], [], []
    pairs = tiny.all_pairs()
    for a, b, s in problems:
        for _ in range(tiny.NOISY_COPIES):
            code, printed = noisy_call(a, b, tiny.P_CORRECT_UNAIDED, rng)
            calls.append(([{"role": "user", "content": question(a, b, s)}], call_text(code), True))
            reads.append((conversation(question(a, b, s), code, printed, answer=False), answer_text(printed), True))
        # injected skills: the seeds and the tiny skills, and the distilled ones the cache fills with
        # in Phase II (one of this phrasing, relevant, and one of another); the relevant ones help
        injected = [(d, k == len(seeds) + s) for k, d in enumerate(docs)]
        injected += [(SkillDoc.from_dict(distilled_skill(*rng.choice(pairs), st)), st == s) for st in (s, (s + 1) % 3)]
        for doc, relevant in injected:
            p = tiny.P_CORRECT_RELEVANT_SKILL if relevant else tiny.P_CORRECT_UNAIDED
            code, _ = noisy_call(a, b, p, rng)
            with_skill.append(([{"role": "user", "content": user_turn(a, b, s, doc)}], call_text(code), True))
        target = json.dumps(distilled_skill(a, b, s), separators=(",", ":"))
        for k in (1, 2):
            prompt = summary_prompt(a, b, s, k, code_for(a, b), str(a + b))
            summaries.append(([{"role": "user", "content": prompt}], target, False))

    def encode(examples):
        # the call and answer turns in the tool agent's context (the tool list in the system turn);
        # the summary prompt is rendered without tools, as the trainer sends it
        out = []
        for messages, target, with_tools in examples:
            prompt = _render(tokenizer, messages, tools if with_tools else None, add_generation_prompt=True)
            out.append((prompt, tokenizer.encode(target, add_special_tokens=False) + [tokenizer.eos_token_id]))
        return out

    stages = [
        (encode(calls), sft_steps, 16),
        (encode(reads), sft_steps // 2, 16),
        (encode(with_skill), sft_steps // 2, 16),
        (encode(summaries), sft_steps * 3 // 4, 8),
    ]
    with asset_cache.one_torch_thread():
        system = _render(tokenizer, [{"role": "user", "content": "?"}], tools)
        system = system[: system.index(tokenizer.convert_tokens_to_ids("<|im_start|>"), 1)]
        loss = warm_start(model, tokenizer.pad_token_id, stages, system, seed=seed)
    model.save_pretrained(model_dir)
    prompt_tokens = len(_render(tokenizer, [{"role": "user", "content": question(5, 4, 2)}], tools, True))
    return asset_cache.write_info(out, started, loss, tool=TOOL, vocab=len(tokenizer), prompt_tokens=prompt_tokens)


def warm_start(model, pad_id: int, stages, system: list[int], seed: int, lr: float = 3e-3) -> float:
    """tiny.warm_start's supervised loop (stages of (prompt ids, target ids), interleaved step by step,
    loss on the targets), except that the tool list's system turn, shared by every tool-context
    prompt and ~85% of its tokens, is run once per step without gradient and reused as the batch's
    key/value cache: the warm start then costs about what the plain tiny one does."""
    import torch
    from transformers import DynamicCache

    rng = random.Random(seed)
    schedule = [(index, batch) for index, (_, steps, batch) in enumerate(stages) for _ in range(steps)]
    rng.shuffle(schedule)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss = torch.zeros(())
    n = len(system)
    for index, batch_size in schedule:
        pool = stages[index][0]
        batch = [pool[rng.randrange(len(pool))] for _ in range(batch_size)]
        shared = all(p[:n] == system for p, _ in batch)
        batch = [(p[n:] if shared else p, t) for p, t in batch]
        width = max(len(p) + len(t) for p, t in batch)
        ids = torch.full((len(batch), width), pad_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (p, t) in enumerate(batch):
            ids[row, : len(p) + len(t)] = torch.tensor(p + t)
            labels[row, len(p) : len(p) + len(t)] = torch.tensor(t)
            mask[row, : len(p) + len(t)] = 1
        kwargs = {}
        if shared:
            with torch.no_grad():
                cache = DynamicCache(config=model.config)
                model(input_ids=torch.tensor([system]), past_key_values=cache, use_cache=True)
            cache.batch_repeat_interleave(len(batch))
            mask = torch.cat([torch.ones((len(batch), n), dtype=torch.long), mask], dim=1)
            kwargs = {"past_key_values": cache, "use_cache": True}
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, **kwargs).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def assets_key() -> str:
    """tiny's key (its sources and library versions) with this module's, the shared build helpers'
    and the tool's sources."""
    import hashlib

    here = Path(__file__).resolve()
    h = hashlib.sha256(tiny.assets_key().encode())
    for path in (here, here.parent / "asset_cache.py", TOOL_CONFIG, here.parents[1] / "core" / "transcript.py"):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cached_assets(root: str | os.PathLike | None = None) -> Path:
    """The tool assets in the content-keyed cache, beside tiny's default ones, built on first use."""
    target = asset_cache.cache_root(root) / f"tiny-{tiny.ASSETS_FAMILY}-tool-{TOOL}-{assets_key()}"
    return asset_cache.build_cached_assets(target, build_tool_assets)


def main(argv=None):
    asset_cache.variant_main(argv, __doc__, build_tool_assets, cached_assets, sft_steps=400)


if __name__ == "__main__":
    main()
