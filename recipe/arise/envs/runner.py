"""Time limits and a per-process pool for environment objects (used by ``arise_env_agent``).

:class:`EnvRunner` runs an environment's ``reset`` / ``step`` in a daemon thread and waits at most the
call's limit (and what is left of the episode's): on a timeout or a crash it closes the environment
(for the Java ones: kills the JVM, which also ends the hung call) and raises :class:`EnvFailure`,
which fails the episode, never the run. Its calls block: call them from an executor thread.

:data:`POOL` keeps healthy environment objects per (name, options) across episodes, since verl builds
one agent-loop object per sample and a JVM costs seconds to start: ``POOL.episode(...)`` gives an
:class:`EnvRunner`, ``POOL.take`` / ``POOL.give_back`` the objects themselves. A broken one is
closed, and the next episode gets a fresh one. Everything left is closed at exit.
"""

from __future__ import annotations

import atexit
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from recipe.arise.envs.base import Step, TextEnv, make_env

__all__ = ["POOL", "EnvFailure", "EnvPool", "EnvRunner"]

CLOSE_WAIT_S = 10.0  # how long a broken environment's close() may take before it is left to its daemon thread


class EnvFailure(RuntimeError):
    """The environment timed out or crashed: the episode fails (counted), the run goes on."""


class EnvRunner:
    """One environment object, created on the first ``reset``, behind time limits.

    ``reset_timeout_s`` covers starting the environment too (a JVM: 1-25 s on a busy machine, and a
    cold game load); ``episode_timeout_s`` counts from the start of ``reset``."""

    def __init__(
        self,
        env_factory: Callable[[], TextEnv],
        *,
        step_timeout_s: float = 60.0,
        reset_timeout_s: float = 180.0,
        episode_timeout_s: float = 900.0,
        label: str = "env",
    ):
        for what, value in (("step", step_timeout_s), ("reset", reset_timeout_s), ("episode", episode_timeout_s)):
            if not value > 0:
                raise ValueError(f"{what} timeout must be > 0 s, got {value}")
        self.env_factory = env_factory
        self.step_timeout_s = float(step_timeout_s)
        self.reset_timeout_s = float(reset_timeout_s)
        self.episode_timeout_s = float(episode_timeout_s)
        self.label = label
        self.env: TextEnv | None = None
        self.broken = False  # a timeout or crash: the environment was closed, the runner is not used again
        self.closed = False
        self._game: Any = None
        self._started = 0.0

    def reset(self, game: dict) -> tuple[str, Step]:
        if self.broken or self.closed:
            raise EnvFailure(f"{self.label}: reset on a closed environment")
        self._game, self._started = game, time.monotonic()

        def start_and_reset():
            if self.env is None:
                self.env = self.env_factory()
            return self.env.reset(game)

        return self._call("reset", start_and_reset, self.reset_timeout_s)

    def step(self, action: str) -> Step:
        if self.env is None or self.broken or self.closed:
            raise EnvFailure(f"{self.label}: step without a running game")
        return self._call("step", lambda: self.env.step(action), self.step_timeout_s)

    def task_type(self, game: dict) -> str:
        if self.env is None:  # before the first reset: the environment is not started for this
            self.env = self.env_factory()
        return self.env.task_type(game)

    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def _call(self, what: str, fn: Callable[[], Any], limit_s: float) -> Any:
        left = self.episode_timeout_s - self.elapsed_s()
        if left <= 0:
            self._break()
            raise EnvFailure(f"episode timed out after {self.episode_timeout_s:g} s in {self._where()}")
        limit = min(limit_s, left)
        box: dict[str, Any] = {}

        def target():
            try:
                box["value"] = fn()
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread below
                box["error"] = error

        worker = threading.Thread(target=target, name=f"arise-env-{self.label}-{what}", daemon=True)
        worker.start()
        worker.join(limit)
        if worker.is_alive():
            self._break()
            kind = "episode" if limit < limit_s else what
            shown = self.episode_timeout_s if limit < limit_s else limit_s
            raise EnvFailure(f"{kind} timed out after {shown:g} s in {self._where()}")
        if "error" in box:
            self._break()
            error = box["error"]
            raise EnvFailure(f"{what} failed in {self._where()}: {type(error).__name__}: {error}") from error
        return box["value"]

    def _where(self) -> str:
        return f"{self.label} game {json.dumps(self._game, sort_keys=True, default=str)}"

    def _break(self) -> None:
        self.broken = True
        self.close()

    def close(self) -> None:
        """Close the environment (at most CLOSE_WAIT_S; a close that hangs too is left to its thread)."""
        if self.closed:
            return
        self.closed = True
        env, self.env = self.env, None
        if env is not None:
            _close_bounded(env, self.label)


def _close_bounded(env: TextEnv, label: str) -> None:
    """``env.close()`` in a daemon thread, waited for at most CLOSE_WAIT_S (a hung close keeps its thread)."""

    def close():
        try:
            env.close()
        except Exception:  # noqa: BLE001 - a broken environment may fail to close; it is dropped either way
            pass

    closer = threading.Thread(target=close, name=f"arise-env-{label}-close", daemon=True)
    closer.start()
    closer.join(CLOSE_WAIT_S)


class EnvPool:
    """Idle environment objects per (name, options), reused across episodes of this process.

    ``take`` / ``give_back`` hand out the objects themselves (for a loop with time limits of its
    own); ``episode`` wraps one in an :class:`EnvRunner`."""

    def __init__(self, factory: Callable[..., TextEnv] = make_env):
        self._factory = factory
        self._idle: dict[tuple[str, str], list[TextEnv]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(name: str, options: dict | None) -> tuple[str, str]:
        return name, json.dumps(dict(options or {}), sort_keys=True, default=str)

    def take(self, name: str, options: dict | None = None) -> TextEnv:
        """An idle environment ``name`` built with ``options``, else a new one (this may start a JVM)."""
        with self._lock:
            idle = self._idle.get(self.key(name, options))
            env = idle.pop() if idle else None
        return env if env is not None else self._factory(name, **dict(options or {}))

    def give_back(self, env: TextEnv, name: str, options: dict | None = None, healthy: bool = True) -> None:
        """Keep ``env`` for the next episode, or close it when the episode failed (``healthy`` False)."""
        if not healthy:
            _close_bounded(env, name)
            return
        with self._lock:
            self._idle.setdefault(self.key(name, options), []).append(env)

    @contextmanager
    def episode(self, name: str, options: dict | None = None, **limits: float) -> Iterator[EnvRunner]:
        """A runner for one episode (``step_timeout_s``, ``reset_timeout_s``, ``episode_timeout_s``),
        on an idle environment if there is one; given back healthy, closed otherwise."""
        options = dict(options or {})
        runner = EnvRunner(lambda: self.take(name, options), label=name, **limits)
        healthy = False
        try:
            yield runner
            healthy = not (runner.broken or runner.closed)
        finally:
            env, runner.env, runner.closed = runner.env, None, True
            if env is not None:  # an exception out of the episode: its state is not handed on
                self.give_back(env, name, options, healthy=healthy)

    def idle(self) -> int:
        with self._lock:
            return sum(len(envs) for envs in self._idle.values())

    def close_all(self) -> None:
        with self._lock:
            envs = [(name, env) for (name, _), found in self._idle.items() for env in found]
            self._idle.clear()
        for name, env in envs:
            _close_bounded(env, name)


POOL = EnvPool()
atexit.register(POOL.close_all)
