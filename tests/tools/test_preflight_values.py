"""Values the run would take quietly or refuse only after start-up are preflight ERRORs: a boolean given as
a word (``arise.enable=maybe``), a mistyped key (``arise.selection.gatee``: the schema's message, not
Hydra's), a setting the library refuses (``cache_capacity=0``), a ``load_from`` file holding a skill over
the schema's limits; and the ARISE trainer refuses a config without ``arise:``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from recipe.arise.tools import preflight

ENTRY = preflight.ARISE_ENTRY
ARISE_ENTRY_MODULE = ENTRY
REPO = Path(__file__).resolve().parents[2]


CONFIG, LIBRARY = "ARISE config (arise: section)", "ARISE initial library (seeds or arise.library.load_from)"


def _arise_findings(tmp_path, *overrides: str, check_paths: bool = False) -> dict[str, preflight.Finding]:
    """The preflight's ARISE findings (CONFIG, LIBRARY) for the ARISE entry's config with ``overrides``."""
    base = ["actor_rollout_ref.rollout.name=vllm", f"trainer.default_local_dir={tmp_path / 'ckpt'}"]
    cfg = preflight.compose(ENTRY, base + list(overrides))
    findings = preflight.check_config(cfg, ENTRY, check_paths=check_paths, check_runtime=False)
    return {name: f for f in findings for name in (CONFIG, LIBRARY) if f.what.startswith(name + ":")}


@pytest.mark.parametrize(
    "override,match",
    [
        ("arise.enable=maybe", "arise.enable must be true or false, got 'maybe'"),
        ("arise.enable=no", "arise.enable must be true or false, got 'no'"),  # hydra: only true/false are booleans
        ("arise.selection.use_gate=1", "arise.selection.use_gate must be true or false, got 1"),
        ("arise.phase1_steps=2.5", "arise.phase1_steps must be an integer, got 2.5"),
        ("arise.library.cache_capacity=0", "arise.library.cache_capacity must be >= 1, got 0"),
        ("arise.library.new_skill_policy=fifo", "arise.library: new_skill_policy must be one of"),
        ("arise.summary.top_p=0", "arise.summary.top_p must be in (0, 1]"),
    ],
)
def test_a_bad_arise_value_is_a_preflight_error_naming_the_key(tmp_path, override, match):
    finding = _arise_findings(tmp_path, override)[CONFIG]
    assert finding.level == "ERROR" and match in finding.what


def test_the_default_config_passes(tmp_path):
    findings = _arise_findings(tmp_path, check_paths=True)
    assert findings[CONFIG].level == "OK"
    library = findings[LIBRARY]
    assert library.level == "OK" and "the paper's seed skills" in library.what


def test_a_load_from_file_with_an_over_long_skill_is_a_preflight_error(tmp_path):
    doc = {
        "skill_name": "long_skill",
        "problem_type": "algebra",
        "key_insight": "x" * 1000,
        "method": ["First", "Then"],
        "check": "Plug in",
    }
    path = tmp_path / "skills.jsonl"
    path.write_text(json.dumps({"skill": doc}) + "\n")
    findings = _arise_findings(tmp_path, f"arise.library.load_from={path}", check_paths=True)
    finding = findings[LIBRARY]
    assert finding.level == "ERROR"
    assert f"{path}: line 1: field 'skill.key_insight': must be non-empty and at most 160 chars" in finding.what


def test_a_bad_seed_skills_file_is_a_preflight_error(tmp_path):
    path = tmp_path / "seeds.json"
    path.write_text(json.dumps([{"skill_name": "x", "problem_type": "algebra"}]))
    findings = _arise_findings(tmp_path, f"arise.library.seed_skills={path}", check_paths=True)
    finding = findings[LIBRARY]
    assert finding.level == "ERROR" and f"{path}: entry 0: field 'key_insight': missing" in finding.what


def test_the_arise_trainer_refuses_a_config_without_the_section():
    from recipe.arise.adapters.trainers import ARISETrainer

    config = OmegaConf.create({"trainer": {"experiment_name": "plain_grpo"}})
    with pytest.raises(ValueError, match=r"experiment 'plain_grpo' has no 'arise:' section"):
        ARISETrainer(config)


def test_the_trainers_library_settings_are_the_configs():
    """The preflight builds the library with ARISEConfig.library_settings(); the trainer with its own."""
    from recipe.arise.adapters.trainers import ARISETrainer
    from recipe.arise.core.arise_config import ARISEConfig

    cfg = ARISEConfig.from_dict({"phase1_steps": 3, "library": {"cache_capacity": 4, "rank_by": "uplift"}})
    assert ARISETrainer._library_settings(SimpleNamespace(arise=cfg)) == cfg.library_settings()


def _run(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHON": sys.executable}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_a_mistyped_arise_key_on_a_script_gets_the_projects_message_not_hydras():
    """`arise.selection.gatee=0.3` on a run script: its preflight (what run_main runs first) names the key, the
    closest known one and the section's known keys; Hydra's "To append to your config use +..." never shows."""
    proc = _run("-m", "recipe.arise.tools.preflight", "run_scripts/qwen3_4b_arise.sh", "arise.selection.gatee=0.3")
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[preflight] ERROR")]
    assert len(lines) == 1, proc.stdout[-2000:]
    assert "unknown key 'arise.selection.gatee' in arise.selection (did you mean arise.selection.gate?)" in lines[0]
    assert "known: calibration, calibration_window, control_share, epsilon, gate," in lines[0]
    assert "+arise" not in proc.stdout + proc.stderr and "append" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "override,match",
    [
        ("arise.selection.gatee=0.3", "unknown key 'arise.selection.gatee' in arise.selection"),
        ("arise.enable.x=1", "arise.enable is a value, not a section"),
    ],
)
def test_the_entry_point_checks_arise_keys_before_hydra(override, match):
    """With SKIP_PREFLIGHT=1 the entry point is the first to see the override: the same message. (Only
    overrides Hydra refuses too: were the check gone, none of them could start a run.)"""
    proc = _run("-m", ARISE_ENTRY_MODULE, override)
    assert proc.returncode == 1 and match in proc.stderr, proc.stderr[-2000:]
    assert "append" not in proc.stderr


def test_known_arise_keys_and_other_overrides_pass_the_check():
    from recipe.arise.core.arise_overrides import check_arise_overrides

    with pytest.raises(ValueError, match=r"'arise.libary.cache_capacity' in arise \(did you mean arise.library\?\)"):
        check_arise_overrides(["+arise.libary.cache_capacity=5"])  # Hydra would add it; ARISEConfig refuse it later

    check_arise_overrides(["arise.selection.gate=0.3", "++arise.summary.on_overlong=discard", "trainer.x=1"])
    check_arise_overrides(["arise.selection={gate: 0.3}", "~arise.ig.every_n_steps", "data.arise_tag=1"])
