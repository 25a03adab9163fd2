"""Rollout failures (recipe/arise/adapters/rollout_failures.py): under verl's V1 agent-loop worker an
exception in a session fails its query group and drops the session's trajectory. The ARISE loops
record the exception (traceback and all) for the trainer and raise it again; the trainer counts the
failed groups of each sampled batch (``arise/rollout_failures``, the console line) and stops on a
programming error, with its traceback, or on more than ``arise.max_failed_group_share`` failed
groups; the agent loop is checked at start-up (a loop of your own through ``with_skills`` included).
"""

import asyncio
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from skill_layer_host import build_loop

import recipe.arise.adapters.rollout_failures as failures_module
import recipe.arise.adapters.skill_layer as skill_layer_module
from recipe.arise.adapters.library_replica import LibraryReplica
from recipe.arise.adapters.replay_sampler import RecordingSampler as _RecordingSampler
from recipe.arise.adapters.replay_sampler import RefillLimit
from recipe.arise.adapters.rollout_failures import FailureTally, RolloutFailure, check_failures
from recipe.arise.adapters.skill_layer import arise_config, check_agent_loop
from recipe.arise.adapters.trainer_metrics import console_line
from recipe.arise.adapters.trainers import ARISETrainer
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.skill import load_seed_skills

DOC = Path(__file__).resolve().parents[2] / "docs" / "agent_loops.md"
CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(load_seed_skills(), start=1)]
MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]


def trainer_config(**selection):
    selection = {"epsilon": 0.0, "use_gate": False, "control_share": 0.0, **selection}
    rollout = {"n": 2, "val_kwargs": {"n": 1}, "prompt_length": 1024, "response_length": 64}
    arise = {"phase1_steps": 0, "selection": selection}
    return OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "arise": arise})


def build(cls, tokenizer, config):
    """An agent loop as verl's worker builds it, for a text-only Qwen3 run (no engine is reached)."""
    return build_loop(cls, tokenizer, None, config)


def run(loop, uid, session=1):
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}
    return loop.run(params, raw_prompt=MESSAGES, uid=uid, session_id=session, global_steps=3)


def docs_example() -> dict:
    """docs/agent_loops.md's example loop of your own, executed as written."""
    namespace: dict = {}
    exec(compile(re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1), str(DOC), "exec"), namespace)
    return namespace


class Replica:
    """The library replica as the agent loops reach it (``.remote`` awaitable), backed by the real
    :class:`LibraryReplica`."""

    def __init__(self):
        self.actor = LibraryReplica()
        snapshot = {"version": 1, "cache": CACHE, "mode": "train"}
        self.snapshot = SimpleNamespace(remote=lambda: _ready(snapshot))
        self.record_failure = SimpleNamespace(remote=lambda f: _ready(self.actor.record_failure(f)))


async def _ready(value):
    return value


@pytest.fixture()
def tokenizer(tmp_path_factory):
    from recipe.arise.cpu.tiny import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("tok"), [MESSAGES[0]["content"], *(t for _, t in CACHE)])


def _broken_scoring(monkeypatch, error):
    async def broken(self, *args, **kwargs):
        raise error

    monkeypatch.setattr(skill_layer_module.SkillLayer, "score_group", broken)


# --------------------------------------------------------------------------- the agent loops record


def test_a_programming_error_in_a_users_loop_is_recorded_with_its_traceback_and_raised(tokenizer, monkeypatch):
    replica = Replica()
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: replica)
    monkeypatch.setattr(failures_module, "get_replica", lambda: replica)
    _broken_scoring(monkeypatch, TypeError("score_group() got an unexpected keyword"))
    example = docs_example()

    async def go():
        loop = build(example["ARISEEchoLoop"], tokenizer, trainer_config())
        return await run(loop, uid="q7", session=1)

    with pytest.raises(TypeError):  # verl fails the group as before
        asyncio.run(go())
    (record,) = replica.actor.drain_failures()
    assert record["uid"] == "q7" and record["session"] == 1 and record["programming"] and record["mode"] == "train"
    assert record["error"].startswith("TypeError: score_group()") and "in broken" in record["traceback"]


