"""ARISE's staleness metrics (recipe/arise/adapters/trainer_staleness.py): the library and weight
versions behind the trainer of every trained trajectory, per global step.

Under the sync trainer both are 0 by construction: the library a step's groups read is the one the
previous step's maintenance published, and their weights the previous step's sync. One batch ahead
(colocate_async's warm-up batch) both are 1. The trajectory's library version is recorded by the
skill layer from its group's snapshot; the trainer's is read before the step's own maintenance.
"""

import asyncio
import logging
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from skill_layer_host import skill_layer

import recipe.arise.adapters.skill_layer as skill_layer_module
import recipe.arise.adapters.trainer as trainer_module
from recipe.arise.adapters.library_replica import LibraryReplica
from recipe.arise.adapters.rollout_failures import FailureTally
from recipe.arise.adapters.trainer_metrics import StepState, step_metrics
from recipe.arise.adapters.trainer_staleness import StalenessTally
from recipe.arise.adapters.trainers import ARISETrainer
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.library import SkillLibrary, StepEvents
from recipe.arise.core.trajectory import TrajectoryInfo

MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]
KEYS = [
    "arise/library_staleness/mean",
    "arise/library_staleness/max",
    "arise/weight_staleness/mean",
    "arise/weight_staleness/max",
    "arise/staleness_unknown",
]


async def _ready(value):
    return value


class Replica:
    """The library replica as agent loops reach it, backed by the real :class:`LibraryReplica`."""

    def __init__(self):
        self.actor = LibraryReplica()
        self.snapshot = SimpleNamespace(remote=lambda: _ready(self.actor.snapshot()))


class Batch:
    """A sampled batch as verl's replay buffer hands it out, its rows' extra fields beside it."""

    def __init__(self, rows):
        self.keys = [f"k{i}" for i in range(len(rows))]
        self.tags = [tag for tag, _ in rows]
        self.partition_id = "train"
        self.extra = [extra for _, extra in rows]

    def fetch(self, batch, fields):
        assert batch is self and fields == ["extra_fields"]
        rows = [e for e, tag in zip(self.extra, self.tags, strict=True) if not tag.get("is_padding", False)]
        return {"extra_fields": rows} if rows else None


class Trainer(ARISETrainer):
    """No verl set-up: what on_sample_end touches; maintenance publishes the next library version."""

    def __init__(self, replica, parameter_sync_step=1):
        self.library, self.library_replica = object(), None
        self.arise, self.global_steps, self._arise_version = ARISEConfig(), 1, 0
        self.replay_buffer = SimpleNamespace(last_train_batch=None, failures={"train": FailureTally()})
        self.parameter_sync_step, self.local_trigger_step = parameter_sync_step, 0
        self.checkpoint_manager = SimpleNamespace(sleep_replicas=lambda: None)
        self.curr_step_profile = False
        self._step_state, self.replica, self.metrics, self.tallies = StepState(), replica, [], []
        self._publish()

    def _publish(self):
        self._arise_version += 1
        self.replica.actor.publish(self._arise_version, [("s000001", '{"skill_name": "x"}')])

    def _arise_sample(self, batch):
        pass

    def _arise_maintain(self):
        state, self._step_state = self._step_state, StepState()
        self.metrics.append(state.staleness.metrics())
        self.tallies.append(state.staleness)
        self._publish()


def generate(replica, monkeypatch, step, uids, weights):
    """One group's trajectories per uid through the skill layer (Phase I: no selection), tagged as
    verl's agent loop tags them, ``weights`` the server's weight version."""
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: replica)
    layer = skill_layer(server=None)
    layer.host.config = OmegaConf.create({"arise": {"phase1_steps": 100}})

    async def sessions():
        rows = [
            {"raw_prompt": MESSAGES, "uid": uid, "session_id": s, "global_steps": step} for uid in uids for s in (0, 1)
        ]
        return await asyncio.gather(*[layer.prepare(row) for row in rows])

    plans = asyncio.run(sessions())
    tag = {"status": "success", "global_steps": step, "min_global_steps": weights, "max_global_steps": weights}
    return [(dict(tag), plan.info.to_extra_fields()) for plan in plans]


