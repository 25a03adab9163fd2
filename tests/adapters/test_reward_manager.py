"""The reward manager: R by phase and ablation, and what it posts to the skill pool."""

import asyncio
from types import SimpleNamespace

import pytest
import torch

import recipe.arise.reward_manager as reward_manager_module
from recipe.arise.arise_config import ARISEConfig
from recipe.arise.reward_manager import ARISERewardManager


class FakeTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "so the answer is \\boxed{3}"


class FakePool:
    def __init__(self):
        self.posted = []

        async def record(obs):
            self.posted.append(obs)

        self.record = SimpleNamespace(remote=record)


def run(monkeypatch, cfg, fields, truth="3"):
    from verl import DataProto

    pool = FakePool()
    monkeypatch.setattr(reward_manager_module, "get_pool", lambda: pool)
    data = DataProto.from_dict(
        tensors={"responses": torch.tensor([[5, 6, 7]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 1]])},
        non_tensors={"reward_model": [{"ground_truth": truth}], "tool_extra_fields": [fields]},
    )
    manager = SimpleNamespace(arise=cfg, tokenizer=FakeTokenizer())

    async def go():
        manager.loop = asyncio.get_running_loop()
        return await ARISERewardManager.run_single(manager, data)

    return asyncio.run(go()), pool.posted


AIDED = {"arise_skill_id": "s1", "arise_phase": 2, "arise_selected": True, "arise_scores": [-1.0, -2.0]}
CONTROL = {"arise_phase": 2, "arise_control": True}


@pytest.mark.parametrize(
    "binary, fields, score", [(False, AIDED, 2.0), (False, CONTROL, 1.0), (True, AIDED, 1.0), (True, CONTROL, 1.0)]
)
def test_binary_reward_changes_only_the_reward_not_the_managers_phase(monkeypatch, binary, fields, score):
    """Ablation (a): R is binary, but the trajectory is still a Phase II one (selection, control
    arm), so the step's Phase II metrics (control rate, uplift) still count it."""
    cfg = ARISEConfig()
    cfg.reward.binary = binary
    out, posted = run(monkeypatch, cfg, fields)
    assert out["reward_score"] == score
    assert posted[0]["phase"] == 2 and posted[0]["control"] == bool(fields.get("arise_control"))
    info = out["reward_extra_info"]
    assert info["skill_used"] == float("arise_skill_id" in fields)
    assert info["skill_scored"] == float("arise_scores" in fields)


def test_phase_one_is_binary(monkeypatch):
    out, posted = run(monkeypatch, ARISEConfig(), {**AIDED, "arise_phase": 1})
    assert out["reward_score"] == 1.0 and posted[0]["phase"] == 1
