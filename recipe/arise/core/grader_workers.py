"""The grader's worker processes: :class:`WorkerPool`, used by :mod:`recipe.arise.core.grader`.

math-verify (sympy) can hang in C loops and can crash or be killed (OOM), and it is called from
many threads at once (the reward manager's executor), where its own ``signal.alarm`` timeout
cannot run.  So it runs in worker processes, through the PUBLIC API of pebble only:
``ProcessPool(max_workers=1, initializer=..., context=...)``, ``.schedule(fn, args, timeout=)``,
the returned future, ``.active``, ``.stop()`` and ``.join()``.  pebble, not
``concurrent.futures.ProcessPoolExecutor``: pebble's per-task ``timeout`` kills the worker of a
task that runs too long and starts a replacement (the executor has no way to stop one task, and
it breaks for every pending task when any worker dies).

The grader keeps ``pool_size`` *slots*; a slot is a pebble pool of ONE worker process that holds
at most ONE task at a time.  A caller takes an idle slot from a queue in this process (waiting
counts against its deadline), schedules its task there with ``timeout`` = the time it has left,
and the slot goes back to the queue when the task's future completes.  Outcomes:

* result -> the grade;
* pebble's timeout (the task ran past its time; pebble killed the worker and starts another
  one) -> False, reason ``timeout``.  Not retried: the same input would hang again;
* the worker died under the task (``ProcessExpired``) or pebble gave up on the slot's pool
  (``BrokenProcessPool``) -> the slot's pool is replaced by a fresh one and the task is retried
  once; a second death -> False, reason ``worker_died``;
* ``fn`` raised -> False, reason ``error``;
* no slot free before the deadline -> False, reason ``timeout``; no worker process can start ->
  reason ``no_worker`` (mode ``auto`` then grades in-process, see below).

Each is counted by reason in ``grader_stats()["failures"]``.  Only ``Exception`` is caught: a
``KeyboardInterrupt`` in a waiting caller propagates (its slot returns to the queue when pebble
finishes the task).

Why one worker and one task per pebble pool (the cause of the old "channel lock" failures): a
pebble pool of N workers shares one task pipe among them, guarded by one inter-process lock pair
that a worker holds while it takes a task and acknowledges it (and the write half while it sends
a result).  Two properties of that shared channel made one killed worker cost OTHER tasks:

1. a worker killed inside that section (SIGKILL from outside: the OOM killer, an operator)
   leaves the lock held; every other worker then blocks for pebble's 60 s lock timeout, and all
   tasks queued in the pool miss their deadlines;
2. when a worker dies while pebble sees no task running in any worker (the dead one was idle,
   or its acknowledgement was not processed yet), pebble declares the whole pool broken ("All
   workers expired") and fails every task it holds, queued ones too, with BrokenProcessPool.

The flaky channel-lock test hit both: its killed worker held the lock, and pebble noticed the
death just after the last running task had finished, so no task was running -> (2) aborted the
queued grade.  With one worker and one task per pool neither can touch another task: the lock
and the queue of a pool are used by its one worker only; a death fails at most the task of that
slot (which is retried on a fresh pool, so a lock left held dies with its pool), and the tasks
waiting for a slot wait in this process, where no worker can break them.  pebble's own timeout
kill is safe: it kills a worker only after taking that lock itself.

Processes start from a forkserver (never forked from the caller, a Ray / vLLM process full of
threads) with math-verify preloaded, so a replacement serves in well under a second.  If no worker
process can be started at all (e.g. inside a daemonic process), :meth:`WorkerPool.call` answers
``no_worker`` and the grader's mode ``auto`` grades in-process instead.

pebble is imported lazily.  Tests: tests/reliability/test_grader_faults.py, tests/core/test_grader.py.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import queue
import threading
import time
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from recipe.arise.core.grader_answer import _mv_equal

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

__all__ = ["FAILURE_REASONS", "STARTUP_GRACE_S", "WorkerPool", "set_exit_hook"]

STARTUP_GRACE_S = 30.0  # a pool's first calls may also wait this long for the workers to start
_STOP_WAIT_S = 10.0  # shutdown_grader() waits at most this long for pebble to stop the workers
_MAX_BARREN_POOLS = 3  # pools lost before any task ever completed: the workers cannot run here
FAILURE_REASONS = ("timeout", "worker_died", "error", "no_worker")


def _mp_context():
    """forkserver: the workers are forked from a clean single-threaded server process, never from
    the caller (a Ray / vLLM process full of threads, where fork can deadlock).  math-verify is on
    the server's preload list, so a worker -- a replacement after a fault too -- starts without
    importing sympy (the list is process-wide and only read when the server starts; ``__main__``
    stays on it as in multiprocessing's default).  spawn where there is no forkserver.

    Like every spawn/forkserver user of multiprocessing, the workers import the caller's
    ``__main__`` module (``if __name__ == "__main__":`` guards it, as Ray's and verl's entry points
    and this repo's scripts have)."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", "math_verify", __name__])
    return ctx


def _worker_init() -> None:  # pragma: no cover - runs once in each new worker process
    """Warm math-verify's imports and sympy's lazy caches before the first task; never raises
    (pebble ends a worker whose initializer fails)."""
    try:
        logging.disable(logging.CRITICAL)
        _mv_equal("\\frac{1}{2}", "0.5", None)
    except Exception:
        pass


def _run(fn, args: tuple) -> tuple[int, Any]:  # pragma: no cover - runs in the worker
    """``fn(*args)`` with the pid of the worker that ran it (the slot's current worker)."""
    return os.getpid(), fn(*args)


def _ping(pause_s: float = 0.0) -> int:  # pragma: no cover - runs in the worker
    time.sleep(pause_s)
    return os.getpid()


class _NoWorkers(Exception):
    """No worker process can be started here."""


class _Slot:
    """One pebble pool of one worker process, holding at most one task at a time (whoever took
    the slot from the idle queue owns it until the task's future completes)."""

    __slots__ = ("index", "pool", "fault", "pid")

    def __init__(self, index: int) -> None:
        self.index = index
        self.pool = None  # pebble.ProcessPool, started on first use
        self.fault = False  # its worker died: replace the pool before the next task
        self.pid: int | None = None  # the worker that ran the slot's last task


def _stop_pool(pool) -> threading.Thread:
    """Stop a pebble pool (no new work; pebble ends its worker: SIGTERM, SIGKILL after 3 s),
    joined in the background: the joining thread."""
    try:
        pool.stop()
    except Exception:
        pass

    def join() -> None:
        try:
            pool.join()
        except Exception:
            pass

    th = threading.Thread(target=join, daemon=True, name="arise-grader-stop")
    th.start()
    return th


_EXIT_HOOK = False
_EXIT_FN: list[Any] = []  # what stops the grader at interpreter exit (set by the grader: it imports this module)
_LOGGED: set[str] = set()


def set_exit_hook(fn) -> None:
    """Run ``fn`` at interpreter exit, registered when the first worker pool starts (after pebble's own
    atexit hook, so ``fn`` runs first: atexit is LIFO)."""
    _EXIT_FN[:] = [fn]


def _log_once(msg: str) -> None:
    if msg not in _LOGGED:
        _LOGGED.add(msg)
        logger.warning(msg)


class WorkerPool:
    """``size`` worker processes running functions for ``grade()`` with a per-call time bound;
    see the module docstring for the design and its failure handling."""

    def __init__(self, size: int, mp_context=None) -> None:
        self.size = max(1, int(size))
        self.pid = os.getpid()
        self._ctx = mp_context
        self.start_method: str | None = None
        self._slots = [_Slot(i) for i in range(self.size)]
        self._idle: queue.Queue[_Slot] = queue.Queue()
        for slot in self._slots:
            self._idle.put(slot)
        self._lock = threading.Lock()  # the counters below
        self._start_lock = threading.Lock()  # pool starts vs shutdown()
        self.calls = self.timeouts = self.kills = self.crashes = self.retries = self.errors = 0
        self.restarts = 0  # pools replaced after a worker death
        self.failures = dict.fromkeys(FAILURE_REASONS, 0)  # calls without a worker's answer, by reason
        self.completed = 0  # tasks that returned a result
        self.barren = 0  # pools lost while no task had ever completed
        self.broken: str | None = None  # why no worker process can be started here
        self.closed = False
        self.events: collections.deque = collections.deque(maxlen=32)  # (monotonic time, what)

    def _event(self, what: str) -> None:
        self.events.append((round(time.monotonic(), 3), what))

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, d in deltas.items():
                setattr(self, name, getattr(self, name) + d)

    def _fail(self, reason: str) -> tuple[bool, str]:
        with self._lock:
            self.failures[reason] += 1
        return False, reason

    # -- slots
    def _take(self, deadline: float) -> _Slot | None:
        """An idle slot, waiting until ``deadline`` at most (None then, or after shutdown)."""
        while not self.closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                return self._idle.get(timeout=min(remaining, 1.0))  # wakes up to notice shutdown
            except queue.Empty:
                continue
        return None

    def _release(self, slot: _Slot, future) -> None:
        """The slot's task completed (pebble's thread, or the caller's if already done)."""
        if not future.cancelled():
            exc = future.exception()
            if exc is None:
                slot.pid = future.result()[0]
                with self._lock:
                    self.completed += 1
            elif _is_worker_death(exc):  # a fresh pool for the slot now, before anyone waits on it
                slot.fault = True
                threading.Thread(target=self._refresh, args=(slot,), daemon=True, name="arise-grader-refresh").start()
                return
            elif isinstance(exc, TimeoutError):  # pebble's task timeout: it killed the worker
                with self._lock:
                    self.kills += 1
                self._event(f"slot {slot.index}: task ran past its timeout, worker killed")
        self._idle.put(slot)

    def _refresh(self, slot: _Slot) -> None:
        try:
            self._pool_of(slot)
        except _NoWorkers:
            pass  # the next caller that takes the slot tries again
        self._idle.put(slot)

    def _pool_of(self, slot: _Slot):
        """The slot's running pebble pool: a fresh one after a worker death, or if pebble gave up
        on it (a worker that died idle).  Raises _NoWorkers if no process can be started."""
        pool = slot.pool
        if pool is not None and not slot.fault and pool.active:
            return pool
        if pool is not None:
            slot.pool, slot.pid = None, None
            why = "worker died" if slot.fault else "pebble gave up on it"
            with self._lock:
                self.restarts += 1
                self.barren += self.completed == 0
                barren = self.barren
            self._event(f"slot {slot.index}: pool replaced ({why})")
            _stop_pool(pool)
            if barren >= _MAX_BARREN_POOLS:
                self.broken = f"{barren} worker pools lost before any task completed"
                raise _NoWorkers(self.broken)
        slot.fault = False
        with self._start_lock:  # shutdown() sees every pool started
            if self.closed:
                raise _NoWorkers("the grader was shut down")
            slot.pool = self._start_pool(slot)
        self.broken = None
        return slot.pool

    def _start_pool(self, slot: _Slot):
        global _EXIT_HOOK
        try:
            from pebble import ProcessPool

            if not _EXIT_HOOK and _EXIT_FN:  # registered after pebble's own atexit hook, so ours runs first (LIFO)
                atexit.register(_EXIT_FN[0])
                _EXIT_HOOK = True
            if self._ctx is None:
                self._ctx = _mp_context()
                self.start_method = self._ctx.get_start_method()
            pool = ProcessPool(max_workers=1, initializer=_worker_init, context=self._ctx)
            if not pool.active:  # starts the worker process now
                raise _NoWorkers("pebble pool did not start")
        except Exception as e:  # e.g. in a daemonic process, or no /dev/shm
            self.broken = f"{type(e).__name__}: {e}"
            self._event(f"slot {slot.index}: pool start failed: {self.broken}")
            _log_once(f"grader worker processes cannot start ({self.broken})")
            raise _NoWorkers(self.broken) from e
        return pool

    def _submit(self, slot: _Slot, fn, args: tuple, timeout_s: float):
        """Schedule ``fn(*args)`` on the slot (its task timeout: ``timeout_s``); the slot returns
        to the idle queue when the future completes."""
        for _attempt in range(2):
            pool = self._pool_of(slot)
            try:
                future = pool.schedule(_run, args=(fn, args), timeout=max(0.01, timeout_s))
            except RuntimeError:  # pebble gave up on the pool just now: a fresh one
                slot.fault = True
                continue
            future.add_done_callback(lambda f, s=slot: self._release(s, f))
            return future
        raise _NoWorkers("pebble pools stopped right after they started")

    # -- API used by grade()
    def call(self, fn, args: tuple, timeout_s: float) -> tuple[bool, Any]:
        """``(True, fn(*args))`` from a worker, or ``(False, reason)`` (one of FAILURE_REASONS)
        within ``timeout_s`` (waiting for a slot included; a pool's first calls may also wait
        up to STARTUP_GRACE_S for its workers to start)."""
        start = time.monotonic()
        deadline = start + timeout_s + (STARTUP_GRACE_S if self.completed == 0 else 0.0)
        self._count(calls=1)
        died = 0
        while True:
            slot = self._take(deadline)
            if slot is None and self.closed:
                return self._fail("no_worker")
            if slot is None:
                self._count(timeouts=1)
                return self._fail("timeout")
            submitted = False
            try:
                future = self._submit(slot, fn, args, min(timeout_s, deadline - time.monotonic()))
                submitted = True
            except _NoWorkers:
                return self._fail("no_worker")
            finally:
                if not submitted:
                    self._idle.put(slot)
            try:
                return True, future.result(timeout=max(0.0, deadline - time.monotonic()))[1]
            except TimeoutError:  # concurrent.futures.TimeoutError is this class since 3.11
                # pebble's task timeout (it killed the worker), or our deadline came first (pebble
                # stops the task at its own timeout, moments later)
                self._count(timeouts=1)
                return self._fail("timeout")
            except CancelledError:
                return self._fail("error")
            except Exception as exc:
                if not _is_worker_death(exc):  # fn raised
                    self._count(errors=1)
                    return self._fail("error")
                died += 1
                self._count(crashes=1)
                self._event(f"slot {slot.index}: worker died under a task ({type(exc).__name__}: {exc})")
                if died > 1 or deadline - time.monotonic() <= 0:
                    return self._fail("worker_died")
                self._count(retries=1)

    def warmup(self, n: int | None = None, wait_s: float = 60.0) -> int:
        """Start ``n`` (default all) slots' workers and wait until they answer; the number that did."""
        n = self.size if n is None else max(0, min(int(n), self.size))
        deadline = time.monotonic() + wait_s
        taken: list[_Slot] = []
        try:  # hold n slots at once, so that each gets its own ping
            while len(taken) < n:
                slot = self._take(deadline)
                if slot is None:
                    break
                taken.append(slot)
            futures = []
            for slot in taken[:]:
                try:
                    futures.append(self._submit(slot, _ping, (), wait_s))
                except _NoWorkers:
                    break
                taken.remove(slot)  # now released by its future
        finally:
            for slot in taken:
                self._idle.put(slot)
        ready = 0
        for future in futures:
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
                ready += 1
            except Exception:
                pass
        return ready

    def worker_pids(self) -> list[int]:
        """The pids of the workers that ran each slot's last task (after :meth:`warmup`: all)."""
        return [s.pid for s in self._slots if s.pid is not None]

    def alive(self) -> int:
        """Slots whose pebble pool is running (pebble keeps its one worker process up)."""
        return sum(1 for s in self._slots if s.pool is not None and not s.fault and s.pool.active)

    def shutdown(self, wait_s: float = _STOP_WAIT_S) -> None:
        with self._start_lock:
            self.closed = True
            pools = [s.pool for s in self._slots if s.pool is not None]
            for s in self._slots:
                s.pool = None
        joins = [_stop_pool(pool) for pool in pools]
        end = time.monotonic() + wait_s
        for th in joins:
            th.join(max(0.01, end - time.monotonic()))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "pool": "pebble",
                "start_method": self.start_method,
                "pool_size": self.size,
                "alive": self.alive(),
                "calls": self.calls,
                "timeouts": self.timeouts,
                "kills": self.kills,
                "crashes": self.crashes,
                "retries": self.retries,
                "errors": self.errors,
                "restarts": self.restarts,
                "failures": dict(self.failures),
                "broken": self.broken,
                "events": list(self.events)[-12:],
            }


def _is_worker_death(exc: BaseException) -> bool:
    """pebble's ProcessExpired (the worker died under the task) or BrokenProcessPool (pebble gave
    up on the pool before the task ran or while it did)."""
    from pebble import ProcessExpired

    return isinstance(exc, (ProcessExpired, BrokenProcessPool))
