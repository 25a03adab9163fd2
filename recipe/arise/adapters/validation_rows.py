"""Which samples are validation samples: a flag on each row, not a mode of the trainer.

verl's async trainers keep generating training rollouts while the trainer validates
(colocate_async resumes the engines at ``on_step_end``, before the periodic validation), so a
switch flipped around validation would also catch the training trajectories started meanwhile
(no observation, forced Phase II, the validation epsilon). Instead every row of the validation
dataloader carries ``arise_validate=True`` (:class:`FlaggedValLoader`, put in place by the
trainer's ``_init_dataloader``). verl hands a row's non-tensor fields to the agent loop's
``run(**kwargs)`` (``AgentLoopWorkerTQ.generate_sequences``) and to the reward manager's
``non_tensor_batch`` (``AgentLoopWorker._compute_score``), where :func:`is_validation_sample`
reads it; a row without it is a training row.

Why the dataloader and not the dataset: verl builds both datasets with one class
(``data.custom_cls``, which a user may replace with their own) that never learns which of the two
it is; the trainer knows, and verl's ``_validate`` is the one reader of ``val_dataloader``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from recipe.arise.core.trajectory import plain

__all__ = ["VALIDATE_FIELD", "FlaggedValLoader", "is_validation_sample"]

VALIDATE_FIELD = "arise_validate"


def is_validation_sample(fields: Mapping[str, Any]) -> bool:
    """Whether the sample whose fields (run arguments, a reward item's ``non_tensor_batch``) are
    ``fields`` is a validation sample; a value that is not a bool raises ValueError naming it."""
    value = plain(fields.get(VALIDATE_FIELD, False))
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{VALIDATE_FIELD} must be a bool (True on validation rows), got {value!r}")
    return bool(value)


class FlaggedValLoader:
    """verl's validation dataloader, each batch (verl's ``collate_fn`` dict of columns) with an
    ``arise_validate`` column of True; anything else (``len``, attributes) is the wrapped loader's."""

    def __init__(self, inner):
        self._inner = inner

    def __iter__(self) -> Iterator[dict]:
        for batch in self._inner:
            if VALIDATE_FIELD in batch:
                raise ValueError(f"the validation data has a column {VALIDATE_FIELD!r}: ARISE's own, rename it")
            rows = len(next(iter(batch.values())))
            yield {**batch, VALIDATE_FIELD: np.full(rows, True, dtype=object)}

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name):
        if name == "_inner":  # not set yet (a copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._inner, name)
