"""The transfer world: query families with hidden rules a skill can carry (bench/bench_learning_effect.py).

In the tiny addition world (recipe/arise/cpu/tiny.py) a distilled skill names its own question's
numbers, so no skill can help another query. Here every query belongs to a *family* named in the
query, and each bench family has a hidden constant ``k`` (1, 2 or 3) added to a small sum::

    In zuqo math, what is 3 plus 2? Put the final answer within \\boxed{}.     (zuqo: k = 2)
    -> "3 plus 2 is 5. In zuqo math we add 2 more: 7. The answer is \\boxed{7}."

The query alone does not reveal ``k``; a correct trace states it, so a summary of one solved query
of a family ("In zuqo math add 2 to the usual sum") carries what the family's other queries need.
A policy can learn each family's ``k`` in its weights (GRPO) or by writing, selecting and reading
skills (ARISE).

The warm start teaches formats only, on *warm-start* names disjoint from the bench families' names
and with ``k`` drawn afresh for every example (no name has a rule there):
  - answering: the trace format with a uniformly random ``k`` (so an unaided bench query is right
    ~1/3 of the time, whatever its family);
  - reading a skill: ``SKILL:`` + a family rule -> the answer uses the rule's ``k`` (whichever
    family it names: a first build that taught "another family's rule -> ignore it" left the model
    hedging, 62% right with its own family's rule); a seed skill -> a random ``k``;
  - writing a skill: the summary prompt (Figure 4) with a trace -> the skill JSON of that trace's
    family and ``k`` (copied from the trace);
  - the manager's scoring context (chat(query) + ``\\nSKILL:``) -> a skill of the query's family with
    a random ``k``: the policy's score of a skill rises with a matching family name, never with
    a particular ``k``.
So no bench family's rule and no skill is planted: in Phase II every non-seed skill in the library
comes from the policy's own summary rollouts.

Family names are two syllables of rare letters; the tokenizer learns the syllables (not whole
names), so a bench name is a new pair of syllable tokens the warm start has trained.

usage: python -m recipe.arise.cpu.world OUT_DIR [--families 6] [--sft-steps N] [--seed S]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import time
from pathlib import Path

from recipe.arise.cpu import asset_cache, tiny
from recipe.arise.cpu.tiny import INSTRUCTION, build_model, build_tokenizer

SYLLABLES = ("zu", "qo", "xi", "jo", "vy", "ke", "wa", "fy")
KS = (1, 2, 3)
MAX_AB = 6  # a + b <= 6, so a + b + k <= 9: one-digit answers
DATA_SOURCE_PREFIX = "transfer_"
HELD_OUT_PER_FAMILY = 5
# warm start: P(the answer uses a matching skill's k); otherwise k is drawn at random
P_READ_SKILL = 0.95


def all_names() -> list[str]:
    return [a + b for a in SYLLABLES for b in SYLLABLES if a != b]


def bench_families(n: int = 6, seed: int = 1234) -> dict[str, int]:
    """``n`` bench family names -> hidden k, the k's balanced over KS. Fixed by ``seed`` (not by the
    run's seed): every arm and seed of the bench sees the same world."""
    rng = random.Random(seed)
    names = all_names()
    rng.shuffle(names)
    chosen: list[str] = []
    for name in names:  # no two bench names with the same two syllables (zuqo and qozu)
        if len(chosen) < n and name[2:] + name[:2] not in chosen:
            chosen.append(name)
    return {name: KS[i % len(KS)] for i, name in enumerate(sorted(chosen))}


def warm_start_names(families: dict[str, int]) -> list[str]:
    """Every other name: the warm start's, disjoint from the bench's."""
    return [n for n in all_names() if n not in families]


def pairs() -> list[tuple[int, int]]:
    return [(a, b) for a in range(MAX_AB + 1) for b in range(MAX_AB + 1) if a + b <= MAX_AB]


def question(fam: str, a: int, b: int) -> str:
    return f"In {fam} math, what is {a} plus {b}? {INSTRUCTION}"


def trace(fam: str, a: int, b: int, k: int) -> str:
    """A solution that states the rule it used (k): what a summary can carry to other queries."""
    s = a + b
    return f"{a} plus {b} is {s}. In {fam} math we add {k} more: {s + k}. The answer is \\boxed{{{s + k}}}."


