"""The preflight's trainer checks (recipe/arise/tools/preflight_trainer.py): parameter_sync_step > 1
under the sync and colocate_async trainers is refused, naming the key verl reads and the fix; under
separate_async, what verl asserts at start-up and what would hang (no rollout pool, the naive
backend, train_batch != pss x mini, a colocated reward model, more GPUs than there are)."""

import copy
import inspect

import pytest
from omegaconf import OmegaConf

from recipe.arise.adapters.trainer_modes import TRAINER_MODES
from recipe.arise.tools import preflight
from recipe.arise.tools.preflight_trainer import (
    check_parameter_sync_step,
    check_separate_async,
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
    assert max_parameter_sync_step("separate_async") is None is max_parameter_sync_step("arise_separate_async")


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


# ------------------------------------------------------------------------------------ separate_async
SEPARATE = {
    "trainer.v1.trainer_mode": "separate_async",
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 4,
    "actor_rollout_ref.rollout.nnodes": 1,
    "actor_rollout_ref.rollout.n_gpus_per_node": 4,
    "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
    "trainer.v1.separate_async.parameter_sync_step": 2,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 32,
    "data.train_batch_size": 64,
}


@pytest.fixture(scope="module")
def separate(base):
    cfg = base[2]
    for key, value in SEPARATE.items():
        cfg = _cfg(cfg, key, value)
    return cfg


def _errors(cfg, local_gpus=8):
    return [f.what for f in check_separate_async(cfg, local_gpus) if f.level == "ERROR"]


def test_a_separate_async_split_that_fits_passes(separate):
    (ok,) = check_separate_async(separate, local_gpus=8)
    assert ok.level == "OK" and "trainer 1x4 GPU(s), rollout 1x4, backend nccl, 2 mini-batch(es) of 32" in ok.what
    assert check_separate_async(_cfg(separate, "trainer.v1.trainer_mode", "sync"), 8) == []  # another mode


def test_separate_async_with_the_naive_backend_is_refused(separate):
    (what,) = _errors(_cfg(separate, "actor_rollout_ref.rollout.checkpoint_engine.backend", "naive"))
    assert what.startswith("actor_rollout_ref.rollout.checkpoint_engine.backend=naive")


@pytest.mark.parametrize("key", ["nnodes", "n_gpus_per_node"])
def test_separate_async_without_rollout_gpus_is_refused(separate, key):
    (what,) = _errors(_cfg(separate, f"actor_rollout_ref.rollout.{key}", 0))
    assert "GPUs of their own (verl asserts both > 0)" in what


def test_separate_async_with_train_batch_other_than_pss_times_mini_is_refused(separate):
    (what,) = _errors(_cfg(separate, "trainer.v1.separate_async.parameter_sync_step", 4))
    assert what.startswith("data.train_batch_size=64 != trainer.v1.separate_async.parameter_sync_step 4 x ")


def test_separate_async_with_a_colocated_reward_model_is_refused(separate):
    cfg = _cfg(separate, "reward.reward_model.enable", True)
    (what,) = _errors(_cfg(cfg, "reward.reward_model.enable_resource_pool", False))
    assert what.startswith("reward.reward_model.enable_resource_pool=False")
    assert _errors(_cfg(cfg, "reward.reward_model.enable_resource_pool", True)) == []


def test_separate_async_with_more_gpus_than_there_are_is_refused(separate):
    (what,) = _errors(separate, local_gpus=6)
    assert what.startswith("separate_async needs 4 trainer + 4 rollout GPU(s) = 8, this node's GPUs (nvidia-smi) ")
    assert "gives 6" in what
    # a local Ray cluster's declared GPUs count first (the CPU run's two slots)
    (what,) = _errors(_cfg(separate, "ray_kwargs.ray_init.num_gpus", 2), local_gpus=None)
    assert "= 8, ray_kwargs.ray_init.num_gpus gives 2" in what
    # several nodes: Ray's to count, said so
    nodes = _cfg(separate, "trainer.nnodes", 2)
    info, _ = check_separate_async(nodes, local_gpus=8)
    assert info.level == "INFO" and info.what.endswith("not checked: several nodes' GPUs are Ray's to count")
    # one node without nvidia-smi: nothing to count, said so
    info, ok = check_separate_async(separate, local_gpus=None)
    assert info.level == "INFO" and info.what.endswith("not checked: no GPU count here (no nvidia-smi)")
    assert ok.level == "OK"


def test_the_preflight_runs_the_separate_async_checks(base):
    entry, overrides, _ = base
    cfg = preflight.compose(entry, overrides + ["trainer.v1.trainer_mode=separate_async"])
    errors = [f.what for f in preflight.check_config(cfg, entry, False, False) if f.level == "ERROR"]
    # verl's defaults: no rollout pool, the naive backend, parameter_sync_step 4 against one mini-batch
    assert len(errors) == 3 and all("separate" in e or "naive" in e for e in errors), errors


def test_separate_async_with_a_mini_batch_of_no_whole_micro_batches_is_refused(separate):
    """PARAM_SYNC_STEP=2 on the CPU run (4 prompts x 4, micro 16) failed in compute_log_prob."""
    cfg = _cfg(
        _cfg(separate, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 16), "trainer.n_gpus_per_node", 1
    )
    cfg = _cfg(_cfg(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size", 2), "data.train_batch_size", 4)
    cfg = _cfg(_cfg(cfg, "actor_rollout_ref.rollout.n", 4), "actor_rollout_ref.rollout.n_gpus_per_node", 1)
    (what,) = _errors(cfg)
    assert what.startswith("a mini-batch of 2 x rollout.n 4 = 8 sequences over 1 trainer GPU(s) is no whole number")
    assert "log_prob_micro_batch_size_per_gpu=16" in what
    assert _errors(_cfg(cfg, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 8)) == []
    assert _errors(_cfg(cfg, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", True)) == []
