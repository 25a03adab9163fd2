"""Tiny env assets for the CPU end-to-end run in ScienceWorld (``ENV=scienceworld``).

The world of :mod:`recipe.arise.cpu.tiny_env` (the tiny Qwen3, a tokenizer learned on the game's
text, a warm start on the episode format from a noisy expert) on ScienceWorld's
``lifespan-longest-lived`` task, simplification ``easy``: the animals are outside, and focusing on
the one with the longest life span wins (score 100), on anything else loses (score -100). The
expert teleports to the outside (``teleport to outside``: ``easy`` allows it) and focuses on the
animal of the task's gold path: 2 actions, within a turn budget of :data:`TURNS`. Unlike the coin
game, what wins is knowledge (which animal lives longest), which the skills carry: the strategy
skills name the long-lived animals, and the summary of a won episode is taught to name the animal
it focused on.

usage: python -m recipe.arise.cpu.tiny_env_sw OUT_DIR | --cached
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from recipe.arise.cpu import tiny_env_game

ENV = "scienceworld"
GAME = "lifespan-longest-lived"
TASK_TYPE = GAME
TURNS = 3  # teleport, focus, and one spare reply for a miss
STEP_LIMIT = 10  # the game's own limit (lost after as many actions), beyond the turn budget
TRAIN_GAMES = 24
VAL_GAMES = 8
GO_OUTSIDE = "teleport to outside"
P_UNAIDED = 0.65
_ARRIVED = re.compile(r"^You (?:teleport|move) to the (.+?)\.")

SKILLS = [
    {
        "skill_name": "focus_longest_lived",
        "problem_type": "general",
        "key_insight": "Go outside; focus on the animal that lives longest",
        "method": ["teleport to outside", "Focus on it"],
        "check": "You focus on it",
    },
    {
        "skill_name": "long_lived_animals",
        "problem_type": "general",
        "key_insight": "Tortoises, parrots, crocodiles outlive mice",
        "method": ["teleport to outside", "Focus on the longest-lived"],
        "check": "You focus on it",
    },
]


def animal(target: str) -> str:
    """The animal of a focus target: "egg giant tortoise" -> "giant tortoise", "baby baby wolf" -> "wolf"."""
    words = target.split()
    while words and words[0] in ("baby", "egg"):
        words = words[1:]
    return " ".join(words) or target


def distilled_skill(target: str) -> dict:
    """What the summary rollout is taught to write for a won episode: the strategy, naming the
    animal it focused on, so every distilled skill is its own document."""
    return {
        "skill_name": "longest_lived",
        "problem_type": "general",
        "key_insight": f"Focus on the longest-lived: the {animal(target)}",
        "method": ["teleport to outside", f"focus on {target}"],
        "check": "You focus on it",
    }


def write_data(data_dir: Path) -> tuple[list[dict], list[dict]]:
    """The run's games through the project's data prep: train games from the task's train
    variations, validation (val.parquet) from its test variations; their ``game`` dicts."""
    import pandas as pd

    from recipe.arise.data_prep import env as env_prep

    data_dir = Path(data_dir)
    env_prep.main(
        ["--env", ENV, "--out", str(data_dir), "--games", GAME, "--train", str(TRAIN_GAMES),
         "--test", str(VAL_GAMES), "--step-limit", str(STEP_LIMIT)]
    )  # fmt: skip
    (data_dir / "test.parquet").replace(data_dir / "val.parquet")  # the smoke run's name for it
    return tuple(
        [json.loads(info["env"])["game"] for info in pd.read_parquet(data_dir / f"{name}.parquet")["extra_info"]]
        for name in ("train", "val")
    )


def expert_action(where: str, target: str) -> str:
    """Teleport to the outside, then focus on the gold path's animal."""
    return f"focus on {target}" if where == "outside" else GO_OUTSIDE


def arrived(observation: str, where: str) -> str:
    """The location after an observation ("You teleport to the outside." -> "outside")."""
    found = _ARRIVED.match(observation.strip())
    return found.group(1) if found else where


@dataclass
class Episode:
    messages: list[dict]
    won: bool
    transcript: str
    hint: tuple[str, ...]  # distilled_skill's arguments: the animal focused on


