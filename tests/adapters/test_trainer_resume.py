"""Resume in every trainer mode (recipe/arise/adapters/trainer_resume.py, docs/trainer_modes.md):
the library replica's observations not yet drained survive a checkpoint, and the groups verl
re-issues on resume are counted, their restored observations dropped.

The trainer runs its real ``_save_checkpoint`` / ``_load_checkpoint`` / ``_reissue_inflight_prompts``
with verl's base methods stubbed and the replica called in-process."""

from __future__ import annotations

import json
import math
import sys
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from recipe.arise.adapters import trainer_resume
from recipe.arise.adapters.library_replica import LibraryReplica
from recipe.arise.adapters.trainer_resume import PENDING_FILE, PendingObservationsError
from recipe.arise.adapters.trainers import ARISEColocateAsyncTrainer, ARISETrainer
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.observation import Observation
from recipe.arise.core.trajectory import TrajectoryInfo


class Local:
    """A LibraryReplica called the way the trainer calls the Ray actor (``method.remote(...)``)."""

    def __init__(self, inner: LibraryReplica | None = None):
        self.inner = inner or LibraryReplica()

    def __getattr__(self, name):
        return SimpleNamespace(remote=getattr(self.inner, name))


@pytest.fixture(autouse=True)
def in_process(monkeypatch):
    for module in ("recipe.arise.adapters.trainer", "recipe.arise.adapters.trainer_resume"):
        monkeypatch.setattr(f"{module}.ray", SimpleNamespace(get=lambda ref: ref))


def observation(uid: str, reward: float = 2.0, **trajectory) -> Observation:
    record = TrajectoryInfo(phase=2, skill_id="s000001", selected=True, gate_passed=True, scores=[-1.5, -2.0])
    for key, value in trajectory.items():
        setattr(record, key, value)
    return Observation(
        uid,
        reward,
        reward > 0,
        record,
        step=3,
        prompt_tokens=30,
        response_tokens=7,
        messages=[{"role": "user", "content": "1+1?"}],
        tool_selection=["python"],
        grader_error=None if reward == reward else "timeout",
    )


def verl_base(cls):
    """The verl v1 trainer a registered ARISE trainer puts ARISEHooks before."""
    return next(c for c in cls.__mro__ if c.__module__.startswith("verl."))


def _trainer(cls, tmp_path, step: int, replica: Local | None = None):
    trainer = object.__new__(cls)
    trainer.arise = ARISEConfig.from_dict({})
    trainer.config = OmegaConf.create(
        {
            "trainer": {
                "default_local_dir": str(tmp_path / "checkpoints"),
                "default_hdfs_dir": None,
                "resume_mode": "auto",
                "resume_from_path": None,
                "val_only": False,
            },
        }
    )
    trainer.global_steps, trainer._arise_metrics, trainer._arise_version = step, {}, 0
    trainer.library_replica = replica or Local()
    trainer._init_gate()
    return trainer


def _save(cls, tmp_path, monkeypatch, pending: list[Observation], step: int = 4):
    """A trainer of ``cls`` at ``step`` whose replica holds ``pending``, through its checkpoint save."""
    monkeypatch.setattr(verl_base(cls), "_save_checkpoint", lambda self: None)
    trainer = _trainer(cls, tmp_path, step)
    trainer.library = trainer._new_library()
    for o in pending:
        trainer.library_replica.inner.record(o)
    cls._save_checkpoint(trainer)
    return trainer


def _resume(cls, tmp_path, monkeypatch, step: int = 4):
    """A new trainer process resuming the checkpoint at ``step``: a fresh replica."""
    replica = Local()

    def base_load(self):
        self.global_steps = step

    monkeypatch.setattr(verl_base(cls), "_load_checkpoint", base_load)
    monkeypatch.setattr("recipe.arise.adapters.trainer.get_or_create_replica", lambda: replica)
    trainer = _trainer(cls, tmp_path, 0, replica)
    cls._load_checkpoint(trainer)
    return trainer


