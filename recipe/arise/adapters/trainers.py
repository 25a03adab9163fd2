"""The registered ARISE trainers: :class:`~recipe.arise.adapters.trainer.ARISEHooks` before one of
verl's v1 trainers, one class per mode (:data:`~recipe.arise.adapters.trainer_modes.TRAINER_MODES`).

Each pins ``trainer_mode`` to its verl base's mode: verl's base reads ``self.trainer_mode`` for the
replay buffer, ``parameter_sync_step``, the TransferQueue checkpoint and more, and assigns it the
config value (the ARISE name) in ``__init__``. The async ones hand out ARISE's rollout client
(:mod:`~recipe.arise.adapters.llm_client`). docs/trainer_modes.md
"""

from __future__ import annotations

import logging

from verl.trainer.ppo.v1 import trainer_separate_async
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from recipe.arise.adapters.llm_client import ARISEAsyncLLMClient
from recipe.arise.adapters.trainer import ARISEHooks
from recipe.arise.adapters.trainer_modes import TRAINER_MODES


class DropFlush(logging.LoggerAdapter):
    """A logger that drops ``print``'s ``flush`` keyword. verl 0.9.1's ``PPOTrainerSeparateAsync._setup``
    logs ``logger.info(..., flush=True)`` when ``actor_rollout_ref.hybrid_engine=False``, and
    ``Logger._log`` raises a TypeError on it: the run dies at start-up
    (tests/contracts/test_trainer_overrides_contract.py says when verl no longer needs this)."""

    def process(self, msg, kwargs):
        kwargs.pop("flush", None)
        return msg, kwargs


trainer_separate_async.logger = DropFlush(trainer_separate_async.logger, {})


def pinned_mode(mode: str) -> property:
    """``trainer_mode`` reading ``mode``; the base's assignment of the config value is ignored."""
    return property(lambda self: mode, lambda self, value: None, doc=f"verl's {mode!r} semantics")


@register_trainer(TRAINER_MODES["sync"])
class ARISETrainer(ARISEHooks, PPOTrainerSync):
    """ARISE on verl's sync trainer (``trainer.v1.trainer_mode=arise`` or ``sync``)."""

    trainer_mode = pinned_mode("sync")


@register_trainer(TRAINER_MODES["colocate_async"])
class ARISEColocateAsyncTrainer(ARISEHooks, PPOTrainerColocateAsync):
    """ARISE on verl's colocate_async trainer (``arise_colocate_async`` or ``colocate_async``)."""

    trainer_mode = pinned_mode("colocate_async")

    def get_llm_client(self):
        return self.llm_server_manager.get_client(client_cls=ARISEAsyncLLMClient)


@register_trainer(TRAINER_MODES["separate_async"])
class ARISESeparateAsyncTrainer(ARISEHooks, PPOTrainerSeparateAsync):
    """ARISE on verl's separate_async trainer (``arise_separate_async`` or ``separate_async``): the
    standalone rollout servers generate while the actor trains."""

    trainer_mode = pinned_mode("separate_async")

    def get_llm_client(self):
        # the standalone servers', as verl's base hands out, with ARISE's client class
        return self.standalone_server_manager.get_client(client_cls=ARISEAsyncLLMClient)
