"""Does the Manager's selection sharpen towards the skill with positive uplift faster with
``arise.selection.train_manager`` on than off?  (docs/design.md: Training the Manager)

A controlled CPU experiment, not the verl trainer: a tiny Qwen2 (recipe.arise.cpu.tiny, random
weights, its BPE tokenizer) is the policy; every step samples B queries, scores the K cache skills
on the project's scoring path (recipe.arise.core.scoring, mean-normalised s_k), selects per trajectory
with recipe.arise.core.selection (sigma 1, epsilon 0.1, gate off: with untrained scores max p ~ 1/K
would never pass delta 0.35), keeps a control arm (2 of G=8), and draws each trajectory's
correctness from a fixed success rate per arm: the skills' *uplift* over the control arm is known
by construction. R is the hierarchical reward (or binary for the ``on_binary`` arm); the update is
one GRPO step with verl's ``compute_grpo_outcome_advantage`` and vanilla clipped policy loss
(token-mean), AdamW. The trajectories' tokens are those of each mode:

- ``off`` (the paper): prompt = chat(SKILL line + question), response = solution;
- ``on`` / ``on_binary``: prompt = chat(question), response = ``SKILL:`` + skill + ``\\n`` +
  solution, mask 1 on the skill tokens (as ``ARISEAgentLoop._run_skill_in_response`` builds it).

The solution text is the tiny task's (its answer right or wrong as drawn); rewards do not depend
on the generated text, so only the Manager's side is under test. Every ``--eval-every`` steps the
selection distribution p = softmax(s / sigma) is measured on fixed held-out queries, with each
mode's own scoring context.

Run from the repo root:  python bench/bench_manager_training.py [--steps 150 --seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from recipe.arise.core.prompts import inject_skill  # noqa: E402
from recipe.arise.core.reward import hierarchical_reward  # noqa: E402
from recipe.arise.core.scoring import scoring_prefix_ids, scoring_requests, scoring_suffix, skill_score  # noqa: E402
from recipe.arise.core.selection import is_control_session, select_skill_detailed, selection_probs  # noqa: E402
from recipe.arise.core.skill import SkillDoc, load_seed_skills  # noqa: E402
from recipe.arise.cpu.tiny import _TINY_SKILLS, all_problems, build_model, build_tokenizer, question  # noqa: E402

# K = 4 skills; success rate of a trajectory per arm (the control arm: 0.5). Uplift = +0.3, 0, -0.2, -0.4.
CONTROL_ACC = 0.5
SKILL_ACC = (0.8, 0.5, 0.3, 0.1)
ARMS = ("off", "on", "on_binary")


def skills() -> list[SkillDoc]:
    """The cache: the tiny task's three skills and the first paper seed, best first."""
    docs = [SkillDoc.from_dict(s) for s in _TINY_SKILLS] + [load_seed_skills()[0]]
    return docs[: len(SKILL_ACC)]


FILLER = "Let me count it once more to be sure. "


def answer(a: int, b: int, correct: bool, filler: int = 0) -> str:
    """The tiny task's solution, right or wrong, after ``filler`` repetitions of a reasoning line
    (``--solution-tokens``: long solutions dilute the skill tokens' share of the loss)."""
    value = a + b if correct else a + b + 1
    return FILLER * filler + f"{a} plus {b} is {value}. The answer is \\boxed{{{value}}}."


def chat(tokenizer, messages) -> list[int]:
    return scoring_prefix_ids(tokenizer, messages, suffix="")