def skill(fam: str, k: int) -> dict:
    """The skill a summary of a solved ``fam`` query writes (the format the warm start teaches)."""
    return {
        "skill_name": f"{fam}_rule",
        "problem_type": "algebra",
        "key_insight": f"In {fam} math add {k} to the usual sum",
        "method": ["Add the two numbers", f"Add {k} more"],
        "check": f"The answer is {k} above the plain sum",
    }


def split(families: dict[str, int], seed: int = 1234) -> tuple[list, list]:
    """(train, held-out) lists of (family, a, b): HELD_OUT_PER_FAMILY pairs of every family held out."""
    rng = random.Random(seed)
    train, held = [], []
    for fam in families:
        ps = pairs()
        rng.shuffle(ps)
        held += [(fam, a, b) for a, b in ps[:HELD_OUT_PER_FAMILY]]
        train += [(fam, a, b) for a, b in ps[HELD_OUT_PER_FAMILY:]]
    return train, held


def make_rows(problems, families: dict[str, int], split_name: str) -> list[dict]:
    rows = []
    for i, (fam, a, b) in enumerate(problems):
        q = question(fam, a, b)
        rows.append(
            {
                "data_source": DATA_SOURCE_PREFIX + fam,  # per-family accuracy in verl's val-core metrics
                "prompt": [{"role": "user", "content": q}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b + families[fam])},
                "extra_info": {"split": split_name, "index": i, "question": q, "family": fam},
            }
        )
    return rows


# the warm start's stages: answering, reading an injected skill, the summary format, the scoring context
STAGES = ("answer", "read", "summary", "score")


def warm_start_examples(names: list[str], rng: random.Random, per_stage: int = 2000) -> dict[str, list]:
    """The four warm-start stages' examples, (prefix kind, user text, target). Only ``names`` appear
    (the warm-start names); k is drawn afresh for every example, so no name has a rule."""
    from recipe.arise.core.prompts import inject_skill, summary_messages
    from recipe.arise.core.skill import SkillDoc, load_seed_skills

    seeds = load_seed_skills()
    ps = pairs()
    out: dict[str, list] = {"answer": [], "read": [], "summary": [], "score": []}
    for _ in range(per_stage):
        fam, (a, b) = rng.choice(names), rng.choice(ps)
        out["answer"].append(("chat", question(fam, a, b), trace(fam, a, b, rng.choice(KS))))

        r = rng.random()
        if r < 0.85:  # a family rule (mostly the query's own family): the answer follows its k
            k = rng.choice(KS)
            doc = SkillDoc.from_dict(skill(fam if r < 0.65 else rng.choice(names), k))
            used = k if rng.random() < P_READ_SKILL else rng.choice(KS)
        else:  # a seed skill (no rule): ignored
            doc, used = rng.choice(seeds), rng.choice(KS)
        prompt = inject_skill([{"role": "user", "content": question(fam, a, b)}], doc)[0]["content"]
        out["read"].append(("chat", prompt, trace(fam, a, b, used)))

        k = rng.choice(KS)
        traces = [trace(fam, a, b, k)]
        if rng.random() < 0.5:  # two traces of the same family and k (other numbers)
            traces.append(trace(fam, *rng.choice(ps), k))
        msg = summary_messages(question(fam, a, b), traces, max_traces=2, clip_chars=400)[0]["content"]
        out["summary"].append(("chat", msg, json.dumps(skill(fam, k), separators=(",", ":"))))

        out["score"].append(
            ("score", question(fam, a, b), json.dumps(skill(fam, rng.choice(KS)), separators=(",", ":")))
        )
    return out


def _encode(tokenizer, examples):
    from recipe.arise.core.scoring import SCORING_SUFFIX

    encoded = []
    for kind, user, answer in examples:
        prefix = tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True)
        if not isinstance(prefix, list):  # transformers 5 returns a BatchEncoding
            prefix = list(prefix["input_ids"])
        if kind == "score":  # the manager's scoring context: chat(query) + "\nSKILL:", then the skill
            prefix = prefix + tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False)
            target = tokenizer.encode(answer, add_special_tokens=False)
        else:
            target = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
        encoded.append((prefix, target))
    return encoded


def warm_start(model, tokenizer, stages, seed: int, lr: float = 3e-3) -> float:
    """Supervised warm start as tiny.warm_start (loss on the target only, stages interleaved step by
    step), with the scoring-context prefix for the "score" stage."""
    return tiny.warm_start(model, tokenizer, stages, seed, lr=lr, encode=_encode)


