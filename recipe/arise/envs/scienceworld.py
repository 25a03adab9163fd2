"""ScienceWorld (``scienceworld``, the ``envs`` extra): 30 long-horizon science tasks in a JVM.

One game is ``{"task": name, "variation": int, "simplification": "easy"}`` (data prep writes it:
recipe/arise/data_prep/env.py); the task's variations are split train/dev/test by the package.
Won at score 100, lost (done) at a negative score. The engine's list of valid actions is not
exhaustive, so an action is invalid by the engine's own answer, not by membership.

One JVM per environment object, one game at a time: several games in one JVM stepped from threads
gave wrong scores (docs/environments.md). The JVM runs with a 512 MB heap and the serial collector
(~0.4 GB resident instead of ~1.5 GB).
"""

from __future__ import annotations

from recipe.arise.envs.base import Step
from recipe.arise.envs.jvm import JavaVM

__all__ = ["JAVA_OPTS", "ScienceWorldEnv"]

JAVA_OPTS = ["-Xmx512m", "-XX:+UseSerialGC"]
NO_MATCH = "No known action matches that input."  # the engine's answer to an action it cannot parse
WON_SCORE = 100


def check_game(game: dict) -> tuple[str, int, str]:
    """(task, variation, simplification) of a game dict, or a ValueError naming what is wrong."""
    if not isinstance(game, dict):
        raise ValueError(f"scienceworld game must be a dict, got {type(game).__name__}: {game!r}")
    missing = [key for key in ("task", "variation") if key not in game]
    if missing:
        raise ValueError(f"scienceworld game {game!r} lacks {missing}")
    task, variation, simplification = game["task"], game["variation"], game.get("simplification", "easy")
    if not isinstance(task, str) or not task:
        raise ValueError(f"scienceworld game {game!r}: task must be a task name")
    if isinstance(variation, bool) or not isinstance(variation, int) or variation < 0:
        raise ValueError(f"scienceworld game {game!r}: variation must be an int >= 0")
    if not isinstance(simplification, str):
        raise ValueError(f"scienceworld game {game!r}: simplification must be a string like 'easy'")
    return task, variation, simplification


class ScienceWorldEnv:
    """:class:`recipe.arise.envs.base.TextEnv` over one ScienceWorld JVM.

    ``step_limit``: the episode ends (lost) after this many actions; ``javaopts``: the JVM's options."""

    def __init__(self, step_limit: int = 100, javaopts: list[str] | None = None):
        from scienceworld.constants import BASEPATH, JAR_PATH

        if int(step_limit) < 1:
            raise ValueError(f"scienceworld step_limit must be >= 1, got {step_limit}")
        self.step_limit = int(step_limit)
        self.vm = JavaVM(JAR_PATH, JAVA_OPTS if javaopts is None else list(javaopts), cwd=BASEPATH)
        self.server = self.vm.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        self.tasks = [str(t) for t in self.server.getTaskNames()]
        self._loaded = False
        self._moves = 0

    def variations(self, task: str) -> dict[str, list[int]]:
        """The task's variations per split (``train``, ``dev``, ``test``); loads the task."""
        self._load(task, 0, "easy")
        server = self.server
        splits = {"train": server.getVariationsTrain(), "dev": server.getVariationsDev()}
        splits["test"] = server.getVariationsTest()
        return {split: [int(v) for v in found] for split, found in splits.items()}

    def _load(self, task: str, variation: int, simplification: str) -> None:
        if task not in self.tasks:
            raise ValueError(f"scienceworld: unknown task {task!r}; tasks: {self.tasks}")
        top = int(self.server.getTaskMaxVariations(task))
        if variation >= top:
            raise ValueError(f"scienceworld task {task!r} has variations 0..{top - 1}, not {variation}")
        self.server.load(task, variation, simplification, False)

    def describe(self, game: dict) -> str:
        """The game's task description (loads it without the reset's first step: data prep)."""
        self._load(*check_game(game))
        self._loaded = False
        return str(self.server.getTaskDescription())

    def reset(self, game: dict) -> tuple[str, Step]:
        task, variation, simplification = check_game(game)
        self._load(task, variation, simplification)
        self._loaded = True
        self.server.reset()
        self._moves = 0
        first = self._observe(str(self.server.step("look around")))  # the package's reset does the same
        return str(self.server.getTaskDescription()), first

    def step(self, action: str) -> Step:
        if not self._loaded:
            raise RuntimeError("scienceworld step before reset")
        self._moves += 1
        observation = str(self.server.step(action))
        step = self._observe(observation)
        step.invalid = observation.strip() == NO_MATCH
        return step

    def _observe(self, observation: str) -> Step:
        score = int(round(100 * float(self.server.getScore())))
        won, lost = score >= WON_SCORE, score < 0
        done = won or lost or bool(self.server.getCompleted()) or self._moves >= self.step_limit
        return Step(
            observation=observation.strip(),
            done=done,
            won=won,
            score=float(score),
            admissible=[str(a) for a in self.server.getValidActionObjectCombinations()],
            info={"moves": self._moves, "lost": lost},
        )

    def task_type(self, game: dict) -> str:
        return check_game(game)[0]

    def close(self) -> None:
        self.vm.kill()
