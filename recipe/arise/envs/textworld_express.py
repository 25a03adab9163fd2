"""TextWorldExpress (``textworld-express``, the ``envs`` extra): short procedural games in a JVM.

Games: cookingworld, twc, coin, mapreader, arithmetic, sorting, simonsays, peckingorder; one game is
``{"game": name, "seed": int, "fold": "train"|"dev"|"test", "params": "numLocations=3,..."}``
(data prep writes it: recipe/arise/data_prep/env.py). The engine lists every admissible action.

One JVM per environment object (~110 MB): a hung or crashed game is ended by killing its JVM
(recipe/arise/envs/runner.py), which must fail that episode only; a JVM shared by the episodes of a
worker would fail all of them. The per-worker pool keeps the JVMs warm across episodes.
"""

from __future__ import annotations

import json

from recipe.arise.envs.base import Step
from recipe.arise.envs.jvm import JavaVM

__all__ = ["FOLDS", "GAMES", "TextWorldExpressEnv"]

GAMES = ("cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder")
FOLDS = ("train", "dev", "test")
UNKNOWN_ACTION = "Unknown action"  # the engine's answer to an action it cannot parse


def check_game(game: dict) -> tuple[str, int, str, str]:
    """(name, seed, fold, params) of a game dict, or a ValueError naming what is wrong."""
    if not isinstance(game, dict):
        raise ValueError(f"twx game must be a dict, got {type(game).__name__}: {game!r}")
    missing = [key for key in ("game", "seed", "fold") if key not in game]
    if missing:
        raise ValueError(f"twx game {game!r} lacks {missing}")
    name, seed, fold, params = game["game"], game["seed"], game["fold"], game.get("params", "")
    if name not in GAMES:
        raise ValueError(f"twx game {game!r}: unknown game {name!r}; games: {list(GAMES)}")
    if fold not in FOLDS:
        raise ValueError(f"twx game {game!r}: fold must be one of {list(FOLDS)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"twx game {game!r}: seed must be an int")
    if not isinstance(params, str):
        raise ValueError(f"twx game {game!r}: params must be a string like 'numLocations=3,includeDoors=0'")
    return name, seed, fold, params


class TextWorldExpressEnv:
    """:class:`recipe.arise.envs.base.TextEnv` over one TextWorldExpress JVM.

    ``step_limit``: the episode ends (lost) after this many actions, whatever the loop's turn budget;
    ``javaopts``: extra JVM options."""

    def __init__(self, step_limit: int = 100, javaopts: list[str] | None = None):
        from textworld_express.constants import BASEPATH, JAR_PATH

        if int(step_limit) < 1:
            raise ValueError(f"twx step_limit must be >= 1, got {step_limit}")
        self.step_limit = int(step_limit)
        self.vm = JavaVM(JAR_PATH, ["-Xverify:none", *(javaopts or [])], cwd=BASEPATH)
        self.server = self.vm.jvm.textworldexpress.runtime.PythonInterface()
        self._loaded: tuple[str, str] | None = None  # (game, params) of the loaded generator
        self._moves = 0

    def reset(self, game: dict) -> tuple[str, Step]:
        name, seed, fold, params = check_game(game)
        if self._loaded != (name, params):
            error = self.server.load(name, params)
            if error:  # e.g. an unknown game parameter
                raise ValueError(f"twx game {game!r}: {error}")
            self._loaded = (name, params)
        self._moves = 0
        state = json.loads(self.server.generateNewGameJSON(seed, fold, False))
        return str(self.server.getTaskDescription()), self._step(state)

    def step(self, action: str) -> Step:
        if self._loaded is None:
            raise RuntimeError("twx step before reset")
        self._moves += 1
        state = json.loads(self.server.stepJSON(action))
        step = self._step(state)
        if state["observation"].startswith(UNKNOWN_ACTION):
            step.invalid = True  # else None: judged by membership in the admissible actions
        return step

    def _step(self, state: dict) -> Step:
        won = bool(state["tasksuccess"])
        done = won or bool(state["taskfailure"]) or self._moves >= self.step_limit
        return Step(
            observation=str(state["observation"]).strip(),
            done=done,
            won=won,
            score=float(state["score"]),
            admissible=[str(a) for a in state["validActions"]],
            info={"moves": self._moves, "lost": bool(state["taskfailure"])},
        )

    def task_type(self, game: dict) -> str:
        return check_game(game)[0]

    def close(self) -> None:
        self.vm.kill()