def sample(trainer, rows, monkeypatch):
    """One sampled batch of ``rows`` through the trainer's on_sample_end."""
    batch = Batch(rows)
    trainer.replay_buffer.last_train_batch = batch
    monkeypatch.setattr(trainer_module, "batch_fields", batch.fetch)
    ARISETrainer.on_sample_end(trainer)


def test_under_sync_library_and_weight_staleness_are_zero_by_construction(monkeypatch):
    replica = Replica()
    trainer = Trainer(replica)
    for step in (1, 2, 3):
        trainer.global_steps = step
        # sync: the step's rollouts start after the previous step's maintenance and weight sync
        sample(
            trainer,
            generate(replica, monkeypatch, step, [f"sync-{step}-a", f"sync-{step}-b"], weights=step - 1),
            monkeypatch,
        )
    assert [m["arise/library_staleness/max"] for m in trainer.metrics] == [0.0] * 3
    assert [m["arise/weight_staleness/max"] for m in trainer.metrics] == [0.0] * 3
    assert all(m[k] == 0.0 for m in trainer.metrics for k in KEYS)
    assert [(len(t.library), len(t.weight)) for t in trainer.tallies] == [(4, 4)] * 3  # every trajectory counted


def test_one_batch_ahead_the_trained_trajectories_are_one_version_behind(monkeypatch):
    """colocate_async's warm-up batch: step s trains on groups generated during step s - 1, before
    its maintenance and weight sync; with parameter_sync_step 2 the step's two batches are pooled."""
    replica = Replica()
    trainer = Trainer(replica, parameter_sync_step=2)
    ahead = generate(replica, monkeypatch, 1, ["ahead-1"], weights=0)
    for step in (1, 2, 3):
        trainer.global_steps = step
        fresh = generate(replica, monkeypatch, step, [f"fresh-{step}"], weights=step - 1)
        # generated during this step, before its maintenance and weight sync; trained at the next
        following = generate(replica, monkeypatch, step + 1, [f"ahead-{step + 1}"], weights=step - 1)
        trainer.local_trigger_step = 0
        sample(trainer, ahead, monkeypatch)  # at step 1: the warm-up batch, of the same versions
        trainer.local_trigger_step = 1
        sample(trainer, fresh, monkeypatch)
        ahead = following
    means = [(m["arise/library_staleness/mean"], m["arise/weight_staleness/mean"]) for m in trainer.metrics]
    assert means == [(0.0, 0.0), (0.5, 0.5), (0.5, 0.5)]  # half of each step's trajectories one behind
    assert [m["arise/library_staleness/max"] for m in trainer.metrics] == [0.0, 1.0, 1.0]
    assert [m["arise/weight_staleness/max"] for m in trainer.metrics] == [0.0, 1.0, 1.0]


def test_rows_without_a_version_are_counted_not_guessed(caplog):
    tally = StalenessTally()
    tags = [{"max_global_steps": 3}, {"max_global_steps": None}, {}]
    records = [TrajectoryInfo(library_version=2), TrajectoryInfo(library_version=1), TrajectoryInfo()]
    with caplog.at_level(logging.WARNING):
        tally.add(tags, records, global_steps=5, library_version=3)
    m = tally.metrics()
    assert (tally.library, tally.weight, m["arise/staleness_unknown"]) == ([1, 2], [1], 2.0)
    assert "2 of 3 trajectories" in caplog.text and "arise/staleness_unknown" in caplog.text
    with pytest.raises(ValueError, match="2 tags for 1 trajectories"):
        tally.add(tags[:2], records[:1], global_steps=5, library_version=3)
    # padding rows are not trajectories
    batch = Batch([({"max_global_steps": 4}, {"arise_library_version": 3}), ({"is_padding": True}, {})])
    tally = StalenessTally()
    tally.add_batch(batch, batch.fetch, global_steps=5, library_version=3)
    assert (tally.library, tally.weight, tally.unknown) == ([0], [0], 0)


def test_the_step_metrics_carry_them():
    state = StepState()
    state.staleness.add([{"max_global_steps": 1}], [TrajectoryInfo(library_version=1)], 4, 3)
    m = step_metrics(SkillLibrary(), 2, [], StepEvents(step=4), state, 0.0, True)
    assert {k: m[k] for k in KEYS} == dict(zip(KEYS, [2.0, 2.0, 2.0, 2.0, 0.0], strict=True))