class Player(tiny_env_game.Player):
    """Plays the lifespan games through the env agent's own adapter (one ScienceWorld JVM). The
    game is deterministic given its actions, so the steps of each action prefix are kept: a reset
    (0.4-2 s) only for a prefix not played before."""

    def __init__(self):
        from recipe.arise.envs.scienceworld import ScienceWorldEnv

        self.env = ScienceWorldEnv(step_limit=STEP_LIMIT)
        self._steps: dict[tuple, object] = {}
        self._targets: dict[tuple, str] = {}

    @staticmethod
    def _key(g: dict) -> tuple:
        return g["task"], g["variation"], g.get("simplification", "easy")

    def target(self, g: dict) -> str:
        """The focus target of the task's gold path (e.g. "egg giant tortoise")."""
        key = self._key(g)
        if key not in self._targets:
            self.env.server.load(key[0], key[1], key[2], True)
            gold = [str(a) for a in self.env.server.getGoldActionSequence()]
            focus = [a for a in gold if a.startswith("focus on ")]
            if not focus:
                raise RuntimeError(f"scienceworld {g}: no focus action in the gold path {gold}")
            self._targets[key] = focus[-1].removeprefix("focus on ")
        return self._targets[key]

    def _after(self, g: dict, actions: tuple[str, ...]):
        """(task, step) after ``actions`` from the game's start."""
        key = (self._key(g), actions)
        if key not in self._steps:
            task, step = self.env.reset(g)
            self._steps[(self._key(g), ())] = (task, step)
            for k in range(len(actions)):
                step = self.env.step(actions[k])
                self._steps[(self._key(g), actions[: k + 1])] = (task, step)
        return self._steps[key]

    def task(self, g: dict) -> str:
        return self._after(g, ())[0]

    def skill_hint(self, g: dict) -> tuple[str, ...]:
        return (self.target(g),)

    def play(self, g: dict, user_turn: str, p_expert: float, rng: random.Random) -> Episode:
        """One episode of the noisy expert: its action with probability ``p_expert``, else a random
        action of those the turn lists; at most TURNS replies."""
        from recipe.arise.core.env_prompts import ACTION_PREFIX, MAX_LISTED_ACTIONS, first_turn, observation_turn

        target = self.target(g)
        _, step = self._after(g, ())
        messages = [{"role": "user", "content": first_turn(user_turn, step.observation, step.admissible)}]
        lines, actions, where = [("OBSERVATION", step.observation)], (), "start"
        for _ in range(TURNS):
            action = expert_action(where, target)
            if rng.random() >= p_expert:
                action = rng.choice(step.admissible[:MAX_LISTED_ACTIONS])
            messages.append({"role": "assistant", "content": f"{ACTION_PREFIX} {action}"})
            actions += (action,)
            _, step = self._after(g, actions)
            where = arrived(step.observation, where)
            lines += [("ACTION", action), ("OBSERVATION", step.observation)]
            if step.done:
                break
            messages.append({"role": "user", "content": observation_turn(step.observation, step.admissible)})
        if messages[-1]["role"] == "user":  # the budget ran out: no reply follows the last observation
            messages.pop()
        return Episode(messages, step.won, tiny_env_game.transcript(lines), (target,))


def world():
    """This world as :class:`recipe.arise.cpu.tiny_env.World`."""
    import sys

    from recipe.arise.cpu.tiny_env import World

    # 2 actions to win (the coin game: 1-2): a higher unaided rate keeps wins as frequent (~0.4)
    return World(ENV, sys.modules[__name__], SKILLS, distilled_skill, 4096, ("envs/scienceworld.py",), P_UNAIDED)


def cached_assets(root=None) -> Path:
    from recipe.arise.cpu import tiny_env

    return tiny_env.cached_assets(root, world())


def cache_folder(root=None) -> Path:
    from recipe.arise.cpu import tiny_env

    return tiny_env.cache_folder(root, world())


def main(argv=None):
    from recipe.arise.cpu import asset_cache, tiny_env

    def build(out_dir, **kw):
        return tiny_env.build_env_assets(out_dir, world=world(), **kw)

    asset_cache.variant_main(argv, __doc__, build, cached_assets, sft_steps=240)


if __name__ == "__main__":
    main()
