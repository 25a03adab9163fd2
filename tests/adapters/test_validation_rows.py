"""Validation is a flag on each row (recipe/arise/adapters/validation_rows.py), not a mode of the trainer.

verl's async trainers keep generating training rollouts while the trainer validates; a training
sample and a validation sample served then are each treated by their own flag (phase, epsilon,
observation), whatever else the replica says. The flag reaches the agent loop's run arguments and
the reward manager through verl's own plumbing (pinned below against verl's source).
"""

import asyncio
import copy
import inspect
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from skill_layer_host import skill_layer
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.utils.dataset.rl_dataset import collate_fn

import recipe.arise.adapters.reward_manager as reward_manager_module
import recipe.arise.adapters.rollout_failures as failures_module
import recipe.arise.adapters.skill_layer as skill_layer_module
from recipe.arise.adapters.reward_manager import ARISERewardManager
from recipe.arise.adapters.rollout_failures import failure_record
from recipe.arise.adapters.skill_layer import arise_config
from recipe.arise.adapters.validation_rows import VALIDATE_FIELD, FlaggedValLoader, is_validation_sample
from recipe.arise.core.skill import load_seed_skills
from recipe.arise.core.trajectory import TrajectoryInfo

CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(load_seed_skills(), start=1)]
MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]
CONFIG = OmegaConf.create({"arise": {"phase1_steps": 5}})  # step 3: Phase I for a training sample


async def _ready(value):
    return value


class ValidatingReplica:
    """The replica as agent loops read it while the trainer validates: its snapshot still says
    "val" (what the trainer's old global switch published during validation)."""

    def __init__(self):
        self.snapshot = SimpleNamespace(remote=lambda: _ready({"version": 3, "cache": CACHE, "mode": "val"}))
        self.posted = []

        async def record(observation, trace=None):
            self.posted.append(observation)

        self.record = SimpleNamespace(remote=record)


def test_a_training_and_a_validation_sample_served_together_are_each_treated_by_their_own_flag(monkeypatch):
    replica = ValidatingReplica()
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: replica)
    layer = skill_layer(server=None)
    layer.host.config = CONFIG
    train = {"raw_prompt": MESSAGES, "uid": "t", "session_id": 1, "global_steps": 3}
    val = {**train, "uid": "v", VALIDATE_FIELD: True}

    async def both():
        return await asyncio.gather(layer.prepare(train), layer.prepare(val))

    monkeypatch.setattr(skill_layer_module.SkillLayer, "select", no_selection)
    train_plan, val_plan = asyncio.run(both())
    assert (train_plan.info.validate, train_plan.info.phase) == (False, 1)  # a training sample of step 3
    assert (val_plan.info.validate, val_plan.info.phase) == (True, 2)  # validation selects in Phase II

    # the reward manager observes the training trajectory only, by the row's own flag
    monkeypatch.setattr(reward_manager_module, "get_replica", lambda: replica)
    monkeypatch.setattr(failures_module, "get_replica", lambda: replica)
    for plan, row in ((train_plan, train), (val_plan, val)):
        reward(plan.info, row)
    assert [o.uid for o in replica.posted] == ["t"]


async def no_selection(self, cfg, snapshot, messages, kwargs, validate, info):
    return None


def reward(info: TrajectoryInfo, row: dict) -> dict:
    """One trajectory through the reward manager's run_single, its row's fields as verl passes them."""
    from verl import DataProto

    non_tensors = {
        "reward_model": [{"ground_truth": "3"}],
        "tool_extra_fields": [info.to_extra_fields()],
        "raw_prompt": [MESSAGES],
        "extra_info": [{}],
        **{k: [v] for k, v in row.items() if k not in ("raw_prompt",)},
    }
    data = DataProto.from_dict(
        tensors={"responses": torch.tensor([[5, 6, 7]]), "attention_mask": torch.ones(1, 5, dtype=torch.long)},
        non_tensors={k: np.array(v, dtype=object) for k, v in non_tensors.items()},
    )
    manager = object.__new__(ARISERewardManager)
    manager.arise = arise_config(CONFIG)
    manager.tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "\\boxed{3}")

    async def go():
        manager.loop = asyncio.get_running_loop()
        return await ARISERewardManager.run_single(manager, data)

    return asyncio.run(go())


