"""What ``arise.replay_poll_s`` relies on, read from verl's source on both stacks (conftest.py)
(recipe/arise/adapters/trainer.py ``ARISETrainer._build_replay_buffer``):

- the v1 trainer builds its replay buffer in ``_build_replay_buffer`` during ``__init__`` (the
  recipe parses its config section before calling the base ``__init__``);
- ``ReplayBuffer.sample`` waits for finished rollouts by sleeping ``self.poll_interval`` between
  checks, a constructor default of 2.0 s that verl's trainer does not pass from any config key, so
  a generation phase ends on a 2-s grid unless the attribute is set.
"""

import re


def test_the_replay_buffer_is_built_by_an_overridable_method_in_init(source):
    base = source("trainer/ppo/v1/trainer_base.py")
    assert "self.replay_buffer = self._build_replay_buffer()" in base
    assert re.search(r"def _build_replay_buffer\(self\)", base)


def test_sample_sleeps_poll_interval_between_checks_for_finished_rollouts(source):
    buffer = source("trainer/ppo/v1/replay_buffer.py")
    assert re.search(r"poll_interval: float = 2\.0", buffer), "verl's default poll interval changed"
    assert "self.poll_interval = poll_interval" in buffer
    assert re.search(r"def _wait_for_next_poll\(self[^)]*\)[^:]*:\s*time\.sleep\(self\.poll_interval\)", buffer)
    sample = buffer[buffer.index("    def sample(") :]
    assert "self._wait_for_next_poll(" in sample


def test_the_trainer_passes_no_poll_interval_from_the_config(source):
    base = source("trainer/ppo/v1/trainer_base.py")
    build = base[base.index("def _build_replay_buffer(") :]
    build = build[: build.index("\n    def ", 1)]
    assert "poll_interval" not in build, "verl now passes poll_interval: use its config key instead"
