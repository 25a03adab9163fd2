"""The ``arise:`` section has one source of truth, the dataclasses of ``core.arise_config``: every key
carries one line of help and a group, and the trainer yaml holds exactly their keys and defaults (a key
added to one and not the other, or a default changed in one, fails here)."""

from __future__ import annotations

from pathlib import Path

import yaml

from recipe.arise.core.arise_config import GROUPS, ARISEConfig, config_keys, default_section

YAML = Path(__file__).resolve().parents[2] / "recipe" / "arise" / "config" / "arise_trainer.yaml"


def _flat(section: dict, prefix: str = "arise") -> dict:
    out = {}
    for name, value in section.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}.{name}"))
        else:
            out[f"{prefix}.{name}"] = value
    return out


def test_every_key_has_one_line_of_help_and_a_group():
    keys = config_keys()
    assert len(keys) == len({k.key for k in keys}) > 40
    for k in keys:
        assert k.help.strip() and "\n" not in k.help and len(k.help) <= 120, k
        assert k.group in GROUPS, k


def test_the_yaml_holds_exactly_the_dataclass_keys_and_defaults():
    in_yaml = _flat(yaml.safe_load(YAML.read_text())["arise"])
    in_code = _flat(default_section())
    assert sorted(set(in_code) - set(in_yaml)) == [], "keys of the dataclasses missing from the yaml"
    assert sorted(set(in_yaml) - set(in_code)) == [], "keys of the yaml unknown to the dataclasses"
    differ = {k: (in_yaml[k], in_code[k]) for k in in_code if in_yaml[k] != in_code[k]}
    assert differ == {}, "yaml default != dataclass default (yaml, dataclass)"
    assert ARISEConfig.from_dict(yaml.safe_load(YAML.read_text())["arise"]) == ARISEConfig()


def test_config_keys_lists_every_leaf_with_its_default():
    assert {k.key: k.default for k in config_keys()} == _flat(default_section())


def test_the_groups_are_the_paper_table_and_the_four_ablations():
    groups = {k.key: k.group for k in config_keys()}
    # App. A.1, Table 7 (above the double rule), plus the switch between ARISE and its baselines
    paper = {
        "arise.enable",
        "arise.phase1_steps",
        "arise.selection.temperature",
        "arise.selection.epsilon",
        "arise.selection.gate",
        "arise.selection.max_skill_tokens",
        "arise.library.cache_capacity",
        "arise.library.reservoir_capacity",
        "arise.library.ema_beta",
        "arise.library.seed_skills",
        "arise.summary.temperature",
        "arise.summary.top_p",
        "arise.summary.max_tokens",
        "arise.summary.max_chars",
        "arise.reward.skill_bonus",
    }
    ablation = {"arise.reward.binary", "arise.selection.random", "arise.summary.enable", "arise.selection.use_gate"}
    assert {k for k, g in groups.items() if g == "paper"} == paper
    assert {k for k, g in groups.items() if g == "ablation"} == ablation
