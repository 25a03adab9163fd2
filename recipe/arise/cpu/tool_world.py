"""The tool world: query families whose hidden rule is a computation (bench_learning_effect.py --tool).

The transfer world (recipe/arise/cpu/world.py) with the python tool: every query names its family,
and each bench family's ``star`` is one Python expression of ``a`` and ``b`` from a small pool::

    In joxi math, what is 7 star 5? You may use the python tool. Put the final answer within \\boxed{}.
    -> <tool_call>{"name": "python", "arguments": {"code": "a, b = 7, 5; print(a * b % 7)"}}</tool_call>
    <- 0
    -> "The tool printed 0. The answer is \\boxed{0}."

The answers (0-90) are what a 2-layer model cannot compute in its head; it gets them by running
the expression, so the rule a skill must carry is *which code to run*. The pool's expressions
give different values on every data pair, so a correct answer means the family's expression was
run, and its trace names it (the summary's tool rule: "method must name the code").

The warm start teaches formats only, on warm-start names disjoint from the bench's, with the
expression drawn afresh from the pool for every example (no name is ever paired with one
expression, so no rule is in the weights):
  1. calling: query -> a tool call running a random pool expression (unaided, a bench query is
     right ~1/3 of the time); after the tool's result (half the time with a skill in the prompt),
     the answer copies the printed number;
  2. reading a skill: ``SKILL:`` naming an expression (65% the query's family, 20% another) -> the
     call runs that expression (95%); a seed skill -> a random one;
  3. writing a skill: the summary prompt with one or two multi-turn transcripts (as
     recipe/arise/core/transcript.py renders them) -> a skill whose method names the code run;
  4. the manager's scoring context (the tool prompt + ``\\nSKILL:``) -> a skill naming the query's
     family with a random expression.

usage: python -m recipe.arise.cpu.tool_world OUT_DIR | --cached | --probe ASSETS
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import time
from pathlib import Path

from recipe.arise.cpu import asset_cache, tiny, tiny_tool, world

# the pool: one expression per family (two families each); pairwise different on every data pair
EXPRESSIONS = {
    "a * b % 7": lambda a, b: a * b % 7,
    "a * a + b": lambda a, b: a * a + b,
    "2 * a + 3 * b": lambda a, b: 2 * a + 3 * b,
}
POOL = tuple(EXPRESSIONS)
DATA_SOURCE_PREFIX = world.DATA_SOURCE_PREFIX  # per-family accuracy keys, as the bench reads them
HELD_OUT_PER_FAMILY = 5
P_READ_SKILL = 0.95
# warm-start steps per stage, in units of sft_steps. Copying the family's name into a skill (summary)
# and matching it (score) need the most: a first build with 3/4 and 1/4 wrote warm-start names into
# every summary and ranked the own family's skill first 17% of the time (chance)
STAGE_STEPS = {"call": 1.0, "read": 1.0, "skill": 0.75, "summary": 2.0, "score": 1.0}
CALL = re.compile(r"a, b = (\d+), (\d+); print\((.*)\)")


def bench_families(n: int = 6) -> dict[str, str]:
    """The transfer world's ``n`` bench names, each family's k choosing its expression (balanced)."""
    return {name: POOL[k - 1] for name, k in world.bench_families(n).items()}


def pairs() -> list[tuple[int, int]]:
    """(a, b) in 1..9 on which the pool's expressions all differ: the answer names the expression."""
    grid = [(a, b) for a in range(1, 10) for b in range(1, 10)]
    return [(a, b) for a, b in grid if len({f(a, b) for f in EXPRESSIONS.values()}) == len(POOL)]


def answer(expr: str, a: int, b: int) -> str:
    return str(EXPRESSIONS[expr](a, b))


def question(fam: str, a: int, b: int) -> str:
    return f"In {fam} math, what is {a} star {b}? {tiny_tool.INSTRUCTION}"


def code(expr: str, a: int, b: int) -> str:
    """The program a call runs: the question's numbers, then the expression, verbatim (copyable)."""
    return f"a, b = {a}, {b}; print({expr})"


