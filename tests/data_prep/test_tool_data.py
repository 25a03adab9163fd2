"""Tool-use data (``--tool python``): the same rows, the user turn names the Python tool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recipe.arise.data_prep import amc23, omni_math
from recipe.arise.data_prep.common import INSTRUCTION, TOOL_INSTRUCTIONS, build_prompt_content

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES_RAW = REPO_ROOT / "tests" / "fixtures" / "raw"


def test_tool_instruction_replaces_only_the_instruction():
    assert build_prompt_content(" 1+1? ") == "1+1?\n" + INSTRUCTION
    tool = build_prompt_content(" 1+1? ", "python")
    assert tool == "1+1?\n" + TOOL_INSTRUCTIONS["python"]
    assert "`python` tool" in tool and tool.endswith(INSTRUCTION)  # the task is unchanged


@pytest.mark.parametrize("tool", [None, "python"])
def test_module_writes_tool_rows(tool, tmp_path):
    argv = ["--local", str(FIXTURES_RAW / "amc23_qwen25math" / "test.jsonl"), "--out", str(tmp_path)]
    amc23.main(argv + (["--tool", tool] if tool else []))
    rows = pq.read_table(tmp_path / "amc23.parquet").to_pylist()
    assert rows
    for r in rows:
        assert r["prompt"] == [{"role": "user", "content": build_prompt_content(r["extra_info"]["question"], tool)}]


def test_omni_domain_files_get_the_tool_prompt(tmp_path):
    omni_math.main(
        ["--local", str(FIXTURES_RAW / "omni_math_rule" / "omni_math_rule.jsonl"), "--out", str(tmp_path)]
        + ["--tool", "python"]
    )
    for path in tmp_path.glob("omni_math*.parquet"):
        for r in pq.read_table(path).to_pylist():
            assert r["prompt"][0]["content"].endswith(TOOL_INSTRUCTIONS["python"]), path


def test_unknown_tool_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        amc23.main(["--local", str(FIXTURES_RAW / "amc23_qwen25math"), "--out", str(tmp_path), "--tool", "bash"])
    assert "invalid choice: 'bash'" in capsys.readouterr().err


def test_prepare_all_tool_flag(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), PYTHON=sys.executable)
    env.pop("DATA_DIR", None)
    r = subprocess.run(
        ["bash", str(REPO_ROOT / "data_prep" / "prepare_all.sh"), "--local", str(FIXTURES_RAW), "--tool", "python"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "data" / "arise_tool"  # its own default folder, never the plain data's
    assert not (tmp_path / "data" / "arise").exists()
    for rel in ("train/deepscaler.parquet", "eval/aime24.parquet", "eval/omni_math_algebra.parquet"):
        rows = pq.read_table(out / rel).to_pylist()
        assert rows and all(r["prompt"][0]["content"].endswith(TOOL_INSTRUCTIONS["python"]) for r in rows), rel
