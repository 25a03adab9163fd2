"""The files ARISE adds to a checkpoint survive a crash mid-save, and a damaged checkpoint is found
before the resume: the trainer names the unreadable file and how to resume the previous checkpoint,
and the preflight reads the checkpoint it will resume and names the last intact one."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from recipe.arise.core.library import SkillLibrary
from recipe.arise.tools import preflight
from recipe.arise.tools.preflight_run_folder import unreadable_files


# ------------------------------------------------------------------------------------------ the trainer
def _gate_trainer(global_steps=0, resume_from=None):
    from recipe.arise.adapters.trainers import ARISETrainer
    from recipe.arise.core.arise_config import ARISEConfig

    trainer = SimpleNamespace(arise=ARISEConfig.from_dict({"phase1_steps": 2}), global_steps=global_steps)
    trainer.config = SimpleNamespace(trainer=SimpleNamespace(resume_mode="resume_path", resume_from_path=resume_from))
    for name in ("_init_gate", "_gate_file", "_restore_gate", "_save_gate"):
        setattr(trainer, name, getattr(ARISETrainer, name).__get__(trainer))
    trainer._init_gate()
    return trainer


def test_a_gate_save_that_fails_part_way_leaves_the_previous_file(tmp_path):
    trainer = _gate_trainer()
    trainer._save_gate(str(tmp_path))
    before = (tmp_path / "gate.json").read_bytes()
    # a save that dies after writing part of the file (here: a value json cannot encode, at the end)
    trainer._gate.state = lambda: {"sigma": 2.0, "window": [0.5] * 5000 + [object()]}
    with pytest.raises(TypeError):
        trainer._save_gate(str(tmp_path))
    assert (tmp_path / "gate.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["gate.json"]  # no temp file left behind


def test_a_truncated_gate_file_names_itself_and_the_resume_command(tmp_path):
    folder = tmp_path / "global_step_6"
    (folder / "arise").mkdir(parents=True)
    (folder / "arise" / "gate.json").write_text('{"sigma": 1.5, "auto": tr')  # cut mid-save
    trainer = _gate_trainer(global_steps=6, resume_from=str(folder))
    with pytest.raises(RuntimeError) as raised:
        trainer._restore_gate()
    message = str(raised.value)
    assert str(folder / "arise" / "gate.json") in message and "JSONDecodeError" in message
    assert "trainer.resume_mode=resume_path" in message and f"trainer.resume_from_path={tmp_path}/" in message
    assert "latest_checkpointed_iteration.txt" in message


# ------------------------------------------------------------------------------------------ the preflight
@pytest.fixture(scope="module")
def base(paper_script_overrides):
    entry, overrides = paper_script_overrides
    return preflight.compose(entry, overrides)


def _torch_save(obj, path: Path) -> None:
    import torch

    torch.save(obj, path)


def _checkpoint(root: Path, step: int, cfg=None) -> Path:
    """A checkpoint as verl and the ARISE trainer write it (the actor's files tiny; the step's config: cfg)."""
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    _torch_save({"w": list(range(100))}, folder / "actor" / "model_world_size_1_rank_0.pt")
    _torch_save({"epoch": 0}, folder / "data.pt")
    SkillLibrary().save(folder / "arise" / "library.parquet")
    (folder / "arise" / "gate.json").write_text(json.dumps({"sigma": 1.2, "auto": True, "delta": 0.35}))
    pending = {"format": 1, "global_step": step, "observations": [{"uid": "q", "reward": 1.0, "correct": True}]}
    (folder / "arise" / "pending_observations.json").write_text(json.dumps(pending))
    if cfg is not None:
        OmegaConf.save(cfg, folder / "arise" / "config.yaml")
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _cfg(base, root: Path, **updates):
    cfg = copy.deepcopy(base)
    OmegaConf.update(cfg, "trainer.default_local_dir", str(root))
    for key, value in updates.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    return cfg


def test_an_intact_checkpoint_reads_clean(tmp_path, base):
    cfg = _cfg(base, tmp_path)
    folder = _checkpoint(tmp_path, 4, cfg)
    assert unreadable_files(folder, arise=True) == []
    assert [f.level for f in preflight.check_resume(cfg)] == ["INFO", "OK"]


@pytest.mark.parametrize(
    "damaged",
    [
        "arise/library.parquet",
        "arise/gate.json",
        "arise/pending_observations.json",
        "arise/config.yaml",
        "data.pt",
        "actor/model.pt",
    ],
)
def test_the_preflight_names_a_damaged_file_and_the_last_intact_checkpoint(tmp_path, base, damaged):
    root = tmp_path / "ckpt"
    cfg = _cfg(base, root)
    _checkpoint(root, 2, cfg)
    folder = _checkpoint(root, 4, cfg)
    path = folder / ("actor/model_world_size_1_rank_0.pt" if damaged == "actor/model.pt" else damaged)
    if damaged == "arise/config.yaml":
        path.write_text("arise: {enable: [true\n")  # cut mid-save
    else:
        _truncate(path)
    (error,) = [f for f in preflight.check_resume(cfg) if f.level == "ERROR"]
    assert str(path) in error.what and "global_step_4 is damaged" in error.what
    assert f"trainer.resume_mode=resume_path trainer.resume_from_path={root / 'global_step_2'}" in error.fix
    assert f"echo 2 > {root / 'latest_checkpointed_iteration.txt'}" in error.fix


def test_a_checkpoint_whose_actor_retention_removed_is_not_offered(tmp_path, base):
    root = tmp_path / "ckpt"
    older = _checkpoint(root, 2)
    for f in (older / "actor").iterdir():
        f.unlink()
    (older / "actor").rmdir()  # verl's retention (max_actor_ckpt_to_keep) removes actor/ only
    _truncate(_checkpoint(root, 4) / "arise" / "library.parquet")
    (error,) = [f for f in preflight.check_resume(_cfg(base, root)) if f.level == "ERROR"]
    assert "no earlier intact checkpoint" in error.fix and "trainer.resume_mode=disable" in error.fix


def test_the_library_is_checked_only_when_the_run_restores_it(tmp_path, base):
    root = tmp_path / "ckpt"
    _truncate(_checkpoint(root, 4) / "arise" / "library.parquet")
    restored = preflight.check_resume(_cfg(base, root))
    assert any(f.level == "ERROR" and "library.parquet" in f.what for f in restored)
    for off in ({"arise__enable": False}, {"arise__library__from_checkpoint": False}):
        assert all(f.level != "ERROR" for f in preflight.check_resume(_cfg(base, root, **off)))


@pytest.mark.parametrize("content", ["", "4\x00\x00", "7"], ids=["empty", "garbage", "missing-folder"])
def test_a_damaged_tracker_file_is_an_error_not_a_new_run(tmp_path, base, content):
    # verl's int() fails on a damaged tracker; a step without its folder makes verl start from 0
    root = tmp_path / "ckpt"
    _checkpoint(root, 2)
    (root / "latest_checkpointed_iteration.txt").write_text(content)
    (error,) = preflight.check_resume(_cfg(base, root))
    assert error.level == "ERROR" and "latest_checkpointed_iteration.txt" in error.what
    assert f"trainer.resume_from_path={root / 'global_step_2'}" in error.fix


def test_the_launch_record_is_written_atomically(tmp_path, base, monkeypatch):
    from recipe.arise.core import store

    root = tmp_path / "ckpt"
    preflight.record_launch(_cfg(base, root))
    before = (root / preflight.RUN_CONFIG).read_bytes()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.os, "fsync", full_disk)
    with pytest.raises(OSError):
        preflight.record_launch(_cfg(base, root, arise__selection__gate=0.25))
    assert (root / preflight.RUN_CONFIG).read_bytes() == before


# ------------------------------------------------------------------------------------- verl's tracker file
def test_an_interrupted_tracker_write_fails_loudly(tmp_path):
    """verl writes latest_checkpointed_iteration.txt with open(..., "w").write(...): a kill between
    the truncation and the write leaves it empty; its reader then raises at start-up (the next
    launch fails, it never resumes from a wrong folder nor starts over silently). A kill inside a save
    of the whole run: tests/e2e/test_faults_e2e.py."""
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    (tmp_path / "global_step_2").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("")
    with pytest.raises(ValueError):
        find_latest_ckpt_path(str(tmp_path))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_2")