def tokenizer_corpus(names: list[str]) -> list[str]:
    """Text the BPE tokenizer learns from: the formats, with the syllables as words of their own and
    names only with a space between their syllables, so that no whole name becomes a token."""
    from recipe.arise.core.prompts import build_summary_prompt, inject_skill
    from recipe.arise.core.skill import load_seed_skills

    seeds = load_seed_skills()
    spaced = [n[:2] + " " + n[2:] for n in names]
    corpus = [" ".join(SYLLABLES)] * 50
    for i, (a, b) in enumerate(pairs()):
        fam, k = spaced[i % len(spaced)], KS[i % len(KS)]
        corpus.append(question(fam, a, b) + " " + trace(fam, a, b, k))
        corpus.append(json.dumps(skill(fam, k), separators=(",", ":")))
    corpus += [build_summary_prompt(question(spaced[0], 1, 2), [trace(spaced[0], 1, 2, 1)])] * 3
    corpus += [inject_skill([{"role": "user", "content": question("zu qo", 1, 2)}], s)[0]["content"] for s in seeds]
    corpus += [s.to_json() for s in seeds] * 5
    return corpus


def build_world_assets(
    out_dir: str | os.PathLike,
    n_families: int = 6,
    sft_steps: int = 600,
    seed: int = 0,
    hidden: int = 128,
    layers: int = 2,
    stages: tuple[str, ...] = STAGES,
) -> dict:
    """Write model/, data/train.parquet, data/val.parquet (held-out queries of every family) and
    world.json (the families' rules, for the report) under ``out_dir``; return their paths.

    Warm-start steps per stage: answering and reading ``sft_steps`` each, summary 3/5, scoring 1/5;
    only the ``stages`` named are trained (the selection-relevance test needs only ``("score",)``:
    the Manager's scoring context, a fifth of the full warm start's time)."""
    import pandas as pd
    import torch
    from transformers import AutoTokenizer

    unknown = sorted(set(stages) - set(STAGES))
    if unknown or not stages:
        raise ValueError(f"world warm-start stages {list(stages)}: each one of {list(STAGES)}, at least one")
    started = time.time()
    out = Path(out_dir)
    model_dir, data_dir = out / "model", out / "data"
    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)

    families = bench_families(n_families)
    train, held = split(families)
    rng.shuffle(train)
    pd.DataFrame(make_rows(train, families, "train")).to_parquet(data_dir / "train.parquet")
    pd.DataFrame(make_rows(held, families, "test")).to_parquet(data_dir / "val.parquet")

    names = warm_start_names(families)
    built = build_tokenizer(model_dir, tokenizer_corpus(names))
    model = build_model(built, seed, hidden=hidden, layers=layers)
    model.config.save_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    probe = [question(n, 1, 2) for n in list(families)[:3] + names[:3]]
    for text in probe:
        if tokenizer.encode(text, add_special_tokens=False) != built.encode(text, add_special_tokens=False):
            raise RuntimeError(f"the world tokenizer encodes differently after reloading: {text[:60]!r}")

    ex = warm_start_examples(names, rng)
    plan = {
        "answer": (sft_steps, 32),
        "read": (sft_steps, 16),
        "summary": (sft_steps * 3 // 5, 8),
        "score": (sft_steps // 5, 16),
    }
    schedule = [(ex[name], *plan[name]) for name in STAGES if name in stages]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tiny.build_tiny_assets: tiny matrices, shared cores
    try:
        loss = warm_start(model, tokenizer, schedule, seed=seed)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(model_dir)
    (out / "world.json").write_text(json.dumps({"families": families, "held_out": len(held), "train": len(train)}))
    info = {
        "model": str(model_dir),
        "train": str(data_dir / "train.parquet"),
        "val": str(data_dir / "val.parquet"),
        "families": families,
        "vocab": len(tokenizer),
        "warm_start_loss": round(loss, 4),
        "seconds": round(time.time() - started, 1),
    }
    (out / "tiny_assets.json").write_text(json.dumps(info, indent=2))
    return info


def probe_assets(assets: str | os.PathLike, samples: int = 4, seed: int = 0) -> dict:
    """What the warm start left, on the bench families' held-out queries (transformers, temperature 1):
    accuracy unaided, with the family's true skill injected, with another family's skill; how often
    the summary prompt of a correct trace yields a valid skill carrying the trace's k; and how often
    the scoring context ranks the family's own skill above the other families' (mean log-prob)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe.arise.core.grader import grade
    from recipe.arise.core.prompts import inject_skill, summary_messages
    from recipe.arise.core.scoring import SCORING_SUFFIX
    from recipe.arise.core.skill import SkillDoc, parse_skill

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model_dir = Path(assets) / "model"
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    families = json.loads((Path(assets) / "world.json").read_text())["families"]
    _, held = split(families)

    def chat_ids(user):
        ids = tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True)
        return list(ids["input_ids"]) if not isinstance(ids, list) else ids

    def sample(user, n, max_new=48):
        ids = torch.tensor([chat_ids(user)] * n)
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                max_new_tokens=max_new,
                pad_token_id=tok.pad_token_id,
            )
        return [tok.decode(o[ids.shape[1] :], skip_special_tokens=True) for o in out]

    def doc(fam, k):
        return SkillDoc.from_dict(skill(fam, k))

    def acc(prompts):
        hits = [grade(r, gt) for user, gt in prompts for r in sample(user, samples)]
        return sum(hits) / len(hits)

    plain, own, other = [], [], []
    for fam, a, b in held:
        gt = str(a + b + families[fam])
        q = [{"role": "user", "content": question(fam, a, b)}]
        plain.append((q[0]["content"], gt))
        own.append((inject_skill(q, doc(fam, families[fam]))[0]["content"], gt))
        wrong = rng.choice([f for f in families if f != fam])
        other.append((inject_skill(q, doc(wrong, families[wrong]))[0]["content"], gt))
    parsed = carried = 0
    for fam, a, b in held:
        k = families[fam]
        msg = summary_messages(question(fam, a, b), [trace(fam, a, b, k)], max_traces=2, clip_chars=400)
        for text in sample(msg[0]["content"], 2, max_new=120):
            got = parse_skill(text, shrink=True)
            parsed += got is not None
            carried += got is not None and f"add {k} " in got.key_insight and fam in got.skill_name
    ranked = 0
    suffix = tok.encode(SCORING_SUFFIX, add_special_tokens=False)
    for fam, a, b in held:
        prefix = chat_ids(question(fam, a, b)) + suffix
        scores = {}
        for f, k in families.items():
            target = tok.encode(doc(f, k).to_json(), add_special_tokens=False)
            ids = torch.tensor([prefix + target])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0, len(prefix) - 1 : -1], -1)
            scores[f] = float(logp.gather(1, torch.tensor(target)[:, None]).mean())
        ranked += max(scores, key=scores.get) == fam
    n = len(held)
    return {
        "acc_unaided": round(acc(plain), 3),
        "acc_own_skill": round(acc(own), 3),
        "acc_other_family_skill": round(acc(other), 3),
        "summary_parsed": round(parsed / (2 * n), 3),
        "summary_carries_rule": round(carried / (2 * n), 3),
        "scoring_ranks_own_family_first": round(ranked / n, 3),
    }


def assets_key(**params) -> str:
    """A hash of this module's and tiny.py's sources, the core formats and the build parameters."""
    here = Path(__file__).resolve()
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for path in (
        here,
        here.parent / "tiny.py",
        here.parents[1] / "core" / "prompts.py",
        here.parents[1] / "core" / "skill.py",
    ):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cached_world(
    cache_root: str | os.PathLike | None = None,
    n_families: int = 6,
    sft_steps: int = 600,
    seed: int = 0,
    stages: tuple[str, ...] = STAGES,
) -> Path:
    """The world's assets in the content-keyed cache ($ARISE_CACHE or ~/.cache/arise), built on first use."""
    params: dict = {"n_families": n_families, "sft_steps": sft_steps, "seed": seed}
    if tuple(stages) != STAGES:  # the full warm start keeps the key it always had
        params["stages"] = list(stages)
    target = asset_cache.cache_root(cache_root) / f"world-{assets_key(**params)}"
    return asset_cache.build_cached(target, lambda folder: build_world_assets(folder, **params))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("--cached", action="store_true", help="print the cached world's folder, building it if needed")
    parser.add_argument("--families", type=int, default=6)
    parser.add_argument("--sft-steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe", metavar="ASSETS", help="print what the warm start left in ASSETS (no build)")
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe_assets(args.probe), indent=2))
        return
    params = {"n_families": args.families, "sft_steps": args.sft_steps, "seed": args.seed}
    if args.cached:
        print(cached_world(**params))
        return
    if not args.out_dir:
        parser.error("out_dir is required unless --cached")
    print(json.dumps(build_world_assets(args.out_dir, **params), indent=2))


if __name__ == "__main__":
    main()
