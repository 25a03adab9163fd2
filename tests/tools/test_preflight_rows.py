"""The preflight refuses the data rows the training's dataset would refuse (a row without
``reward_model.ground_truth``, an empty prompt, an over-long prompt where verl would truncate it
with ``data.truncation=error``), naming file, row and field, before any run starts."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from omegaconf import OmegaConf

from recipe.arise.data_prep.schema import make_row
from recipe.arise.tools import preflight
from recipe.arise.tools.preflight_data import check_data_rows

ENTRY = "recipe.arise.adapters.main_arise"


@pytest.fixture(scope="module")
def base():
    return preflight.compose(ENTRY, ["actor_rollout_ref.rollout.name=vllm"])


def _row(content="What is 1 + 1 ?", truth="2"):
    prompt = [{"role": "user", "content": content}] if content is not None else []
    return {"data_source": "t", "prompt": prompt, "reward_model": {"style": "rule", "ground_truth": truth}}


def _cfg(base, train, val, **data):
    cfg = copy.deepcopy(base)
    OmegaConf.update(cfg, "data.train_files", str(train))
    OmegaConf.update(cfg, "data.val_files", str(val))
    for key, value in {"filter_overlong_prompts": True, **data}.items():  # as the run scripts set it
        OmegaConf.update(cfg, f"data.{key}", value)
    return cfg


def _files(tmp_path, train_rows, val_rows=None):
    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    pd.DataFrame(train_rows).to_parquet(train)
    pd.DataFrame(val_rows or [_row()]).to_parquet(val)
    return train, val


def test_rows_without_ground_truth_are_refused(tmp_path, base):
    train, val = _files(tmp_path, [_row(), _row(truth=None), _row(truth="")], [_row(truth=" ")])
    (finding,) = check_data_rows(_cfg(base, train, val))
    assert finding.level == "ERROR" and "data_prep" in finding.fix
    assert f"{train} row 1: reward_model.ground_truth: missing" in finding.what
    assert f"{train} row 2: reward_model.ground_truth: empty" in finding.what
    assert f"{val} row 0: reward_model.ground_truth: empty" in finding.what


def test_empty_prompts_are_refused(tmp_path, base):
    train, val = _files(tmp_path, [_row(content=""), _row(), _row(content=None)])
    (finding,) = check_data_rows(_cfg(base, train, val))
    assert finding.level == "ERROR"
    assert f"{train} row 0: prompt: every message's content is empty" in finding.what
    assert f"{train} row 2: prompt: no messages" in finding.what and "row 1" not in finding.what


def test_good_rows_pass(tmp_path, base):
    train, val = _files(tmp_path, [_row(), _row()])
    (finding,) = check_data_rows(_cfg(base, train, val))
    assert finding.level == "OK" and "3 in 2 file(s)" in finding.what
    val.write_bytes(b"")  # an empty or truncated file: named, not a traceback
    (finding,) = check_data_rows(_cfg(base, train, val))
    assert finding.level == "ERROR" and f"{val}: unreadable: ArrowInvalid" in finding.what


def test_overlong_prompts_are_refused_where_verl_would_truncate_them(tmp_path, base, tiny_chat_tokenizer):
    train, val = _files(tmp_path, [_row(), _row(content=" ".join(["w"] * 50))])
    cfg = _cfg(base, train, val, max_prompt_length=40, filter_overlong_prompts=False, truncation="error")
    tiny_chat_tokenizer.save_pretrained(tmp_path / "model")
    OmegaConf.update(cfg, "actor_rollout_ref.model.path", str(tmp_path / "model"))
    (finding,) = check_data_rows(cfg)
    assert finding.level == "ERROR"
    assert f"{train} row 1: prompt: 56 tokens > data.max_prompt_length 40" in finding.what
    # verl's filter drops them (the dataset counts them), or truncation was asked for: not an error
    for data in ({"filter_overlong_prompts": True}, {"truncation": "left"}):
        for key, value in data.items():
            OmegaConf.update(cfg, f"data.{key}", value)
        assert [f.level for f in check_data_rows(cfg)] == ["OK"]
    # a tokenizer on the hub: said, and left to the dataset's check at load
    cfg = _cfg(base, train, val, filter_overlong_prompts=False, truncation="error")
    OmegaConf.update(cfg, "actor_rollout_ref.model.path", "Qwen/Qwen3-4B-Instruct-2507")
    assert [f.level for f in check_data_rows(cfg)] == ["INFO", "OK"]


def test_the_preflight_runs_the_row_check(tmp_path, base):
    train, val = _files(tmp_path, [_row(truth=None)])
    findings = preflight.check_config(_cfg(base, train, val), ENTRY, check_runtime=False)
    assert any(f.level == "ERROR" and f"{train} row 0: reward_model.ground_truth" in f.what for f in findings)


def test_the_converters_never_build_such_rows():
    assert make_row("aime24", "Find x.", "7", split="test", index=0)["reward_model"]["ground_truth"] == "7"
    for problem, truth in (("  ", "7"), ("Find x.", ""), ("Find x.", None)):
        with pytest.raises(ValueError, match="aime24 test row 3"):
            make_row("aime24", problem, truth, split="test", index=3)
