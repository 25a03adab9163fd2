"""The training's dataset (``recipe.arise.adapters.dataset``, verl's ``data.custom_cls``) refuses the
rows a run would take quietly, naming file, row and field, and counts the over-long prompts verl's
filter drops (console line, ``arise/rows_dropped``). Small parquet files in tmp_path."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from omegaconf import OmegaConf  # noqa: E402

from recipe.arise.adapters.dataset import ARISEDataset, DataRowError  # noqa: E402


def _row(content="What is 1 + 1 ?", truth="2"):
    prompt = [{"role": "user", "content": content}] if content is not None else []
    return {"data_source": "t", "prompt": prompt, "reward_model": {"style": "rule", "ground_truth": truth}}


def _parquet(path: Path, rows) -> str:
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def _config(tmp_path, **data):
    base = {
        "cache_dir": str(tmp_path / "cache"),
        "prompt_key": "prompt",
        "max_prompt_length": 40,
        "filter_overlong_prompts": True,
        "filter_overlong_prompts_workers": 1,
        "truncation": "error",
    }
    return OmegaConf.create({**base, **data})


@pytest.fixture
def load(tmp_path, tiny_chat_tokenizer):
    def build(files, **data):
        return ARISEDataset(data_files=files, tokenizer=tiny_chat_tokenizer, config=_config(tmp_path, **data))

    return build


def test_the_arise_config_loads_data_through_this_dataset():
    from verl.utils.dataset.rl_dataset import get_dataset_class

    from recipe.arise.tools import preflight

    cfg = preflight.compose("recipe.arise.adapters.main_arise", [])
    assert get_dataset_class(cfg.data) is ARISEDataset


def test_a_row_without_ground_truth_is_refused_with_file_row_and_field(tmp_path, load):
    good = _parquet(tmp_path / "good.parquet", [_row(), _row()])
    bad = _parquet(tmp_path / "train.parquet", [_row(), _row(truth=None), _row(truth="  ")])
    with pytest.raises(DataRowError) as error:
        load([good, bad])
    message = str(error.value)
    assert f"{bad} row 1: reward_model.ground_truth: missing" in message
    assert f"{bad} row 2: reward_model.ground_truth: empty" in message
    assert "good.parquet" not in message and "in 5 rows" in message


def test_a_file_without_reward_model_is_refused(tmp_path, load):
    path = _parquet(tmp_path / "train.parquet", [{"data_source": "t", "prompt": [{"role": "user", "content": "x"}]}])
    with pytest.raises(DataRowError, match=r"train\.parquet: reward_model\.ground_truth: no 'reward_model' column"):
        load([path])


def test_an_empty_prompt_is_refused(tmp_path, load):
    path = _parquet(tmp_path / "train.parquet", [_row(), _row(content="   "), _row(content=None)])
    with pytest.raises(DataRowError) as error:
        load([path])
    assert f"{path} row 1: prompt: every message's content is empty" in str(error.value)
    assert f"{path} row 2: prompt: no messages" in str(error.value)


def test_an_overlong_prompt_is_refused_when_not_filtered_and_truncation_is_error(tmp_path, load):
    long = " ".join(["word"] * 60)  # 60 + 6 template tokens > 40
    path = _parquet(tmp_path / "train.parquet", [_row(), _row(content=long)])
    with pytest.raises(DataRowError) as error:
        load([path], filter_overlong_prompts=False)
    assert f"{path} row 1: prompt: 66 tokens > data.max_prompt_length 40" in str(error.value)
    # truncation asked for: verl's agent loop truncates, as configured
    assert len(load([path], filter_overlong_prompts=False, truncation="left")) == 2


def test_filtered_overlong_prompts_are_counted_and_printed(tmp_path, load, capsys):
    path = _parquet(tmp_path / "train.parquet", [_row(), _row(content=" ".join(["word"] * 60)), _row()])
    dataset = load([path])
    assert len(dataset) == 2 and dataset.rows_dropped == 1
    assert f"[arise] data: 1 of 3 rows of {path} dropped" in capsys.readouterr().out
    clean = load([_parquet(tmp_path / "val.parquet", [_row()])])
    assert clean.rows_dropped == 0 and "[arise] data:" not in capsys.readouterr().out


def test_json_lines_files_are_checked_too(tmp_path, load):
    path = tmp_path / "train.jsonl"
    pd.DataFrame([_row(), _row(truth=None)]).to_json(path, orient="records", lines=True)
    with pytest.raises(DataRowError, match=r"train\.jsonl row 1: reward_model\.ground_truth: missing"):
        load([str(path)])


def test_the_trainer_logs_the_dropped_rows(monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from recipe.arise.adapters.rollout_failures import FailureTally
    from recipe.arise.adapters.trainers import ARISETrainer

    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", lambda self, *a, **kw: None, raising=False)
    monkeypatch.setattr(ARISETrainer, "_extra_fields", lambda self, batch: [{}])  # a math batch
    trainer = object.__new__(ARISETrainer)
    trainer._arise_metrics, trainer.library, trainer.total_training_steps = {}, None, 1
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": False}}}})
    trainer.train_dataset, trainer.val_dataset = SimpleNamespace(rows_dropped=3), SimpleNamespace(rows_dropped=1)
    trainer.replay_buffer, trainer._val_failures = (
        SimpleNamespace(failures={"train": FailureTally()}, refilled_step=0),
        None,
    )
    metrics = {}
    ARISETrainer._compute_metrics(trainer, None, metrics, {}, global_steps=1, epoch=0)
    assert metrics["arise/rows_dropped"] == 3.0 and metrics["arise/val_rows_dropped"] == 1.0
