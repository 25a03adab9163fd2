"""ALFWorld through the TextEnv interface (recipe/arise/envs/alfworld.py).

Its games are written by the tests in ALFWorld's format (tests/helpers/alfworld_games.py: the real
ones need ``alfworld-download`` and github.com). Without the package (the project's venv and CI: its
planner compiles for 10-17 min at install), the adapter's error and its game checks run, and the
games' play is skipped; where ``alfworld`` imports (``pip install alfworld==0.4.2``), the play runs
through ALFWorld's own code: reset, the admissible actions, a won game of each kind written, an invalid
action, the step limit. docs/environments.md has this test's figures."""

from __future__ import annotations

import importlib.util
import sys
import time

import alfworld_games as gen
import pytest

from recipe.arise.envs.alfworld import AlfWorldEnv, check_game
from recipe.arise.envs.alfworld_data import read_game
from recipe.arise.envs.base import TextEnv, make_env

HAVE_ALFWORLD = importlib.util.find_spec("alfworld") is not None
needs_alfworld = pytest.mark.skipif(not HAVE_ALFWORLD, reason="alfworld not installed (pip install alfworld==0.4.2)")


def test_without_the_package_the_error_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "alfworld", None)  # as where it is not installed
    monkeypatch.setitem(sys.modules, "alfworld.agents.environment.alfred_tw_env", None)
    with pytest.raises(ImportError, match=r"needs the alfworld package .*pip install alfworld==0\.4\.2"):
        make_env("alfworld", data_dir=str(tmp_path))


@pytest.mark.parametrize(
    ("game", "match"),
    [
        ("train/x/y", "must be a dict"),
        ({"path": 3}, "must be a dict with a 'path'"),
        ({"path": "train/pick_and_place_simple-Apple-None-Shelf-1"}, "<split>/<task folder>/<trial>"),
        ({"path": "test/pick_and_place_simple-Apple-None-Shelf-1/trial_1"}, "split of"),
        ({"path": "train/../valid_seen/trial_1"}, "<split>/<task folder>/<trial>"),
        ({"path": "train/pick_and_place_with_movable_recep-Apple-Bowl-Shelf-1/trial_1"}, "movable"),
        ({"path": "train/pick_heat_then_place_in_recep-AppleSliced-None-Shelf-1/trial_1"}, "sliced"),
        ({"path": "train/stack_things-Apple-None-Shelf-1/trial_1"}, "names none of"),
    ],
)
def test_malformed_games_are_refused(game, match):
    with pytest.raises(ValueError, match=match):
        check_game(game)


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """The data folder (two games of each type written in ALFWorld's format) and one environment."""
    data = tmp_path_factory.mktemp("alfworld")
    logic = gen.alfworld_logic()
    games = {}
    for task_type in gen.GOALS | {gen.LOOK: None, gen.PICK_TWO: None}:
        games[task_type] = gen.write_game(data, "valid_unseen", task_type, logic=logic)
    env = make_env("alfworld", data_dir=str(data), step_limit=8)
    yield data, games, env
    env.close()


def _game(folder) -> dict:
    return {"path": "/".join(folder.parts[-3:])}


@needs_alfworld
def test_a_game_resets_to_its_task_and_admissible_actions(played):
    data, games, env = played
    assert isinstance(env, TextEnv) and isinstance(env, AlfWorldEnv)
    game = _game(games["pick_and_place_simple"])
    start = time.perf_counter()
    task, first = env.reset(game)
    print(f"reset {time.perf_counter() - start:.2f} s")
    assert task == "Your task is to: put some apple on shelf." == read_game(data, game["path"])[0]  # data prep's
    assert first.observation.startswith("You are in the middle of a room.") and "Welcome" not in first.observation
    assert "go to countertop 1" in first.admissible and "help" not in first.admissible
    assert not first.done and not first.won and first.invalid is None
    assert env.task_type(game) == "pick"


@needs_alfworld
def test_the_gold_path_of_each_task_type_wins(played):
    _, games, env = played
    for task_type, gold in gen.GOLD.items():
        env.reset(_game(games[task_type]))
        steps, took = [], []
        for action in gold:
            start = time.perf_counter()
            steps.append(env.step(action.format(obj="apple", recep="shelf")))
            took.append(time.perf_counter() - start)
        print(f"{task_type}: steps {min(took) * 1e3:.0f}-{max(took) * 1e3:.0f} ms, last: {steps[-1].observation!r}")
        assert [s.won for s in steps] == [False] * (len(steps) - 1) + [True] and steps[-1].done, task_type
        assert not any(s.invalid for s in steps), task_type


@needs_alfworld
def test_invalid_actions_and_the_step_limit(played):
    _, games, env = played
    _, first = env.reset(_game(games["look_at_obj_in_light"]))
    step = env.step("dance wildly")
    print(f"invalid action answer: {step.observation!r}")
    assert step.invalid is True and step.observation == "Nothing happens." and not step.done
    assert step.admissible == first.admissible  # nothing changed
    assert env.step("go to desk 1").invalid is False
    steps = [env.step("look") for _ in range(6)]  # 8 actions in all: the limit
    assert [s.done for s in steps] == [False] * 5 + [True] and not steps[-1].won


@needs_alfworld
def test_a_missing_game_folder_is_named(played):
    _, _, env = played
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        env.reset({"path": "train/pick_and_place_simple-Apple-None-Shelf-9/trial_9"})


@needs_alfworld
def test_two_environments_play_at_once_in_threads(played):
    """The agent loop plays several episodes of a worker at once, each environment stepped from its own
    thread: each object loads its own copy of the planner's library (fast_downward.load_lib), so games
    in threads do not mix (ScienceWorld's did in one JVM)."""
    from concurrent.futures import ThreadPoolExecutor

    data, games, _ = played

    def play(task_type: str) -> list[bool]:
        env = make_env("alfworld", data_dir=str(data), step_limit=20)
        try:
            env.reset(_game(games[task_type]))
            return [env.step(a.format(obj="apple", recep="shelf")).won for a in gen.GOLD[task_type]]
        finally:
            env.close()

    types = ["pick_two_obj_and_place", "pick_heat_then_place_in_recep", "look_at_obj_in_light"]
    with ThreadPoolExecutor(len(types)) as pool:
        results = list(pool.map(play, types))
    assert all(won[-1] and not any(won[:-1]) for won in results), results


@needs_alfworld
def test_episodes_through_the_agent_loop_s_pool(played, monkeypatch):
    """As arise_env_agent plays a row: the pool builds the environment from the row's options (the data
    folder from ALFWORLD_DATA, as the run scripts export it), behind the runner's time limits, and keeps
    it for the next episode."""
    from recipe.arise.envs.runner import EnvPool

    data, games, _ = played
    monkeypatch.setenv("ALFWORLD_DATA", str(data))
    pool, options = EnvPool(), {"step_limit": 50}
    try:
        for task_type in ("pick_cool_then_place_in_recep", "pick_clean_then_place_in_recep"):
            with pool.episode("alfworld", options, step_timeout_s=30, reset_timeout_s=60) as runner:
                task, _ = runner.reset(_game(games[task_type]))
                assert task.startswith("Your task is to: put a ") and runner.task_type(_game(games[task_type]))
                won = [runner.step(a.format(obj="apple", recep="shelf")).won for a in gen.GOLD[task_type]]
                assert won[-1] and not any(won[:-1]), (task_type, won)
        assert pool.idle() == 1  # one object played both episodes
    finally:
        pool.close_all()
