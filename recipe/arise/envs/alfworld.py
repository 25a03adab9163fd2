"""ALFWorld (``alfworld==0.4.2``, installed by the user: not in the ``envs`` extra): household tasks
of six types played in TextWorld's PDDL engine, from the user's data folder (``ALFWORLD_DATA``).

One game is ``{"path": "<split>/<task folder>/<trial folder>"}`` under ``$ALFWORLD_DATA/json_2.1.1``
(recipe/arise/envs/alfworld_data.py; data prep writes it). The game file is loaded as ALFWorld's
``AlfredTWEnv`` does (``textworld.start`` with its ``AlfredDemangler``: objects named "apple 1"),
one game at a time, no process of its own (the engine runs in this process's threads: a hung step is
abandoned by the runner's time limit, not killed).

TextWorld parses the game's grammar and PDDL, and every observation it derives, with module-level
tatsu parsers that are not thread-safe (two environments loading at once in threads raised
IndexError inside tatsu; a step derives its text through them too), so every engine call of every
object in the process holds one lock:
the calls take ~20-60 ms a step and ~0.3-0.7 s a load, and the agent loop's episodes of a worker
take turns on them.

The task is the game's "Your task is to: ..." line, the first observation the room without it; the
engine lists every admissible action (its "help" is dropped, as the peers do) and answers any other
text "Nothing happens.": such an action is invalid. Won by the engine's goal check.
"""

from __future__ import annotations

import threading

from recipe.arise.envs.alfworld_data import FETCH, INSTALL, JSON_DIR, SPLITS, data_root, excluded, task_type_of
from recipe.arise.envs.base import Step

__all__ = ["AlfWorldEnv", "check_game"]

WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
TASK_PREFIX = "Your task is to:"
DROPPED = ("help",)  # listed by the engine, no use to a policy
ENGINE_LOCK = threading.Lock()  # TextWorld's shared parsers (module docstring)


def check_game(game: dict) -> str:
    """The game's path under ``json_2.1.1``, or a ValueError naming what is wrong."""
    if not isinstance(game, dict) or not isinstance(game.get("path"), str):
        raise ValueError(f"alfworld game must be a dict with a 'path' string, got {game!r}")
    path = game["path"]
    parts = path.split("/")
    if len(parts) != 3 or parts[0] not in SPLITS or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"alfworld game {game!r}: path must be <split>/<task folder>/<trial>, split of {SPLITS}")
    if excluded(path):
        raise ValueError(f"alfworld game {game!r}: movable or sliced games are not played (ALFWorld skips them)")
    task_type_of(path)
    return path


def split_intro(text: str) -> tuple[str, str]:
    """(task line, observation) of the engine's first text: the banner dropped, the task line apart."""
    text = text.replace(WELCOME, "").strip()
    head, sep, task = text.rpartition(TASK_PREFIX)
    if not sep:
        raise ValueError(f"alfworld: the game's first text has no {TASK_PREFIX!r} line: {text[:200]!r}")
    return f"{TASK_PREFIX} {task.strip()}", head.strip()


class AlfWorldEnv:
    """:class:`recipe.arise.envs.base.TextEnv` over ALFWorld's text engine.

    ``step_limit``: the episode ends (lost) after this many actions (the peers' budget is 50);
    ``data_dir``: the data folder (default ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``)."""

    def __init__(self, step_limit: int = 50, data_dir: str | None = None):
        try:
            import textworld
            from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        except ImportError as exc:
            raise ImportError(f"environment 'alfworld' needs the alfworld package ({exc.name}): {INSTALL}") from exc
        if int(step_limit) < 1:
            raise ValueError(f"alfworld step_limit must be >= 1, got {step_limit}")
        self.step_limit = int(step_limit)
        self.root = data_root(data_dir)
        if not (self.root / JSON_DIR).is_dir():
            raise FileNotFoundError(f"alfworld: no {JSON_DIR}/ in the data folder {self.root} (ALFWORLD_DATA): {FETCH}")
        self._textworld, self._demangler = textworld, AlfredDemangler
        self._engine = None
        self._commands: list[str] = []  # every command the engine takes in this state, "help" included
        self._moves = 0

    def reset(self, game: dict) -> tuple[str, Step]:
        file = self.root / JSON_DIR / check_game(game) / "game.tw-pddl"
        if not file.is_file():
            raise FileNotFoundError(f"alfworld game {game!r}: no {file} ({FETCH})")
        with ENGINE_LOCK:
            if self._engine is None:
                infos = self._textworld.EnvInfos(won=True, admissible_commands=True)
                self._engine = self._textworld.start(str(file), request_infos=infos, wrappers=[self._demangler()])
            else:
                self._engine.load(str(file))
            state = self._engine.reset()
        self._moves = 0
        task, observation = split_intro(state.feedback)
        return task, self._observe(state, observation)

    def step(self, action: str) -> Step:
        if self._engine is None:
            raise RuntimeError("alfworld step before reset")
        self._moves += 1
        invalid = action.strip() not in self._commands  # the engine's own rule: an exact command
        with ENGINE_LOCK:
            state, _, _ = self._engine.step(action)
        step = self._observe(state, state.feedback)
        step.invalid = invalid
        return step

    def _observe(self, state, observation: str) -> Step:
        won = bool(state["won"])
        self._commands = [str(c) for c in state["admissible_commands"]]
        return Step(
            observation=str(observation).strip(),
            done=won or self._moves >= self.step_limit,
            won=won,
            score=float(won),
            admissible=[c for c in self._commands if c not in DROPPED],
            info={"moves": self._moves},
        )

    def task_type(self, game: dict) -> str:
        return task_type_of(check_game(game))

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()  # TextWorld's is a no-op: not behind the lock, which a hung step may hold
            self._engine = None