def test_the_single_turn_loop_records_too_and_an_engine_error_is_not_a_programming_error(tokenizer, monkeypatch):
    from recipe.arise.adapters.agent_loop import ARISEAgentLoop

    replica = Replica()
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: replica)
    monkeypatch.setattr(failures_module, "get_replica", lambda: replica)
    _broken_scoring(monkeypatch, RuntimeError("engine died"))

    async def go():
        return await run(build(ARISEAgentLoop, tokenizer, trainer_config()), uid="q8")

    with pytest.raises(RuntimeError):
        asyncio.run(go())
    (record,) = replica.actor.drain_failures()
    assert record["uid"] == "q8" and not record["programming"]


def test_the_replica_keeps_programming_errors_when_full():
    replica = LibraryReplica()
    for i in range(30):
        replica.record_failure({"uid": str(i), "programming": False})
    replica.record_failure({"uid": "bug", "programming": True})
    kept = replica.drain_failures()
    assert len(kept) == 20 and kept[-1]["uid"] == "bug" and replica.drain_failures() == []


# --------------------------------------------------------------------------- the trainer counts and stops


def test_failed_groups_and_dropped_trajectories_are_counted_from_verls_keys():
    tally = FailureTally()
    # verl's keys {uid}_{session}_{index}: a complete group, one that lost a session, one that lost all
    keys = ["a_0_0", "a_1_0", "b_0_0", "b_0_1"]
    assert tally.add(keys, groups=3, n=2) == (2, 3)
    assert tally.add(["c_0_0", "c_1_0"], groups=1, n=2) == (0, 0)
    assert (tally.groups, tally.failed, tally.dropped) == (4, 2, 3)


def test_the_trainers_sampler_tallies_each_partition():
    batch = SimpleNamespace(keys=["u1_0_0", "u1_1_0", "u2_0_0"], tags=[{}] * 3, partition_id="train")
    inner = SimpleNamespace(sample=lambda **kw: (batch, {}))
    rollout = OmegaConf.create({"n": 2, "val_kwargs": {"n": 1}})
    sampler = _RecordingSampler(inner, rollout)
    sampler.sample(global_steps=1, partition_id="train", batch_size=2)
    sampler.sample(global_steps=1, partition_id="val", batch_size=3)
    assert (sampler.failures["train"].failed, sampler.failures["train"].dropped) == (1, 1)
    assert (sampler.failures["val"].failed, sampler.failures["val"].dropped) == (1, 1)


class _RefillingBuffer:
    """verl's ReplayBuffer as dynamic sampling drives it when every group gets one reward: each poll
    drops the finished groups and asks the trainer's refill_fn for as many again, without end."""

    def __init__(self):
        self.refill_fn = lambda n: self.submitted.append(n)
        self.submitted = []

    def sample(self, global_steps, partition_id, batch_size):
        for _ in range(1000):  # verl's loop has no bound
            self.refill_fn(batch_size)
        return SimpleNamespace(keys=[], tags=[], partition_id=partition_id), {}


def test_endless_refills_stop_the_run_saying_why():
    rollout = OmegaConf.create({"n": 2, "val_kwargs": {"n": 1}})
    buffer = _RefillingBuffer()
    sampler = _RecordingSampler(buffer, rollout, max_refill_batches=3)
    with pytest.raises(
        RefillLimit, match=r"16 query groups were refilled to sample one batch of 4.*max_refill_batches=3"
    ):
        sampler.sample(global_steps=1, partition_id="train", batch_size=4)
    assert sum(buffer.submitted) == 12  # the refill over the bound is not submitted
    unbounded = _RecordingSampler(_RefillingBuffer(), rollout, max_refill_batches=0)
    unbounded.sample(global_steps=1, partition_id="train", batch_size=4)  # 0: verl's behaviour
    assert unbounded.refilled == unbounded.refilled_step == 4000
    with pytest.raises(ValueError, match=r"arise\.max_refill_batches must be >= 0"):
        ARISEConfig.from_dict({"max_refill_batches": -1})