def skill(fam: str, expr: str) -> dict:
    """The skill a summary of a solved ``fam`` query writes: the method names the code, the key insight
    the family. The name is the same for every family: the name field comes first, where a first
    build's summaries wrote a warm-start name (fyxi_star for joxi); in the key insight the family is
    copied the way the transfer world's is ("In joxi math" -> "In joxi math")."""
    from recipe.arise.core.skill import FIELDS

    method = [f"Run print({expr}) in python", "Box the printed number"]
    values = ("star_code", "algebra", f"In {fam} math a star b is {expr}", method, "Use the question's a and b")
    return dict(zip(FIELDS, values, strict=True))


def skill_json(fam: str, expr: str) -> str:
    from recipe.arise.core.skill import SkillDoc

    return SkillDoc.from_dict(skill(fam, expr)).to_json()


def split(families: dict[str, str], seed: int = 1234) -> tuple[list, list]:
    """(train, held-out) lists of (family, a, b): HELD_OUT_PER_FAMILY pairs of every family held out."""
    rng, train, held = random.Random(seed), [], []
    for fam in families:
        problems = [(fam, a, b) for a, b in pairs()]
        rng.shuffle(problems)
        held, train = held + problems[:HELD_OUT_PER_FAMILY], train + problems[HELD_OUT_PER_FAMILY:]
    return train, held


def make_rows(problems, families: dict[str, str], split_name: str) -> list[dict]:
    out = []
    for i, (fam, a, b) in enumerate(problems):
        q, gt = question(fam, a, b), answer(families[fam], a, b)
        info = {"split": split_name, "index": i, "question": q, "family": fam}
        row = {"data_source": DATA_SOURCE_PREFIX + fam, "prompt": [{"role": "user", "content": q}], "ability": "math"}
        out.append({**row, "reward_model": {"style": "rule", "ground_truth": gt}, "extra_info": info})
    return out


def plain_transcript(code_text: str, printed: str) -> str:
    """The transcript's text without a tokenizer (tests, the tokenizer's corpus)."""
    return f"TOOL CALL python: {code_text}\nTOOL RESULT: {printed}\nASSISTANT: {tiny_tool.answer_text(printed)}"


def warm_start_examples(names: list[str], rng: random.Random, per_stage: int = 2000, transcript=plain_transcript):
    """The warm start's examples by stage, each (kind, messages, target); kind "tools" (rendered with
    the tool list), "plain" (the summary prompt, no tools) or "score" (tools + the scoring suffix).
    Only ``names`` appear; the expression is drawn afresh for every example, so no name has a rule.
    ``transcript(code, printed)`` renders a solved trace for the summary prompt."""
    from recipe.arise.core.prompts import inject_skill, summary_messages
    from recipe.arise.core.skill import SkillDoc, load_seed_skills

    seeds, ps = load_seed_skills(), pairs()
    out: dict[str, list] = {"call": [], "read": [], "skill": [], "summary": [], "score": []}
    for _ in range(per_stage):
        fam, (a, b), expr = rng.choice(names), rng.choice(ps), rng.choice(POOL)
        q = question(fam, a, b)
        out["call"].append(("tools", [{"role": "user", "content": q}], tiny_tool.call_text(code(expr, a, b))))
        r = rng.random()
        if r < 0.85:  # a family rule (mostly the query's own family): the call runs its expression
            shown = rng.choice(POOL)
            doc = SkillDoc.from_dict(skill(fam if r < 0.65 else rng.choice(names), shown))
            run = shown if rng.random() < P_READ_SKILL else rng.choice(POOL)
        else:  # a seed skill (no rule): a random expression
            doc, run = rng.choice(seeds), rng.choice(POOL)
        aided = inject_skill([{"role": "user", "content": q}], doc)
        out["skill"].append(("tools", aided, tiny_tool.call_text(code(run, a, b))))

        # the answer after the tool's result, half the time under an injected skill: a build that
        # taught it unaided only called the tool again after the result whenever a skill was in the
        # prompt (every aided trajectory wrong: uplift -0.3 for correct skills in the bench)
        printed = answer(run, a, b)
        user = aided[0]["content"] if rng.random() < 0.5 else q
        read = tiny_tool.conversation(user, code(run, a, b), printed, answer=False)
        out["read"].append(("tools", read, tiny_tool.answer_text(printed)))

        traces = [transcript(code(expr, a, b), answer(expr, a, b))]
        if rng.random() < 0.5:  # two traces of the same family and expression (other numbers)
            a2, b2 = rng.choice(ps)
            traces.append(transcript(code(expr, a2, b2), answer(expr, a2, b2)))
        msg = summary_messages(q, traces, max_traces=2, clip_chars=1600, tool_use=True)
        out["summary"].append(("plain", msg, skill_json(fam, expr)))
        out["score"].append(("score", [{"role": "user", "content": q}], skill_json(fam, rng.choice(POOL))))
    return out


