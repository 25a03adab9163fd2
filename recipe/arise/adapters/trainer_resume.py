"""What a checkpoint keeps of ARISE's work in flight, and what a resume redoes (docs/trainer_modes.md).

Under an asynchronous trainer (colocate_async) trajectories finish ahead of their training step, and
the reward manager posts their observations to the library replica as their rewards come in; the
next maintenance drains them. ``ARISEHooks._save_checkpoint`` writes those not yet drained to
``arise/pending_observations.json`` beside the library (:func:`save_pending`, under
sync the list is empty: the step's maintenance drained every observation before the save), and
``_load_checkpoint`` puts them back in the replica (:func:`restore_pending`): verl's
TransferQueue checkpoint restores those finished trajectories as they were, so their observations
must come back too.

On resume verl re-issues the prompt groups that were pending or running at the checkpoint
(``_reissue_inflight_prompts``): it deletes their partial trajectories and generates them again, a
new ``run()`` with a new skill selection. :func:`inflight_groups` names those groups before verl
re-issues them, :func:`reissued` drops the restored observations of their deleted trajectories
(their new ones are posted again) and counts both: ``arise/reissued_groups`` and
``arise/reissued_observations_dropped`` in the first step's metrics, and one console line.

So that no observation of a re-issued group was applied before the save, a maintenance takes a
group's observations only once the group is no longer generating (:func:`drain`): the finished
sessions of a group still in flight stay in the replica (and so in the checkpoint's pending list)
instead of reaching UPDATE once drained and once regenerated.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import ray

from recipe.arise.core.observation import Observation
from recipe.arise.core.store import atomic_write
from recipe.arise.core.trajectory import TrajectoryInfo, plain

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

PENDING_FILE = "pending_observations.json"  # in the checkpoint's arise/ folder, beside library.parquet
FORMAT = 1
_FIELDS = [f.name for f in dataclasses.fields(Observation)]

__all__ = [
    "PENDING_FILE",
    "PendingObservationsError",
    "drain",
    "inflight_groups",
    "load_pending_observations",
    "observation_from_record",
    "observation_record",
    "reissued",
    "restore_pending",
    "save_pending",
]


class PendingObservationsError(ValueError):
    """A checkpoint's ``pending_observations.json`` cannot be read back."""


def observation_record(observation: Observation) -> dict[str, Any]:
    """One observation as a JSON object (its trajectory record under the ``arise_*`` keys verl carries)."""
    record = {name: getattr(observation, name) for name in _FIELDS if name != "trajectory"}
    record["trajectory"] = observation.trajectory.to_extra_fields()
    return record


