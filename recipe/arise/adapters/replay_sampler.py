"""The replay buffer the ARISE trainer samples from: verl's, wrapped (``ARISEHooks._build_replay_buffer``).

``on_sample_end`` gets no arguments, and the summary rollouts need the batch just sampled: the wrapper
keeps it. It also tallies each partition's failed query groups (recipe.arise.adapters.rollout_failures)
and counts the groups verl refills while one batch is sampled, stopping a run whose refills never end
(``arise.max_refill_batches``, docs/design.md). tests/contracts/test_trainer_overrides_contract.py
holds ``sample`` to the signature of verl's buffers.
"""

from __future__ import annotations

from recipe.arise.adapters.rollout_failures import FailureTally

__all__ = ["RecordingSampler", "RefillLimit"]


class RefillLimit(RuntimeError):
    """One sampled batch needed more refilled groups than ``arise.max_refill_batches`` batches."""


class RecordingSampler:
    """Wraps verl's replay buffer: remembers the last training batch it handed out (``on_sample_end``
    gets no arguments; the summary rollout needs that batch) and tallies the failed query groups of
    each partition's batches (``rollout``: n sessions per group, val_kwargs.n at evaluation)."""

    def __init__(self, inner, rollout, max_refill_batches: int = 0):
        self._inner = inner
        self._rollout = rollout
        self.last_train_batch = None
        self.failures = {"train": FailureTally(), "val": FailureTally()}  # the trainer resets them
        # groups verl refilled (dynamic sampling's dropped groups, failed ones) while one batch was
        # sampled, and in the step (arise/refilled_groups; the trainer resets it)
        self.max_refill_batches, self.refilled, self.refilled_step, self._batch_size = max_refill_batches, 0, 0, 0
        if getattr(inner, "refill_fn", None) is not None:
            inner.refill_fn = self._counted(inner.refill_fn)

    def _counted(self, refill):
        def counted(num_prompts):
            self.refilled += num_prompts
            self.refilled_step += num_prompts
            if self.max_refill_batches and self.refilled > self.max_refill_batches * self._batch_size:
                raise RefillLimit(
                    f"{self.refilled} query groups were refilled to sample one batch of {self._batch_size}: the "
                    "groups dropped (algorithm.filter_groups: every rollout of a group got one reward; or failed) "
                    "leave too few to train on, and verl would refill for ever. Is the data far too hard or too "
                    "easy for the model, or its reward always 0 (check the grader, the data's answers)? "
                    f"arise.max_refill_batches={self.max_refill_batches} allows more (0: no bound)"
                )
            return refill(num_prompts)

        return counted

    def sample(self, global_steps, partition_id, batch_size):
        self.refilled, self._batch_size = 0, int(batch_size)
        batch, metrics = self._inner.sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        if partition_id == "train":
            self.last_train_batch = batch
        n = self._rollout.n if partition_id == "train" else self._rollout.val_kwargs.n
        self.failures.setdefault(partition_id, FailureTally()).add(batch.keys, batch_size, int(n))
        return batch, metrics

    def __getattr__(self, name):
        return getattr(self._inner, name)
