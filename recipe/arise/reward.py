"""Task grading and the hierarchical reward of ARISE (paper §3, App. D.2).

``grade(response, ground_truth)``: the LAST ``\\boxed{}``/``\\fbox{}`` of the response is
the answer (no box -> False).  Integer ground truths (``204``, ``"27.0"``, ``27.0``,
``"10,\\!080"``) are matched exactly by value after light normalisation of the boxed text,
without sympy.  Everything else goes through math-verify.

Every call is bounded in time from any thread:

* cheap pre-guards reject pathological answers (length, control bytes, brace depth,
  digit runs, power towers / huge exponents, factorials / binomials of big numbers);
* math-verify runs in a ``pebble.ProcessPool`` of worker processes (forkserver start, see
  ``_mp_context``).  The caller waits on the task's future with a deadline; a task that runs
  past it is cancelled and pebble kills its worker (a signal, so sympy's C loops cannot
  ignore it) and starts a replacement; a worker that dies fails only its own task.  This works
  off the main thread, where math-verify's own ``signal.alarm`` timeout cannot be used
  (math-verify then raises and returns False for everything).  Inside the worker (its main
  thread) math-verify's own timeouts are enabled as a first line of defence.
* if worker processes cannot be started (e.g. inside a daemonic process), grading falls
  back to in-process math-verify: with its signal timeout on the main thread, otherwise
  in a helper daemon thread joined with a deadline (soft bound, backed by the guards).

Framework free: math-verify is imported lazily, only in the process that needs it.
"""

from __future__ import annotations

import atexit
import collections
import math
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from fractions import Fraction
from typing import Any

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "extract_boxed",
    "grade",
    "grade_many",
    "hierarchical_reward",
    "normalize_answer",
    "is_pathological",
    "warmup",
    "configure_grader",
    "grader_stats",
    "shutdown_grader",
]

DEFAULT_TIMEOUT_S = 5.0
MAX_RESPONSE_CHARS = 100_000  # only the tail is searched for the last box
MAX_ANSWER_CHARS = 400  # MATH-500 max answer length is 53
MAX_BRACE_DEPTH = 12
MAX_DIGIT_RUN = 60
MAX_INT_DIGITS = 1000
MAX_CARETS = 16

# ----------------------------------------------------------------------------- boxes

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def _scan_group(text: str, open_idx: int) -> int | None:
    """Index of the '}' matching text[open_idx] == '{' (escape-aware), or None."""
    depth = 0
    i, n = open_idx, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def extract_boxed(text: Any) -> str | None:
    """Content of the LAST ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces) or of a
    trailing ``\\boxed 5`` form; None if there is none or the last one is unterminated."""
    if not isinstance(text, str):
        return None
    last = None
    for m in _BOX_RE.finditer(text):
        last = m
    if last is None:
        return None
    i = last.end()
    n = len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i < n and text[i] == "{":
        j = _scan_group(text, i)
        if j is None:
            return None
        return text[i + 1 : j]
    if i > last.end():  # "\boxed 5" form: up to whitespace or '$'
        m = re.match(r"[^\s$]+", text[i:])
        if m:
            return m.group(0).rstrip(".,;")
    return None


def _strip_skill_echo(text: str) -> str:
    """Drop a leading ``SKILL:{...json...}`` echo of the injected prompt line."""
    s = text.lstrip()
    if not s.startswith("SKILL:"):
        return text
    import json

    brace = s.find("{")
    if brace == -1 or brace > 12:
        return text
    try:
        _obj, end = json.JSONDecoder().raw_decode(s[:20_000], brace)
    except (ValueError, RecursionError):
        nl = s.find("\n")  # fall back to dropping the echoed line
        return s[nl + 1 :] if nl != -1 else text
    return s[end:]


# ---------------------------------------------------------------------- normalisation