def observation_from_record(record: Any) -> Observation:
    """The observation :func:`observation_record` wrote; ValueError on a key it does not know or a
    missing ``uid``/``reward``/``correct``."""
    if not isinstance(record, dict):
        raise ValueError(f"an observation is a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - set(_FIELDS))
    if unknown:
        raise ValueError(f"unknown observation field(s) {unknown}; known: {sorted(_FIELDS)}")
    missing = sorted({"uid", "reward", "correct"} - set(record))
    if missing:
        raise ValueError(f"missing observation field(s) {missing}")
    if not isinstance(record["correct"], bool):
        raise ValueError(f"correct must be true or false, got {record['correct']!r}")
    trajectory = TrajectoryInfo.from_extra_fields(record.get("trajectory"))
    uid, reward = str(record["uid"]), float(record["reward"])
    return Observation(**{**record, "uid": uid, "reward": reward, "trajectory": trajectory})


def _json_default(value: Any) -> Any:
    value = plain(value)  # numpy / torch values in messages or tool selections
    if isinstance(value, (str, int, float, bool, list, dict)) or value is None:
        return value
    raise TypeError(f"an observation holds a {type(value).__name__}, which JSON cannot store")


def save_pending(replica, library_path: str, step: int) -> str:
    """Write the replica's observations not yet drained to ``pending_observations.json`` beside the
    checkpoint's ``library_path`` (an empty list too: the file says none were pending); returns its path."""
    observations = ray.get(replica.pending.remote())
    path = os.path.join(os.path.dirname(library_path), PENDING_FILE)
    doc = {"format": FORMAT, "global_step": int(step), "observations": [observation_record(o) for o in observations]}
    text = json.dumps(doc, default=_json_default, ensure_ascii=False)
    atomic_write(path, lambda f: f.write(text.encode()))
    return path


def load_pending_observations(path: str, step: int) -> list[Observation]:
    """The observations in a checkpoint's ``pending_observations.json``; PendingObservationsError
    naming the file on anything it cannot read (a torn or hand-edited file, another step's)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PendingObservationsError(f"{path}: cannot read the pending observations: {error}") from error
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("observations"), list):
        raise PendingObservationsError(
            f"{path}: not a pending-observations file of format {FORMAT} "
            '({"format": 1, "global_step": N, "observations": [...]})'
        )
    if doc.get("global_step") != step:
        raise PendingObservationsError(
            f"{path}: written at global step {doc.get('global_step')!r}, but the checkpoint is step {step}"
        )
    observations = []
    for i, record in enumerate(doc["observations"]):
        try:
            observations.append(observation_from_record(record))
        except (TypeError, ValueError) as error:
            raise PendingObservationsError(f"{path}: observation {i}: {error}") from error
    return observations


def restore_pending(replica, library_path: str, step: int) -> dict[str, float]:
    """Put the pending observations saved beside a checkpoint's ``library_path`` back in the replica
    (before any new one is posted); returns the first step's metric. A checkpoint without the file
    (written before ARISE saved them) restores none, with a warning."""
    path = os.path.join(os.path.dirname(library_path), PENDING_FILE)
    if not os.path.exists(path):
        logger.warning(f"ARISE: {os.path.dirname(path)} holds no {PENDING_FILE}: no pending observations restored")
        return {"arise/restored_observations": 0.0}
    observations = load_pending_observations(path, step)
    ray.get(replica.restore.remote(observations))
    print(f"[arise] resume: {len(observations)} observation(s) not yet drained at step {step} restored", flush=True)
    return {"arise/restored_observations": float(len(observations))}


def inflight_groups(trainer_mode: str, partition_id: str = "train") -> list[str]:
    """The prompt groups verl's ``_reissue_inflight_prompts`` re-issues (read the same way, before it
    re-tags them): the restored TransferQueue's prompts pending or running; none under sync."""
    if trainer_mode == "sync":
        return []
    import transfer_queue as tq

    data = tq.kv_list(partition_id)
    items = (data or {}).get(partition_id, {})
    return [
        key for key, tag in items.items() if tag.get("is_prompt", False) and tag.get("status") in ("pending", "running")
    ]


def drain(replica, trainer_mode: str, partition_id: str = "train") -> list[Observation]:
    """The observations a maintenance takes: every one posted, less those of the groups still in flight
    (:func:`inflight_groups`; none under sync), which stay in the replica until their group finishes.
    Under the async trainers a group's sessions finish at different times; drained part by part, a
    group in flight at a checkpoint would have its finished sessions in UPDATE and again, regenerated,
    after verl re-issues it on resume (and a maintenance would see part of a group's contrast)."""
    return ray.get(replica.drain.remote(hold=inflight_groups(trainer_mode, partition_id)))


def reissued(replica, uids: list[str], step: int) -> dict[str, float]:
    """Before verl re-issues ``uids``: drop the restored observations of their trajectories (verl
    deletes those and generates them again, so their new observations come instead); the count
    goes to the first step's metrics and the console."""
    dropped = ray.get(replica.discard_groups.remote(list(uids))) if uids and replica is not None else 0
    if uids:
        print(
            f"[arise] resume: verl re-issues {len(uids)} query group(s) in flight at the checkpoint for step {step}"
            f" (new rollouts, a new skill selection); {dropped} restored observation(s) of them dropped",
            flush=True,
        )
    return {"arise/reissued_groups": float(len(uids)), "arise/reissued_observations_dropped": float(dropped)}