def test_undrained_observations_survive_a_checkpoint(tmp_path, monkeypatch, capsys):
    """colocate_async: groups finished ahead of their training step posted observations the next
    maintenance drains; a kill and a resume keep them (they were lost before: not saved)."""
    pending = [observation("q1"), observation("q1", 0.0, control=True, skill_id=""), observation("q2", float("nan"))]
    _save(ARISEColocateAsyncTrainer, tmp_path, monkeypatch, pending)
    saved = tmp_path / "checkpoints" / "global_step_4" / "arise" / PENDING_FILE
    assert saved.is_file() and len(json.loads(saved.read_text())["observations"]) == 3
    resumed = _resume(ARISEColocateAsyncTrainer, tmp_path, monkeypatch)
    back = resumed.library_replica.inner.drain()
    assert back[:2] == pending[:2]  # every field, the trajectory record whole
    assert back[2].uid == "q2" and math.isnan(back[2].reward) and back[2].grader_error == "timeout"
    assert resumed._arise_metrics["arise/restored_observations"] == 3.0
    assert "3 observation(s) not yet drained at step 4 restored" in capsys.readouterr().out


def test_under_sync_the_checkpoint_holds_no_pending_observations(tmp_path, monkeypatch):
    """sync: the step's maintenance drained every observation before the save (no rollout runs
    between them), so the file says none were pending and the resume restores none."""
    _save(ARISETrainer, tmp_path, monkeypatch, [])
    saved = tmp_path / "checkpoints" / "global_step_4" / "arise" / PENDING_FILE
    assert json.loads(saved.read_text()) == {"format": 1, "global_step": 4, "observations": []}
    resumed = _resume(ARISETrainer, tmp_path, monkeypatch)
    assert resumed.library_replica.inner.drain() == []
    assert resumed._arise_metrics["arise/restored_observations"] == 0.0


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "cannot read the pending observations"),
        ('{"format": 2, "observations": []}', "not a pending-observations file of format 1"),
        ('{"format": 1, "global_step": 3, "observations": []}', "written at global step 3, but the checkpoint is step"),
        ('{"format": 1, "global_step": 4, "observations": [{"uid": "q"}]}', r"observation 0: missing .*reward"),
        (
            '{"format": 1, "global_step": 4, "observations": [{"uid": "q", "reward": 1, "correct": true, "x": 1}]}',
            r"observation 0: unknown observation field\(s\) \['x'\]",
        ),
        (
            '{"format": 1, "global_step": 4, "observations": [{"uid": "q", "reward": 1, "correct": true, '
            '"trajectory": {"arise_nope": 1}}]}',
            r"observation 0: unknown ARISE trajectory field",
        ),
    ],
)
def test_a_bad_pending_file_stops_the_resume_naming_it(tmp_path, monkeypatch, content, match):
    _save(ARISEColocateAsyncTrainer, tmp_path, monkeypatch, [observation("q1")])
    saved = tmp_path / "checkpoints" / "global_step_4" / "arise" / PENDING_FILE
    saved.write_text(content)
    with pytest.raises(PendingObservationsError, match=match) as error:
        _resume(ARISEColocateAsyncTrainer, tmp_path, monkeypatch)
    assert str(saved) in str(error.value)


def test_a_checkpoint_without_the_file_restores_none_and_says_so(tmp_path, monkeypatch, caplog):
    import logging

    _save(ARISEColocateAsyncTrainer, tmp_path, monkeypatch, [observation("q1")])
    (tmp_path / "checkpoints" / "global_step_4" / "arise" / PENDING_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="recipe.arise.adapters.trainer_resume"):
        resumed = _resume(ARISEColocateAsyncTrainer, tmp_path, monkeypatch)
    assert f"holds no {PENDING_FILE}" in caplog.text
    assert resumed._arise_metrics["arise/restored_observations"] == 0.0