def test_a_recorded_programming_error_stops_the_run_with_its_traceback():
    tally = FailureTally(groups=64, failed=1, dropped=1)
    record = {"uid": "q", "error": "TypeError: bad", "programming": True, "traceback": "Traceback ...\nTypeError: bad"}
    with pytest.raises(RolloutFailure, match=r"(?s)programming error.*step 3.*Traceback \.\.\.\nTypeError: bad"):
        check_failures(tally, [record], max_share=1.0, where="step 3")


def test_more_than_the_share_of_failed_groups_stops_the_run(caplog):
    record = {"uid": "q", "error": "RuntimeError: tool", "programming": False, "traceback": "tb"}
    with pytest.raises(RolloutFailure, match=r"2 of 10 query groups.*max_failed_group_share=0\.1"):
        check_failures(FailureTally(groups=10, failed=2, dropped=3), [record], 0.1, "step 1")
    with caplog.at_level(logging.WARNING):
        check_failures(FailureTally(groups=10, failed=1, dropped=1), [], 0.1, "step 1")  # at the share: a warning
    assert "1 of 10 query groups failed" in caplog.text
    check_failures(FailureTally(groups=10), [], 0.0, "step 1")  # none failed: nothing
    assert ARISEConfig().max_failed_group_share == 0.1
    with pytest.raises(ValueError, match="max_failed_group_share"):
        ARISEConfig.from_dict({"max_failed_group_share": 1.5})


def _trainer(records, failed, groups=4, max_share=0.1):
    trainer = object.__new__(ARISETrainer)
    trainer.arise = ARISEConfig.from_dict({"max_failed_group_share": max_share})
    trainer.global_steps, trainer.library, trainer._val_failures = 2, None, None
    trainer.library_replica = SimpleNamespace(drain_failures=SimpleNamespace(remote=lambda: records))
    trainer.replay_buffer = SimpleNamespace(
        failures={"train": FailureTally(groups, failed, failed), "val": FailureTally()},
        last_train_batch=None,
        refilled_step=5,  # groups dynamic sampling refilled in the step
    )
    return trainer


def test_the_trainer_stops_before_the_batch_trains(monkeypatch):
    monkeypatch.setattr("recipe.arise.adapters.trainer.ray", SimpleNamespace(get=lambda ref: ref))
    record = {"uid": "q", "error": "KeyError: 'raw_prompt'", "programming": True, "traceback": "tb: KeyError"}
    with pytest.raises(RolloutFailure, match="tb: KeyError"):
        ARISETrainer.on_sample_end(_trainer([record], failed=1, max_share=1.0))
    with pytest.raises(RolloutFailure, match="max_failed_group_share"):
        ARISETrainer.on_sample_end(_trainer([], failed=2))