_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_UNIT_TAIL_RE = re.compile(r"(?<=[0-9}])\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}(\^\{?\d\}?)?\s*$")
_SPACING_RE = re.compile(r"\\[!,;: ]|~|\\quad|\\qquad")
_LHS_RE = re.compile(r"^\s*[A-Za-z](?:_\{?\w+\}?)?\s*=\s*")
_INT_RE = re.compile(r"^([+-]?)(\d+)(?:\.0*)?$")
_DEC_RE = re.compile(r"^[+-]?(?:\d+\.\d*|\.\d+)$")
_THOUSANDS_RE = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_FRAC_RE = re.compile(r"^([+-]?)\\[dt]?frac\{([+-]?\d{1,30})\}\{(\d{1,30})\}$|^([+-]?\d{1,30})/(\d{1,30})$")


def normalize_answer(s: str) -> str:
    """Light, sympy-free normalisation used for integer matching and quick equality."""
    s = s.strip()
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("{,}", ",")
    s = _SPACING_RE.sub(" ", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\^\s*\{?\\circ\}?|\\degree|°", "", s)
    s = s.replace("\\%", "").replace("%", "")
    s = _UNIT_TAIL_RE.sub("", s)
    for _ in range(3):
        s2 = _TEXT_CMD_RE.sub(r"\1", s)
        if s2 == s:
            break
        s = s2
    s = _LHS_RE.sub("", s)
    s = s.strip().rstrip(".").strip()
    s = re.sub(r"\s+", "", s)
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    return s


def _int_gold(gt: Any) -> int | None:
    if isinstance(gt, bool):
        return None
    if isinstance(gt, int):
        return gt
    if isinstance(gt, float):
        return int(gt) if math.isfinite(gt) and gt.is_integer() and abs(gt) < 1e18 else None
    if isinstance(gt, str) and len(gt) <= 200:
        inner = extract_boxed(gt) if "\\boxed" in gt else gt
        if inner is None:
            return None
        m = _INT_RE.match(normalize_answer(inner))
        if m and len(m.group(2)) <= MAX_INT_DIGITS:
            return int(m.group(1) + m.group(2))
    return None


def _numeric_value(s: str) -> Fraction | None:
    """Exact value of a plain integer / decimal / simple fraction string, else None."""
    m = _INT_RE.match(s)
    if m:
        if len(m.group(2)) > MAX_INT_DIGITS:
            return None
        digits = m.group(2).lstrip("0") or "0"
        if len(digits) > 4000:  # int() str-conversion limit
            return None
        return Fraction(int(m.group(1) + digits))
    if _DEC_RE.match(s) and len(s) <= 60:
        return Fraction(s)
    m = _FRAC_RE.match(s)
    if m:
        if m.group(2) is not None:
            sign, num, den = m.group(1), m.group(2), m.group(3)
        else:
            sign, num, den = "", m.group(4), m.group(5)
        if int(den) == 0:
            return None
        v = Fraction(int(num), int(den))
        return -v if sign == "-" else v
    return None


# -------------------------------------------------------------------------- guards

_CTRL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
_DIGITS_RE = re.compile(r"\d+")


def _group_after(s: str, i: int) -> str:
    """The exponent/operand starting at s[i]: a {...} group, or a token."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] == "{":
        j = _scan_group(s, i)
        return s[i:] if j is None else s[i : j + 1]
    m = re.match(r"\\?[A-Za-z]+|\d+|.", s[i:])
    return m.group(0) if m else ""


def is_pathological(ans: str) -> bool:
    """Cheap structural checks for answers that could make sympy hang or blow up."""
    if len(ans) > MAX_ANSWER_CHARS or _CTRL_RE.search(ans):
        return True
    depth = 0
    for c in ans:
        if c in "{([":
            depth += 1
            if depth > MAX_BRACE_DEPTH:
                return True
        elif c in "})]":
            depth -= 1
    if any(len(d) > MAX_DIGIT_RUN for d in _DIGITS_RE.findall(ans)):
        return True
    s = ans.replace("**", "^")
    if s.count("^") > MAX_CARETS or "\\uparrow" in s or "\u2191" in s:
        return True
    for m in re.finditer(r"\^", s):
        exp = _group_after(s, m.end())
        k = m.end()
        while k < len(s) and s[k] == " ":
            k += 1
        if s[k + len(exp) :].lstrip().startswith("^"):  # chained tower a^b^c
            return True
        if "^" in exp or "!" in exp or "\\binom" in exp or "\\frac" in exp and re.search(r"\d{3,}", exp):
            return True
        if any(len(d) >= 4 for d in _DIGITS_RE.findall(exp)):
            return True
    for m in re.finditer(r"!", s):
        before = s[: m.start()].rstrip()
        if not before:
            continue
        if before[-1] in "})]":
            # operand is a group: reject if it holds a big number or a power
            k = len(before) - 1
            opener = {"}": "{", ")": "(", "]": "["}[before[-1]]
            lvl = 0
            while k >= 0:
                if before[k] in "})]":
                    lvl += 1
                elif before[k] in "{([":
                    lvl -= 1
                    if lvl == 0:
                        break
                k -= 1
            operand = before[max(k, 0) :]
            if "^" in operand or "!" in operand or re.search(r"\d{3,}", operand) or opener not in operand:
                return True
            if before[: max(k, 0)].rstrip().endswith("^"):  # a factorial on an exponent: 9^{99}!
                return True
        else:
            m2 = re.search(r"(\d+)$", before)
            if m2 and len(m2.group(1)) >= 3:
                return True
    for m in re.finditer(r"\\(?:sum|prod)", s):  # big symbolic sums/products: \sum_{k=1}^{999} k^k
        if re.search(r"\^\s*\{?\s*\d{3,}", s[m.end() : m.end() + 80]):
            return True
    for m in re.finditer(r"\\(?:binom|dbinom|tbinom|choose)", s):
        tail = s[m.end() : m.end() + 80]
        if "^" in tail or re.search(r"\d{4,}", tail):
            return True
    return False


# ------------------------------------------------------------------ math-verify core


def _mv_equal(pred: str, gold: str, timeout_int: int | None) -> bool:
    """math-verify equivalence (runs in a worker process or, as fallback, in-process)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_text = gold if ("$" in gold or "\\boxed" in gold) else f"${gold}$"
    cfg_gold = [LatexExtractionConfig(), ExprExtractionConfig()]
    cfg_pred = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    g = parse(gold_text, extraction_config=cfg_gold, parsing_timeout=timeout_int)
    if not g:
        return False
    p = parse("\\boxed{" + pred + "}", extraction_config=cfg_pred, parsing_timeout=timeout_int)
    if not p:
        return False
    return bool(verify(g, p, timeout_seconds=timeout_int))


# ------------------------------------------------------------------ worker pool (pebble)

STARTUP_GRACE_S = 30.0  # a process's first tasks may also wait this long for its workers to start
_POLL_S = 0.5  # while waiting, look this often whether pebble has given up on the pool
_STOP_GRACE_S = 3.0  # a stopped pool's workers still alive after this are SIGKILLed
_WEDGE_AFTER_S = 1.0  # a task queued this long while no task finished: check the channel lock
_WEDGE_PROBE_S = 2.0  # ... by trying to take it for this long (holders keep it for microseconds)
_MAX_BARREN_RESTARTS = 3  # pools that died before any task completed: then the workers cannot start
# pebble gave up on its pool and failed every task it held, running or queued, with
# BrokenProcessPool: they did not complete, so they go to a fresh pool.  pebble 5.2 gives up when a
# worker dies while no task is running in a worker -- e.g. one killed while it waited for the
# channel lock, just after the last running task finished -- which would otherwise turn every
# grade waiting in the queue into a wrong answer
_ABORTED = "pebble aborted its tasks (BrokenProcessPool)"


def _mp_context():
    """forkserver: the workers are forked from a clean single-threaded server process, never from
    the caller (a Ray / vLLM process full of threads, where fork can deadlock).  math-verify (and
    sympy) are added to the server's preload list, so a worker -- a replacement after a kill too
    -- starts in ~0.1 s instead of importing them for ~1 s (if the server already runs, the list
    is ignored and each worker imports them).  spawn where there is no forkserver.

    Like every spawn/forkserver user of multiprocessing, the workers import the caller's
    ``__main__`` module (``if __name__ == "__main__":`` guards it, as Ray's and verl's entry points
    and this repo's scripts have)."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    try:
        from multiprocessing import forkserver

        preload = list(getattr(forkserver._forkserver, "_preload_modules", None) or ["__main__"])
        ctx.set_forkserver_preload(preload + [m for m in ("math_verify", __name__) if m not in preload])
    except Exception:
        pass
    return ctx


def _worker_init() -> None:  # pragma: no cover - runs once in each new worker process
    """Warm math-verify's imports and sympy's lazy caches before the first task; never raises
    (a failing initializer makes pebble's worker exit, which it may take for a broken pool)."""
    try:
        import logging

        logging.disable(logging.CRITICAL)
        _mv_equal("\\frac{1}{2}", "0.5", None)
    except BaseException:
        pass


def _run_task(deadline: float, fn, args: tuple) -> Any:  # pragma: no cover - runs in the worker
    """Run ``fn(*args)`` unless the caller has given up already (a task that waited in the queue
    past its caller's deadline is skipped, not computed).  ``time.monotonic`` is CLOCK_MONOTONIC,
    the same clock in every process of the machine."""
    if time.monotonic() >= deadline:
        return None
    return fn(*args)


def _ping(pause_s: float) -> int:  # pragma: no cover - runs in the worker
    time.sleep(pause_s)
    return os.getpid()


def _worker_processes(pool) -> list:
    """The worker processes of a pebble pool (pebble internals; for stats, shutdown and tests).
    pebble drops a dead worker from this list within 0.1 s; no ``is_alive()`` here, which would
    race pebble's own thread for the exit status."""
    try:
        return list(pool._pool_manager.worker_manager.workers.values())
    except Exception:
        return []


def _discard(pool, wait_s: float = 0.0) -> None:
    """Stop a pebble pool: no new work; pebble joins its threads, then ends its workers (SIGTERM
    at the default action, so at once, also mid-task).  Workers still there after
    ``_STOP_GRACE_S`` (pebble's thread stuck on its 60 s channel lock) are SIGKILLed.  Waits at
    most ``wait_s`` for all that (0: in the background)."""
    try:
        pool.stop()
    except Exception:
        pass

    def stop() -> None:
        joiner = threading.Thread(target=_join_quietly, args=(pool,), daemon=True, name="arise-grader-join")
        joiner.start()
        joiner.join(_STOP_GRACE_S)
        for p in _worker_processes(pool):
            try:
                p.kill()
            except Exception:
                pass

    th = threading.Thread(target=stop, daemon=True, name="arise-grader-stop")
    th.start()
    if wait_s > 0:
        th.join(wait_s)


def _join_quietly(pool) -> None:
    try:
        pool.join()
    except Exception:
        pass


_EXIT_HOOK = False
_LOGGED: set[str] = set()


def _log_once(msg: str) -> None:
    if msg not in _LOGGED:
        _LOGGED.add(msg)
        import logging

        logging.getLogger(__name__).warning(msg)


class _Grader:
    """A ``pebble.ProcessPool`` of math-verify workers, plus what ``grade()`` needs on top of it.

    pebble does the process work: it keeps ``size`` workers running, kills a worker whose task
    runs past its ``timeout`` (SIGTERM, which the workers leave at its default action, so it ends
    them even inside a C loop of sympy; SIGKILL after 3 s), fails the future of a worker that
    died (``ProcessExpired``) and starts a replacement.  This class adds the caller-side
    deadline -- no calling thread ever waits longer than ``timeout_s``, whatever happens inside
    the pool -- and replaces the pebble pool when pebble gives up on it (pebble 5.1-5.2 do when
    a worker dies while no task runs in a worker, failing the queued tasks too) or when a worker
    died holding pebble's channel lock (``_wedged``; pebble alone would stall for its 60 s lock
    timeout); the tasks waiting on the old pool are submitted again.  Tests: tests/reliability/test_grader_faults.py."""

    def __init__(self, size: int) -> None:
        self.size = max(1, int(size))
        self.pid = os.getpid()
        self.broken: str | None = None
        self.start_method: str | None = None
        self.calls = self.timeouts = self.kills = self.crashes = self.errors = self.restarts = 0
        self.completed = 0  # tasks that ended in a worker (result, error, kill): the pool is serving
        self.last_done = time.monotonic()
        self._lock = threading.Lock()
        self._probe = threading.Lock()
        self._pool = None
        self.closed = False
        # the pool's last faults, for grader_stats() and failing tests: (monotonic time, what)
        self.events: collections.deque = collections.deque(maxlen=32)

    def _event(self, what: str) -> None:
        self.events.append((round(time.monotonic(), 3), what))

    # -- the pebble pool
    def _pebble(self):
        """The running pebble pool, (re)started if needed; call with ``self._lock`` held."""
        global _EXIT_HOOK
        pool = self._pool
        if pool is not None and pool.active:
            return pool
        if pool is not None:  # pebble gave up on it (BrokenProcessPool): start a fresh one
            self._pool = None
            self.restarts += 1
            self._event("pool given up by pebble: replaced")
            _discard(pool)
        if self.restarts >= _MAX_BARREN_RESTARTS and self.completed == 0:
            raise RuntimeError(f"the grader workers died before any task {self.restarts} times")
        from pebble import ProcessPool

        if not _EXIT_HOOK:  # after pebble's own atexit hook, so that ours runs first (LIFO)
            atexit.register(shutdown_grader)
            _EXIT_HOOK = True
        ctx = _mp_context()
        self.start_method = ctx.get_start_method()
        pool = ProcessPool(max_workers=self.size, initializer=_worker_init, context=ctx)
        self._pool = pool
        try:
            pool.active  # noqa: B018 - starts the worker processes now
        except BaseException as e:
            self._pool = None
            self._event(f"pool start failed: {type(e).__name__}: {e}")
            _discard(pool)
            raise
        self._event("pool started")
        return pool

    def _recycle(self, pool, why: str) -> None:
        with self._lock:
            if self._pool is not pool:
                return
            self._pool = None
            self.restarts += 1
            self._event(f"pool replaced: {why}")
        _discard(pool)

    def _on_done(self, future) -> None:
        """Bookkeeping when a task ends in the pool (whether or not its caller still waits)."""
        if future.cancelled():
            return
        exc = future.exception()
        if isinstance(exc, BrokenProcessPool):  # never ran: pebble aborted it with its pool
            return
        with self._lock:
            self.completed += 1
            self.last_done = time.monotonic()
            if isinstance(exc, FuturesTimeout):  # ran past timeout_s: pebble killed the worker
                self.kills += 1
            elif isinstance(exc, OSError):  # pebble's ProcessExpired: the worker died under it
                self.crashes += 1
            elif exc is not None:  # fn raised
                self.errors += 1

    def _schedule(self, fn, args: tuple, timeout_s: float, deadline: float):
        """(pool, future) of ``fn(*args)`` submitted to the pool; (None, None) where no worker
        process can be started (``self.broken`` says why)."""
        with self._lock:
            if self.closed:  # shut down (interpreter exit, configure_grader): no new pool
                self._event("call after shutdown")
                return None, None
            for _attempt in range(2):
                try:
                    pool = self._pebble()
                except BaseException as e:  # e.g. in a daemonic process, or no /dev/shm
                    self.broken = f"{type(e).__name__}: {e}"
                    _log_once(f"grader worker processes cannot start ({self.broken})")
                    return None, None
                self.broken = None
                try:
                    future = pool.schedule(_run_task, args=(deadline, fn, args), timeout=max(0.01, timeout_s))
                except Exception as e:  # pebble gave up on the pool just now: once more on a fresh one
                    self._pool = None
                    self.restarts += 1
                    self._event(f"schedule failed ({type(e).__name__}: {e}): pool replaced")
                    _discard(pool)
                    continue
                self.calls += 1
                break
            else:
                return None, None
        future.add_done_callback(self._on_done)
        return pool, future

    # -- API used by grade()
    def call(self, fn, args: tuple, timeout_s: float) -> tuple[bool, Any]:
        """(True, fn(*args)) from a worker, or (False, None) when that did not come within
        ``timeout_s`` (queueing included), when the worker died under it or when it raised.

        A task never runs longer than ``timeout_s`` in its worker: pebble kills the worker then and
        starts a replacement.  A caller whose deadline passes first (its task waited in the queue)
        just stops waiting; a task still queued then is skipped by ``_run_task``, one already
        running is left to finish (or to pebble's kill) rather than killing a healthy worker."""
        start = time.monotonic()
        deadline = start + timeout_s + (STARTUP_GRACE_S if self.completed == 0 else 0.0)
        pool, future = self._schedule(fn, args, timeout_s, deadline)
        submitted, resubmits = start, 0
        while future is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                with self._lock:
                    self.timeouts += 1
                return False, None
            try:
                return True, future.result(timeout=min(remaining, _POLL_S))
            except FuturesTimeout:
                # the wait timed out -- or the task did: pebble's timeout is the same TimeoutError
                # class (Python >= 3.11). Only a done future can be the latter (it may have got
                # its result just after the wait ended: read it again)
                if future.done():
                    exc = future.exception(timeout=0)
                    if exc is None:
                        return True, future.result(timeout=0)
                    if isinstance(exc, FuturesTimeout):  # pebble's own timeout (the worker is killed)
                        with self._lock:
                            self.timeouts += 1
                        return False, None
                    if not isinstance(exc, BrokenProcessPool):
                        return False, None
                    why = _ABORTED
                # pebble gave up on this pool, or its channel lock is held by a dead worker: the
                # task would never run -> submit it again to a fresh pool
                elif not pool.active:
                    why = "pebble gave up on it with tasks waiting"
                elif not future.running() and self._wedged(pool, submitted, deadline):
                    why = "channel lock held by a dead worker"
                else:
                    continue
            except BrokenProcessPool:
                why = _ABORTED
            except BaseException:  # the worker died under the task (ProcessExpired), or fn raised
                return False, None
            self._recycle(pool, why)
            resubmits += 1
            if resubmits > 2:
                self._event("a task resubmitted 3 times: given up")
                return False, None
            submitted = time.monotonic()
            pool, future = self._schedule(fn, args, timeout_s, deadline)
            if future is None:
                self._event("resubmission found no pool")
        return False, None

    def _wedged(self, pool, since: float, deadline: float) -> bool:
        """True if the pool's task channel is locked by a worker that died holding the lock.

        pebble's workers take one inter-process lock to fetch a task (and its write half to send
        a result) -- for microseconds.  A worker killed from outside inside that section (OOM
        killer, an operator) leaves it locked; the other workers then wait pebble's 60 s
        LOCK_TIMEOUT before it gives up on the pool.  Checked only when this task has waited
        ``_WEDGE_AFTER_S`` with no task finishing meanwhile, by one thread at a time: try to take
        the fetch lock for ``_WEDGE_PROBE_S`` (pebble internals; no verdict if they change), or
        for what is left before the caller's deadline, at least 0.5 s."""
        now = time.monotonic()
        probe_s = min(_WEDGE_PROBE_S, deadline - now)
        if probe_s < 0.5 or now - since < _WEDGE_AFTER_S or now - self.last_done < _WEDGE_AFTER_S:
            return False
        if not self._probe.acquire(blocking=False):
            return False
        try:
            lock = pool._pool_manager.worker_manager.workers_channel.mutex.reader_mutex
            if lock.acquire(timeout=probe_s):
                lock.release()
                return False
            return self.last_done < now  # nothing finished while we waited on the lock either
        except Exception:
            return False
        finally:
            self._probe.release()

    def warmup(self, n: int | None = None, wait_s: float = 60.0) -> int:
        """Start the workers and wait until ``n`` of them answer; the number that did."""
        n = self.size if n is None else max(0, min(int(n), self.size))
        seen: set[int] = set()
        end = time.monotonic() + wait_s
        while len(seen) < n and time.monotonic() < end:
            futures = []
            for _ in range(n - len(seen)):
                _pool, future = self._schedule(_ping, (0.1,), wait_s, end)
                if future is None:
                    return len(seen)
                futures.append(future)
            for future in futures:
                try:
                    seen.add(future.result(timeout=max(0.01, end - time.monotonic())))
                except BaseException:
                    pass
        return len(seen)

    def worker_pids(self) -> list[int]:
        pool = self._pool
        return [p.pid for p in _worker_processes(pool)] if pool is not None else []

    def shutdown(self, wait_s: float = 10.0) -> None:
        with self._lock:
            self.closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            _discard(pool, wait_s=wait_s)


_CONFIG: dict[str, Any] = {"mode": "auto", "pool_size": min(4, os.cpu_count() or 1)}
_POOL: _Grader | None = None
_POOL_LOCK = threading.Lock()


def configure_grader(mode: str = "auto", pool_size: int | None = None) -> None:
    """mode: "auto" (pool, in-process fallback if it cannot start), "pool", or "inprocess"."""
    if mode not in ("auto", "pool", "inprocess"):
        raise ValueError(f"mode must be auto|pool|inprocess, got {mode!r}")
    shutdown_grader()
    with _POOL_LOCK:
        _CONFIG["mode"] = mode
        if pool_size is not None:
            _CONFIG["pool_size"] = max(1, int(pool_size))


def _get_pool() -> _Grader | None:
    global _POOL
    if _CONFIG["mode"] == "inprocess":
        return None
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():  # new process after fork: fresh pool
            _POOL = _Grader(_CONFIG["pool_size"])
        pool = _POOL
    if pool.broken and _CONFIG["mode"] == "auto":
        return None
    return pool


def warmup(n: int | None = None) -> int:
    """Start the grader workers now and wait until ``n`` (default: all) of them are ready; the
    number ready.  Otherwise the first grading calls of a process wait for the start-up."""
    pool = _get_pool()
    return pool.warmup(n) if pool is not None else 0


def shutdown_grader() -> None:
    """Stop the worker processes (also run at interpreter exit)."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None and pool.pid == os.getpid():
        pool.shutdown()


def grader_stats() -> dict[str, Any]:
    p = _POOL
    if p is None:
        return {"mode": _CONFIG["mode"], "pool": None}
    return {
        "mode": _CONFIG["mode"],
        "pool": "pebble",
        "start_method": p.start_method,
        "pool_size": p.size,
        "alive": len(p.worker_pids()),
        "calls": p.calls,
        "timeouts": p.timeouts,
        "kills": p.kills,
        "crashes": p.crashes,
        "errors": p.errors,
        "restarts": p.restarts,
        "broken": p.broken,
        "events": list(p.events)[-12:],
    }


def _inprocess_equal(pred: str, gold: str, timeout_s: float) -> bool:
    t = max(1, int(math.ceil(timeout_s)))
    if threading.current_thread() is threading.main_thread():
        try:
            return _mv_equal(pred, gold, t)
        except BaseException:
            return False
    box: list[bool] = []

    def run() -> None:
        try:
            box.append(_mv_equal(pred, gold, None))
        except BaseException:
            box.append(False)

    th = threading.Thread(target=run, daemon=True, name="arise-grade-inproc")
    th.start()
    th.join(timeout_s)
    return bool(box and box[0])


def _verify_bounded(pred: str, gold: str, timeout_s: float) -> bool:
    pool = _get_pool()
    if pool is not None:
        ok, res = pool.call(_mv_equal, (pred, gold, max(1, int(math.ceil(timeout_s)))), timeout_s)
        if ok:
            return bool(res)
        if not (pool.broken and _CONFIG["mode"] == "auto"):
            return False  # timed out / killed: treat as wrong
    return _inprocess_equal(pred, gold, timeout_s)


# ---------------------------------------------------------------------------- grade


def _gold_strings(gt: Any) -> list[Any]:
    if isinstance(gt, (list, tuple)):
        return [g for g in gt[:8]]
    try:  # numpy arrays / scalars without importing numpy
        if hasattr(gt, "tolist"):
            v = gt.tolist()
            return list(v[:8]) if isinstance(v, list) else [v]
    except Exception:
        pass
    return [gt]


def _grade_one(pred: str, gt: Any, timeout_s: float) -> bool:
    ig = _int_gold(gt)
    npred = normalize_answer(pred)
    if ig is not None:
        v = _numeric_value(npred)
        if v is not None:
            return v == ig
        if npred == str(ig):
            return True
        if is_pathological(pred):
            return False
        return _verify_bounded(pred, str(ig), timeout_s)
    if isinstance(gt, float):
        if not math.isfinite(gt):
            return False
        gold = repr(gt)
    elif isinstance(gt, (int, str)) and not isinstance(gt, bool):
        gold = str(gt)
    else:
        return False
    gold = gold.strip()
    if "\\boxed" in gold:
        gold = extract_boxed(gold) or gold
    if not gold or len(gold) > 2000:
        return False
    ngold = normalize_answer(gold)
    if npred == ngold and npred:
        return True
    vp, vg = _numeric_value(npred), _numeric_value(ngold)
    if vp is not None and vg is not None:
        return vp == vg
    if is_pathological(pred):
        return False
    return _verify_bounded(pred, gold, timeout_s)


def grade(solution_str: Any, ground_truth: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True iff the last boxed answer of ``solution_str`` equals ``ground_truth``.

    Never raises; bounded by ``timeout_s`` from any thread (the first calls of a process, if
    :func:`warmup` was not called, may also wait up to ``STARTUP_GRACE_S`` for the workers
    to start)."""
    try:
        if isinstance(solution_str, (bytes, bytearray)):
            solution_str = bytes(solution_str[-MAX_RESPONSE_CHARS * 4 :]).decode("utf-8", errors="replace")
        if not isinstance(solution_str, str):
            return False
        text = solution_str[-MAX_RESPONSE_CHARS:] if len(solution_str) > MAX_RESPONSE_CHARS else solution_str
        text = _strip_skill_echo(text)
        pred = extract_boxed(text)
        if pred is None:
            return False
        pred = pred.strip()
        if not pred:
            return False
        timeout_s = float(timeout_s)
        if not (timeout_s > 0):
            timeout_s = DEFAULT_TIMEOUT_S
        deadline = time.monotonic() + timeout_s
        for gt in _gold_strings(ground_truth):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if _grade_one(pred, gt, remaining):
                return True
        return False
    except Exception:
        return False


def grade_many(
    solutions: Sequence[Any],
    ground_truths: Sequence[Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_workers: int | None = None,
) -> list[bool]:
    """Grade a batch concurrently (threads feeding the worker pool)."""
    from concurrent.futures import ThreadPoolExecutor

    if len(solutions) != len(ground_truths):
        raise ValueError("solutions and ground_truths must have the same length")
    n = max_workers or _CONFIG["pool_size"]
    with ThreadPoolExecutor(max_workers=max(1, n)) as ex:
        return list(ex.map(lambda sg: grade(sg[0], sg[1], timeout_s), zip(solutions, ground_truths, strict=False)))


# ----------------------------------------------------------------------- reward


def hierarchical_reward(correct: bool, skill_used: bool, phase: int, skill_bonus: float = 1.0) -> float:
    """R = r_task + r_skill (App. D.2).  Phase 1: binary 0/1.  Phase 2: 0 if wrong,
    1 if right without a skill, 1 + skill_bonus if right with a skill."""
    if isinstance(phase, bool) or phase not in (1, 2):
        raise ValueError(f"phase must be 1 or 2, got {phase!r}")
    bonus = float(skill_bonus)
    if not math.isfinite(bonus) or bonus < 0:
        raise ValueError(f"skill_bonus must be a finite number >= 0, got {skill_bonus!r}")
    if not correct:
        return 0.0
    if phase == 2 and skill_used:
        return 1.0 + bonus
    return 1.0
