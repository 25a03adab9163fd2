"""ALFWorld's data folder read without the package (recipe/arise/envs/alfworld_data.py): the six task
types from the folder names, the game folders of each split with their files checked, and the task a
game shows, on folders the tests write in ALFWorld's format (tests/helpers/alfworld_games.py)."""

from __future__ import annotations

import json

import alfworld_games as gen
import pytest

from recipe.arise.envs.alfworld_data import FETCH, TASK_TYPES, data_root, read_game, scan, task_type_of


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("pick_and_place_simple-AlarmClock-None-Desk-307", "pick"),
        ("look_at_obj_in_light-AlarmClock-None-DeskLamp-301", "look"),
        ("pick_clean_then_place_in_recep-Apple-None-Fridge-12", "clean"),
        ("pick_heat_then_place_in_recep-Egg-None-Fridge-13", "heat"),
        ("pick_cool_then_place_in_recep-Bread-None-CounterTop-1", "cool"),
        ("pick_two_obj_and_place-Book-None-Sofa-212", "pick2"),
        ("valid_unseen/pick_two_obj_and_place-Book-None-Sofa-212/trial_T1", "pick2"),
    ],
)
def test_the_six_task_types_from_the_folder_name(name, short):
    assert task_type_of(name) == short


def test_the_types_in_the_peers_order_and_an_unknown_type_refused():
    assert list(TASK_TYPES.values()) == ["pick", "look", "clean", "heat", "cool", "pick2"]
    for name in ("pick_and_place_with_movable_recep-Apple-Bowl-Shelf-1", "pick-Apple", "", "train/x/y"):
        with pytest.raises(ValueError, match="names none of"):
            task_type_of(name)


def test_the_data_folder_is_alfworld_s_variable_else_its_default(monkeypatch, tmp_path):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert data_root() == tmp_path and data_root("/x") == data_root("/x")
    monkeypatch.delenv("ALFWORLD_DATA")
    assert str(data_root()).endswith(".cache/alfworld")
    assert "alfworld-download" in FETCH


def _complete(root):
    for split in ("train", "valid_seen", "valid_unseen"):
        gen.write_game(root, split, "pick_and_place_simple", scene=1 if split == "train" else 2)
        gen.write_game(root, split, "pick_cool_then_place_in_recep", scene=3)


def test_a_complete_folder_lists_its_games_per_split(tmp_path):
    _complete(tmp_path)
    gen.write_game(tmp_path, "train", "pick_heat_then_place_in_recep", obj="AppleSliced")  # ALFWorld skips it
    found = scan(tmp_path)
    assert found.faults == [] and found.excluded == 1
    assert {split: len(games) for split, games in found.games.items()} == {
        "train": 2,
        "valid_seen": 2,
        "valid_unseen": 2,
    }
    assert found.games["train"][0] == "train/pick_and_place_simple-Apple-None-Shelf-1/trial_T20190001_000000_000001"


def test_a_missing_or_incomplete_folder_is_named(tmp_path):
    assert scan(tmp_path / "nowhere").faults == [f"ALFWorld data folder {tmp_path / 'nowhere'} does not exist"]
    assert scan(tmp_path).faults == [f"ALFWorld data folder {tmp_path} has no json_2.1.1/"]
    _complete(tmp_path)
    gen.write_game(tmp_path, "valid_seen", "pick_two_obj_and_place", skip=("game.tw-pddl", "initial_state.pddl"))
    for game in (tmp_path / "json_2.1.1" / "valid_unseen").iterdir():
        for trial in game.iterdir():
            for file in trial.iterdir():
                file.unlink()
            trial.rmdir()
        game.rmdir()
    faults = scan(tmp_path).faults
    assert len(faults) == 2
    assert faults[0].endswith("/valid_seen/pick_two_obj_and_place-Apple-None-Shelf-1/"
                              "trial_T20190001_000000_000001 lacks initial_state.pddl, game.tw-pddl")  # fmt: skip
    assert faults[1] == f"{tmp_path / 'json_2.1.1' / 'valid_unseen'} has no games"


def test_the_task_is_the_game_s_own_line(tmp_path):
    folder = gen.write_game(tmp_path, "train", "pick_heat_then_place_in_recep", obj="Egg", recep="CounterTop")
    path = "/".join(folder.parts[-3:])
    assert read_game(tmp_path, path) == ("Your task is to: put a hot egg in countertop.", True)
    data = json.loads((folder / "game.tw-pddl").read_text())
    (folder / "game.tw-pddl").write_text(json.dumps({**data, "solvable": False}))
    assert read_game(tmp_path, path)[1] is False
    (folder / "game.tw-pddl").write_text(json.dumps({**data, "grammar": "Your task is to: UNKNOWN GOAL."}))
    with pytest.raises(ValueError, match="has no task"):
        read_game(tmp_path, path)
    (folder / "game.tw-pddl").write_text("{not json")
    with pytest.raises(ValueError, match="not an ALFWorld game file"):
        read_game(tmp_path, path)
