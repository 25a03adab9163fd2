"""Environment data prep (recipe/arise/data_prep/env.py): one row per game, train and evaluation games
from the environment's own splits and disjoint, rows a run accepts (the row checks and the
training's dataset) and games the environment starts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from recipe.arise.data_prep import env as env_prep
from recipe.arise.data_prep.records import DataPrepError
from recipe.arise.data_prep.schema import ENV_SCHEMA, file_row_faults, make_env_row
from recipe.arise.envs.base import make_env


def _rows(path):
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def twx_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("twx")
    env_prep.main(["--env", "twx", "--out", str(out), "--games", "coin,mapreader", "--train", "6"]
                  + ["--validation", "2", "--test", "3", "--step-limit", "20"])  # fmt: skip
    return out


def test_twx_rows_per_split_from_the_engine_s_folds(twx_out):
    counts = {}
    for split, fold, seeds in (("train", "train", range(0, 1000)), ("validation", "dev", range(10000, 11000))):
        rows = _rows(twx_out / f"{split}.parquet")
        counts[split] = len(rows)
        for row in rows:
            env = json.loads(row["extra_info"]["env"])
            assert env["name"] == "twx" and env["options"] == {"step_limit": 20}
            assert env["game"]["fold"] == fold and env["game"]["seed"] in seeds
            assert row["data_source"] == f"env/twx/{env['game']['game']}" == f"env/twx/{row['extra_info']['task_type']}"
            assert row["agent_name"] == "arise_env_agent" and row["ability"] == "env"
            assert row["extra_info"]["question"] in row["prompt"][0]["content"]
    test = [json.loads(r["extra_info"]["env"])["game"] for r in _rows(twx_out / "test.parquet")]
    assert {g["fold"] for g in test} == {"test"} and all(20000 <= g["seed"] < 21000 for g in test)
    assert counts == {"train": 12, "validation": 4} and len(test) == 6


def test_train_and_evaluation_games_are_disjoint(twx_out):
    games = {
        split: {json.dumps(json.loads(r["extra_info"]["env"])["game"], sort_keys=True) for r in _rows(path)}
        for split in ("train", "validation", "test")
        if (path := twx_out / f"{split}.parquet").exists()
    }
    assert not games["train"] & games["test"] and not games["train"] & games["validation"]
    assert not games["validation"] & games["test"]
    with pytest.raises(DataPrepError, match="is in both train and test"):
        game = {"game": "coin", "seed": 1, "fold": "train"}
        env_prep.check_disjoint({"train": [(game, "t", "coin")], "test": [(dict(game), "t", "coin")]})


def test_the_rows_pass_the_run_s_checks_and_their_games_start(twx_out, tmp_path, tiny_chat_tokenizer):
    from recipe.arise.adapters.dataset import ARISEDataset

    path = twx_out / "test.parquet"
    assert pq.read_schema(path).remove_metadata() == ENV_SCHEMA.remove_metadata()
    assert file_row_faults(path) == (6, [])  # no ground truth, and that is right for an environment row
    config = {"cache_dir": str(tmp_path), "prompt_key": "prompt", "max_prompt_length": 200, "truncation": "error"}
    dataset = ARISEDataset(data_files=[str(path)], tokenizer=tiny_chat_tokenizer, config=OmegaConf.create(config))
    assert len(dataset) == 6
    row = _rows(path)[0]
    spec = json.loads(row["extra_info"]["env"])
    env = make_env(spec["name"], **spec["options"])
    try:
        task, first = env.reset(spec["game"])
        assert task == row["extra_info"]["question"] and first.admissible
    finally:
        env.close()


def test_an_env_row_needs_a_task(tmp_path):
    with pytest.raises(ValueError, match="task description is empty"):
        make_env_row("twx", {}, {}, "  ", "coin", split="train", index=0)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--games", "coin,zork"], r"unknown game\(s\) \['zork'\]"),
        (["--params", "coin=numLocations=3"], "expected GAME:key=value"),
        (["--params", "coin:noSuchParam=1", "--games", "coin", "--test", "1"], "twx game"),
        (["--train", "1001", "--games", "coin"], "1001 games asked, the split has 1000"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, argv, match):
    with pytest.raises(DataPrepError, match=match):
        env_prep.main(["--env", "twx", "--out", str(tmp_path), "--train", "1", *argv])
    assert not list(tmp_path.iterdir())


@pytest.mark.e2e  # a ScienceWorld JVM: ~7 s here, up to 30 s on a loaded machine (as tests/envs/test_scienceworld.py)
def test_scienceworld_rows_from_the_task_s_variations(tmp_path):
    env_prep.main(["--env", "scienceworld", "--out", str(tmp_path), "--games", "boil"]
                  + ["--train", "2", "--validation", "1", "--test", "1"])  # fmt: skip
    found = {}
    for split in ("train", "validation", "test"):
        rows = _rows(tmp_path / f"{split}.parquet")
        found[split] = [json.loads(r["extra_info"]["env"])["game"] for r in rows]
        assert all(r["data_source"] == "env/scienceworld/boil" and "boil" in r["extra_info"]["question"] for r in rows)
    assert [len(g) for g in found.values()] == [2, 1, 1]
    assert all(g["simplification"] == "easy" for games in found.values() for g in games)
    # boil's variations: train 0-13, dev 14-20, test 21-29 (the package's split)
    assert all(g["variation"] < 14 for g in found["train"]) and all(g["variation"] >= 21 for g in found["test"])


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e  # a JVM each, ~520 TextWorldExpress and 60 ScienceWorld games: ~1.5 min
def test_the_documented_commands_as_written(tmp_path):
    """docs/environments.md's data-prep block, run as written (``~`` is a temporary HOME): its files
    are rows a run accepts."""
    (block,) = [
        b
        for b in re.findall(r"^```bash\n(.*?)^```", (REPO / "docs" / "environments.md").read_text(), re.S | re.M)
        if "data_prep.env --env twx" in b
    ]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "HOME": str(tmp_path), "PATH": path, "PYTHONPATH": str(REPO)}
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2
    for command in commands:
        out = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, (command, out.stderr[-2000:])
        folder = tmp_path / "data" / "arise" / "env" / command.split("--env ")[1].split()[0]
        for split in ("train", "test"):
            rows, faults = file_row_faults(folder / f"{split}.parquet")
            assert rows and not faults, (command, split, faults)
