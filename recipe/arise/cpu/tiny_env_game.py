"""The tiny env world's game (TextWorldExpress coin collector in two rooms): its parquet rows, its
expert and the episodes the warm start of :mod:`recipe.arise.cpu.tiny_env` learns from.

An episode here is rendered exactly as ``arise_env_agent`` renders it
(:mod:`recipe.arise.core.env_prompts`): the row's user turn (a skill injected or not) with the first
observation and the admissible actions, ``Action: <action>`` replies, one user turn per later
observation, at most :data:`TURNS` replies.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

GAME = "coin"
TASK_TYPE = GAME
# two rooms, no distractors or doors: the gold path is "take coin" or "move <dir>, take coin"
PARAMS = "numLocations=2,numDistractorItems=0,includeDoors=0,limitInventorySize=0"
TURNS = 3  # the turn budget (multi_turn.max_assistant_turns): a miss leaves room for one more try
STEP_LIMIT = 10  # the game's own limit (lost after as many actions), beyond the turn budget
TRAIN_GAMES = 48
VAL_GAMES = 8
_REVERSE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def write_data(data_dir: Path) -> tuple[list[dict], list[dict]]:
    """The run's games through the project's data prep (recipe.arise.data_prep.env): train games from
    TWX's train seeds, validation (val.parquet) from its test seeds; their ``game`` dicts."""
    import pandas as pd

    from recipe.arise.data_prep import env as env_prep

    data_dir = Path(data_dir)
    env_prep.main(
        ["--env", "twx", "--out", str(data_dir), "--games", GAME, "--params", f"{GAME}:{PARAMS}",
         "--train", str(TRAIN_GAMES), "--test", str(VAL_GAMES), "--step-limit", str(STEP_LIMIT)]
    )  # fmt: skip
    (data_dir / "test.parquet").replace(data_dir / "val.parquet")  # the smoke run's name for it
    return tuple(
        [json.loads(info["env"])["game"] for info in pd.read_parquet(data_dir / f"{name}.parquet")["extra_info"]]
        for name in ("train", "val")
    )


def transcript(lines: list[tuple[str, str]]) -> str:
    """An episode's text for the summary prompt, as arise_env_agent writes it (its Episode.as_dict)."""
    return "\n".join(f"{label}: {' '.join(str(text).split())}" for label, text in lines)


def expert_action(admissible: list[str], gold_moves: list[str], moves: list[str]) -> str:
    """The gold action from here: take the coin in view; else the gold path's next move while on it;
    else back the way we came."""
    if "take coin" in admissible:
        return "take coin"
    if moves == gold_moves[: len(moves)] and len(moves) < len(gold_moves):
        return gold_moves[len(moves)]
    if moves:
        return "move " + _REVERSE[moves[-1].split()[-1]]
    raise RuntimeError(f"no expert action: admissible {admissible}, gold moves {gold_moves}")


@dataclass
class Episode:
    messages: list[dict]
    won: bool
    transcript: str
    coin_room: str
    coin_direction: str | None

    @property
    def hint(self) -> tuple[str, str | None]:
        """tiny_env.distilled_skill's arguments for this episode."""
        return self.coin_room, self.coin_direction


class Player:
    """Plays the coin games through the env agent's own adapter (one TWX JVM), so the warm start
    sees the observations and admissible lists exactly as the run does."""

    def __init__(self):
        from recipe.arise.envs.textworld_express import TextWorldExpressEnv

        self.env = TextWorldExpressEnv(step_limit=STEP_LIMIT)

    def task(self, g: dict) -> str:
        return self.env.reset(g)[0]

    def gold_moves(self, g: dict) -> list[str]:
        """The moves of TWX's gold action sequence of ``g`` (reset loads its generator first)."""
        self.env.reset(g)
        self.env.server.generateNewGameJSON(g["seed"], g["fold"], True)
        return [str(a) for a in self.env.server.getGoldActionSequence() if str(a).startswith("move ")]

    def coin_room(self, g: dict) -> tuple[str, str | None]:
        """(the room the coin is in, the move from the start there or None)."""
        moves = self.gold_moves(g)
        _, step = self.env.reset(g)
        for a in moves:
            step = self.env.step(a)
        return _room(step.observation), (moves[0].split()[-1] if moves else None)

    def skill_hint(self, g: dict) -> tuple[str, str | None]:
        """tiny_env.distilled_skill's arguments for a won episode of ``g``."""
        return self.coin_room(g)

    def play(self, g: dict, user_turn: str, p_expert: float, rng: random.Random) -> Episode:
        """One episode of the noisy expert: its action with probability ``p_expert``, else a random
        admissible one; at most TURNS replies."""
        from recipe.arise.core.env_prompts import ACTION_PREFIX, first_turn, observation_turn

        gold_moves = self.gold_moves(g)
        _, step = self.env.reset(g)
        messages = [{"role": "user", "content": first_turn(user_turn, step.observation, step.admissible)}]
        lines, moves, room = [("OBSERVATION", step.observation)], [], ""
        for _ in range(TURNS):
            action = expert_action(step.admissible, gold_moves, moves)
            if rng.random() >= p_expert:
                action = rng.choice(step.admissible)
            messages.append({"role": "assistant", "content": f"{ACTION_PREFIX} {action}"})
            here = _room(step.observation) if step.observation.startswith("You are in") else room
            room = here or room
            step = self.env.step(action)
            lines += [("ACTION", action), ("OBSERVATION", step.observation)]
            if action.startswith("move "):
                moves.append(action)
            if step.done:
                break
            messages.append({"role": "user", "content": observation_turn(step.observation, step.admissible)})
        if messages[-1]["role"] == "user":  # the budget ran out: no reply follows the last observation
            messages.pop()
        direction = gold_moves[0].split()[-1] if gold_moves else None
        return Episode(messages, step.won, transcript(lines), room if step.won else "", direction)

    def play_model(self, g: dict, user_turn: str, reply) -> tuple[bool, str]:
        """One episode of a policy, ``reply(messages) -> text``, as the agent loop plays it (a reply
        without an action line is not played); (won, transcript)."""
        from recipe.arise.core.env_prompts import first_turn, observation_turn, parse_action

        _, step = self.env.reset(g)
        messages = [{"role": "user", "content": first_turn(user_turn, step.observation, step.admissible)}]
        lines = [("OBSERVATION", step.observation)]
        for _ in range(TURNS):
            text = reply(messages)
            action = parse_action(text)
            messages.append({"role": "assistant", "content": text})
            lines.append(("ACTION", action or "(none)"))
            if action:
                step = self.env.step(action)
                lines.append(("OBSERVATION", step.observation))
                if step.done:
                    break
            messages.append({"role": "user", "content": observation_turn(step.observation, step.admissible)})
        return step.won, transcript(lines)

    def close(self):
        self.env.close()


def _room(observation: str) -> str:
    """The room an observation is in ("You are in the pantry. ..." -> "pantry")."""
    head = observation.strip().split(".")[0]
    return head.removeprefix("You are in the ").strip() or "room"
