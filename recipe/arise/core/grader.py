"""Task grading of ARISE (paper §3): is the last boxed answer of a response the ground truth?

``grade(response, ground_truth)``: the LAST ``\\boxed{}``/``\\fbox{}`` of the response is the
answer (no box -> False).  Integer ground truths (``204``, ``"27.0"``, ``27.0``, ``"10,\\!080"``)
are matched exactly by value after light normalisation of the boxed text, without sympy;
cheap pre-guards reject pathological answers (length, control bytes, brace depth, digit runs,
power towers / huge exponents, factorials / binomials of big numbers).  Everything else goes
through math-verify in worker processes, bounded in time from any thread.  The reward formula
built on this (0 / 1 / 1 + bonus) is :func:`recipe.arise.core.reward.hierarchical_reward`.

Three modules:

* this one: the public API (:func:`grade`, :func:`grade_many`, :func:`configure_grader`,
  :func:`warmup`, :func:`shutdown_grader`, :func:`grader_stats`), the process-wide worker pool
  and the in-process fallback; it re-exports the names below;
* :mod:`recipe.arise.core.grader_answer`: box extraction, normalisation, the pre-guards and the
  math-verify comparison;
* :mod:`recipe.arise.core.grader_workers`: :class:`WorkerPool`, math-verify in worker processes
  through pebble's public API (its docstring: the design, the failure reasons, and why one worker
  and one task per pebble pool).

If worker processes cannot be started at all (e.g. inside a daemonic process), mode ``auto`` falls
back to in-process math-verify (its signal timeout on the main thread; a daemon thread joined with
a deadline elsewhere, a soft bound backed by the pre-guards).

Framework free: math-verify and pebble are imported lazily.  Tests: tests/core/test_grader.py,
tests/reliability/test_grader_faults.py.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from recipe.arise.core.grader_answer import (  # noqa: F401 (the guards' limits are re-exported)
    MAX_ANSWER_CHARS,
    MAX_BRACE_DEPTH,
    MAX_CARETS,
    MAX_DIGIT_RUN,
    MAX_INT_DIGITS,
    _int_gold,
    _mv_equal,
    _numeric_value,
    _strip_skill_echo,
    extract_boxed,
    is_pathological,
    normalize_answer,
)
from recipe.arise.core.grader_workers import (  # noqa: F401 (re-exported)
    FAILURE_REASONS,
    STARTUP_GRACE_S,
    WorkerPool,
    set_exit_hook,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "WorkerPool",
    "configure_grader",
    "extract_boxed",
    "grade",
    "grade_checked",
    "grade_many",
    "grader_stats",
    "is_pathological",
    "normalize_answer",
    "shutdown_grader",
    "warmup",
]

DEFAULT_TIMEOUT_S = 5.0
# bugs of this code or its caller: raised by grade(), never counted as a wrong answer
PROGRAMMING_ERRORS = (TypeError, AttributeError, KeyError, NameError, AssertionError)
MAX_RESPONSE_CHARS = 100_000  # only the tail is searched for the last box


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


set_exit_hook(shutdown_grader)


def grader_stats() -> dict[str, Any]:
    """Counters of the worker pool: ``calls`` (math-verify calls), ``timeouts``, ``kills`` (workers
    pebble killed at a task timeout), ``crashes`` (worker deaths under a task), ``retries``,
    ``errors``, ``restarts`` (pools replaced), ``failures`` (calls a worker did not answer, by
    reason: timeout, worker_died, error, no_worker)."""
    p = _POOL
    if p is None:
        return {"mode": _CONFIG["mode"], "pool": None}
    return {"mode": _CONFIG["mode"], **p.stats()}


class Undecided(Exception):
    """math-verify gave no verdict; the reason (one of FAILURE_REASONS) is the message."""


def _inprocess_equal(pred: str, gold: str, timeout_s: float) -> bool:
    t = max(1, int(math.ceil(timeout_s)))
    if threading.current_thread() is threading.main_thread():
        try:
            return _mv_equal(pred, gold, t)
        except Exception as e:  # math-verify on the model's text: counted, not raised
            raise Undecided("error") from e
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(_mv_equal(pred, gold, None))
        except Exception as e:
            box.append(e)

    th = threading.Thread(target=run, daemon=True, name="arise-grade-inproc")
    th.start()
    th.join(timeout_s)
    if not box:
        raise Undecided("timeout")
    if isinstance(box[0], Exception):
        raise Undecided("error") from box[0]
    return bool(box[0])


def _verify_bounded(pred: str, gold: str, timeout_s: float) -> bool:
    pool = _get_pool()
    if pool is not None:
        ok, res = pool.call(_mv_equal, (pred, gold, max(1, int(math.ceil(timeout_s)))), timeout_s)
        if ok:
            return bool(res)
        if not (res == "no_worker" and _CONFIG["mode"] == "auto"):
            raise Undecided(res)  # timed out / worker died twice / raised: wrong, and counted
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

    Bounded by ``timeout_s`` from any thread (the first calls of a process, if :func:`warmup` was
    not called, may also wait up to ``STARTUP_GRACE_S`` for the workers to start). A check that
    cannot decide (a timeout, a dead worker, an error on the model's text) is False;
    :func:`grade_checked` also says why. Raises only :data:`PROGRAMMING_ERRORS` (bugs, not answers)."""
    return grade_checked(solution_str, ground_truth, timeout_s)[0]


def grade_checked(
    solution_str: Any, ground_truth: Any, timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[bool, str | None]:
    """:func:`grade` and the reason a check could not decide: ``(correct, None)``, or ``(False,
    reason)`` with reason one of FAILURE_REASONS (``error`` also for an exception on the model's
    text). The reward manager counts these in ``arise/grader_errors``."""
    try:
        if isinstance(solution_str, (bytes, bytearray)):
            solution_str = bytes(solution_str[-MAX_RESPONSE_CHARS * 4 :]).decode("utf-8", errors="replace")
        if not isinstance(solution_str, str):
            return False, None
        text = solution_str[-MAX_RESPONSE_CHARS:] if len(solution_str) > MAX_RESPONSE_CHARS else solution_str
        text = _strip_skill_echo(text)
        pred = extract_boxed(text)
        if pred is None:
            return False, None
        pred = pred.strip()
        if not pred:
            return False, None
        timeout_s = float(timeout_s)
        if not (timeout_s > 0):
            timeout_s = DEFAULT_TIMEOUT_S
        deadline = time.monotonic() + timeout_s
        reason = None
        for gt in _gold_strings(ground_truth):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False, reason or "timeout"
            try:
                if _grade_one(pred, gt, remaining):
                    return True, None
            except Undecided as e:  # another gold answer may still match
                reason = str(e)
        return False, reason
    except PROGRAMMING_ERRORS:
        raise
    except Exception:  # e.g. ValueError/OverflowError/RecursionError parsing the model's answer
        return False, "error"


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
