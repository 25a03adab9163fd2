"""The preflight of a tool run (TOOL=python): tools, the sandbox's isolation, the multi-turn budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from recipe.arise.tools import preflight
from recipe.arise.tools.preflight_tool import check_tool

REPO = Path(__file__).resolve().parents[2]
TOOL_YAML = REPO / "recipe" / "arise" / "config" / "python_tool.yaml"


@pytest.fixture(scope="module")
def tool_cfg():
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHON": sys.executable}
    entry, overrides = preflight.script_overrides(REPO / "run_scripts" / "qwen3_4b_arise_tool.sh", env=env)
    return preflight.compose(entry, overrides)


def _lines(findings, level=None):
    return [f.what for f in findings if level is None or f.level == level]


def test_tool_run_passes_with_its_defaults(tool_cfg):
    findings = check_tool(tool_cfg)
    assert not _lines(findings, "ERROR"), _lines(findings)
    text = "\n".join(_lines(findings))
    assert f"tools from {TOOL_YAML}: python" in text
    assert "python sandbox:" in text  # which isolation, said by the preflight
    assert "multi-turn budget: 3 tool results x 256 tokens = 768 of the response's 4096 tokens" in text


def test_single_turn_run_has_no_tool_findings():
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHON": sys.executable}
    entry, overrides = preflight.script_overrides(REPO / "run_scripts" / "qwen3_4b_arise.sh", env=env)
    assert check_tool(preflight.compose(entry, overrides)) == []


def test_budget_errors_and_warnings(tool_cfg):
    cfg = tool_cfg.copy()
    cfg.actor_rollout_ref.rollout.multi_turn.max_assistant_turns = 1
    assert any("max_assistant_turns=1" in line for line in _lines(check_tool(cfg, check_paths=False), "ERROR"))
    cfg.actor_rollout_ref.rollout.multi_turn.max_assistant_turns = 20
    warnings = _lines(check_tool(cfg, check_paths=False), "WARNING")
    assert any("crowd out the answer" in line for line in warnings), warnings
    cfg = tool_cfg.copy()
    cfg.actor_rollout_ref.rollout.max_model_len = 2048
    assert any("raise MAX_MODEL_LEN" in line for line in _lines(check_tool(cfg), "ERROR"))


def test_wrong_loop_and_bad_tool_yaml(tool_cfg, tmp_path):
    cfg = tool_cfg.copy()
    cfg.actor_rollout_ref.rollout.agent.default_agent_loop = "arise_agent"
    assert any("never calls a tool" in line for line in _lines(check_tool(cfg, check_paths=False), "ERROR"))
    bad = tmp_path / "tools.yaml"
    bad.write_text(TOOL_YAML.read_text().replace("wall_s: 10", "wall_seconds: 10"))
    cfg = tool_cfg.copy()
    cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path = str(bad)
    errors = _lines(check_tool(cfg), "ERROR")
    assert any(str(bad) in line and "wall_seconds" in line for line in errors), errors


def test_isolation_without_namespaces_is_a_warning(tool_cfg, monkeypatch):
    monkeypatch.setenv("ARISE_BWRAP", "/nonexistent/bwrap")
    cfg = tool_cfg.copy()
    path = Path(cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path)
    cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path = str(path)
    import recipe.arise.core.sandbox as sandbox

    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    warnings = _lines(check_tool(cfg), "WARNING")
    assert any(line.startswith("python sandbox: NONE") for line in warnings), warnings
