"""Values the run would take quietly or refuse only after start-up are preflight ERRORs: a boolean given as
a word (``arise.enable=maybe``), a setting the library refuses (``cache_capacity=0``), a ``load_from`` file
holding a skill over the schema's limits; and the ARISE trainer refuses a config without ``arise:``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from recipe.arise.tools import preflight

ENTRY = preflight.ARISE_ENTRY


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
