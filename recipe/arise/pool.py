"""The library's read replica and observation inbox, shared by every worker through Ray.

The trainer owns the authoritative :class:`~recipe.arise.library.SkillLibrary` (it is saved in
checkpoints and maintained once per step on the driver). After each maintenance it publishes the
cache here; agent-loop workers on any node read it with ``ray.get_actor(POOL_NAME)``. Reward
workers post one observation per training trajectory, so UPDATE also sees the groups that
dynamic sampling drops later.
"""

from __future__ import annotations

from typing import Any

POOL_NAME = "arise_skill_pool"


class SkillPool:
    def __init__(self):
        self._snapshot: dict[str, Any] = {"version": 0, "cache": [], "utilities": None, "mode": "train"}
        self._observations: list[dict[str, Any]] = []

    def publish(self, version: int, cache: list[tuple[str, str]], utilities: list[float] | None = None) -> int:
        """cache: (skill_id, skill JSON text) pairs of the active pool, in cache order; utilities:
        each cache skill's library utility u_k, in the same order (``arise.selection.score_top_m``
        ranks by it; None: not published, top-M then takes the first M in cache order)."""
        cache = list(cache)
        if utilities is not None:
            utilities = [float(u) for u in utilities]
            if len(utilities) != len(cache):
                raise ValueError(f"publish: {len(utilities)} utilities for {len(cache)} cache skills")
        self._snapshot = {**self._snapshot, "version": int(version), "cache": cache, "utilities": utilities}
        return self._snapshot["version"]

    def set_mode(self, mode: str) -> None:
        if mode not in ("train", "val"):
            raise ValueError(f"mode must be 'train' or 'val', got {mode!r}")
        self._snapshot = {**self._snapshot, "mode": mode}

    def snapshot(self) -> dict[str, Any]:
        return self._snapshot

    def record(self, observation: dict[str, Any]) -> None:
        self._observations.append(observation)

    def drain(self) -> list[dict[str, Any]]:
        out, self._observations = self._observations, []
        return out


def get_or_create_pool():
    import ray

    actor_cls = ray.remote(num_cpus=0)(SkillPool)
    return actor_cls.options(name=POOL_NAME, get_if_exists=True).remote()


_POOL_HANDLE = None


def get_pool():
    """The pool actor, or None when no ARISE trainer created one (e.g. plain GRPO runs)."""
    global _POOL_HANDLE
    if _POOL_HANDLE is None:
        import ray

        try:
            _POOL_HANDLE = ray.get_actor(POOL_NAME)
        except ValueError:
            return None
    return _POOL_HANDLE
