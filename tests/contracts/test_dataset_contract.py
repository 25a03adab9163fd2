"""verl's RLHFDataset as ``recipe.arise.adapters.dataset.ARISEDataset`` extends it: the row checks run in
an override of ``_read_files_and_tokenize`` before verl reads the files, and the dropped-row count in an
override of ``maybe_filter_out_long_prompts``. Both hold only while verl's dataset reads its files
through the first (at construction and on resume) and filters through the second.

Read from each stack's verl source (AST); on ``[cpu]`` also exercised on a real parquet file.
"""

from __future__ import annotations

import ast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

RL_DATASET = "utils/dataset/rl_dataset.py"


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    (klass,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    (method,) = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name]
    return method


def _self_calls(fn: ast.FunctionDef) -> set[str]:
    return {
        n.func.attr
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "self"
    }


def test_the_dataset_reads_its_files_through_the_overridden_methods(source):
    tree = ast.parse(source(RL_DATASET))
    assert "_read_files_and_tokenize" in _self_calls(_method(tree, "RLHFDataset", "__init__"))
    assert "_read_files_and_tokenize" in _self_calls(_method(tree, "RLHFDataset", "resume_dataset_state"))
    read = _method(tree, "RLHFDataset", "_read_files_and_tokenize")
    assert "maybe_filter_out_long_prompts" in _self_calls(read)
    assert {a.arg for a in read.args.args} == {"self"}
    filt = _method(tree, "RLHFDataset", "maybe_filter_out_long_prompts")
    assert [a.arg for a in filt.args.args] == ["self", "dataframe"]


def test_the_overrides_run_on_a_real_dataset(tmp_path, tiny_chat_tokenizer):
    """On the installed stack: the row check runs inside verl's own construction."""
    from omegaconf import OmegaConf

    from recipe.arise.adapters.dataset import ARISEDataset
    from recipe.arise.data_prep.schema import DataRowError

    rows = [
        {"prompt": [{"role": "user", "content": "What is 1 plus 2?"}], "reward_model": {"ground_truth": "3"}},
        {"prompt": [{"role": "user", "content": "What is 2 plus 2?"}], "reward_model": {"ground_truth": ""}},
    ]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    config = OmegaConf.create({"max_prompt_length": 64, "filter_overlong_prompts": True, "truncation": "error"})
    with pytest.raises(DataRowError, match="row 1"):
        ARISEDataset(data_files=[str(path)], tokenizer=tiny_chat_tokenizer, config=config)
