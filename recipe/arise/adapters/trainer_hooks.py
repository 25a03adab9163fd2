"""ARISE's trainer component, declared: the verl hooks it overrides, in the order verl calls them, the
ARISE step at each, and what it needs of the verl trainer it is composed with.

:class:`~recipe.arise.adapters.trainer.ARISEHooks` is the component; each registered trainer
(:mod:`~recipe.arise.adapters.trainers`) is ``ARISEHooks`` before one of verl 0.9.1's v1 trainers
(``PPOTrainerSync``, ``PPOTrainerColocateAsync``, ``PPOTrainerSeparateAsync``), and composing it with
a base that lacks one of :data:`HOOKS` fails at class creation (:func:`check_composition`).
tests/contracts/test_trainer_hooks_contract.py checks :data:`HOOKS` against verl's own trainers (each
hook exists on every base, verl calls them in this order, ``ARISEHooks`` overrides exactly these)
and :class:`TrainerHost` against what ``ARISEHooks`` reads and verl's trainers provide. The parts
``ARISEHooks`` is built from declare what they read of it: ``trainer_gate.GateHost``,
``trainer_upload.UploadHost``. docs/design.md (where each ARISE step hooks into verl).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

__all__ = ["HOOKS", "Hook", "TrainerHost", "check_composition"]


@dataclasses.dataclass(frozen=True)
class Hook:
    name: str  # the method of verl's PPOTrainer ARISEHooks overrides (and calls with super())
    caller: str  # where verl calls it
    step: str  # what ARISE does there


# in the order verl first calls them (set-up, validation before training, then each step)
HOOKS: tuple[Hook, ...] = (
    Hook("__init__", "Ray's TaskRunner", "read arise:, check the agent loop; before the base builds the buffer"),
    Hook("_build_replay_buffer", "PPOTrainer.__init__", "wrap verl's buffer: keep the sampled batch, count failures"),
    Hook("_init_dataloader", "PPOTrainer._setup", "every validation row carries arise_validate"),
    Hook("_load_checkpoint", "PPOTrainer._setup, last", "library (seeds, load_from or checkpoint), gate, publish"),
    Hook("on_validate_end", "PPOTrainer.fit, after each _validate", "stop on failed validation groups"),
    Hook("_reissue_inflight_prompts", "PPOTrainer.fit, before step 1", "drop the re-issued groups' observations"),
    Hook("on_sample_begin", "PPOTrainer._step_once, per sampled batch", "open the batch's summary stream"),
    Hook(
        "on_sample_end",
        "PPOTrainer._step_once, per sampled batch",
        "before verl's (engines awake): Upload (summaries, exact IG); once per global step maintenance + gate",
    ),
    Hook("_save_checkpoint", "PPOTrainer.fit, save_freq", "library, gate, pending observations, before verl's"),
    Hook("_compute_metrics", "PPOTrainer.fit, each step", "the arise/* metrics (core.metrics) and the console line"),
)


class TrainerHost(Protocol):
    """What ARISEHooks reads of the verl trainer it is composed with, and who sets each."""

    config: Any  # PPOTrainer.__init__: the trainer config
    trainer_mode: str  # PPOTrainer.__init__; pinned per registered trainer (trainers.pinned_mode)
    parameter_sync_step: int  # PPOTrainer.__init__: sampled batches per global step
    replay_buffer: Any  # PPOTrainer.__init__, from _build_replay_buffer
    tokenizer: Any  # PPOTrainer._setup (_init_tokenizer)
    train_dataset: Any  # PPOTrainer._init_dataloader
    val_dataset: Any  # PPOTrainer._init_dataloader
    val_dataloader: Any  # PPOTrainer._init_dataloader (ARISEHooks wraps it)
    total_training_steps: int  # PPOTrainer._init_dataloader
    global_steps: int  # PPOTrainer._load_checkpoint (0, or the resumed step), then fit
    local_trigger_step: int  # PPOTrainer.step: the sampled batch's index within the global step
    timing_raw: dict  # PPOTrainer.fit: the step's timings

    def get_llm_client(self) -> Any:
        """PPOTrainer (the async trainers: ARISE's client class): the client of the rollout servers."""


def check_composition(cls: type, component: type) -> None:
    """TypeError when ``cls`` composes ``component`` (ARISEHooks) with a base that does not define
    every hook of :data:`HOOKS` (ARISE's override would have no verl method to call with super())."""
    mro = cls.__mro__
    bases = mro[mro.index(component) + 1 :]
    missing = [h.name for h in HOOKS if not any(h.name in vars(base) for base in bases if base is not object)]
    if missing:
        raise TypeError(f"{cls.__name__}: its verl base defines no {missing}, the hooks ARISE overrides (HOOKS)")
