"""Environment games -> ``{out}/train.parquet``, ``{out}/test.parquet`` (and ``validation.parquet``).

One row per game (docs/environments.md): the task description as the user turn, and in
``extra_info.env`` the game the agent loop resets to. Train and evaluation games come from the
environment's own splits and never overlap (checked before writing):

* ``--env twx`` (TextWorldExpress): per game type, train seeds from ``getValidSeedsTrain`` played
  with fold "train", validation from the dev seeds (fold "dev"), test from the test seeds (fold
  "test"); small worlds by default (``TWX_PARAMS``, ``--params game:k=v,...`` to change one).
* ``--env scienceworld``: per task, its train / dev / test variations, simplification "easy".
* ``--env alfworld``: the games of the user's data folder (``--data-dir``, default ``$ALFWORLD_DATA``),
  ALFWorld's splits train / valid_seen / valid_unseen -> train / validation / test; every game of
  each split unless ``--train`` / ``--validation`` / ``--test`` ask for fewer per task type.

TWX and ScienceWorld games are started once here for their task description, which also checks that
they start (TextWorldExpress: ~20 ms a game; ScienceWorld: ~0.2-2 s a game). ALFWorld games are read
from their files (the task is the game's own "Your task is to: ..." line; no ``alfworld`` needed).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from recipe.arise.data_prep.records import DataPrepError
from recipe.arise.data_prep.schema import make_env_row
from recipe.arise.envs.alfworld_data import FETCH, TASK_TYPES, data_root, read_game, scan, shown, task_type_of

TWX_PARAMS = {  # small worlds: 3-15 steps of gold path
    "coin": "numLocations=3,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
    "cookingworld": "numLocations=2,numIngredients=1,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
    "mapreader": (
        "numLocations=3,maxDistanceApart=2,maxDistractorItemsPerLocation=0,includeDoors=0,limitInventorySize=0"
    ),
    "twc": "numLocations=1,numItemsToPutAway=1,includeDoors=0,limitInventorySize=0",
    "sorting": "",
    "arithmetic": "",
    "simonsays": "",
    "peckingorder": "",
}
DEFAULT_GAMES = {
    "twx": "coin,cookingworld,mapreader,twc",
    "scienceworld": "find-living-thing,boil,melt,use-thermometer",
    "alfworld": ",".join(TASK_TYPES.values()),
}
SPLITS = (("train", "train"), ("validation", "dev"), ("test", "test"))  # (output file, the environment's split)
# ALFWorld's folders: test is valid_unseen, the peers' evaluation games (134 in the real data)
ALFWORLD_SPLITS = (("train", "train"), ("validation", "valid_seen"), ("test", "valid_unseen"))
COUNTS = {"train": 100, "validation": 0, "test": 20}  # games per type when not asked (alfworld: all)


def parse_params(values: list[str]) -> dict[str, str]:
    """``--params coin:numLocations=5,includeDoors=1`` -> {"coin": "numLocations=5,includeDoors=1"}."""
    params = dict(TWX_PARAMS)
    for value in values:
        game, sep, text = value.partition(":")
        if not sep or game not in TWX_PARAMS:
            raise DataPrepError(f"--params {value!r}: expected GAME:key=value,... with GAME in {sorted(TWX_PARAMS)}")
        params[game] = text
    return params


def _pick(pool: list[int], n: int, rng: random.Random, what: str) -> list[int]:
    if n > len(pool):
        raise DataPrepError(f"{what}: {n} games asked, the split has {len(pool)}")
    return sorted(rng.sample(pool, n))


def twx_games(args) -> dict[str, list[tuple[dict, str, str]]]:
    """Per output split: (game, task description, task type) of each TWX game."""
    from recipe.arise.envs.textworld_express import TextWorldExpressEnv

    params = parse_params(args.params)
    unknown = [name for name in args.games if name not in TWX_PARAMS]
    if unknown:  # before the JVM starts
        raise DataPrepError(f"twx: unknown game(s) {unknown}; games: {sorted(TWX_PARAMS)}")
    env = TextWorldExpressEnv()
    try:
        seeds = {
            "train": env.server.getSeedsTrain(),
            "dev": env.server.getSeedsDev(),
            "test": env.server.getSeedsTest(),
        }
        seeds = {fold: [int(s) for s in found] for fold, found in seeds.items()}
        out: dict[str, list] = {split: [] for split, _ in SPLITS}
        for name in args.games:
            rng = random.Random(f"{args.seed}/{name}")
            for split, fold in SPLITS:
                for seed in _pick(seeds[fold], args.count[split], rng, f"twx {name} {fold} seeds"):
                    game = {"game": name, "seed": seed, "fold": fold, "params": params[name]}
                    try:
                        task, _ = env.reset(game)
                    except ValueError as error:  # e.g. a parameter the game does not take
                        raise DataPrepError(str(error)) from error
                    out[split].append((game, task, name))
        return out
    finally:
        env.close()


def scienceworld_games(args) -> dict[str, list[tuple[dict, str, str]]]:
    """Per output split: (game, task description, task type) of each ScienceWorld game."""
    from recipe.arise.envs.scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv()
    try:
        out: dict[str, list] = {split: [] for split, _ in SPLITS}
        for task in args.games:
            if task not in env.tasks:
                raise DataPrepError(f"scienceworld: unknown task {task!r}; tasks: {env.tasks}")
            variations = env.variations(task)
            rng = random.Random(f"{args.seed}/{task}")
            for split, fold in SPLITS:
                for variation in _pick(variations[fold], args.count[split], rng, f"scienceworld {task} {fold}"):
                    game = {"task": task, "variation": variation, "simplification": "easy"}
                    out[split].append((game, env.describe(game), task))
        return out
    finally:
        env.close()


def alfworld_games(args) -> dict[str, list[tuple[dict, str, str]]]:
    """Per output split: (game, task, task type) of each ALFWorld game of the data folder."""
    unknown = [t for t in args.games if t not in TASK_TYPES.values()]
    if unknown:
        raise DataPrepError(f"alfworld: unknown task type(s) {unknown}; types: {list(TASK_TYPES.values())}")
    root = data_root(args.data_dir)
    found = scan(root, tuple(fold for _, fold in ALFWORLD_SPLITS))
    if found.faults:
        raise DataPrepError(f"alfworld data folder {root} is incomplete: {shown(found.faults)} (fetch it: {FETCH})")
    out: dict[str, list] = {split: [] for split, _ in ALFWORLD_SPLITS}
    for split, fold in ALFWORLD_SPLITS:
        unsolvable = 0
        by_type: dict[str, list[tuple[dict, str, str]]] = {t: [] for t in args.games}
        for path in found.games[fold]:
            task_type = task_type_of(path)
            if task_type not in by_type:
                continue
            try:
                task, solvable = read_game(root, path)
            except ValueError as error:
                raise DataPrepError(str(error)) from error
            if not solvable:  # as AlfredTWEnv: a game its check found unsolvable is not played
                unsolvable += 1
                continue
            by_type[task_type].append(({"path": path}, task, task_type))
        for task_type, games in by_type.items():
            n = args.count[split]
            if n is not None:
                rng = random.Random(f"{args.seed}/{task_type}")
                games = [games[i] for i in _pick(list(range(len(games))), n, rng, f"alfworld {task_type} {fold}")]
            out[split] += games
        if unsolvable:
            print(f"[data_prep] alfworld {fold}: {unsolvable} game(s) marked unsolvable not used")
    if found.excluded:
        print(f"[data_prep] alfworld: {found.excluded} movable/sliced folder(s) not used (ALFWorld skips them)")
    return out


def check_disjoint(games: dict[str, list[tuple[dict, str, str]]]) -> None:
    """No game is in two splits (train vs validation vs test); an ALFWorld trial by its folder, whatever
    its split."""
    seen: dict[str, str] = {}
    for split, found in games.items():
        for game, _, _ in found:
            key = game["path"].split("/", 1)[1] if set(game) == {"path"} else repr(sorted(game.items()))
            if seen.setdefault(key, split) != split:
                raise DataPrepError(f"game {game} is in both {seen[key]} and {split}")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True, choices=("twx", "scienceworld", "alfworld"))
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--games", default=None, help=f"comma-separated game types / tasks (default: {DEFAULT_GAMES})")
    p.add_argument("--train", type=int, default=None, help="train games per type (default 100; alfworld: all)")
    p.add_argument(
        "--validation", type=int, default=None, help="validation games per type, dev split (default 0; alfworld: all)"
    )
    p.add_argument("--test", type=int, default=None, help="test games per type (default 20; alfworld: all)")
    p.add_argument("--params", action="append", default=[], help="twx: GAME:key=value,... (repeatable)")
    p.add_argument("--step-limit", type=int, default=50, help="actions per episode before it is lost (default 50)")
    p.add_argument("--seed", type=int, default=0, help="which games of each split are drawn (default 0)")
    p.add_argument("--data-dir", default=None, help="alfworld: the data folder (default $ALFWORLD_DATA)")
    return p


def main(argv=None) -> list[Path]:
    from recipe.arise.data_prep.common import write_parquet_atomic

    args = make_parser().parse_args(argv)
    args.games = [g for g in (args.games or DEFAULT_GAMES[args.env]).split(",") if g]
    args.count = {"train": args.train, "validation": args.validation, "test": args.test}
    if args.env != "alfworld":
        args.count = {split: COUNTS[split] if n is None else n for split, n in args.count.items()}
    if any(n is not None and n < 0 for n in args.count.values()) or args.step_limit < 1:
        raise DataPrepError("--train/--validation/--test must be >= 0 and --step-limit >= 1")
    if args.params and args.env != "twx":
        raise DataPrepError("--params is for --env twx")
    if args.data_dir and args.env != "alfworld":
        raise DataPrepError("--data-dir is for --env alfworld")
    games = {"twx": twx_games, "scienceworld": scienceworld_games, "alfworld": alfworld_games}[args.env](args)
    check_disjoint(games)
    options = {"step_limit": args.step_limit}
    written = []
    for split, found in games.items():
        if not found:
            continue
        rows = [
            make_env_row(args.env, game, options, task, task_type, split=split, index=i)
            for i, (game, task, task_type) in enumerate(found)
        ]
        written.append(write_parquet_atomic(rows, Path(args.out) / f"{split}.parquet"))
        print(f"[data_prep] wrote {written[-1]} ({len(rows)} {args.env} games: {', '.join(args.games)})")
    return written


if __name__ == "__main__":
    from recipe.arise.data_prep.common import run_main

    sys.exit(run_main(main))
