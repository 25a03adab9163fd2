"""ARISE's trainer per verl v1 trainer mode: verl's names (``sync``, ``colocate_async``,
``separate_async``) to the ARISE trainers registered under their own names (verl refuses a second
class under one of its names). docs/trainer_modes.md

``trainer.v1.trainer_mode`` takes either name: ``main_arise`` turns verl's into ARISE's before verl
resolves the trainer, and the preflight checks it the same way (:func:`arise_trainer_mode`).
"""

from __future__ import annotations

# verl's mode -> the ARISE trainer registered for it (recipe.arise.adapters.trainers)
TRAINER_MODES = {"sync": "arise", "colocate_async": "arise_colocate_async", "separate_async": "arise_separate_async"}


class TrainerModeError(ValueError):
    """A ``trainer.v1.trainer_mode`` ARISE has no trainer for."""


def arise_trainer_mode(name: str) -> str:
    """The registered ARISE trainer for ``trainer.v1.trainer_mode=name`` (verl's name or ARISE's)."""
    if name in TRAINER_MODES.values():
        return name
    if name in TRAINER_MODES:
        return TRAINER_MODES[name]
    known = ", ".join(f"{verl} ({arise})" for verl, arise in TRAINER_MODES.items())
    raise TrainerModeError(f"trainer.v1.trainer_mode={name!r} is no ARISE trainer; one of {known}")
