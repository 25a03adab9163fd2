"""The preflight's trainer checks (recipe/arise/tools/preflight_trainer.py): parameter_sync_step > 1
under the sync and colocate_async trainers is refused, naming the key verl reads and the fix."""

import copy
import inspect

import pytest
from omegaconf import OmegaConf

from recipe.arise.adapters.trainer_modes import TRAINER_MODES
from recipe.arise.tools import preflight
from recipe.arise.tools.preflight_trainer import (
    check_parameter_sync_step,
    max_parameter_sync_step,
    verl_mode,
)


@pytest.fixture(scope="module")
def base(paper_script_overrides):
    entry, overrides = paper_script_overrides
    return entry, overrides, preflight.compose(entry, overrides)


def _cfg(cfg, key, value):
    cfg = copy.deepcopy(cfg)
    OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def test_the_key_is_the_one_verl_reads_for_arises_trainer():
    """verl's PPOTrainer reads trainer.v1.<self.trainer_mode>.parameter_sync_step; ARISE's trainer
    says "sync" whatever trainer.v1.trainer_mode holds."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from recipe.arise.adapters.trainers import ARISETrainer

    source = inspect.getsource(PPOTrainer.__init__)
    assert 'self.config.trainer.v1.get(self.trainer_mode, {}).get("parameter_sync_step", 1)' in source
    assert ARISETrainer.trainer_mode.fget(None) == "sync" == verl_mode("arise")


def test_every_arise_trainer_reads_its_verl_bases_mode():
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    from recipe.arise.adapters import trainers  # noqa: F401  (registers them)

    for verl, arise in TRAINER_MODES.items():
        assert verl_mode(arise) == verl_mode(verl) == verl == get_trainer_cls(arise).trainer_mode.fget(None)


def test_the_limit_is_a_function_of_the_trainer_mode():
    assert max_parameter_sync_step("arise") == max_parameter_sync_step("sync") == 1
    # colocate_async aborts and sleeps the engines after each sampled batch too
    assert max_parameter_sync_step("colocate_async") == max_parameter_sync_step("arise_colocate_async") == 1
    assert max_parameter_sync_step("separate_async") is None


def test_parameter_sync_step_above_1_is_refused_under_colocate_async_in_the_section_verl_reads(base):
    _, _, cfg = base
    cfg = _cfg(cfg, "trainer.v1.trainer_mode", "arise_colocate_async")
    (finding,) = check_parameter_sync_step(_cfg(cfg, "trainer.v1.colocate_async.parameter_sync_step", 2))
    assert finding.level == "ERROR" and finding.what.startswith("trainer.v1.colocate_async.parameter_sync_step=2")
    assert "arise_colocate_async (colocate_async semantics)" in finding.what


@pytest.mark.parametrize("section", ["sync", "arise"])
def test_parameter_sync_step_above_1_is_refused_under_the_sync_trainer(base, section):
    _, _, cfg = base
    assert check_parameter_sync_step(cfg) == []  # the paper script: verl's default, 1
    key = f"trainer.v1.{section}.parameter_sync_step"
    (finding,) = check_parameter_sync_step(_cfg(cfg, key, 4))
    assert finding.level == "ERROR" and finding.what.startswith(f"{key}=4")
    assert "sleeping engines" in finding.what and finding.fix == f"{key}=1 (or drop it)"
    assert check_parameter_sync_step(_cfg(cfg, key, 1)) == []
    assert check_parameter_sync_step(_cfg(cfg, key, 0))[0].level == "ERROR"
    # an async mode's own section may hold more (verl checks it against the batch itself)
    async_mode = _cfg(_cfg(cfg, "trainer.v1.trainer_mode", "separate_async"), key, 4)
    assert check_parameter_sync_step(async_mode) == []


def test_the_preflight_refuses_it(base):
    entry, overrides, _ = base
    cfg = preflight.compose(entry, overrides + ["++trainer.v1.sync.parameter_sync_step=2"])
    errors = [f for f in preflight.check_config(cfg, entry, False, False) if f.level == "ERROR"]
    assert [f.what.split(":")[0] for f in errors] == ["trainer.v1.sync.parameter_sync_step=2"]
