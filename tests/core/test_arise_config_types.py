"""Every ``arise.*`` value is checked for its type, not only its range: hydra hands ``arise.enable=maybe``
over as the string 'maybe' (truthy), and a value the library refuses fails when the config is read, not
when the trainer first builds the library."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from recipe.arise.core.arise_config import ARISEConfig


def _section(key: str, value) -> dict:
    """``{"a": {"b": value}}`` for the dotted key ``a.b``."""
    out: dict = {}
    node = out
    *parents, last = key.split(".")
    for name in parents:
        node = node.setdefault(name, {})
    node[last] = value
    return out


@pytest.mark.parametrize(
    "key,value",
    [
        ("enable", "maybe"),
        ("enable", "no"),
        ("enable", 1),
        ("enable", {"on": True}),
        ("phase1_steps", 2.5),
        ("phase1_steps", True),
        ("phase1_steps", "500"),
        ("seed", 0.5),
        ("log_dir", 7),
        ("selection.use_gate", "false"),
        ("selection.random", "yes"),
        ("selection.gate", "0.3"),
        ("selection.epsilon", True),
        ("selection.max_skill_tokens", 12.5),
        ("selection.calibration_window", 64.0),
        ("library.seed_skills", ["seeds.json"]),
        ("library.cache_capacity", 1.5),
        ("library.reservoir_capacity", "100"),
        ("library.from_checkpoint", "false"),
        ("library.load_from", 3),
        ("library.seed_trial_steps", 2.0),
        ("summary.enable", "maybe"),
        ("summary.max_per_step", 1.0),
        ("summary.stream", 0),
        ("reward.binary", "yes"),
        ("reward.skill_bonus", "1"),
        ("ig.every_n_steps", 1.0),
        ("validation.active", "true"),
    ],
)
def test_a_value_of_the_wrong_type_names_its_key(key, value):
    with pytest.raises(ValueError, match=rf"arise\.{re.escape(key)} must be .*got {re.escape(repr(value))}"):
        ARISEConfig.from_dict(_section(key, value))


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("library.cache_capacity", 0, r"arise\.library\.cache_capacity must be >= 1, got 0"),
        ("library.reservoir_capacity", -1, r"arise\.library\.reservoir_capacity must be >= 0"),
        ("library.ema_beta", 1.5, r"arise\.library\.ema_beta must be in \[0, 1\]"),
        ("library.trial_uses", -2, r"arise\.library\.trial_uses must be >= 0"),
        # checked by the library's own validation (SkillLibrary), named under arise.library
        ("library.new_skill_policy", "fifo", r"arise\.library: new_skill_policy must be one of"),
        ("phase1_steps", -1, r"arise\.phase1_steps must be >= 0"),
        ("summary.top_p", 0.0, r"arise\.summary\.top_p must be in \(0, 1\]"),
        ("summary.max_tokens", 0, r"arise\.summary\.max_tokens must be > 0"),
        # the cap is the skill schema's: another value would be ignored, so it is refused
        ("summary.max_chars", 300, r"arise\.summary\.max_chars is fixed at 220 .*got 300"),
        ("reward.timeout_s", 0, r"arise\.reward\.timeout_s must be > 0"),
        ("reward.skill_bonus", float("nan"), r"arise\.reward\.skill_bonus must be a finite number"),
    ],
)
def test_a_value_out_of_range_fails_when_the_config_is_read(key, value, match):
    with pytest.raises(ValueError, match=match):
        ARISEConfig.from_dict(_section(key, value))


def test_a_section_that_is_not_a_mapping_names_its_key():
    with pytest.raises(ValueError, match=r"arise\.selection must be a section"):
        ARISEConfig.from_dict({"selection": 5})


def test_an_int_where_a_number_is_expected_passes_a_string_does_not():
    cfg = ARISEConfig.from_dict(
        {
            "enable": False,
            "phase1_steps": 0,
            "selection": {"temperature": 1, "scoring_timeout_s": 600, "gate_target_use": None, "epsilon": 0},
            "library": {"seed_trial_steps": None, "load_from": "skills.jsonl", "cache_capacity": 1},
            "summary": {"temperature": 0, "timeout_s": 30},  # an int where a float is expected: fine
        }
    )
    assert cfg.selection.temperature == 1 and cfg.summary.timeout_s == 30 and cfg.library.cache_capacity == 1
    with pytest.raises(ValueError, match=r"arise\.summary\.timeout_s must be a number, got '30' \(str\)"):
        ARISEConfig.from_dict({"summary": {"timeout_s": "30"}})


def test_hydra_override_strings_are_refused_and_real_booleans_taken():
    """``arise.enable=maybe`` on the command line is the string 'maybe'; ``true`` / ``false`` are booleans."""
    for text, enable in (("true", True), ("false", False)):
        cfg = OmegaConf.from_dotlist([f"arise.enable={text}", "arise.selection.use_gate=false"])
        arise = ARISEConfig.from_trainer_config(cfg)
        assert arise.enable is enable and arise.selection.use_gate is False
    for text in ("maybe", "1"):  # hydra's own parser: tests/tools/test_preflight_values.py
        cfg = OmegaConf.from_dotlist([f"arise.enable={text}"])
        with pytest.raises(ValueError, match=r"arise\.enable must be true or false"):
            ARISEConfig.from_trainer_config(cfg)


def test_a_config_without_the_section_is_an_error_where_it_is_required():
    assert ARISEConfig.from_trainer_config({}).enable is False  # other callers: ARISE disabled
    config = OmegaConf.create({"trainer": {"experiment_name": "qwen3_grpo"}})
    with pytest.raises(ValueError, match=r"config of experiment 'qwen3_grpo' has no 'arise:' section"):
        ARISEConfig.from_trainer_config(config, required=True)
    with pytest.raises(ValueError, match=r"arise_trainer\.yaml"):
        ARISEConfig.from_trainer_config({}, required=True)
    assert ARISEConfig.from_trainer_config({"arise": {}}, required=True) == ARISEConfig()


def test_library_settings_are_the_librarys_keywords():
    from recipe.arise.core.library import SETTINGS, SkillLibrary

    cfg = ARISEConfig.from_dict({"phase1_steps": 7, "library": {"cache_capacity": 3}})
    settings = cfg.library_settings()
    assert set(settings) <= set(SETTINGS)  # the rest (delete_percentile, success_threshold): the library's defaults
    lib = SkillLibrary(**settings)
    assert lib.cache_capacity == 3 and lib.selection_start_step == 8 and lib.max_protected == 1
