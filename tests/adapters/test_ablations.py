"""Each ablation of paper Table 2 switches off exactly its own mechanism, and leaves the other three on.

The four mechanisms, each probed where the run decides it: the hierarchical reward (the reward
manager), the policy's scoring of the cache (the skill layer asks the engine for log-probs), the
confidence gate (the skill layer rejects a flat score vector), the summary rollout O_{G+1} (the
trainer's per-batch Upload). The configs are built from the overrides run_scripts/arise.sh passes
for ``ABLATION=<name>``.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from skill_layer_host import skill_layer

import recipe.arise.adapters.reward_manager as reward_manager_module
from recipe.arise.adapters.library_replica import LibraryReplica
from recipe.arise.adapters.reward_manager import ARISERewardManager
from recipe.arise.adapters.trainer_metrics import StepState
from recipe.arise.adapters.trainers import ARISETrainer
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.skill import load_seed_skills
from recipe.arise.core.trajectory import TrajectoryInfo

QUERY = [{"role": "user", "content": "1+2?"}]
MECHANISMS = ("hierarchical_reward", "policy_scoring", "gate", "summary")
OFF = {
    None: set(),
    "binary_reward": {"hierarchical_reward"},
    "random_selection": {"policy_scoring", "gate"},  # ablation (b): a uniform pick, nothing to gate
    "no_summary": {"summary"},
    "no_gate": {"gate"},
}


def _ablation_overrides() -> dict[str, dict]:
    """ABLATION=<name> -> the arise.* overrides of run_scripts/arise.sh, as a nested section."""
    script = (Path(__file__).resolve().parents[2] / "run_scripts" / "arise.sh").read_text()
    out = {}
    for name, key, value in re.findall(r"^\s*(\w+)\) ABLATION_OVERRIDES=\(arise\.([\w.]+)=(\w+)\)", script, re.M):
        section, leaf = key.rsplit(".", 1)
        out[name] = {section: {leaf: value == "true"}}
    return out


def _config(ablation: str | None) -> ARISEConfig:
    base = {"selection": {"epsilon": 0.0, "control_share": 0.0}}  # deterministic probes
    for section, values in _ablation_overrides().get(ablation, {}).items():
        base.setdefault(section, {}).update(values)
    return ARISEConfig.from_dict(base)


# ------------------------------------------------------------------ the probes


def _reward_of_a_correct_aided_phase2_trajectory(monkeypatch, cfg) -> float:
    from verl import DataProto

    class Tok:
        def decode(self, ids, skip_special_tokens=True):
            return "so the answer is \\boxed{3}"

    async def record(obs, trace=None):
        pass

    monkeypatch.setattr(
        reward_manager_module, "get_replica", lambda: SimpleNamespace(record=SimpleNamespace(remote=record))
    )
    fields = {"arise_skill_id": "s1", "arise_phase": 2, "arise_selected": True, "arise_scores": [-1.0, -2.0]}
    data = DataProto.from_dict(
        tensors={"responses": torch.tensor([[5, 6, 7]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 1]])},
        non_tensors={
            "reward_model": [{"ground_truth": "3"}],
            "tool_extra_fields": [fields],
            "raw_prompt": [QUERY],
        },
    )
    manager = object.__new__(ARISERewardManager)  # no verl set-up: what run_single reads
    manager.arise, manager.tokenizer = cfg, Tok()

    async def go():
        manager.loop = asyncio.get_running_loop()
        return await ARISERewardManager.run_single(manager, data)

    return asyncio.run(go())["reward_score"]


_QUERY_IDS = itertools.count()
CACHE = [(f"s{i}", doc.to_json()) for i, doc in enumerate(load_seed_skills(None))]


def _select_on_flat_scores(cfg) -> tuple[int, TrajectoryInfo]:
    """One Phase II selection where every skill scores the same (max p = 1/5 < delta): returns the
    engine requests made and what the trajectory recorded."""
    requests = []

    class Server:
        async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
            requests.append(request_id)
            return SimpleNamespace(extra_fields={"prompt_logprobs": [[-1.0]] * len(prompt_ids)})

    layer = skill_layer(Server(), n=1)
    pool = LibraryReplica()
    # a fresh query id per probe: the layer scores a (query, library version) group once per process
    uid = f"q{next(_QUERY_IDS)}"
    pool.publish(1, CACHE)  # library version 1
    info = TrajectoryInfo(phase=2)
    asyncio.run(layer.select(cfg, pool.snapshot(), QUERY, {"uid": uid, "global_steps": 3}, False, info))
    return len(requests), info


def _summary_rollouts_started(cfg) -> bool:
    started = []
    trainer = SimpleNamespace(
        arise=cfg,
        global_steps=3,
        timing_raw={},
        _step_state=StepState(),
        _tau_plus_groups=lambda batch: [{"uid": "q", "success_rate": 0.5, "traces": [{"text": "t", "reward": 1.0}]}],
        _batch_budget=lambda: 1,
        _summary_rollouts=lambda chosen, step: started.append(chosen) or ([], {}),
        _exact_ig=lambda groups, step: ({}, 0),
    )
    ARISETrainer._arise_sample(trainer, batch=object())
    return bool(started)


def _mechanisms_on(monkeypatch, cfg) -> set[str]:
    on = set()
    if _reward_of_a_correct_aided_phase2_trajectory(monkeypatch, cfg) == 2.0:
        on.add("hierarchical_reward")
    requests, info = _select_on_flat_scores(cfg)
    if requests and info.scores:
        on.add("policy_scoring")
    if not info.selected and not info.gate_passed:  # a flat vector is rejected only by the gate
        on.add("gate")
    if _summary_rollouts_started(cfg):
        on.add("summary")
    return on


def test_arise_sh_has_the_four_ablations():
    assert set(_ablation_overrides()) == {"binary_reward", "random_selection", "no_summary", "no_gate"}


@pytest.mark.parametrize("ablation", list(OFF))
def test_each_ablation_switches_off_exactly_its_own_mechanism(monkeypatch, ablation):
    on = _mechanisms_on(monkeypatch, _config(ablation))
    assert on == set(MECHANISMS) - OFF[ablation], f"ABLATION={ablation}: mechanisms on {sorted(on)}"


def test_the_probes_can_tell_on_from_off(monkeypatch):
    # every mechanism off at once: each probe reports it off (the probes are not vacuous)
    cfg = ARISEConfig.from_dict(
        {
            "selection": {"epsilon": 0.0, "control_share": 0.0, "random": True, "use_gate": False},
            "reward": {"binary": True},
            "summary": {"enable": False},
        }
    )
    assert _mechanisms_on(monkeypatch, cfg) == set()
    assert np.isfinite(_config(None).selection.gate)
