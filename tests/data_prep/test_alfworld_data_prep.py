"""ALFWorld data prep (``recipe.arise.data_prep.env --env alfworld``) on data folders the tests write in
ALFWorld's format: ALFWorld's splits to train / validation / test, the task type in each row, train and
evaluation games disjoint, unsolvable games dropped and counted, an incomplete folder refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import alfworld_games as gen
import pyarrow.parquet as pq
import pytest

from recipe.arise.data_prep import env as env_prep
from recipe.arise.data_prep.records import DataPrepError
from recipe.arise.data_prep.schema import ENV_SCHEMA, file_row_faults

TYPES = [*gen.GOALS, gen.LOOK, gen.PICK_TWO]


def _data(root, per_split=(("train", 3), ("valid_seen", 1), ("valid_unseen", 2))):
    """Each split: ``n`` games of each of the six task types, every trial its own."""
    for split, n in per_split:
        for task_type in TYPES:
            for i in range(n):
                gen.write_game(root, split, task_type, scene=i, trial=f"trial_T2019_{split}_{i}")
    return root


def _rows(path):
    return pq.read_table(path).to_pylist()


def test_every_game_of_each_split_with_its_task_type(tmp_path, capsys):
    data, out = _data(tmp_path / "data"), tmp_path / "out"
    env_prep.main(["--env", "alfworld", "--data-dir", str(data), "--out", str(out), "--step-limit", "50"])
    rows = {split: _rows(out / f"{split}.parquet") for split in ("train", "validation", "test")}
    assert {split: len(r) for split, r in rows.items()} == {"train": 18, "validation": 6, "test": 12}
    folds = {"train": "train", "validation": "valid_seen", "test": "valid_unseen"}
    for split, found in rows.items():
        assert pq.read_schema(out / f"{split}.parquet") == ENV_SCHEMA
        for row in found:
            env = json.loads(row["extra_info"]["env"])
            assert env["name"] == "alfworld" and env["options"] == {"step_limit": 50}
            assert env["game"]["path"].split("/")[0] == folds[split]
            short = row["extra_info"]["task_type"]
            assert row["data_source"] == f"env/alfworld/{short}" and env["game"]["path"].split("/")[1].startswith(
                next(long for long, s in env_prep.TASK_TYPES.items() if s == short)
            )
            assert row["extra_info"]["question"].startswith("Your task is to: ")
            assert row["extra_info"]["question"] in row["prompt"][0]["content"]
        assert sorted({r["extra_info"]["task_type"] for r in found}) == sorted(env_prep.TASK_TYPES.values())
        assert file_row_faults(out / f"{split}.parquet")[1] == []
    trials = {
        split: {json.loads(r["extra_info"]["env"])["game"]["path"] for r in found} for split, found in rows.items()
    }
    assert not trials["train"] & trials["test"]
    assert "wrote" in capsys.readouterr().out


def test_counts_per_type_and_the_types_asked(tmp_path):
    data, out = _data(tmp_path / "data"), tmp_path / "out"
    env_prep.main(["--env", "alfworld", "--data-dir", str(data), "--out", str(out), "--games", "heat,pick2"]
                  + ["--train", "2", "--validation", "0", "--test", "1"])  # fmt: skip
    train, test = _rows(out / "train.parquet"), _rows(out / "test.parquet")
    assert not (out / "validation.parquet").exists()
    assert sorted(r["extra_info"]["task_type"] for r in train) == ["heat", "heat", "pick2", "pick2"]
    assert sorted(r["extra_info"]["task_type"] for r in test) == ["heat", "pick2"]
    with pytest.raises(DataPrepError, match="alfworld pick valid_unseen: 3 games asked, the split has 2"):
        env_prep.main(["--env", "alfworld", "--data-dir", str(data), "--out", str(out), "--test", "3"])
    with pytest.raises(DataPrepError, match=r"unknown task type\(s\) \['stack'\]"):
        env_prep.main(["--env", "alfworld", "--data-dir", str(data), "--out", str(out), "--games", "stack"])


def test_unsolvable_games_are_dropped_and_counted(tmp_path, capsys):
    data, out = _data(tmp_path / "data"), tmp_path / "out"
    game = next((data / "json_2.1.1" / "train").glob("pick_and_place_simple-*/*/game.tw-pddl"))
    game.write_text(json.dumps({**json.loads(game.read_text()), "solvable": False}))
    env_prep.main(["--env", "alfworld", "--data-dir", str(data), "--out", str(out)])
    assert len(_rows(out / "train.parquet")) == 17
    assert "alfworld train: 1 game(s) marked unsolvable not used" in capsys.readouterr().out


def test_an_incomplete_folder_or_a_shared_trial_is_refused(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "none"))
    with pytest.raises(DataPrepError, match=r"does not exist \(fetch it: pip install alfworld==0\.4\.2 && alfworld-d"):
        env_prep.main(["--env", "alfworld", "--out", str(out)])
    data = _data(tmp_path / "data", per_split=(("train", 1), ("valid_seen", 1)))
    with pytest.raises(DataPrepError, match="valid_unseen has no games"):
        env_prep.main(["--env", "alfworld", "--data-dir", str(data), "--out", str(out)])
    gen.write_game(data, "valid_unseen", "pick_and_place_simple", scene=0, trial="trial_T2019_train_0")
    with pytest.raises(DataPrepError, match="is in both train and test"):
        env_prep.main(["--env", "alfworld", "--data-dir", str(data), "--out", str(out), "--games", "pick"])
    assert not out.exists()
    with pytest.raises(DataPrepError, match="--data-dir is for --env alfworld"):
        env_prep.main(["--env", "twx", "--data-dir", str(data), "--out", str(out)])


REPO = Path(__file__).resolve().parents[2]


def test_the_documented_commands_as_written(tmp_path):
    """docs/environments.md's ALFWorld block as written, ``~`` a temporary HOME whose
    ``~/.cache/alfworld`` (ALFWorld's default data folder) holds games in its format; the install line
    needs github.com (docs: elsewhere). The data prep's files are rows a run accepts; the preflight finds
    the folder complete (and names the package where it is not installed)."""
    (block,) = [
        b
        for b in re.findall(r"^```bash\n(.*?)^```", (REPO / "docs" / "environments.md").read_text(), re.S | re.M)
        if "--env alfworld" in b
    ]
    install, prep, preflight = [line for line in block.splitlines() if line.strip()]
    assert install == "pip install alfworld==0.4.2 && alfworld-download"
    _data(tmp_path / ".cache" / "alfworld", per_split=(("train", 1), ("valid_seen", 1), ("valid_unseen", 1)))
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    env.update(HOME=str(tmp_path), PATH=path, PYTHONPATH=str(REPO))
    out = subprocess.run(prep, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    for split, n in (("train", 6), ("validation", 6), ("test", 6)):
        rows, faults = file_row_faults(tmp_path / "data" / "arise" / "env" / "alfworld" / f"{split}.parquet")
        assert rows == n and not faults, (split, faults)
    out = subprocess.run(preflight, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    folder = tmp_path / ".cache" / "alfworld"
    assert f"OK      ALFWorld data folder {folder}: 6 train, 6 valid_seen, 6 valid_unseen games" in out.stdout
    missing = "environment 'alfworld' needs the package alfworld" in out.stdout
    assert out.returncode == (1 if missing else 0), out.stdout
