"""The library's read replica and observation inbox, shared by every worker through Ray.

The trainer owns the authoritative :class:`~recipe.arise.core.library.SkillLibrary` (it is saved in
checkpoints and maintained once per step on the driver). After each maintenance it publishes the
cache here; agent-loop workers on any node read it with ``ray.get_actor(REPLICA_NAME)``. Reward
workers post one observation per training trajectory, so UPDATE also sees the groups that
dynamic sampling drops later. With ``arise.summary.stream`` it also keeps the
:class:`~recipe.arise.core.stream.SummaryStream` through which a group's summary rollout starts as
soon as its G rewards are in. Agent loops record the sessions an exception ended here
(``record_failure``); the trainer drains them each sampled batch
(:mod:`recipe.arise.adapters.rollout_failures`). An agent loop reads the cache once per query group
(:func:`group_snapshot`), so a group's sessions all select from one library version.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from recipe.arise.core.observation import Observation
from recipe.arise.core.stream import SummaryStream

REPLICA_NAME = "arise_library_replica"
MAX_FAILURES = 20  # failed sessions kept (with tracebacks) between two drains by the trainer


class LibraryReplica:
    def __init__(self):
        # sigma: the selection temperature the trainer calibrated (arise.selection.temperature: auto;
        # None until it publishes one, and the configured number otherwise)
        self._snapshot: dict[str, Any] = {"version": 0, "cache": [], "utilities": None, "sigma": None}
        self._observations: list[Observation] = []
        self._stream = SummaryStream()
        self._llm_client = None
        # sessions that failed in an agent loop (rollout_failures.recorded), drained by the trainer
        self._failures: list[dict[str, Any]] = []

    def publish(
        self,
        version: int,
        cache: list[tuple[str, str]],
        utilities: list[float] | None = None,
        sigma: float | None = None,
    ) -> int:
        """cache: (skill_id, skill JSON text) pairs of the cache, in cache order; utilities:
        each cache skill's library utility u_k, in the same order (``arise.selection.score_top_m``
        ranks by it; None: not published, top-M then takes the first M in cache order); sigma: the
        selection temperature to use with this cache (None: keep the one published before)."""
        cache = list(cache)
        if utilities is not None:
            utilities = [float(u) for u in utilities]
            if len(utilities) != len(cache):
                raise ValueError(f"publish: {len(utilities)} utilities for {len(cache)} cache skills")
        self._snapshot = {**self._snapshot, "version": int(version), "cache": cache, "utilities": utilities}
        if sigma is not None:
            sigma = float(sigma)
            if not 0.0 < sigma < float("inf"):
                raise ValueError(f"publish: sigma must be a finite number > 0, got {sigma!r}")
            self._snapshot["sigma"] = sigma
        return self._snapshot["version"]

    def snapshot(self) -> dict[str, Any]:
        return self._snapshot

    def record(self, observation: Observation, trace: dict[str, Any] | None = None):
        """One training trajectory. ``trace`` (text, question, messages, env) feeds the summary stream:
        the return value is the group claimed for a summary rollout when this trajectory completes
        one (see :meth:`SummaryStream.add`), else None."""
        self._observations.append(observation)
        if trace is None:
            return None
        return self._stream.add(
            observation.uid,
            observation.reward,
            trace["text"],
            trace["question"],
            trace.get("messages"),
            bool(trace.get("env")),
        )

    # the summary stream (arise.summary.stream): the trainer opens and closes it around each sample
    def stream_begin(self, key, budget: int, group_size: int) -> None:
        self._stream.begin(key, budget, group_size)

    def stream_active(self) -> bool:
        return self._stream.active

    def stream_deliver(self, result: dict[str, Any]) -> bool:
        return self._stream.deliver(result)

    def stream_collect(self) -> tuple[int, list[dict[str, Any]]]:
        return self._stream.collect()

    def stream_end(self) -> None:
        self._stream.end()

    def set_llm_client(self, client) -> None:
        """The rollout servers' client, for summary rollouts started outside the trainer."""
        self._llm_client = client

    def llm_client(self):
        return self._llm_client

    def record_failure(self, failure: dict[str, Any]) -> None:
        """One session an exception ended (``rollout_failures.failure_record``); the first
        ``MAX_FAILURES`` are kept with their tracebacks, programming errors before the rest."""
        if len(self._failures) >= MAX_FAILURES:
            if not failure.get("programming") or all(f.get("programming") for f in self._failures):
                return
            self._failures.pop(next(i for i, f in enumerate(self._failures) if not f.get("programming")))
        self._failures.append(failure)

    def drain_failures(self) -> list[dict[str, Any]]:
        out, self._failures = self._failures, []
        return out

    def drain(self, hold: list[str] | None = None) -> list[Observation]:
        """The observations posted, less those of the query groups ``hold``: they stay for a later
        drain (a group still generating reaches the maintenance whole, see ``trainer_resume.drain``)."""
        held = set(hold or ())
        out = [o for o in self._observations if o.uid not in held]
        self._observations = [o for o in self._observations if o.uid in held]
        return out

    # resume (recipe.arise.adapters.trainer_resume): the observations a checkpoint keeps
    def pending(self) -> list[Observation]:
        """The observations posted and not yet drained (the trainer saves them with a checkpoint)."""
        return list(self._observations)

    def restore(self, observations: list[Observation]) -> None:
        """A checkpoint's pending observations, before any posted since."""
        self._observations[:0] = list(observations)

    def discard_groups(self, uids: list[str]) -> int:
        """Drop the observations of the query groups ``uids`` (verl re-issues them); returns how many."""
        gone = set(uids)
        kept = [o for o in self._observations if o.uid not in gone]
        dropped, self._observations = len(self._observations) - len(kept), kept
        return dropped


def get_or_create_replica():
    import ray

    actor_cls = ray.remote(num_cpus=0)(LibraryReplica)
    return actor_cls.options(name=REPLICA_NAME, get_if_exists=True).remote()


# uid -> the future of its query group's snapshot, per worker process (a cache of <= C_c short
# skills each; the oldest go beyond the bound, long after their group's sessions started)
_GROUP_SNAPSHOTS: collections.OrderedDict[str, asyncio.Future] = collections.OrderedDict()
_MAX_GROUP_SNAPSHOTS = 4096


def group_snapshot(replica, uid: str | None) -> asyncio.Future:
    """The library snapshot the query group ``uid`` selects from: its first session to ask reads the
    replica, the others await the same answer. Reading per session would let one group select from
    two library versions when a publish lands between two sessions' reads (the async trainers
    maintain the library while groups generate). No uid: a snapshot of its own."""
    if uid is None:
        return asyncio.ensure_future(replica.snapshot.remote())
    future = _GROUP_SNAPSHOTS.get(uid)
    if future is None:
        future = _GROUP_SNAPSHOTS[uid] = asyncio.ensure_future(replica.snapshot.remote())
        while len(_GROUP_SNAPSHOTS) > _MAX_GROUP_SNAPSHOTS:
            _GROUP_SNAPSHOTS.popitem(last=False)
    return future


_POOL_HANDLE = None


def get_replica():
    """The replica actor, or None when no ARISE trainer created one (it does for every run, the
    GRPO baselines included: the agent loops record their failures there)."""
    global _POOL_HANDLE
    if _POOL_HANDLE is None:
        import ray

        try:
            _POOL_HANDLE = ray.get_actor(REPLICA_NAME)
        except ValueError:
            return None
    return _POOL_HANDLE
