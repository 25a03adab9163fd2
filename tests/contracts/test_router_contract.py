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
  a new one goes to the least-loaded replica. Run here on the stack's own router class (plain
  Python; verl wraps it in a Ray actor).
"""

import json
import re

import pytest

PROBE = r"""
import json
from verl.workers.rollout.router import GlobalRequestLoadBalancer
lb = GlobalRequestLoadBalancer({"s0": "h0", "s1": "h1"})
first, _ = lb.acquire_server(request_id="query-1")
other, _ = lb.acquire_server(request_id="query-2")
again = [lb.acquire_server(request_id="query-1")[0] for _ in range(5)]  # s0 now far busier than s1
for sid in [first, other, *again]:
    lb.release_server(sid)
lb.remove_servers([first])
moved, _ = lb.acquire_server(request_id="query-1")
print(json.dumps({"first": first, "other": other, "again": again, "moved": moved,
                  "acquire_fields": lb.require_acquire_fields()}))
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


def test_the_default_balancer_is_the_sticky_one(source):
    router = source("workers/rollout/router.py")
    factory = router[router.index("def _create_global_sticky_inflight(") :]
    assert "return ray.remote(load_balancer_cls).remote(**kwargs)" in factory
    handle = router[router.index("def get_router_handle(") :]
    assert re.search(
        r"return _create_global_sticky_inflight\([^)]*load_balancer_cls or GlobalRequestLoadBalancer", handle
    )


def test_the_client_routes_by_request_id_and_gives_vllm_a_fresh_id(source):
    server = source("workers/rollout/llm_server.py")
    generate = server[server.index("    async def generate(") :]
    assert re.search(r"server_id, server = await self\._acquire_server\(\s*request_id,", generate)
    assert "request_id=self._vllm_request_id(request_id)" in generate
    fresh = server[server.index("def _vllm_request_id") :][:600]
    assert re.search(r'if getattr\(self\.config\.actor_rollout_ref\.rollout, "full_determinism", False\):', fresh)
    assert "return uuid4().hex" in fresh
