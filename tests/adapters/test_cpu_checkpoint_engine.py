"""The CPU weight-sync backend of separate_async (recipe/arise/cpu/cpu_checkpoint_engine.py), driven
the way verl's ``CheckpointEngineManager`` drives a backend (verl/checkpoint_engine/base.py): prepare
on every worker, build_topology from their metadata (actor's first), init_process_group, send and
receive at once, finalize. Ray's queue and object store are stood in for by in-process fakes; the CPU
smoke run under separate_async (tests/e2e/test_cpu_separate_e2e.py) takes the real ones."""

from __future__ import annotations

import asyncio

import pytest
import torch

from recipe.arise.cpu import cpu_checkpoint_engine as cce


class FakeQueue:
    def __init__(self, actor_options=None):
        self.items: asyncio.Queue = asyncio.Queue()

    async def put_async(self, item):
        await self.items.put(item)

    async def get_async(self, timeout=None):
        try:
            return await asyncio.wait_for(self.items.get(), timeout)
        except asyncio.TimeoutError:
            raise cce.Empty from None


class FakeRef:
    def __init__(self, value):
        self.value = value

    def __await__(self):
        yield from asyncio.sleep(0).__await__()
        return self.value


@pytest.fixture
def fakes(monkeypatch):
    puts = []
    monkeypatch.setattr(cce, "Queue", FakeQueue)
    monkeypatch.setattr(cce.ray, "put", lambda value: puts.append(value) or FakeRef(value))
    return puts


def weights(n=5, numel=4):
    return [(f"layer{i}.weight", torch.full((numel,), float(i))) for i in range(n)]


def connect(actors, rollouts):
    metadata = [e.prepare() for e in actors + rollouts]
    actor_kwargs, rollout_kwargs = cce.CPUCheckpointEngine.build_topology(len(actors), len(rollouts), metadata)
    for i, engine in enumerate(actors):
        engine.init_process_group(**{k: v[i] for k, v in actor_kwargs.items()})
    for i, engine in enumerate(rollouts):
        engine.init_process_group(**{k: v[i] for k, v in rollout_kwargs.items()})


async def receive(engine, step):
    return [(name, t.clone()) async for name, t in engine.receive_weights(global_steps=step)]


def test_the_backend_is_registered_under_its_name():
    from verl.checkpoint_engine import CheckpointEngineRegistry

    assert CheckpointEngineRegistry.get("arise_cpu") is cce.CPUCheckpointEngine


def test_every_rollout_worker_gets_every_weight_in_order_in_buckets(fakes):
    # the master and one more actor rank (which sends nothing), two rollout workers; a bucket holds 2 weights
    actors = [cce.CPUCheckpointEngine(bucket_size=32, is_master=True), cce.CPUCheckpointEngine(32, is_master=False)]
    rollouts = [cce.CPUCheckpointEngine(bucket_size=32), cce.CPUCheckpointEngine(bucket_size=32)]
    connect(actors, rollouts)
    sent = weights()

    async def sync():
        return await asyncio.gather(
            *(a.send_weights(iter(sent), global_steps=3) for a in actors), *(receive(r, 3) for r in rollouts)
        )

    *_, got0, got1 = asyncio.run(sync())
    for got in (got0, got1):
        assert [n for n, _ in got] == [n for n, _ in sent]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, sent, strict=True))
    assert [len(bucket) for bucket in fakes] == [2, 2, 1]  # each bucket put once, for every receiver
    for engine in actors + rollouts:
        engine.finalize()
    assert actors[0]._sent == []


def test_a_rollout_worker_keeps_its_queue_across_syncs(fakes):
    actor, rollout = cce.CPUCheckpointEngine(1 << 20, is_master=True), cce.CPUCheckpointEngine(1 << 20)
    for step in (1, 2):
        connect([actor], [rollout])

        async def sync(step=step):
            return await asyncio.gather(actor.send_weights(iter(weights(2)), global_steps=step), receive(rollout, step))

        assert len(asyncio.run(sync())[1]) == 2
    assert rollout.prepare()["inbox"] is rollout.inbox


def test_a_sync_of_another_step_or_with_missing_tensors_fails_by_name(fakes):
    actor, rollout = cce.CPUCheckpointEngine(1 << 20, is_master=True), cce.CPUCheckpointEngine(1 << 20)
    connect([actor], [rollout])

    async def sync():
        await actor.send_weights(iter(weights(2)), global_steps=4)
        return await receive(rollout, 5)

    with pytest.raises(cce.WeightSyncError, match="sent 2 tensors of step 4, this rollout worker expected step 5"):
        asyncio.run(sync())


def test_a_receiver_waits_no_longer_than_its_timeout(fakes):
    rollout = cce.CPUCheckpointEngine(1 << 20, timeout_s=0.05)
    connect([cce.CPUCheckpointEngine(1 << 20, is_master=True)], [rollout])
    with pytest.raises(cce.WeightSyncError, match="no weights from the actor within 0 s \\(step 7, 0 tensors"):
        asyncio.run(receive(rollout, 7))


def test_a_topology_without_a_queue_per_rollout_worker_is_refused(fakes):
    actor = cce.CPUCheckpointEngine(1 << 20, is_master=True)
    with pytest.raises(cce.WeightSyncError, match="expected 2 rollout queues"):
        cce.CPUCheckpointEngine.build_topology(1, 2, [actor.prepare(), cce.CPUCheckpointEngine(1).prepare()])
    with pytest.raises(cce.WeightSyncError, match="a rollout worker was given the actor side"):
        cce.CPUCheckpointEngine(1).init_process_group(role="actor", queues=[])
