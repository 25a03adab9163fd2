"""How far behind the trainer each trained trajectory's library and weights were (docs/trainer_modes.md).

- ``arise/library_staleness/{mean,max}``: the trainer's library version when the batch is sampled
  (before this step's maintenance publishes the next) minus the version the trajectory selected
  from (``TrajectoryInfo.library_version``: its query group's one snapshot; every ARISE trajectory
  records it, Phase I and the control arm included). The version steps once per maintenance,
  i.e. once per global step: N + 1 after step N's, in a resumed run too (the trajectories verl
  restores from a checkpoint keep the versions they read before the kill).
- ``arise/weight_staleness/{mean,max}``: verl's ``training/off_policy/trajectory_staleness``
  (``PPOTrainer._compute_metrics``) on the same rows: ``(global_steps - 1) - max_global_steps``,
  the policy versions between the freshest weights that generated the trajectory and the ones
  being trained, from the batch's non-padding tags.
- ``arise/staleness_unknown``: trained trajectories without a library or a weight version, each
  left out of the staleness it lacks (a console line says so).

Both are taken over every sampled batch of a global step (``parameter_sync_step`` of them). Under
the sync trainer both are 0 by construction: a step's rollouts start after the previous step's
maintenance published the library and its weight sync, and the step trains on them alone.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from recipe.arise.core.trajectory import TrajectoryInfo, as_list

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

__all__ = ["StalenessTally"]


@dataclasses.dataclass
class StalenessTally:
    """One global step's staleness per trained trajectory, gathered batch by batch."""

    library: list[int] = dataclasses.field(default_factory=list)
    weight: list[int] = dataclasses.field(default_factory=list)
    unknown: int = 0

    def add(
        self,
        tags: Sequence[Mapping[str, Any]],
        records: Sequence[TrajectoryInfo],
        global_steps: int,
        library_version: int,
    ) -> None:
        """The rows of one sampled batch: their transfer-queue ``tags`` and ARISE records, in one order."""
        if len(tags) != len(records):
            raise ValueError(f"staleness: {len(tags)} tags for {len(records)} trajectories")
        unknown = 0
        for tag, record in zip(tags, records, strict=True):
            newest = tag.get("max_global_steps")
            if record.library_version is not None:
                self.library.append(int(library_version) - record.library_version)
            if newest is not None:
                self.weight.append(int(global_steps) - 1 - int(newest))
            unknown += record.library_version is None or newest is None
        if unknown:
            logger.warning(
                f"ARISE: {unknown} of {len(tags)} trajectories of step {global_steps}'s batch carry no library or "
                "weight version: left out of arise/library_staleness or arise/weight_staleness "
                "(arise/staleness_unknown)"
            )
        self.unknown += unknown

    def add_batch(self, batch, fetch: Callable, global_steps: int, library_version: int) -> None:
        """A sampled batch (verl's ``keys``/``tags``/``partition_id``; None: nothing); ``fetch`` is
        ``trainer_upload.batch_fields`` (the non-padding rows' fields from the transfer queue)."""
        if batch is None:
            return
        data = fetch(batch, ["extra_fields"])
        if data is None:  # every row padding
            return
        tags = [tag for tag in batch.tags if not tag.get("is_padding", False)]
        records = [TrajectoryInfo.from_extra_fields(extra) for extra in as_list(data["extra_fields"])]
        self.add(tags, records, global_steps, library_version)

    def metrics(self) -> dict[str, float]:
        out = {"arise/staleness_unknown": float(self.unknown)}
        for name, values in (("library", self.library), ("weight", self.weight)):
            out[f"arise/{name}_staleness/mean"] = float(np.mean(values)) if values else 0.0
            out[f"arise/{name}_staleness/max"] = float(np.max(values)) if values else 0.0
        return out
