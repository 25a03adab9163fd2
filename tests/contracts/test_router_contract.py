"""What the skill scoring's routing relies on in verl's rollout router (recipe/arise/adapters/skill_layer.py:
one query's scoring requests go out under one ``request_id`` so that they land on one vLLM replica
and read that query's prefix from its cache).

- ``LLMServerClient.generate`` acquires a replica from the load balancer with the caller's
  ``request_id`` (verl/workers/rollout/llm_server.py) and, unless ``rollout.full_determinism``,
  sends vLLM a fresh uuid per call, so several requests under one ``request_id`` can be in flight
  at once without clashing in vLLM;
- the default balancer (``GlobalRequestLoadBalancer``, verl/workers/rollout/router.py, made by
  ``get_router_handle`` when no router YAML or subclass is configured) is sticky: a ``request_id``
  it has seen goes to the same replica while that replica is registered, however busy it is, and
  a new one goes to the least-loaded replica.

Run here on the stack's own code (plain Python): ``get_router_handle`` as verl's server manager calls
it with the composed ``ppo_trainer`` config, Ray's actor wrapping replaced by an in-process stand-in,
and ``LLMServerClient.generate`` against that balancer and two fake replicas.
"""

import json

import pytest

PROBE = r"""
import asyncio, json, types
from hydra import compose, initialize_config_module
from verl.workers.rollout import router
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

class Remote:  # a Ray actor method: .remote(...) returns something to await
    def __init__(self, fn):
        self.fn = fn
    def remote(self, *args, **kwargs):
        result = self.fn(*args, **kwargs)
        if asyncio.iscoroutine(result):
            return result
        future = asyncio.get_running_loop().create_future()
        future.set_result(result)
        return future

class Handle:  # a Ray actor handle on an in-process object
    def __init__(self, obj):
        self.obj = obj
    def __getattr__(self, name):
        return Remote(getattr(self.obj, name))

made = []
def remote(cls):  # ray.remote(cls).remote(**kwargs): the actor, here in-process
    made.append(cls.__name__)
    return types.SimpleNamespace(remote=lambda **kwargs: cls(**kwargs))
router.ray = types.SimpleNamespace(remote=remote)

with initialize_config_module("verl.trainer.config", version_base=None):
    config = compose("ppo_trainer", overrides=["actor_rollout_ref.rollout.name=vllm"])
rollout = config.actor_rollout_ref.rollout

class Replica:
    def __init__(self):
        self.request_ids = []
        self.in_flight = 0
        self.all_in = asyncio.Event()
    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.request_ids.append(request_id)
        self.in_flight += 1
        if self.in_flight == 3:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), 10)  # the three requests are in flight together
        return TokenOutput(token_ids=[1], extra_fields={})

replicas = {"s0": Replica(), "s1": Replica()}
handles = {sid: Handle(r) for sid, r in replicas.items()}
# as verl's LLMServerManager._init_global_load_balancer calls it
lb = router.get_router_handle(servers=handles, router_config_path=rollout.get("router_config_path"),
                              full_determinism=rollout.full_determinism)

async def three_requests(client, request_id):
    for r in replicas.values():
        r.request_ids.clear(); r.in_flight = 0; r.all_in = asyncio.Event()
    await asyncio.gather(*[client.generate(request_id, prompt_ids=[1, 2], sampling_params={}) for _ in range(3)])
    return {sid: list(r.request_ids) for sid, r in replicas.items()}

client = LLMServerClient(config, Handle(lb))
fresh = asyncio.run(three_requests(client, "query-0"))
config.actor_rollout_ref.rollout.full_determinism = True
stable = asyncio.run(three_requests(LLMServerClient(config, Handle(lb)), "query-0"))

first, _ = lb.acquire_server(request_id="query-1")
other, _ = lb.acquire_server(request_id="query-2")
again = [lb.acquire_server(request_id="query-1")[0] for _ in range(5)]  # the first replica now far busier
for sid in [first, other, *again]:
    lb.release_server(sid)
lb.remove_servers([first])
moved, _ = lb.acquire_server(request_id="query-1")
print(json.dumps({"made": made, "balancer": type(lb).__name__, "fresh": fresh, "stable": stable,
                  "first": first, "other": other, "again": again,
                  "moved": moved, "acquire_fields": lb.require_acquire_fields()}))
"""


@pytest.fixture(scope="module")
def routing(stack):
    return json.loads(stack.run(PROBE).strip().splitlines()[-1])


def test_one_request_id_sticks_to_one_replica(routing):
    assert routing["again"] == [routing["first"]] * 5  # sticky, although the other replica is idle


def test_a_new_request_id_goes_to_the_least_loaded_replica(routing):
    assert routing["other"] != routing["first"]


def test_a_removed_replica_releases_its_request_ids(routing):
    assert routing["moved"] == routing["other"]


def test_routing_keys_on_the_request_id_alone(routing):
    assert routing["acquire_fields"] == []


def test_the_default_balancer_is_the_sticky_one(routing):
    # the composed config names no router YAML: get_router_handle makes verl's sticky balancer actor
    assert routing["made"] == ["GlobalRequestLoadBalancer"]
    assert routing["balancer"] == "GlobalRequestLoadBalancer"


def test_the_client_routes_by_request_id_and_gives_vllm_a_fresh_id(routing):
    # three requests under one request_id, in flight together: one replica, three distinct vLLM ids
    (ids,) = [ids for ids in routing["fresh"].values() if ids]
    assert len(ids) == 3 and len(set(ids)) == 3 and "query-0" not in ids
    # with rollout.full_determinism vLLM gets the caller's id
    (ids,) = [ids for ids in routing["stable"].values() if ids]
    assert ids == ["query-0"] * 3
