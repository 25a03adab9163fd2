"""Rollout failures: the query groups verl's agent-loop worker fails, counted, shown and stopped on.

Under verl 0.9.1's V1 worker (``AgentLoopWorkerTQ._run_prompt``) an exception escaping one session
of a query group (the agent loop, the skill layer, a tool, the reward) marks the group ``failure``;
verl logs the traceback in the worker's log only, and its sync replay buffer hands the group to the
trainer without the failed sessions' trajectories (with no metric). So:

- the ARISE agent loops (``arise_agent``, ``arise_tool_agent``, any loop through ``with_skills``)
  record such an exception, traceback and all, in the library replica (:func:`recorded`) and
  re-raise it (verl fails the group as before);
- the trainer counts each sampled batch's failed groups and dropped trajectories from the keys verl
  hands it (:class:`FailureTally`: ``arise/rollout_failures``, ``arise/rollout_dropped``, the console
  line) and stops the run (:func:`check_failures`, :class:`RolloutFailure`) on a recorded
  programming error (:data:`PROGRAMMING_ERRORS`, with its traceback) or when more than
  ``arise.max_failed_group_share`` of a sampled batch's groups failed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import traceback
from collections.abc import Awaitable, Iterable
from typing import Any

from ray.exceptions import RayError

from recipe.arise.adapters.library_replica import get_replica
from recipe.arise.adapters.validation_rows import VALIDATE_FIELD
from recipe.arise.core.trajectory import plain

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

# Errors of code (ours, a user's loop, a tool's), not of the engine or the data: one stops the run.
# A Ray error wrapping one (a remote TypeError inside the engine) is the engine's and is not.
PROGRAMMING_ERRORS = (AssertionError, AttributeError, ImportError, IndexError, KeyError, NameError, TypeError)
TRACEBACK_CHARS = 6000  # the end of a recorded traceback (where the error is) that is kept


class RolloutFailure(RuntimeError):
    """The run stops: a programming error in an agent loop, or too many failed query groups."""


def is_programming_error(error: BaseException) -> bool:
    return isinstance(error, PROGRAMMING_ERRORS) and not isinstance(error, RayError)


def failure_record(error: BaseException, kwargs: dict) -> dict[str, Any]:
    """What the trainer is told of one failed session: its query group, the error and its traceback."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return {
        "uid": str(kwargs.get("uid", "")),
        "session": kwargs.get("session_id", 0),
        "error": f"{type(error).__name__}: {error}"[:500],
        "programming": is_programming_error(error),
        # the row's flag, read leniently: a bad value must not hide the error being recorded
        "mode": "val" if plain(kwargs.get(VALIDATE_FIELD, False)) is True else "train",
        "traceback": text[-TRACEBACK_CHARS:],
    }


async def recorded(run: Awaitable, kwargs: dict):
    """``await run`` (one session of an agent loop, run arguments ``kwargs``); an exception escaping
    it is recorded in the library replica (when there is one) and raised again."""
    try:
        return await run
    except Exception as error:
        replica = get_replica()
        if replica is not None:
            try:
                await replica.record_failure.remote(failure_record(error, kwargs))
            except Exception as lost:  # the error itself still fails the group, and verl logs it
                logger.warning(f"ARISE: could not record a rollout failure ({lost!r}): {error!r}")
        raise


@dataclasses.dataclass
class FailureTally:
    """The query groups of sampled batches and those that failed: a group is failed when fewer of its
    ``n`` sessions came back than were started (verl's trajectory keys ``{uid}_{session}_{index}``;
    a group of which none came back has no key at all)."""

    groups: int = 0
    failed: int = 0  # query groups with a failed session
    dropped: int = 0  # trajectories (sessions) that did not come back

    def add(self, keys: Iterable[str], groups: int, n: int) -> tuple[int, int]:
        """Count one sampled batch of ``groups`` query groups of ``n`` sessions each; returns its
        (failed groups, dropped trajectories)."""
        sessions: dict[str, set[str]] = {}
        for key in keys:
            uid, session, _index = str(key).rsplit("_", 2)
            sessions.setdefault(uid, set()).add(session)
        complete = sum(len(s) >= n for s in sessions.values())
        dropped = groups * n - sum(min(len(s), n) for s in sessions.values())
        failed = max(0, groups - complete)
        self.groups += groups
        self.failed += failed
        self.dropped += max(0, dropped)
        return failed, max(0, dropped)

    def share(self) -> float:
        return self.failed / self.groups if self.groups else 0.0


def check_failures(tally: FailureTally, records: list[dict], max_share: float, where: str) -> None:
    """Stop the run (:class:`RolloutFailure`) on a recorded programming error or when more than
    ``max_share`` of the tallied groups failed; else a failed group is a warning. ``records``: the
    failures the agent loops recorded (:func:`failure_record`), ``where``: "step N" or "validation"."""
    programming = [r for r in records if r.get("programming")]
    if programming:
        first = programming[0]
        raise RolloutFailure(
            f"ARISE: a programming error in an agent loop ({where}, {len(programming)} session(s), query group "
            f"{first['uid']}): {first['error']}; it failed {tally.failed} of {tally.groups} query groups. Its "
            f"traceback (in the agent-loop worker):\n{first['traceback']}"
        )
    if not tally.failed:
        return
    seen = f"the first recorded: {records[0]['error']}" if records else "see the agent-loop workers' log"
    message = (
        f"ARISE: {tally.failed} of {tally.groups} query groups failed in the agent loop ({where}; "
        f"{tally.dropped} trajectories dropped); {seen}"
    )
    if tally.share() > max_share:
        detail = f"\n{records[0]['traceback']}" if records else ""
        raise RolloutFailure(f"{message}; more than arise.max_failed_group_share={max_share:g}: stopping{detail}")
    logger.warning(message)


__all__ = [
    "PROGRAMMING_ERRORS",
    "FailureTally",
    "RolloutFailure",
    "check_failures",
    "failure_record",
    "is_programming_error",
    "recorded",
]
