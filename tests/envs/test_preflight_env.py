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


def _alfworld_data(root):
    import alfworld_games as gen

    for split in ("train", "valid_seen", "valid_unseen"):
        gen.write_game(root, split, "pick_and_place_simple", trial=f"trial_{split}")
    return root


def test_alfworld_s_missing_or_incomplete_data_folder_is_refused_with_the_fetch_command(monkeypatch, tmp_path):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "none"))
    (finding,) = preflight_env.check_alfworld_data()
    assert finding.level == "ERROR" and f"{tmp_path / 'none'} does not exist" in finding.what
    assert finding.fix.startswith("fetch it: pip install alfworld==0.4.2 && alfworld-download")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert "has no json_2.1.1/" in preflight_env.check_alfworld_data()[0].what
    data = _alfworld_data(tmp_path)
    (finding,) = preflight_env.check_alfworld_data()
    assert (finding.level, finding.what) == (
        "OK",
        f"ALFWorld data folder {data}: 1 train, 1 valid_seen, 1 valid_unseen games",
    )
    for name in ("traj_data.json", "game.tw-pddl"):
        next((data / "json_2.1.1" / "valid_seen").glob(f"*/*/{name}")).unlink()
    (finding,) = preflight_env.check_alfworld_data()
    assert finding.level == "ERROR" and "lacks traj_data.json, game.tw-pddl" in finding.what
    assert "valid_seen has no games" in finding.what and "alfworld-download" in finding.fix


def test_alfworld_rows_need_the_package_and_their_games_in_the_folder(monkeypatch, tmp_path):
    data = _alfworld_data(tmp_path / "data")
    monkeypatch.setenv("ALFWORLD_DATA", str(data))
    monkeypatch.setitem(preflight_env.PACKAGES, "alfworld", "no_such_alfworld_here")  # as where it is not installed
    here = {"path": "train/pick_and_place_simple-Apple-None-Shelf-1/trial_train"}
    gone = {"path": "valid_unseen/pick_and_place_simple-Apple-None-Shelf-1/trial_gone"}
    rows = [
        make_env_row("alfworld", game, {"step_limit": 50}, "Your task is to: put it.", "pick", split="train", index=i)
        for i, game in enumerate((here, gone))
    ]
    env_file = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=ENV_SCHEMA), env_file)
    findings = preflight_env.check_envs(OmegaConf.create({"data": {"train_files": str(env_file)}}))
    assert [f.level for f in findings] == ["ERROR", "ERROR"]
    assert findings[0].what == f"1 ALFWorld game(s) of the data are not in {data / 'json_2.1.1'}: {gone['path']}"
    assert findings[1].what == "environment 'alfworld' needs the package no_such_alfworld_here"
    assert "pip install alfworld==0.4.2" in findings[1].fix
    pq.write_table(pa.Table.from_pylist(rows[:1], schema=ENV_SCHEMA), env_file)
    findings = preflight_env.check_envs(OmegaConf.create({"data": {"train_files": str(env_file)}}))
    assert [f.level for f in findings] == ["OK", "ERROR"]
    assert preflight_env.main(["alfworld"]) == 1
