"""A query's scoring requests go to one rollout replica.

verl routes each ``generate`` by its ``request_id`` (``GlobalRequestLoadBalancer``: the replica the
id was first given, else the least loaded one). With a fresh id per scoring request, a query's
requests spread over the replicas and only those landing beside its first request could read the
query from the prefix cache. The agent loop's real scoring code runs here through verl's real
``LLMServerClient`` and real ``GlobalRequestLoadBalancer`` (the Ray actor calls made in-process)
against two fake vLLM replicas, each with its own prefix cache.
"""

import asyncio
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
from byte_tokenizer import ByteTokenizer
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerClient  # noqa: E402
from verl.workers.rollout.router import GlobalRequestLoadBalancer  # noqa: E402

from recipe.arise.adapters.skill_layer import SkillLayer  # noqa: E402
from recipe.arise.core.arise_config import ARISEConfig  # noqa: E402
from recipe.arise.core.skill import load_seed_skills  # noqa: E402

CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(load_seed_skills(), start=1)]
CFG = ARISEConfig.from_dict({"selection": {"max_skill_tokens": 1000}})


class InProcessActor:
    """``handle.method.remote(...)`` of a Ray actor, run in-process: an awaitable of the result."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        method = getattr(self._obj, name)

        def remote(*args, **kwargs):
            result = method(*args, **kwargs)
            if asyncio.iscoroutine(result):  # an async actor method runs as the actor's task
                return asyncio.ensure_future(result)
            future = asyncio.get_running_loop().create_future()
            future.set_result(result)
            return future

        return SimpleNamespace(remote=remote)


class Engine:
    """One vLLM replica (verl's ``vLLMHttpServer.generate``): a prefix cache of 8-token blocks,
    prompt log-probs in the V1 layout; records the prompts it served and the engine request ids."""

    def __init__(self, name, in_flight):
        self.name, self.in_flight, self.blocks, self.prompts, self.hits = name, in_flight, set(), [], []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        assert request_id not in self.in_flight, f"engine request id {request_id} already in flight"
        self.in_flight.add(request_id)
        try:
            prompt, hit = list(prompt_ids), 0
            if sampling_params.get("skip_reading_prefix_cache") is False:
                while hit + 8 <= len(prompt) - 1 and tuple(prompt[: hit + 8]) in self.blocks:
                    hit += 8
            await asyncio.sleep(0.01)
            self.blocks.update(tuple(prompt[:end]) for end in range(8, len(prompt) + 1, 8))
            self.prompts.append(bytes(prompt).decode())
            self.hits.append(hit)
            rows = [[-0.5 if p >= hit else 1.0e26] for p in range(len(prompt) - 1)] + [[0.0]]
            fields = {"num_cached_tokens": hit, "prompt_logprobs": rows, "global_steps": 1}
            return SimpleNamespace(token_ids=[0], extra_fields=fields)
        finally:
            self.in_flight.discard(request_id)


def cluster(full_determinism=False, name="vllm"):
    in_flight = set()
    engines = {f"replica-{k}": Engine(f"replica-{k}", in_flight) for k in range(2)}
    balancer = GlobalRequestLoadBalancer(
        {sid: InProcessActor(e) for sid, e in engines.items()}, full_determinism=full_determinism
    )
    rollout = SimpleNamespace(name=name, enable_prefix_caching=True, full_determinism=full_determinism)
    client = LLMServerClient(
        config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout)),
        load_balancer_handle=InProcessActor(balancer),
    )
    tokenizer = ByteTokenizer()
    builder = create_continuous_token_builder(tokenizer)
    host = SimpleNamespace(
        tokenizer=tokenizer, continuous_token_builder=builder, server_manager=client, rollout_config=rollout
    )
    return SkillLayer(host), engines, balancer


def question(k):
    return [{"role": "user", "content": f"Question {k}: what is {k} plus {k}?"}]


def replicas_of(engines, k):
    marker = f"Question {k}:"
    return {name for name, e in engines.items() for p in e.prompts if marker in p}


def test_a_querys_scoring_requests_land_on_one_replica_and_read_its_cache():
    loop, engines, balancer = cluster()

    async def two_groups():
        return await asyncio.gather(*[loop.score_group(CFG, CACHE, question(k)) for k in (1, 2)])

    results = asyncio.run(two_groups())
    for scores, _, counts, error, _ in results:
        assert error is None and scores == [-0.5] * len(CACHE)
        # the later requests read the query from the replica's cache (a hit that ends where two skills
        # part is scored again: tests/adapters/test_adapters_arise.py)
        assert counts["cached"] >= 20 * (len(CACHE) - 1 - counts["rescored"]) > 0
    one, two = replicas_of(engines, 1), replicas_of(engines, 2)
    assert len(one) == 1 and len(two) == 1  # every request of a query on one replica
    assert one != two  # verl's least-loaded choice still spreads the queries
    sent = 2 * len(CACHE) + sum(counts["rescored"] for _, _, counts, _, _ in results)
    assert sum(len(e.prompts) for e in engines.values()) == sent
    assert balancer.get_total_inflight() == 0  # every request released its replica


def test_many_queries_spread_over_the_replicas_one_replica_each():
    loop, engines, _ = cluster()

    async def groups():
        return await asyncio.gather(*[loop.score_group(CFG, CACHE, question(k)) for k in range(6)])

    results = asyncio.run(groups())
    assert all(error is None and counts["cached"] > 0 for _, _, counts, error, _ in results)
    assert all(len(replicas_of(engines, k)) == 1 for k in range(6))
    assert all(len(e.prompts) > 0 for e in engines.values())


def test_under_full_determinism_vllm_gets_the_shared_id_and_makes_it_unique_itself():
    # verl passes the caller's request_id to the engine under rollout.full_determinism; vLLM appends
    # a random suffix to every request id it is given, so concurrent equal ids never collide there
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vllm is not installed")
    source = (Path(spec.submodule_search_locations[0]) / "v1/engine/input_processor.py").read_text()
    assert 'request.request_id = f"{request.external_req_id}-{random_uuid():.8}"' in source

    loop, engines, _ = cluster(full_determinism=True, name="vllm")
    ids = []
    for engine in engines.values():  # the fake engine does what vLLM does with the id
        inner = engine.generate

        async def randomised(request_id, *args, _inner=inner, **kwargs):
            ids.append(request_id)
            return await _inner(f"{request_id}-{len(ids):08d}", *args, **kwargs)

        engine.generate = randomised
    scores, _, counts, error, _ = asyncio.run(loop.score_group(CFG, CACHE, question(7)))
    assert error is None and counts["cached"] > 0 and len(replicas_of(engines, 7)) == 1
    assert len(set(ids)) == 1 and len(ids) == len(CACHE) + counts["rescored"]


def test_under_full_determinism_another_engine_gets_an_id_per_request():
    # not vLLM: nothing makes equal ids unique in the engine, so each request has its own id
    loop, engines, _ = cluster(full_determinism=True, name="sglang")
    scores, _, counts, error, _ = asyncio.run(loop.score_group(CFG, CACHE, question(8)))
    assert error is None and scores == [-0.5] * len(CACHE)  # Engine asserts no id is in flight twice
