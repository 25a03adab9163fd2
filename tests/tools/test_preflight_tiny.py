"""The CPU smoke run on the user's own data, and its preflight run on the script itself
(``python -m recipe.arise.tools.preflight run_scripts/cpu_smoke_arise.sh``, where the tiny assets
are a placeholder until the launch builds or takes them): the user's TRAIN_FILES / VAL_FILES are
used, their prompt lengths are checked with the tiny model's tokenizer (the cached assets), and an
earlier run in the output folder is not reported as resumed with other settings because of the
placeholder."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.arise.tools import preflight
from recipe.arise.tools.preflight_common import TINY_PLACEHOLDER
from recipe.arise.tools.preflight_data import check_data_rows
from recipe.arise.tools.preflight_run_folder import check_resume, record_launch
from recipe.arise.tools.preflight_tiny import cache_folder, resolve_placeholder

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "run_scripts" / "cpu_smoke_arise.sh"


def _env(**extra) -> dict:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "USER")}
    return {**keep, "PYTHON": sys.executable, **extra}


def _rows(path: Path, questions: list[str]) -> Path:
    import pandas as pd

    rows = [
        {
            "data_source": "mine",
            "prompt": [{"role": "user", "content": q}],
            "reward_model": {"style": "rule", "ground_truth": "2"},
        }
        for q in questions
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_the_users_data_files_are_used(tmp_path):
    own = {"TRAIN_FILES": "mine/train.parquet", "VAL_FILES": "['/data/a.parquet','/data/b.parquet']"}
    env = _env(TINY_DIR="/tmp/t", OUT_DIR=str(tmp_path / "out"), **own)
    _, overrides = preflight.script_overrides(SCRIPT, env=env)
    assert f"data.train_files={os.getcwd()}/mine/train.parquet" in overrides  # absolute: Ray workers' cwd differs
    assert "data.val_files=['/data/a.parquet','/data/b.parquet']" in overrides
    assert "actor_rollout_ref.model.path=/tmp/t/model" in overrides  # the tiny model still
    _, overrides = preflight.script_overrides(SCRIPT, env=_env(TINY_DIR="/tmp/t", OUT_DIR=str(tmp_path / "out")))
    assert "data.train_files=/tmp/t/data/train.parquet" in overrides  # no data given: the tiny assets'


@pytest.fixture
def tiny_cache(tmp_path, monkeypatch):
    """The default tiny assets in a cache of the test's own (ARISE_CACHE), with the tokenizer only."""
    from recipe.arise.cpu import tiny

    monkeypatch.setenv("ARISE_CACHE", str(tmp_path / "cache"))
    folder = cache_folder("recipe.arise.cpu.tiny")
    (folder / "model").mkdir(parents=True)
    tiny.build_tokenizer(folder / "model", ["1 + 1 = 2", "Put the final answer within \\boxed{}."] * 20)
    (folder / "tiny_assets.json").write_text(json.dumps({"model": str(folder / "model")}))
    return folder


def test_cache_folder_is_where_the_launch_takes_the_assets(tmp_path, monkeypatch):
    from recipe.arise.cpu import asset_cache, tiny, tiny_tool

    monkeypatch.setenv("ARISE_CACHE", str(tmp_path))
    targets = []
    monkeypatch.setattr(asset_cache, "build_cached", lambda target, build: targets.append(target) or target)
    monkeypatch.setattr(tiny, "build_cached", asset_cache.build_cached)
    assert tiny.cached_assets() == cache_folder("recipe.arise.cpu.tiny")
    assert tiny_tool.cached_assets() == cache_folder("recipe.arise.cpu.tiny_tool")


def test_the_users_prompt_lengths_are_checked_with_the_tiny_tokenizer(tmp_path, tiny_cache):
    """No TINY_DIR: the placeholder is resolved to the cached assets, whose tokenizer counts the
    user's prompts (160 tokens at most in the CPU run, which refuses longer ones at load)."""
    train = _rows(tmp_path / "train.parquet", ["What is 1 + 1?", "1 + 1 = ? " * 200])
    val = _rows(tmp_path / "val.parquet", ["What is 1 + 1?"])
    env = _env(OUT_DIR=str(tmp_path / "out"), TRAIN_FILES=str(train), VAL_FILES=str(val))
    env["ARISE_CACHE"] = os.environ["ARISE_CACHE"]
    entry, overrides = preflight.script_overrides(SCRIPT, env=env)
    assert any(TINY_PLACEHOLDER in o for o in overrides)  # printing the overrides built nothing
    overrides, found = resolve_placeholder(overrides)
    assert [f.level for f in found] == ["OK"] and str(tiny_cache) in found[0].what
    assert f"actor_rollout_ref.model.path={tiny_cache}/model" in overrides
    findings = check_data_rows(preflight.compose(entry, overrides))
    errors = [f.what for f in findings if f.level == "ERROR"]
    assert len(errors) == 1 and "1 unusable data row(s)" in errors[0] and "in 3 rows" in errors[0], errors
    assert "train.parquet" in errors[0] and "tokens" in errors[0]


def test_unbuilt_assets_are_said_to_be_built_at_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("ARISE_CACHE", str(tmp_path / "empty"))
    overrides = [f"actor_rollout_ref.model.path={TINY_PLACEHOLDER}/recipe.arise.cpu.tiny/model"]
    same, found = resolve_placeholder(overrides)
    assert same == overrides and [f.level for f in found] == ["INFO"] and "not built yet" in found[0].what


def test_no_false_resume_error_against_the_placeholder(tmp_path, monkeypatch):
    """The default output folder holds an earlier launch (its real tiny model path recorded); the
    preflight of the script, its assets not built, must not call the placeholder a changed model."""
    monkeypatch.setenv("ARISE_CACHE", str(tmp_path / "empty"))
    out = tmp_path / "outputs" / "cpu_smoke"
    entry, overrides = preflight.script_overrides(SCRIPT, env=_env(OUT_DIR=str(out)))
    cfg = preflight.compose(entry, overrides)
    assert str(cfg.actor_rollout_ref.model.path).startswith(TINY_PLACEHOLDER + "/")
    earlier = OmegaConf.create(OmegaConf.to_container(cfg))
    earlier.actor_rollout_ref.model.path = str(tmp_path / "cache" / "tiny-qwen3-0123" / "model")
    record_launch(earlier)  # what the earlier launch's preflight recorded
    root = Path(cfg.trainer.default_local_dir)
    (root / "global_step_2").mkdir()
    (root / "latest_checkpointed_iteration.txt").write_text("2")
    findings = check_resume(cfg)
    assert not [f.line() for f in findings if f.level == "ERROR"], [f.line() for f in findings]
    assert any("actor_rollout_ref.model.path not compared" in f.what for f in findings)
    cfg.arise.phase1_steps = 7  # a real change is still an ERROR
    assert [f for f in check_resume(cfg) if f.level == "ERROR" and "arise.phase1_steps" in f.what]
