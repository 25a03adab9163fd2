"""The preflight's environment check (recipe/arise/tools/preflight_env.py): the data's environments
need their package and Java, each named with the command that installs it; malformed rows are named."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import OmegaConf

from recipe.arise.data_prep.schema import ENV_SCHEMA, make_env_row, make_row, rows_to_table
from recipe.arise.tools import preflight_env

COIN = {"game": "coin", "seed": 3, "fold": "train", "params": ""}


def _levels(findings):
    return [(f.level, f.what) for f in findings]


def test_java_missing_is_an_error_naming_the_apt_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    (finding,) = preflight_env.check_names(["twx"])
    assert finding.level == "ERROR" and "apt-get install -y default-jre-headless" in finding.what


def test_a_missing_package_is_an_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(preflight_env.PACKAGES, "twx", "no_such_package_here")
    (finding,) = preflight_env.check_names(["twx"])
    assert finding.level == "ERROR" and "no_such_package_here" in finding.what and ".[envs]" in finding.fix


def test_present_environments_pass_and_unknown_ones_warn():
    assert _levels(preflight_env.check_names(["twx", "mine"])) == [
        ("WARNING", "environment 'mine' is not registered here"),
        ("OK", "environment 'twx': package and Java present"),
    ]
    assert preflight_env.main(["twx"]) == 0


def test_the_run_s_data_names_its_environments_and_bad_rows(tmp_path):
    good = make_env_row("twx", COIN, {"step_limit": 5}, "find the coin", "coin", split="train", index=0)
    bad = dict(good, extra_info={**good["extra_info"], "env": json.dumps({"game": COIN})})
    env_file = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([good, bad, good], schema=ENV_SCHEMA), env_file)
    math_file = tmp_path / "val.parquet"
    pq.write_table(rows_to_table([make_row("m", "1+1?", "2", split="test", index=0)]), math_file)
    cfg = OmegaConf.create({"data": {"train_files": [str(env_file)], "val_files": str(math_file)}})
    findings = preflight_env.check_envs(cfg)
    assert [f.level for f in findings] == ["ERROR", "OK"]
    assert f"{env_file} row 1: extra_info.env: no 'name'" in findings[0].what
    assert preflight_env.check_envs(OmegaConf.create({"data": {"train_files": str(math_file)}})) == []
