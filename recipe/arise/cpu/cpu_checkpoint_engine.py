"""A CPU weight-sync backend for verl's checkpoint engine: the actor's weights reach the standalone
rollout servers of ``separate_async`` through Ray's object store. docs/trainer_modes.md

Every backend verl 0.9.1 ships needs an accelerator (nccl: cupy and CUDA; hccl, nixl, mooncake,
kimi, delta_sharded), and ``separate_async`` refuses ``naive``, which only works where actor and
rollout share a process. This one is registered as ``arise_cpu``; verl imports this module on the
actor, the rollout workers and the trainer when the config names it
(``actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module``, run_scripts/cpu_env.sh).

Transport: each rollout worker owns one ``ray.util.queue.Queue`` (made at its first ``prepare``);
``build_topology`` hands every queue to the actor's master rank, which puts each bucket of weights
into the object store once and the bucket's reference into every queue, then an end marker with the
step. The receiver yields the bucket's tensors to the vLLM server adapter, as verl's own backends do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
import torch
from ray.util.queue import Empty, Queue
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

BACKEND = "arise_cpu"


class WeightSyncError(RuntimeError):
    """A weight sync that did not complete (nothing sent in time, or a sync of another step)."""


@CheckpointEngineRegistry.register(BACKEND)
class CPUCheckpointEngine(CheckpointEngine):
    """Weights from the actor's master rank to every rollout worker over Ray's object store.

    Args:
        bucket_size: bytes of weights per object-store put (``update_weights_bucket_megabytes``).
        is_master: the actor rank that sends (rank 0). verl passes it on the actor side only, so
            None marks a rollout worker.
        timeout_s: how long a rollout worker waits for the next bucket before the sync fails.
    """

    def __init__(self, bucket_size: int, is_master: bool | None = None, timeout_s: float = 600.0) -> None:
        self.bucket_size = bucket_size
        self.is_master = bool(is_master)
        self.timeout_s = timeout_s
        self.inbox: Queue | None = None  # a rollout worker's own queue, made once
        self.outboxes: list[Queue] = []  # the master's: every rollout worker's queue
        self.role = "rollout" if is_master is None else "actor"
        self._sent: list[ray.ObjectRef] = []  # kept until finalize: the receivers may still fetch them

    def prepare(self) -> dict[str, Any]:
        if self.role == "actor":
            return {"inbox": None}
        if self.inbox is None:
            self.inbox = Queue(actor_options={"num_cpus": 0})
        return {"inbox": self.inbox}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        inboxes = [m["inbox"] for m in metadata[actor_wg_world_size:]]
        if len(inboxes) != rollout_world_size or any(q is None for q in inboxes):
            raise WeightSyncError(f"{BACKEND}: expected {rollout_world_size} rollout queues, got {inboxes}")
        actor = {"role": ["actor"] * actor_wg_world_size, "queues": [inboxes] * actor_wg_world_size}
        rollout = {"role": ["rollout"] * rollout_world_size, "queues": [[q] for q in inboxes]}
        return actor, rollout

    def init_process_group(self, role: str, queues: list[Queue]):
        if role != self.role:
            raise WeightSyncError(f"{BACKEND}: a {self.role} worker was given the {role} side of the topology")
        if role == "actor":
            self.outboxes = list(queues)

    def finalize(self):
        self._sent = []

    @torch.no_grad()
    async def send_weights(self, weights, global_steps: int | None = None):
        """Every actor rank walks the generator (gathering each tensor is collective over the actor
        group); the master puts the buckets and the end marker into every rollout worker's queue."""
        bucket: list[tuple[str, torch.Tensor]] = []
        size, count = 0, 0
        async for name, tensor in ensure_async_iterator(weights):
            if not self.is_master:
                continue
            bucket.append((name, tensor.detach().cpu()))
            size += tensor.nbytes
            count += 1
            if size >= self.bucket_size:
                await self._put(bucket)
                bucket, size = [], 0
        if not self.is_master:
            return {}
        if bucket:
            await self._put(bucket)
        for queue in self.outboxes:
            await queue.put_async(("end", global_steps, count))
        return {}

    async def _put(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        ref = ray.put(bucket)
        self._sent.append(ref)
        for queue in self.outboxes:
            await queue.put_async(("bucket", [ref]))  # in a list: the queue keeps the reference unresolved

    async def receive_weights(self, global_steps: int | None = None):
        """The tensors of every bucket, in the sender's order, up to its end marker."""
        received = 0
        while True:
            try:
                kind, *payload = await self.inbox.get_async(timeout=self.timeout_s)
            except (Empty, asyncio.TimeoutError) as exc:
                raise WeightSyncError(
                    f"{BACKEND}: no weights from the actor within {self.timeout_s:.0f} s "
                    f"(step {global_steps}, {received} tensors received)"
                ) from exc
            if kind == "end":
                step, count = payload
                if step != global_steps or count != received:
                    raise WeightSyncError(
                        f"{BACKEND}: the actor sent {count} tensors of step {step}, "
                        f"this rollout worker expected step {global_steps} and received {received}"
                    )
                return
            for name, tensor in await payload[0][0]:
                received += 1
                yield name, tensor