def _tq(monkeypatch, tags: dict[str, dict]):
    """verl's TransferQueue as ``_reissue_inflight_prompts`` reads it after a restore."""
    calls = []
    fake = SimpleNamespace(kv_list=lambda partition_id: calls.append(partition_id) or {partition_id: dict(tags)})
    monkeypatch.setitem(sys.modules, "transfer_queue", fake)
    return calls


def test_reissued_groups_are_counted_and_their_restored_observations_dropped(tmp_path, monkeypatch, capsys):
    """On resume verl deletes the partial trajectories of the groups in flight at the checkpoint and
    generates them again (a new run(), a new skill selection): counted, and the restored observations
    of the deleted trajectories dropped (the regenerated ones post theirs)."""
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    tags = {
        "qa": {"is_prompt": True, "status": "running"},  # one session had finished: its observation was saved
        "qa_0_0": {"is_prompt": False},
        "qb": {"is_prompt": True, "status": "pending"},
        "qc": {"is_prompt": True, "status": "finished"},  # restored as is, trained on: its observations stay
        "qc_0_0": {"is_prompt": False},
    }
    _tq(monkeypatch, tags)
    seen = []

    def verl_reissue(self, partition_id="train"):
        seen.append(list(self.library_replica.inner.pending()))  # verl generates after ARISE dropped them
        return 2

    monkeypatch.setattr(PPOTrainerColocateAsync, "_reissue_inflight_prompts", verl_reissue)
    trainer = _trainer(ARISEColocateAsyncTrainer, tmp_path, 5)
    trainer.library_replica.inner.restore([observation("qa"), observation("qc"), observation("qc")])
    assert ARISEColocateAsyncTrainer._reissue_inflight_prompts(trainer) == 2
    assert [o.uid for o in seen[0]] == ["qc", "qc"]
    assert trainer._arise_metrics == {"arise/reissued_groups": 2.0, "arise/reissued_observations_dropped": 1.0}
    from recipe.arise.tools import verdict  # logged with ARISE off too: no sign of ARISE for `--expect grpo`

    assert set(trainer._arise_metrics) <= verdict.RUN_KEYS
    out = capsys.readouterr().out
    assert "verl re-issues 2 query group(s) in flight at the checkpoint for step 5" in out
    assert "1 restored observation(s) of them dropped" in out


def test_under_sync_nothing_is_reissued(tmp_path, monkeypatch, capsys):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    calls = _tq(monkeypatch, {"qa": {"is_prompt": True, "status": "running"}})
    monkeypatch.setattr(PPOTrainerSync, "_reissue_inflight_prompts", lambda self, partition_id="train": 0)
    trainer = _trainer(ARISETrainer, tmp_path, 1)
    assert ARISETrainer._reissue_inflight_prompts(trainer) == 0
    assert calls == [] and trainer._arise_metrics["arise/reissued_groups"] == 0.0
    assert "re-issues" not in capsys.readouterr().out


def test_the_observation_record_round_trips_every_field():
    o = observation("q9", 1.0, max_prob=0.7, scoring_s=0.25)
    record = json.loads(json.dumps(trainer_resume.observation_record(o)))
    assert trainer_resume.observation_from_record(record) == o
    with pytest.raises(ValueError, match="correct must be true or false"):
        trainer_resume.observation_from_record({**record, "correct": 1})


def _maintain(trainer, tmp_path, monkeypatch) -> list[Observation]:
    """The trainer's real maintenance (``_arise_maintain``); returns the observations it drained."""
    from recipe.arise.adapters.trainer_metrics import StepState

    trainer.timing_raw = {}  # the library log goes under the checkpoints folder
    trainer._maintained_step, trainer._step_state = None, StepState()
    trainer.config.algorithm = {"norm_adv_by_std_in_grpo": True}
    replica, drained = trainer.library_replica.inner, []
    drain = replica.drain
    monkeypatch.setattr(replica, "drain", lambda *a, **k: drained.extend(drain(*a, **k)) or list(drained))
    trainer._arise_maintain()
    assert trainer._arise_metrics["arise/trajectories"] == len(drained)
    return drained