def test_the_flag_is_read_strictly_and_a_missing_flag_is_a_training_row():
    assert is_validation_sample({}) is False
    assert is_validation_sample({VALIDATE_FIELD: True}) and is_validation_sample({VALIDATE_FIELD: np.bool_(True)})
    with pytest.raises(ValueError, match=VALIDATE_FIELD):
        is_validation_sample({VALIDATE_FIELD: "yes"})
    # a failure record says which kind of row failed, and never raises over a bad flag
    error = RuntimeError("engine died")
    assert failure_record(error, {"uid": "v", VALIDATE_FIELD: True})["mode"] == "val"
    assert failure_record(error, {"uid": "t", VALIDATE_FIELD: "yes"})["mode"] == "train"


def test_the_validation_loader_flags_every_row_and_stays_verls_loader():
    rows = [{"raw_prompt": MESSAGES, "index": i, "input": torch.zeros(2)} for i in range(5)]
    inner = StatefulDataLoader(dataset=rows, batch_size=2, collate_fn=collate_fn, shuffle=False)
    loader = FlaggedValLoader(inner)
    batches = list(loader)
    assert len(loader) == len(inner) == 3 and loader.batch_size == 2
    assert [list(b[VALIDATE_FIELD]) for b in batches] == [[True, True], [True, True], [True]]
    assert all(b[VALIDATE_FIELD].dtype == object for b in batches)  # verl: a NonTensorStack, one bool per row
    clash = FlaggedValLoader(StatefulDataLoader(dataset=[{VALIDATE_FIELD: 1}], batch_size=1, collate_fn=collate_fn))
    with pytest.raises(ValueError, match="rename"):
        list(clash)
    assert copy.copy(loader)._inner is inner  # a copy (no _inner while it is built) does not recurse


def test_verl_hands_a_rows_non_tensor_field_to_the_agent_loop_and_the_reward_manager(monkeypatch):
    """verl 0.9.1: ``_validate`` iterates ``self.val_dataloader`` into ``tu.get_tensordict``; the v1
    worker gives each row's non-tensor fields to ``_run_prompt`` (then ``run(**kwargs)``), and the
    reward computation puts the run arguments into the reward item's ``non_tensor_batch``."""
    import verl.trainer.ppo.v1.agent_loop_tq as tq_module
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils import tensordict_utils as tu

    validate_src = inspect.getsource(PPOTrainer._validate)
    assert "for batch_dict in self.val_dataloader:" in validate_src and "tu.get_tensordict(batch_dict)" in validate_src
    score_src = inspect.getsource(AgentLoopWorker._compute_score)
    assert "**{k: np.array([v] * n) for k, v in kwargs.items()}" in score_src

    rows = [{"raw_prompt": MESSAGES, "index": i} for i in range(2)]
    (batch_dict,) = list(FlaggedValLoader(StatefulDataLoader(dataset=rows, batch_size=2, collate_fn=collate_fn)))
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", 4)
    tu.assign_non_tensor_data(batch, "validate", True)
    seen = []

    async def run_prompt(prompt, sampling_params, trajectory, trace=False):
        seen.append(prompt)

    worker_cls = tq_module.AgentLoopWorkerTQ.__ray_metadata__.modified_class
    rollout = SimpleNamespace(
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        calculate_log_probs=False,
        val_kwargs=SimpleNamespace(top_p=1.0, top_k=-1, temperature=0.0),
        agent=SimpleNamespace(default_agent_loop="arise_agent"),
    )
    worker = SimpleNamespace(
        config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout)),
        _run_prompt=run_prompt,
        background_tasks=set(),
    )

    async def go():
        await worker_cls.generate_sequences(worker, batch)
        await asyncio.sleep(0)

    asyncio.run(go())
    assert [p[VALIDATE_FIELD] for p in seen] == [True, True] and all(is_validation_sample(p) for p in seen)


def test_the_arise_trainers_flag_verls_validation_loader(monkeypatch):
    """Every registered ARISE trainer wraps the validation loader verl's ``_init_dataloader`` builds,
    and leaves the training loader alone."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from recipe.arise.adapters.trainers import ARISEColocateAsyncTrainer, ARISETrainer

    def init_dataloader(self):
        self.train_dataloader, self.val_dataloader = "train loader", "val loader"

    monkeypatch.setattr(PPOTrainer, "_init_dataloader", init_dataloader)
    for cls in (ARISETrainer, ARISEColocateAsyncTrainer):
        trainer = object.__new__(cls)  # no verl set-up: what _init_dataloader touches
        trainer._init_dataloader()
        assert isinstance(trainer.val_dataloader, FlaggedValLoader) and trainer.val_dataloader._inner == "val loader"
        assert trainer.train_dataloader == "train loader"
