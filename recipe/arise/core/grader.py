"""Task grading of ARISE (paper §3): is the last boxed answer of a response the ground truth?

``grade(response, ground_truth)``: the LAST ``\\boxed{}``/``\\fbox{}`` of the response is the
answer (no box -> False).  Integer ground truths (``204``, ``"27.0"``, ``27.0``, ``"10,\\!080"``)
are matched exactly by value after light normalisation of the boxed text, without sympy;
cheap pre-guards reject pathological answers (length, control bytes, brace depth, digit runs,
power towers / huge exponents, factorials / binomials of big numbers).  Everything else goes
through math-verify in worker processes, bounded in time from any thread.  The reward formula
built on this (0 / 1 / 1 + bonus) is :func:`recipe.arise.core.reward.hierarchical_reward`.

Worker processes: :class:`WorkerPool`
-------------------------------------
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
threads) with math-verify preloaded, so a replacement serves in well under a second.  If worker
processes cannot be started at all (e.g. inside a daemonic process), mode ``auto`` falls back to
in-process math-verify (its signal timeout on the main thread; a daemon thread joined with a
deadline elsewhere, a soft bound backed by the pre-guards).

Framework free: math-verify and pebble are imported lazily.  Tests: tests/core/test_grader.py,
tests/reliability/test_grader_faults.py.
"""

from __future__ import annotations

import atexit
import collections
import math
import os
import queue
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool
from fractions import Fraction
from typing import Any

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "WorkerPool",
    "configure_grader",
    "extract_boxed",
    "grade",
    "grade_many",
    "grader_stats",
    "is_pathological",
    "normalize_answer",
    "shutdown_grader",
    "warmup",
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


# ------------------------------------------------------------------ worker processes (pebble)

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
        import logging

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
_LOGGED: set[str] = set()


def _log_once(msg: str) -> None:
    if msg not in _LOGGED:
        _LOGGED.add(msg)
        import logging

        logging.getLogger(__name__).warning(msg)


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

            if not _EXIT_HOOK:  # registered after pebble's own atexit hook, so ours runs first (LIFO)
                atexit.register(shutdown_grader)
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


_CONFIG: dict[str, Any] = {"mode": "auto", "pool_size": min(4, os.cpu_count() or 1)}
_POOL: WorkerPool | None = None
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


def _get_pool() -> WorkerPool | None:
    global _POOL
    if _CONFIG["mode"] == "inprocess":
        return None
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():  # new process after fork: fresh pool
            _POOL = WorkerPool(_CONFIG["pool_size"])
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
    """Counters of the worker pool: ``calls`` (math-verify calls), ``timeouts``, ``kills`` (workers
    pebble killed at a task timeout), ``crashes`` (worker deaths under a task), ``retries``,
    ``errors``, ``restarts`` (pools replaced), ``failures`` (calls a worker did not answer, by
    reason: timeout, worker_died, error, no_worker)."""
    p = _POOL
    if p is None:
        return {"mode": _CONFIG["mode"], "pool": None}
    return {"mode": _CONFIG["mode"], **p.stats()}


def _inprocess_equal(pred: str, gold: str, timeout_s: float) -> bool:
    t = max(1, int(math.ceil(timeout_s)))
    if threading.current_thread() is threading.main_thread():
        try:
            return _mv_equal(pred, gold, t)
        except Exception:
            return False
    box: list[bool] = []

    def run() -> None:
        try:
            box.append(_mv_equal(pred, gold, None))
        except Exception:
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
        if not (res == "no_worker" and _CONFIG["mode"] == "auto"):
            return False  # timed out / worker died twice / raised: treat as wrong
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