def test_a_partly_finished_group_in_flight_at_a_checkpoint_counts_once(tmp_path, monkeypatch):
    """colocate_async: at step 4's maintenance group qa had one of its two sessions finished (its
    observation posted) and was still running at the checkpoint; on resume verl re-issues qa and its
    two regenerated sessions post theirs. UPDATE sees qa's two trajectories once: the finished
    session stays in the replica while qa runs (saved pending, dropped at the re-issue), not drained
    at step 4 and then regenerated (3 of qa's observations applied before)."""
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    cls = ARISEColocateAsyncTrainer
    tags = {"qa": {"is_prompt": True, "status": "running"}, "qa_0_0": {"is_prompt": False}}
    tags |= {"qc": {"is_prompt": True, "status": "finished"}, "qc_0_0": {}, "qc_1_0": {}}
    _tq(monkeypatch, tags)
    monkeypatch.setattr(verl_base(cls), "_save_checkpoint", lambda self: None)
    trainer = _trainer(cls, tmp_path, 4)
    trainer.library = trainer._new_library()
    for o in (observation("qa"), observation("qc"), observation("qc", 0.0, control=True, skill_id="")):
        trainer.library_replica.inner.record(o)
    first = _maintain(trainer, tmp_path, monkeypatch)
    cls._save_checkpoint(trainer)

    resumed = _resume(cls, tmp_path, monkeypatch)
    replica = resumed.library_replica.inner

    def verl_reissue(self, partition_id="train"):  # verl generates qa again: two new sessions post
        for o in (observation("qa", 1.0), observation("qa", 0.0, control=True, skill_id="")):
            replica.record(o)
        return 1

    monkeypatch.setattr(PPOTrainerColocateAsync, "_reissue_inflight_prompts", verl_reissue)
    resumed.global_steps = 5  # verl's fit() steps on before it re-issues
    assert cls._reissue_inflight_prompts(resumed) == 1
    tags["qa"]["status"] = "finished"
    second = _maintain(resumed, tmp_path, monkeypatch)
    assert sum(o.uid == "qa" for o in first + second) == 2  # qa's two trajectories, each once
    assert [o.uid for o in first] == ["qc", "qc"]
    assert [(o.uid, o.reward) for o in second] == [("qa", 1.0), ("qa", 0.0)]  # the regenerated pair, whole
    assert resumed._arise_metrics["arise/restored_observations"] == 1.0
    assert resumed._arise_metrics["arise/reissued_observations_dropped"] == 1.0


def test_the_resumed_library_keeps_its_version(tmp_path, monkeypatch):
    """The library version steps once per maintenance: an uninterrupted run publishes version 1 at
    start and N + 1 after step N's. Resumed at step 4 it publishes version 5, so the trajectories verl
    restored from the checkpoint (which read versions up to 5 before the kill) are not read as newer
    than the library (the CPU run's first resumed step logged arise/library_staleness -1)."""
    from recipe.arise.adapters.trainer_staleness import StalenessTally

    _save(ARISEColocateAsyncTrainer, tmp_path, monkeypatch, [])
    resumed = _resume(ARISEColocateAsyncTrainer, tmp_path, monkeypatch)
    assert resumed.library_replica.inner.snapshot()["version"] == resumed._arise_version == 5
    tally = StalenessTally()  # step 5 trains a group finished after step 4's maintenance
    tally.add([{"max_global_steps": 4}], [TrajectoryInfo(library_version=5)], 5, resumed._arise_version)
    assert tally.metrics()["arise/library_staleness/mean"] == 0.0
    fresh = _trainer(ARISEColocateAsyncTrainer, tmp_path / "fresh", 0)  # no checkpoint: version 1
    monkeypatch.setattr(verl_base(ARISEColocateAsyncTrainer), "_load_checkpoint", lambda self: None)
    monkeypatch.setattr("recipe.arise.adapters.trainer.get_or_create_replica", lambda: fresh.library_replica)
    ARISEColocateAsyncTrainer._load_checkpoint(fresh)
    assert fresh.library_replica.inner.snapshot()["version"] == 1