def encode(tokenizer, tools, examples) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids) as the tool agent renders them; the scoring context ends with the
    scoring suffix and its target (a skill) has no end of turn."""
    from recipe.arise.core.scoring import SCORING_SUFFIX

    out = []
    for kind, messages, target in examples:
        prompt = tiny_tool._render(tokenizer, messages, None if kind == "plain" else tools, True)
        tail = [tokenizer.eos_token_id]
        if kind == "score":
            prompt, tail = prompt + tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False), []
        out.append((prompt, tokenizer.encode(target, add_special_tokens=False) + tail))
    return out


def tokenizer_corpus(names: list[str]) -> list[str]:
    """The formats with names spaced into their syllables (no whole name becomes a token)."""
    from recipe.arise.core.prompts import build_summary_prompt, inject_skill
    from recipe.arise.core.skill import load_seed_skills

    seeds = load_seed_skills()
    spaced = [n[:2] + " " + n[2:] for n in names]
    corpus = [" ".join(world.SYLLABLES)] * 200
    for i, (a, b) in enumerate(pairs()):
        fam, expr = spaced[i % len(spaced)], POOL[i % len(POOL)]
        c = code(expr, a, b)
        corpus.append(f"{question(fam, a, b)} {tiny_tool.call_text(c)} {tiny_tool.answer_text(answer(expr, a, b))}")
        corpus.append(json.dumps(skill(fam, expr), separators=(",", ":")))
    corpus += [build_summary_prompt(question(spaced[0], 1, 2), [plain_transcript(code(POOL[0], 1, 2), "2")])] * 3
    corpus += [inject_skill([{"role": "user", "content": question("zu qo", 1, 2)}], s)[0]["content"] for s in seeds]
    return corpus + [s.to_json() for s in seeds] * 5


def build_tool_world_assets(out_dir: str | os.PathLike, n_families: int = 6, sft_steps: int = 400, seed: int = 0):
    """Write model/, data/train.parquet, data/val.parquet, world.json under ``out_dir``.

    Warm-start steps per stage (:data:`STAGE_STEPS` x ``sft_steps``), then a quarter as many at a tenth
    of the rate: at a constant rate the last batches' noise leaves the random choice of expression
    skewed (a first build called one expression 15 times in 24, another once)."""
    import pandas as pd
    import torch
    from transformers import AutoTokenizer

    started, out = time.time(), Path(out_dir)
    model_dir, data_dir = out / "model", out / "data"
    for folder in (model_dir, data_dir):
        folder.mkdir(parents=True, exist_ok=True)
    families = bench_families(n_families)
    train, held = split(families)
    rng = random.Random(seed)
    rng.shuffle(train)
    pd.DataFrame(make_rows(train, families, "train")).to_parquet(data_dir / "train.parquet")
    pd.DataFrame(make_rows(held, families, "test")).to_parquet(data_dir / "val.parquet")

    names, tools = world.warm_start_names(families), tiny_tool.tool_schemas()
    texts = tokenizer_corpus(names)
    # a first tokenizer renders whole tool conversations (the tool list) for the final one's corpus
    first = tiny.build_tokenizer(model_dir, texts)
    spaced = [n[:2] + " " + n[2:] for n in names]
    texts += [
        first.apply_chat_template(
            tiny_tool.conversation(question(f, 3, 4), code(e, 3, 4), "9"), tools=tools, tokenize=False
        )
        for f, e in zip(spaced[:6], POOL * 2, strict=True)
    ]
    built = tiny.build_tokenizer(model_dir, texts)
    model = tiny.build_model(built, seed)
    model.config.save_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)  # as verl and vLLM load it
    for text in texts[-5:] + [question(n, 1, 2) for n in families]:
        if tokenizer.encode(text, add_special_tokens=False) != built.encode(text, add_special_tokens=False):
            raise RuntimeError(f"the tool world tokenizer encodes differently after reloading: {text[:60]!r}")

    def render(code_text, printed):
        return tiny_tool.transcript(tokenizer, code_text, printed)

    ex = warm_start_examples(names, rng, transcript=render)
    encoded = {k: encode(tokenizer, tools, ex[k]) for k in STAGE_STEPS}
    batch = {"summary": 8}
    stages = [(encoded[k], int(f * sft_steps), batch.get(k, 16)) for k, f in STAGE_STEPS.items()]
    anneal = [(pool, max(1, n // 4), size) for pool, n, size in stages]
    system = tiny_tool._render(tokenizer, [{"role": "user", "content": "?"}], tools)
    system = system[: system.index(tokenizer.convert_tokens_to_ids("<|im_start|>"), 1)]
    threads, _ = torch.get_num_threads(), torch.set_num_threads(1)  # tiny matrices, shared cores (tiny.py)
    try:
        tiny_tool.warm_start(model, tokenizer.pad_token_id, stages, system, seed=seed)
        loss = tiny_tool.warm_start(model, tokenizer.pad_token_id, anneal, system, seed=seed + 1, lr=3e-4)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(model_dir)
    layout = {"families": families, "held_out": len(held), "train": len(train)}
    (out / "world.json").write_text(json.dumps(layout))
    paths = {"model": model_dir, "train": data_dir / "train.parquet", "val": data_dir / "val.parquet"}
    info = {
        **{name: str(path) for name, path in paths.items()},
        "families": families,
        "tool": tiny_tool.TOOL,
        "vocab": len(tokenizer),
        "warm_start_loss": round(loss, 4),
        "seconds": round(time.time() - started, 1),
    }
    (out / "tiny_assets.json").write_text(json.dumps(info, indent=2))
    return info


def call_prints(text: str, gt: str) -> bool:
    """Whether a generated tool call's code would print ``gt`` (pool expressions only: the probe runs
    no sandbox)."""
    m = CALL.search(text.replace("\\n", "\n"))
    return bool(m) and m.group(3) in EXPRESSIONS and answer(m.group(3), int(m.group(1)), int(m.group(2))) == gt


def probe_assets(assets: str | os.PathLike, samples: int = 4, seed: int = 0) -> dict:
    """What the warm start left on the held-out bench queries (transformers, temperature 1): how
    often the first call runs code that prints the answer unaided, with the family's skill, with
    another family's; how often a summary of a solved transcript names the family and its code;
    how often the scoring context ranks the family's own skill first (mean log-prob)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe.arise.core.prompts import inject_skill, summary_messages
    from recipe.arise.core.scoring import SCORING_SUFFIX
    from recipe.arise.core.skill import SkillDoc, parse_skill

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = AutoTokenizer.from_pretrained(Path(assets) / "model")
    model = AutoModelForCausalLM.from_pretrained(Path(assets) / "model").eval()
    families = json.loads((Path(assets) / "world.json").read_text())["families"]
    tools = tiny_tool.tool_schemas()
    _, held = split(families)

    def sample(ids, n, max_new=64):
        ids = torch.tensor([ids] * n)
        with torch.no_grad():
            got = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_p=1.0,
                                 max_new_tokens=max_new, pad_token_id=tok.pad_token_id)  # fmt: skip
        return [tok.decode(o[ids.shape[1] :], skip_special_tokens=False) for o in got]

    def calls(doc_of):
        hits = []
        for fam, a, b in held:
            msgs = inject_skill([{"role": "user", "content": question(fam, a, b)}], doc_of(fam))
            gt = answer(families[fam], a, b)
            hits += [call_prints(t, gt) for t in sample(tiny_tool._render(tok, msgs, tools, True), samples)]
        return round(sum(hits) / len(hits), 3)

    def other(fam):
        wrong = rng.choice([f for f in families if f != fam])
        return SkillDoc.from_dict(skill(wrong, families[wrong]))

    result = {
        "call_right_unaided": calls(lambda fam: None),
        "call_right_own_skill": calls(lambda fam: SkillDoc.from_dict(skill(fam, families[fam]))),
        "call_right_other_family_skill": calls(other),
    }
    carried = 0
    for fam, a, b in held:
        c, printed = code(families[fam], a, b), answer(families[fam], a, b)
        msgs = summary_messages(
            question(fam, a, b), [tiny_tool.transcript(tok, c, printed)], clip_chars=1600, tool_use=True
        )
        for text in sample(tiny_tool._render(tok, msgs, None, True), 2, max_new=120):
            doc = parse_skill(text.replace("<|im_end|>", ""), shrink=True)
            carried += doc is not None and f"In {fam} math" in doc.key_insight and families[fam] in " ".join(doc.method)
    result["summary_names_family_and_code"] = round(carried / (2 * len(held)), 3)

    ranked = 0
    for fam, a, b in held:
        prefix = tiny_tool._render(tok, [{"role": "user", "content": question(fam, a, b)}], tools, True)
        prefix += tok.encode(SCORING_SUFFIX, add_special_tokens=False)
        scores = {}
        for f, e in families.items():
            target = tok.encode(skill_json(f, e), add_special_tokens=False)
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([prefix + target])).logits[0, len(prefix) - 1 : -1], -1)
            scores[f] = float(logp.gather(1, torch.tensor(target)[:, None]).mean())
        ranked += max(scores, key=scores.get) == fam
    result["scoring_ranks_own_family_first"] = round(ranked / len(held), 3)
    return result


