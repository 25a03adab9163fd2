"""What ``arise.replay_poll_s`` relies on in verl's v1 trainer, run on both stacks (conftest.py)
(recipe/arise/adapters/trainer.py ``ARISETrainer._build_replay_buffer``):

- the v1 trainer builds its replay buffer in ``_build_replay_buffer`` during ``__init__`` (the
  recipe parses its config section before calling the base ``__init__``);
- ``ReplayBuffer.sample`` waits for finished rollouts by sleeping ``self.poll_interval`` between
  checks, a constructor default of 2.0 s that verl's trainer does not pass from any config key, so
  a generation phase ends on a 2-s grid unless the attribute is set.

Run here on verl's own ``PPOTrainer`` (the composed ``ppo_trainer`` config, with ARISE's dynamic
sampling on) and ``ReplayBuffer``, with TransferQueue replaced by an in-memory fake whose group
finishes on the third check and ``time.sleep`` recorded.
"""

import json

import pytest

PROBE = r"""
import json, time
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from verl.trainer.ppo.v1 import replay_buffer as rb, trainer_base as tb

with initialize_config_module("verl.trainer.config", version_base=None):
    # ARISE's dynamic sampling (recipe/arise/config/arise_trainer.yaml) takes the DAPO path of sample()
    config = compose("ppo_trainer", overrides=["algorithm.filter_groups.enable=true"])

class Trainer(tb.PPOTrainer):  # the abstract step methods are not reached
    pass
Trainer.__abstractmethods__ = frozenset()

built = []
class Overriding(Trainer):
    def _build_replay_buffer(self):
        built.append(type(self).__name__)
        return "the override's buffer"

overriding = Overriding(config)

constructed = []
class Recording(rb.ReplayBuffer):  # what _build_replay_buffer passes the buffer
    def __init__(self, **kwargs):
        constructed.append(sorted(kwargs))
        super().__init__(**kwargs)
tb.ReplayBuffer = Recording
buffer = Trainer(config).replay_buffer

def keys(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield f"{prefix}{k}"
            yield from keys(v, f"{prefix}{k}.")

# a group of two trajectories, running for two checks, then finished with different rewards
running = {"train": {"g": {"is_prompt": True, "status": "running", "global_steps": 1}}}
finished = {"train": {"g": {"is_prompt": True, "status": "finished", "global_steps": 1},
                      "g_0_0": {"status": "finished"}, "g_1_0": {"status": "finished"}}}

class FakeTransferQueue:
    def __init__(self):
        self.snapshots = [running, running, finished]
        self.checks = 0
    def kv_list(self, *args, **kwargs):
        self.checks += 1
        return self.snapshots[min(self.checks, len(self.snapshots)) - 1]
    def kv_clear(self, partition_id, keys):
        pass
    def kv_batch_get(self, keys, partition_id, select_fields):
        import torch
        return {"rm_scores": [torch.tensor([float(i)]) for i, _ in enumerate(keys)]}

fake = FakeTransferQueue()
rb.tq = fake
sleeps = []
time.sleep = sleeps.append
default_interval = buffer.poll_interval
buffer.poll_interval = 0.25  # what the ARISE override does with arise.replay_poll_s
batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=1)
print(json.dumps({
    "built": built, "overriding_buffer": overriding.replay_buffer, "buffer_type": type(buffer).__name__,
    "constructed": constructed, "default_interval": default_interval,
    "poll_keys": [k for k in keys(OmegaConf.to_container(config)) if "poll" in k.lower()],
    "sleeps": sleeps, "checks": fake.checks, "sampled": sorted(batch.keys),
}))
"""


@pytest.fixture(scope="module")
def replay(stack):
    return json.loads(stack.run(PROBE).strip().splitlines()[-1])


def test_the_replay_buffer_is_built_by_an_overridable_method_in_init(replay):
    assert replay["built"] == ["Overriding"]  # once, by __init__, through the subclass's method
    assert replay["overriding_buffer"] == "the override's buffer"  # the buffer the trainer samples from
    assert replay["buffer_type"] == "Recording"  # the sync trainer's ReplayBuffer


def test_sample_sleeps_poll_interval_between_checks_for_finished_rollouts(replay):
    assert replay["default_interval"] == 2.0, "verl's default poll interval changed"
    assert replay["checks"] == 3  # running, running, finished
    assert replay["sleeps"] == [0.25, 0.25]  # the instance's attribute, once between each two checks
    assert replay["sampled"] == ["g_0_0", "g_1_0"]


def test_the_trainer_passes_no_poll_interval_from_the_config(replay):
    (kwargs,) = replay["constructed"]
    assert "poll_interval" not in kwargs, "verl now passes poll_interval: use its config key instead"
    assert replay["poll_keys"] == [], f"verl's config now has {replay['poll_keys']}"
