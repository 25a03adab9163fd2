"""The concise console of a long run: the whole output goes to a log file, the console gets what
starts (Ray, the data, the actor, the rollout server, the checkpoint), ARISE's own ``[arise]`` and
``[eval]`` lines, and a progress line when nothing of that came for a while (log lines so far, their
rate, the last stage). Every launch (``recipe.arise.tools.launch``: training, the baselines, the
evaluation) shows its run through it.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable

# (pattern, what the console says of a line it matches)
MILESTONES: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"Started a local Ray instance"), lambda m: "Ray started"),
    (re.compile(r"train and validate dataloader initialized, (.*)"), lambda m: f"data: {m.group(1)}"),
    (re.compile(r"actor and ref model engine initialized"), lambda m: "actor engine (FSDP) ready"),
    (re.compile(r"LLMServerManager: "), lambda m: "rollout server ready"),
    (re.compile(r"ARISE: (restored|starting from) .*"), lambda m: m.group(0)),
    (
        re.compile(r"(Training from scratch|Load from checkpoint folder: .*|Resuming from .*)$"),
        lambda m: m.group(0),
    ),
]
PASS_THROUGH = re.compile(r"\[arise\] (step|data:) ")
HEARTBEAT_S = 30.0


class ConsoleFilter:
    """Feed it the run's output line by line; it writes the console's lines to ``out``."""

    def __init__(self, prefix: str = "[arise]", out=None, heartbeat_s: float = HEARTBEAT_S, clock=time.monotonic):
        self.prefix, self.out, self.heartbeat_s, self.clock = prefix, out or sys.stdout, heartbeat_s, clock
        self.start = self.last = clock()
        self.lines, self.stage = 0, "launch"

    def _emit(self, text: str) -> None:
        print(text, file=self.out, flush=True)
        self.last = self.clock()

    def say(self, what: str, stage: bool = True) -> None:
        self.stage = what if stage else self.stage
        t = int(self.clock() - self.start)
        self._emit(f"{self.prefix} {t // 60}:{t % 60:02d} {what}")

    def feed(self, raw: str) -> None:
        self.lines += 1
        text = raw.rstrip("\r\n").split("\r")[-1]  # a tqdm bar: its last state
        match = PASS_THROUGH.search(text)
        if match:
            return self._emit(text[match.start() :])
        for pattern, words in MILESTONES:
            match = pattern.search(text)
            if match:
                return self.say(words(match))
        self.tick()

    def tick(self) -> None:
        """The progress line, when nothing was shown for ``heartbeat_s``."""
        now = self.clock()
        if now - self.last >= self.heartbeat_s:
            elapsed = max(now - self.start, 1.0)
            self.say(f"... {self.lines} log lines ({int(self.lines / elapsed)}/s); last: {self.stage}", stage=False)