def assets_key(**params) -> str:
    """A hash of the sources the assets depend on and the build parameters."""
    here = Path(__file__).resolve()
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode() + tiny_tool.assets_key().encode())
    for path in (here, here.parent / "world.py"):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cached_world(cache_root=None, **params) -> Path:
    """The tool world's assets (build parameters as :func:`build_tool_world_assets`'s) in the
    content-keyed cache ($ARISE_CACHE or ~/.cache/arise), built on first use."""
    params = {"n_families": 6, "sft_steps": 400, "seed": 0, **params}
    target = asset_cache.cache_root(cache_root) / f"toolworld-{assets_key(**params)}"
    return asset_cache.build_cached(target, lambda folder: build_tool_world_assets(folder, **params))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?", help="build here (or --cached, or --probe ASSETS)")
    parser.add_argument("--cached", action="store_true", help="print the cached world's folder, building it if needed")
    parser.add_argument("--probe", metavar="ASSETS", help="print what the warm start left in ASSETS (no build)")
    for flag, default in (("--families", 6), ("--sft-steps", 400), ("--seed", 0)):
        parser.add_argument(flag, type=int, default=default)
    args = parser.parse_args(argv)
    params = {"n_families": args.families, "sft_steps": args.sft_steps, "seed": args.seed}
    if args.probe:
        result = probe_assets(args.probe)
    elif args.cached:
        result = str(cached_world(**params))
    elif args.out_dir:
        result = build_tool_world_assets(args.out_dir, **params)
    else:
        parser.error("OUT_DIR, --cached or --probe ASSETS is required")
    print(result if isinstance(result, str) else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
