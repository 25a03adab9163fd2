"""ALFWorld's data folder (``ALFWORLD_DATA``, what ``alfworld-download`` writes), read without the
``alfworld`` package: data prep and the preflight use it on a machine without ALFWorld.

Layout: ``<data>/json_2.1.1/<split>/<task folder>/<trial folder>/`` with ``traj_data.json``,
``initial_state.pddl`` and ``game.tw-pddl`` (the game: the PDDL domain, the grammar with the task
filled in, the problem, and whether it is ``solvable``). The task folder's name starts with the task
type (``pick_heat_then_place_in_recep-Apple-None-Fridge-12``). A game is named by its path under
``json_2.1.1`` (``train/<task folder>/<trial folder>``): the split is its first part.

As ALFWorld's ``AlfredTWEnv`` does, folders with movable receptacles or sliced objects (``movable``
or ``Sliced`` in the path) are not games, nor are games marked unsolvable.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "FETCH",
    "GAME_FILES",
    "JSON_DIR",
    "SPLITS",
    "TASK_TYPES",
    "data_root",
    "excluded",
    "read_game",
    "scan",
    "shown",
    "task_type_of",
]

FETCH = "pip install alfworld==0.4.2 && alfworld-download"  # writes the folder to $ALFWORLD_DATA
INSTALL = "pip install alfworld==0.4.2 (its planner, fast-downward-textworld, compiles at install: ~10-17 min)"
JSON_DIR = "json_2.1.1"
SPLITS = ("train", "valid_seen", "valid_unseen")
GAME_FILES = ("traj_data.json", "initial_state.pddl", "game.tw-pddl")
# ALFWorld's six task types (its folder names) -> the peers' short names, in the peers' table order
TASK_TYPES = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}
_TASK_RHS = re.compile(r'"rhs"\s*:\s*"(Your task is to: [^"]*)"')


def data_root(path: str | os.PathLike | None = None) -> Path:
    """``path``, else ``$ALFWORLD_DATA``, else ALFWorld's own default ``~/.cache/alfworld``."""
    return Path(os.path.expanduser(str(path or os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld")))


def task_type_of(game_path: str) -> str:
    """The short task type (pick, look, clean, heat, cool, pick2) of a game path or task folder name."""
    parts = [p for p in str(game_path).split("/") if p]
    folder = parts[1] if len(parts) >= 2 and parts[0] in SPLITS else parts[0] if parts else ""
    long = folder.split("-", 1)[0]
    if long not in TASK_TYPES:
        raise ValueError(f"alfworld game {game_path!r}: task folder {folder!r} names none of {list(TASK_TYPES)}")
    return TASK_TYPES[long]


def excluded(game_path: str) -> bool:
    """A folder ALFWorld does not play (movable receptacles, sliced objects)."""
    return "movable" in game_path or "Sliced" in game_path


@dataclass
class Scan:
    """The game folders of the splits scanned: ``games[split]`` the paths under ``json_2.1.1``."""

    root: Path
    games: dict[str, list[str]] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)  # what makes the folder unusable, each naming a path
    excluded: int = 0  # movable / sliced folders, not games


def scan(root: Path, splits: tuple[str, ...] = SPLITS) -> Scan:
    """Every game folder of ``splits`` with its files checked (existence only: fast on ~3,800 games)."""
    found = Scan(root)
    base = root / JSON_DIR
    if not root.is_dir():
        found.faults.append(f"ALFWorld data folder {root} does not exist")
        return found
    if not base.is_dir():
        found.faults.append(f"ALFWorld data folder {root} has no {JSON_DIR}/")
        return found
    for split in splits:
        games = found.games.setdefault(split, [])
        folder = base / split
        for task in sorted(folder.iterdir()) if folder.is_dir() else []:
            for trial in sorted(task.iterdir()) if task.is_dir() else []:
                path = f"{split}/{task.name}/{trial.name}"
                if excluded(path):
                    found.excluded += 1
                    continue
                if not trial.is_dir():
                    continue
                try:
                    task_type_of(path)
                except ValueError as error:
                    found.faults.append(str(error))
                    continue
                missing = [name for name in GAME_FILES if not (trial / name).is_file()]
                if missing:
                    found.faults.append(f"game folder {base / path} lacks {', '.join(missing)}")
                    continue
                games.append(path)
        if not games:
            found.faults.append(f"{folder} has no games")
    return found


def shown(faults: list[str], first: int = 5) -> str:
    """The first faults and how many more."""
    more = f"; ... and {len(faults) - first} more" if len(faults) > first else ""
    return "; ".join(faults[:first]) + more


def read_game(root: Path, game_path: str) -> tuple[str, bool]:
    """(the task text the game shows at reset, solvable) from the game's ``game.tw-pddl``."""
    file = root / JSON_DIR / game_path / "game.tw-pddl"
    try:
        data = json.loads(file.read_text())
        grammar = data["grammar"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{file}: not an ALFWorld game file ({type(error).__name__}: {error})") from error
    match = _TASK_RHS.search(grammar) if isinstance(grammar, str) else None
    if not match or "UNKNOWN GOAL" in match.group(1):
        raise ValueError(f"{file}: its grammar has no task ('Your task is to: ...')")
    return match.group(1), bool(data.get("solvable", True))