def seq_logprobs(model, seqs: list[list[int]], pad_id: int) -> torch.Tensor:
    """(N, L-1) log p(token j+1 | prefix) of right-padded sequences (one batched forward)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = torch.tensor(s)
        mask[row, : len(s)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def scores_of(model, tokenizer, docs, messages, train_manager: bool) -> list[float]:
    """s_k of every skill for one query, on the project's scoring path (verl's prompt-log-prob layout)."""
    prefix = scoring_prefix_ids(tokenizer, messages, scoring_suffix(train_manager))
    requests = scoring_requests(tokenizer, prefix, [d.to_json() for d in docs], 128)
    with torch.no_grad():
        lp = seq_logprobs(model, requests, tokenizer.pad_token_id)
    out = []
    for row, ids in enumerate(requests):
        layout = [[float(x)] for x in lp[row, : len(ids) - 1]] + [[0.0]]
        out.append(skill_score(layout, len(prefix), len(ids), "mean"))
    return out


def trajectory(tokenizer, messages, doc, text: str, train_manager: bool):
    """(prompt ids, response ids, response mask) as the agent loop builds them in each mode."""
    eos = [tokenizer.eos_token_id]
    solution = tokenizer.encode(text, add_special_tokens=False) + eos
    if doc is None:
        return chat(tokenizer, messages), solution, [1] * len(solution)
    if not train_manager:
        return chat(tokenizer, inject_skill(messages, doc)), solution, [1] * len(solution)
    head = tokenizer.encode(scoring_suffix(True), add_special_tokens=False)
    skill = tokenizer.encode(doc.to_json(), add_special_tokens=False)[:128]
    newline = tokenizer.encode("\n", add_special_tokens=False)
    response = head + skill + newline + solution
    mask = [0] * len(head) + [1] * len(skill) + [0] * len(newline) + [1] * len(solution)
    return chat(tokenizer, messages), response, mask


def evaluate(model, tokenizer, docs, queries, train_manager: bool, temperature: float) -> dict:
    uplift = np.array(SKILL_ACC) - CONTROL_ACC
    probs = np.array(
        [selection_probs(scores_of(model, tokenizer, docs, m, train_manager), temperature) for m in queries]
    )
    return {
        "p_best": float(probs[:, 0].mean()),  # the one skill with positive uplift
        "p_worst": float(probs[:, -1].mean()),
        "expected_uplift": float((probs @ uplift).mean()),  # of a choice drawn from p
        "greedy_best": float((probs.argmax(1) == 0).mean()),  # share of queries whose argmax is it
        "max_p": float(probs.max(1).mean()),
    }


def run_arm(arm: str, base_model, tokenizer, seed: int, args) -> list[dict]:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_policy_loss_fn

    train_manager = arm != "off"
    phase = 1 if arm == "on_binary" else 2  # phase 1 = binary reward (ablation a)
    model = copy.deepcopy(base_model)
    docs = skills()
    problems = all_problems()
    held_out = [[{"role": "user", "content": question(a, b, s)}] for a, b, s in [(1, 2, 0), (4, 3, 1), (2, 5, 2)]]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    loss_fn = get_policy_loss_fn("vanilla")
    config = OmegaConf.create(
        {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "global_batch_info": {}}
    )
    rng_query = np.random.default_rng([seed, 1])  # the same queries in every arm
    rng_select = np.random.default_rng([seed, 2])
    rng_reward = np.random.default_rng([seed, 3])
    curve = []
    for step in range(args.steps + 1):
        if step % args.eval_every == 0:
            model.eval()
            row = {"step": step, **evaluate(model, tokenizer, docs, held_out, train_manager, args.temperature)}
            curve.append(row)
        if step == args.steps:
            break
        seqs, prompts, masks, rewards, index = [], [], [], [], []
        model.eval()
        for q, pick in enumerate(rng_query.choice(len(problems), size=args.batch, replace=False)):
            a, b, s = problems[pick]
            messages = [{"role": "user", "content": question(a, b, s)}]
            scores = scores_of(model, tokenizer, docs, messages, train_manager)
            for session in range(args.group):
                if is_control_session(session, args.group, args.control_share):
                    k = None
                else:
                    k = select_skill_detailed(
                        scores, temperature=args.temperature, epsilon=args.epsilon, gate=0.0, rng=rng_select
                    ).index
                correct = bool(rng_reward.random() < (CONTROL_ACC if k is None else SKILL_ACC[k]))
                rewards.append(hierarchical_reward(correct, k is not None, phase))
                doc = None if k is None else docs[k]
                text = answer(a, b, correct, args.filler)
                prompt, response, mask = trajectory(tokenizer, messages, doc, text, train_manager)
                seqs.append(prompt + response)
                prompts.append(len(prompt))
                masks.append(mask)
                index.append(f"{step}-{q}")
        width = max(len(m) for m in masks)
        response_mask = torch.zeros((len(seqs), width))
        for row, m in enumerate(masks):
            response_mask[row, : len(m)] = torch.tensor(m, dtype=torch.float32)
        token_rewards = torch.zeros_like(response_mask)
        token_rewards[:, 0] = torch.tensor(rewards)
        advantages, _ = compute_grpo_outcome_advantage(token_rewards, response_mask, index=np.array(index))

        model.train()
        full = seq_logprobs(model, seqs, tokenizer.pad_token_id)
        log_prob = torch.zeros_like(response_mask)
        for row, (p, m) in enumerate(zip(prompts, masks, strict=True)):
            log_prob[row, : len(m)] = full[row, p - 1 : p - 1 + len(m)]
        loss, _ = loss_fn(
            old_log_prob=log_prob.detach(),
            log_prob=log_prob,
            advantages=advantages,
            response_mask=response_mask.bool(),
            loss_agg_mode="token-mean",
            config=config,
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return curve


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--batch", type=int, default=4, help="queries per step")
    parser.add_argument("--group", type=int, default=8, help="G")
    parser.add_argument("--control-share", type=float, default=0.25)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--temperature", type=float, default=1.0, help="sigma")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--solution-tokens", type=int, default=0, help="pad solutions to about this many tokens")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="also write the curves here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    docs = skills()
    corpus = [question(a, b, s) + " " + answer(a, b, True) for a, b, s in all_problems()]
    corpus += [d.to_json() for d in docs] * 5
    corpus += [inject_skill([{"role": "user", "content": question(1, 2, 0)}], d)[0]["content"] for d in docs]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp), corpus)
    solution = len(tokenizer.encode(answer(1, 2, True), add_special_tokens=False)) + 1
    per_filler = len(tokenizer.encode(FILLER * 8, add_special_tokens=False)) / 8
    args.filler = max(0, round((args.solution_tokens - solution) / per_filler))
    skill_tokens = np.mean([len(tokenizer.encode(d.to_json(), add_special_tokens=False)) for d in docs])
    solution = len(tokenizer.encode(answer(1, 2, True, args.filler), add_special_tokens=False)) + 1
    print(f"skill {skill_tokens:.0f} tokens on average, solution {solution} tokens")
    print(
        f"skills (uplift over control {CONTROL_ACC}): "
        + ", ".join(f"{d.skill_name} {acc - CONTROL_ACC:+.1f}" for d, acc in zip(docs, SKILL_ACC, strict=True))
    )
    results = {"args": {k: str(v) for k, v in vars(args).items()}, "curves": {}}
    for seed in args.seeds:
        base = build_model(tokenizer, seed).float().eval()
        for arm in args.arms:
            started = time.time()
            curve = run_arm(arm, base, tokenizer, seed, args)
            results["curves"][f"{arm}/seed{seed}"] = curve
            last = curve[-1]
            print(
                f"seed {seed} {arm:10s} p_best {curve[0]['p_best']:.3f} -> {last['p_best']:.3f}  "
                f"E_p[uplift] {curve[0]['expected_uplift']:+.3f} -> {last['expected_uplift']:+.3f}  "
                f"greedy=best {last['greedy_best']:.2f}  max_p {last['max_p']:.3f}  ({time.time() - started:.0f}s)",
                flush=True,
            )

    print("\nmean over seeds (held-out queries), per evaluation step:")
    steps = [row["step"] for row in next(iter(results["curves"].values()))]
    for metric in ("p_best", "p_worst", "expected_uplift", "greedy_best", "max_p"):
        print(f"  {metric}")
        for arm in args.arms:
            rows = [results["curves"][f"{arm}/seed{seed}"] for seed in args.seeds]
            means = [np.mean([r[i][metric] for r in rows]) for i in range(len(steps))]
            print(f"    {arm:10s} " + " ".join(f"{m:+.3f}" for m in means))
    print("    steps      " + " ".join(f"{s:6d}" for s in steps))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
