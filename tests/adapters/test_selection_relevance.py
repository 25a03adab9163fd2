"""The policy's selection picks the relevant skill more often than chance, on a real model.

In the transfer world (recipe/arise/cpu/world.py) relevance is observable: a query names its family,
and one candidate skill is that family's rule. The world's tiny model, warm-started on the Manager's
scoring context only (``stages=("score",)``: ~10 s to build, then cached; 30 of 30 held-out picks), scores
every family's skill for each held-out query through the core's own path — scoring ids
(``scoring_prefix_ids``, ``scoring_requests``), log-probs in verl's prompt-logprob layout from a
transformers forward pass, ``skill_score`` under the default norm, ``select_skill_detailed`` — and
the pick must be the query's family far more often than 1 in 6. A scorer returning noise fails the
same check, so a scoring path that lost the signal (wrong token offsets, scores matched to the wrong
skill) cannot pass it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.scoring import scoring_prefix_ids, scoring_requests, skill_score
from recipe.arise.core.selection import select_skill_detailed
from recipe.arise.core.skill import SkillDoc
from recipe.arise.cpu import world

ALPHA = 1e-3  # the chance of a scorer without signal passing the check


def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def better_than_chance(hits: int, n: int, chance: float) -> bool:
    """Reject "no better than chance" at level ALPHA (one-sided exact binomial test)."""
    return binomial_tail(n, hits, chance) < ALPHA


@pytest.fixture(scope="module")
def assets():
    # the scoring-context stage of the warm start only (~1/5 of the full build): what the selection reads
    folder = Path(world.cached_world(stages=("score",)))  # built on first use, then cached
    families = json.loads((folder / "world.json").read_text())["families"]
    tok = AutoTokenizer.from_pretrained(folder / "model")
    model = AutoModelForCausalLM.from_pretrained(folder / "model").eval()
    return tok, model, families


def _prompt_logprobs(model, ids: list[int]) -> list[list[float]]:
    """verl's layout (``extract_prompt_logprobs``): entry j = log p(token j + 1), one padding entry."""
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    rows = logp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
    return [[x] for x in rows] + [[0.0]]


def _model_scores(tok, model, cfg, messages, skill_texts) -> list[float]:
    sel = cfg.selection
    prefix = scoring_prefix_ids(tok, messages)
    requests = scoring_requests(tok, prefix, skill_texts, sel.max_skill_tokens)
    return [skill_score(_prompt_logprobs(model, ids), len(prefix), len(ids), sel.score_norm) for ids in requests]


def _hits(families, scorer) -> tuple[int, int]:
    """Held-out queries whose pick (greedy: epsilon 0, no gate) is their own family's skill."""
    names = sorted(families)
    texts = [SkillDoc.from_dict(world.skill(f, families[f])).to_json() for f in names]
    _, held = world.split(families)
    rng = np.random.default_rng(0)
    hits = 0
    for fam, a, b in held:
        scores = scorer([{"role": "user", "content": world.question(fam, a, b)}], texts)
        choice = select_skill_detailed(scores, temperature=1.0, epsilon=0.0, gate=0.0, rng=rng)
        hits += names[choice.index] == fam
    return hits, len(held)


def test_the_binomial_bound():
    assert binomial_tail(10, 0, 0.3) == pytest.approx(1.0)
    assert binomial_tail(4, 4, 0.5) == pytest.approx(1 / 16)
    assert not better_than_chance(5, 30, 1 / 6) and better_than_chance(20, 30, 1 / 6)


def test_the_policy_picks_the_querys_family_more_often_than_chance(assets):
    tok, model, families = assets
    cfg = ARISEConfig()  # the default scoring: score_norm mean, max_skill_tokens 128
    hits, n = _hits(families, lambda messages, texts: _model_scores(tok, model, cfg, messages, texts))
    chance = 1 / len(families)
    assert better_than_chance(hits, n, chance), f"{hits}/{n} relevant picks; chance {chance:.2f}"


def test_a_noise_scorer_fails_the_same_check(assets):
    _, _, families = assets
    rng = np.random.default_rng(1)
    hits, n = _hits(families, lambda messages, texts: list(rng.normal(-2.0, 0.5, size=len(texts))))
    assert not better_than_chance(hits, n, 1 / len(families)), f"noise: {hits}/{n}"
