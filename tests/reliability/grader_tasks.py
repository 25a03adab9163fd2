"""Tasks for the grader's fault tests, run inside its worker processes.

A module of its own (not a test file) so that the workers can import it by name: the fault tests
put this folder on ``sys.path`` before they start a pool, and the workers inherit the path.
Each task announces the worker it runs in by creating ``{pid_dir}/{tag}.{pid}`` (an empty file),
so that a test can kill exactly that worker while the task runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from recipe.arise.core.grader_answer import _mv_equal


def _announce(pid_dir: str, tag: str) -> None:
    (Path(pid_dir) / f"{tag}.{os.getpid()}").touch()


def slow_equal(pid_dir: str, tag: str, pause_s: float, pred: str, gold: str) -> bool:
    """math-verify's verdict on ``pred`` vs ``gold`` after ``pause_s`` seconds of work."""
    _announce(pid_dir, tag)
    time.sleep(pause_s)
    return _mv_equal(pred, gold, None)


def wait_for(pid_dir: str, tag: str, go_file: str, max_s: float = 30.0) -> bool:
    """Work until the test creates ``go_file`` (at most ``max_s`` seconds)."""
    _announce(pid_dir, tag)
    end = time.monotonic() + max_s
    while not os.path.exists(go_file) and time.monotonic() < end:
        time.sleep(0.01)
    return True


def hang(pid_dir: str, tag: str) -> None:
    """Never returns in time (stands for a C loop in sympy)."""
    _announce(pid_dir, tag)
    time.sleep(3600)


def pids(pid_dir: str, tag: str) -> list[int]:
    """Workers that have started a task tagged ``tag``, first one first."""
    found = [(p.stat().st_mtime_ns, int(p.name.rsplit(".", 1)[1])) for p in Path(pid_dir).glob(f"{tag}.*")]
    return [pid for _t, pid in sorted(found)]
