"""``arise.selection.score_norm: pmi`` through the agent loop's real scoring code.

s_k = mean log p(skill | query context) - mean log p(skill | query-free context): the chat template
with an empty user turn and the same suffix. The baseline is one request per cache skill per
library version in a worker process, shared by all its queries. The fake engine gives each skill
a per-token log-prob after a query and another after the query-free context.
"""

import asyncio
import collections
import math
from types import SimpleNamespace

import pytest
from skill_layer_host import skill_layer

import recipe.arise.adapters.scoring_requests as scoring_requests_module  # noqa: E402
from recipe.arise.core.arise_config import ARISEConfig  # noqa: E402
from recipe.arise.core.skill import load_seed_skills  # noqa: E402
from recipe.arise.core.trajectory import TrajectoryInfo  # noqa: E402

CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(load_seed_skills(), start=1)][:3]
FREE = "U:|A:"  # the chat template of an empty user turn
# per-token log-prob of each skill's tokens: (after a query, after the query-free context). Skill 0's
# text is predictable on its own and the query does not help it; skill 1 is what the query raises
LOGPROBS = {CACHE[0][1]: (-0.25, -0.2), CACHE[1][1]: (-0.6, -1.0), CACHE[2][1]: (-0.9, -1.0)}


class Server:
    def __init__(self, fail_free=False, nan_free=None):
        self.prompts, self.fail_free, self.nan_free = [], fail_free, nan_free

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        text = bytes(prompt_ids).decode()
        self.prompts.append(text)
        await asyncio.sleep(0.001)
        free = text.startswith(FREE)
        if free and self.fail_free:
            raise RuntimeError("engine died")
        doc = next(d for d in LOGPROBS if text.endswith(d))
        value = LOGPROBS[doc][1 if free else 0]
        if free and doc == self.nan_free:
            value = math.nan
        start = len(text) - len(doc)  # the first skill token
        rows = [[value if j + 1 >= start else -3.0] for j in range(len(prompt_ids) - 1)] + [[0.0]]
        return SimpleNamespace(token_ids=[0], extra_fields={"prompt_logprobs": rows})

    def free_requests(self):
        return [p for p in self.prompts if p.startswith(FREE)]


@pytest.fixture(autouse=True)
def fresh_baselines(monkeypatch):
    monkeypatch.setattr(scoring_requests_module, "_BASELINES", collections.OrderedDict())


def config(norm="pmi", **selection):
    return ARISEConfig.from_dict({"selection": {"score_norm": norm, "max_skill_tokens": 1000, **selection}})


def question(k):
    return [{"role": "user", "content": f"What is {k} plus {k}?"}]


def score(loop, cfg, k=1, version=1):
    return asyncio.run(loop.score_group(cfg, CACHE, question(k), version))


def test_pmi_is_the_query_mean_minus_the_query_free_mean():
    scores, _, _, error, _ = score(skill_layer(Server()), config())
    assert error is None
    assert scores == pytest.approx([q - f for q, f in LOGPROBS.values()])
    means = score(skill_layer(Server()), config("mean"))[0]
    assert means == pytest.approx([q for q, _ in LOGPROBS.values()])
    # mean favours the skill whose text is predictable anyway; pmi the one the query raises
    assert max(range(3), key=means.__getitem__) == 0 and max(range(3), key=scores.__getitem__) == 1


def test_the_query_free_context_is_the_empty_user_turn_and_the_same_suffix():
    for train_manager, suffix in ((False, "\nSKILL:"), (True, "SKILL:")):
        server = Server()
        score(skill_layer(server), config(train_manager=train_manager), version=10 + train_manager)
        free = server.free_requests()
        scored = [p for p in server.prompts if not p.startswith(FREE)]
        assert sorted(free) == sorted(FREE + suffix + doc for _, doc in CACHE)
        # the same skill tokens after either context
        assert sorted(p[len(FREE + suffix) :] for p in free) == sorted(p.split(suffix, 1)[1] for p in scored)


def test_the_baselines_are_sent_once_per_library_version():
    server = Server()
    loop = skill_layer(server)
    for k in range(3):  # three queries of one version: one baseline request per skill
        assert score(loop, config(), k=k, version=1)[3] is None
    assert len(server.free_requests()) == len(CACHE)
    assert len(server.prompts) == len(CACHE) * 4
    score(loop, config(), k=5, version=2)  # the next version (new weights): computed again
    assert len(server.free_requests()) == 2 * len(CACHE)
    score(loop, config(train_manager=True), k=5, version=2)  # another context, its own baselines
    assert len(server.free_requests()) == 3 * len(CACHE)


def test_concurrent_queries_share_one_baseline_computation():
    server = Server()
    loop = skill_layer(server)

    async def groups():
        return await asyncio.gather(*[loop.score_group(config(), CACHE, question(k), 4) for k in range(4)])

    results = asyncio.run(groups())
    assert all(error is None for _, _, _, error, _ in results)
    assert all(scores == results[0][0] for scores, *_ in results)
    assert len(server.free_requests()) == len(CACHE)
    # the cost is counted on the group that computed them, once
    tokens = sorted(counts["tokens"] for _, _, counts, _, _ in results)
    free_tokens = sum(len(p) for p in server.free_requests())
    assert tokens[-1] - tokens[0] == free_tokens


def test_a_failed_baseline_fails_the_group_and_is_not_kept():
    server = Server(fail_free=True)
    loop = skill_layer(server)
    scores, _, _, error, _ = score(loop, config(), version=5)
    assert scores == [] and "engine died" in error
    server.fail_free = False
    scores, _, _, error, _ = score(loop, config(), version=5)
    assert error is None and scores == pytest.approx([q - f for q, f in LOGPROBS.values()])


def test_an_unusable_baseline_makes_that_skill_unscorable_only():
    loop = skill_layer(Server(nan_free=CACHE[1][1]))
    snapshot = {"version": 6, "cache": CACHE, "mode": "train"}
    cfg = config(epsilon=0.0, use_gate=False)

    async def group():
        infos = [TrajectoryInfo(phase=2) for _ in range(4)]
        kwargs = [{"uid": "nan-baseline", "session_id": s, "global_steps": 9} for s in range(4)]
        chosen = await asyncio.gather(
            *[loop.select(cfg, snapshot, question(1), kwargs[s], False, infos[s]) for s in range(4)]
        )
        return chosen, infos

    chosen, infos = asyncio.run(group())
    scored = [i for i in infos if not i.control]
    assert all(i.scores_nonfinite == 1 and not i.scoring_failed for i in scored)
    assert all(c.skill_id != CACHE[1][0] for c in chosen if c is not None)