def test_the_step_metrics_and_the_console_line_show_the_failed_groups(monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", lambda self, *a, **kw: None, raising=False)
    monkeypatch.setattr(ARISETrainer, "_extra_fields", lambda self, batch: [{}])  # a math batch
    trainer = _trainer([], failed=1, groups=16)
    trainer._arise_metrics, trainer.total_training_steps = {}, 5
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": False}}}})
    trainer.train_dataset = trainer.val_dataset = None
    trainer._val_failures = FailureTally(groups=8, failed=2)
    metrics = {}
    ARISETrainer._compute_metrics(trainer, None, metrics, {}, global_steps=2, epoch=0)
    assert metrics["arise/rollout_failures"] == 1.0 and metrics["arise/rollout_dropped"] == 1.0
    assert metrics["arise/val_rollout_failures"] == 2.0
    assert trainer.replay_buffer.failures["train"].groups == 0  # a fresh tally for the next step
    assert metrics["arise/refilled_groups"] == 5.0 and trainer.replay_buffer.refilled_step == 0
    # this trainer has no library (ARISE off, plain GRPO): every arise/* key it logs is one the verdict
    # knows as logged with ARISE on or off, else `--expect grpo` would FAIL a plain GRPO run
    from recipe.arise.tools import verdict

    assert not [k for k in metrics if k.startswith("arise/") and k not in verdict.RUN_KEYS], sorted(metrics)
    assert "| failed groups 1 |" in console_line(2, 5, metrics)


# --------------------------------------------------------------------------- start-up checks


def test_train_manager_with_a_users_loop_is_refused_at_start_up():
    cfg = arise_config(trainer_config(train_manager=True))
    with pytest.raises(ValueError, match=r"arise\.selection\.train_manager.*'arise_echo'"):
        check_agent_loop("arise_echo", cfg)  # docs/agent_loops.md's loop of your own, via with_skills
    check_agent_loop("arise_agent", cfg)
    check_agent_loop("arise_echo", arise_config(trainer_config()))


@pytest.mark.parametrize("loop", ["single_turn_agent", "tool_agent"])
def test_verls_own_loops_are_refused_with_arise_on(loop):
    with pytest.raises(ValueError, match=f"not '{loop}'"):
        check_agent_loop(loop, ARISEConfig())
    check_agent_loop(loop, ARISEConfig(enable=False))


# --------------------------------------------------------------------------- what verl does (pinned)


def test_verls_v1_worker_fails_the_group_and_keys_trajectories_by_uid_session_index(monkeypatch):
    """What :class:`FailureTally` reads: verl 0.9.1's ``AgentLoopWorkerTQ._run_prompt`` lets every
    session of a group settle, marks the group ``failure`` when one raised (raising nothing itself),
    and stores each trajectory under ``{uid}_{session}_{index}``."""
    import inspect

    import verl.trainer.ppo.v1.agent_loop_tq as tq_module

    worker_cls = tq_module.AgentLoopWorkerTQ.__ray_metadata__.modified_class
    tags, finished = [], []

    async def kv_put(key, partition_id, tag):
        tags.append((key, partition_id, tag["status"]))

    monkeypatch.setattr(tq_module.tq, "async_kv_put", kv_put)

    async def run_agent_loop(sampling_params, trajectory, trace, session_id, **prompt):
        if session_id == 1:
            raise TypeError("a bug in session 1")
        finished.append(session_id)

    rollout = SimpleNamespace(n=3, val_kwargs=SimpleNamespace(n=1))
    worker = SimpleNamespace(
        config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout)), _run_agent_loop=run_agent_loop
    )
    asyncio.run(worker_cls._run_prompt(worker, {"uid": "u1"}, {}, trajectory={"validate": False}))
    assert tags == [("u1", "train", "running"), ("u1", "train", "failure")] and sorted(finished) == [0, 2]
    assert 'f"{uid}_{session_id}_{i}"' in inspect.getsource(worker_cls._agent_loop_postprocess)


def test_the_trainer_refuses_to_log_an_undeclared_metric(monkeypatch):
    """Every arise/* key of a step is declared in recipe/arise/core/metrics.py: one that is not (a
    typo, a new metric nobody declared) stops the trainer at its first step, naming it."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from recipe.arise.core.metrics import UndeclaredMetric

    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", lambda self, *a, **kw: None, raising=False)
    monkeypatch.setattr(ARISETrainer, "_extra_fields", lambda self, batch: [{}])
    trainer = _trainer([], failed=0)
    trainer.total_training_steps = 5
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": False}}}})
    trainer.train_dataset = trainer.val_dataset = None
    trainer._arise_metrics = {"arise/skill_use": 0.5}  # the step's metrics from on_sample_end
    with pytest.raises(UndeclaredMetric, match=r"step 2: .*'arise/skill_use'"):
        ARISETrainer._compute_metrics(trainer, None, {}, {}, global_steps=2, epoch=0)
