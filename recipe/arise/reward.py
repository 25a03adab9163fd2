"""Task grading and the hierarchical reward of ARISE (paper §3, App. D.2).

``grade(response, ground_truth)``: the LAST ``\\boxed{}``/``\\fbox{}`` of the response is
the answer (no box -> False).  Integer ground truths (``204``, ``"27.0"``, ``27.0``,
``"10,\\!080"``) are matched exactly by value after light normalisation of the boxed text,
without sympy.  Everything else goes through math-verify.

Every call is bounded in time from any thread:

* cheap pre-guards reject pathological answers (length, control bytes, brace depth,
  digit runs, power towers / huge exponents, factorials / binomials of big numbers);
* math-verify runs in a small pool of persistent *spawned* worker processes; the caller
  waits on a pipe with a deadline and hard-kills (SIGKILL) a worker that overruns, a
  replacement is spawned in the background.  This works off the main thread, where
  math-verify's own ``signal.alarm`` timeout cannot be used (math-verify then raises
  and returns False for everything).  Inside the worker (its main thread) math-verify's
  own timeouts are enabled as a first line of defence.
* if worker processes cannot be started (e.g. inside a daemonic process), grading falls
  back to in-process math-verify: with its signal timeout on the main thread, otherwise
  in a helper daemon thread joined with a deadline (soft bound, backed by the guards).

Framework free: math-verify is imported lazily, only in the process that needs it.
"""

from __future__ import annotations

import atexit
import math
import os
import queue
import re
import threading
import time
from collections.abc import Sequence
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


def _worker_main(rfd: int, wfd: int) -> None:  # pragma: no cover - runs in the child process
    """Worker loop: requests arrive on fd ``rfd``, answers leave on fd ``wfd``."""
    import logging
    import signal
    from multiprocessing.connection import Connection

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
    logging.disable(logging.CRITICAL)
    rconn, wconn = Connection(rfd, writable=False), Connection(wfd, readable=False)
    try:  # warm the imports and sympy's lazy caches before the first request
        _mv_equal("\\frac{1}{2}", "0.5", None)
    except Exception:
        pass
    wconn.send(("ready", os.getpid()))
    while True:
        try:
            kind, payload = rconn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        try:
            if kind == "verify":
                pred, gold, t = payload
                res: Any = _mv_equal(pred, gold, t)
            elif kind == "_sleep":  # test hook: simulate a runaway computation
                time.sleep(float(payload))
                res = True
            else:
                res = False
        except BaseException:
            res = False
        try:
            wconn.send(res)
        except (EOFError, OSError):
            return


def _package_root() -> str:
    """Directory to put on the child's sys.path so that this module is importable."""
    from pathlib import Path

    depth = len(__name__.split("."))
    return str(Path(__file__).resolve().parents[depth - 1])


class _Worker:
    __slots__ = ("proc", "send_conn", "recv_conn")

    def __init__(self, proc, send_conn, recv_conn) -> None:
        self.proc = proc
        self.send_conn = send_conn
        self.recv_conn = recv_conn

    def kill(self) -> None:
        try:
            self.proc.kill()
        except Exception:
            pass
        for c in (self.send_conn, self.recv_conn):
            try:
                c.close()
            except Exception:
                pass
        # reap off the caller's thread: a timed-out grade returns at its deadline, not 1 s later
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=10.0)
        except Exception:
            pass


class _GraderPool:
    """Persistent worker processes; per-call deadline with hard kill.

    Workers are started with ``subprocess`` running ``python -c`` (not multiprocessing
    spawn/forkserver, which re-import the caller's ``__main__``); requests travel over a
    dedicated pipe pair with multiprocessing's length-prefixed pickle framing."""

    def __init__(self, size: int) -> None:
        self.size = max(1, int(size))
        self.pid = os.getpid()
        self.idle: queue.Queue[_Worker] = queue.Queue()
        self.lock = threading.Lock()
        self.alive = 0  # started or starting
        self.broken: str | None = None
        self.kills = 0
        self.calls = 0
        self.timeouts = 0

    def _spawn(self, wait_s: float = 30.0) -> _Worker | None:
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        fds: list[int] = []
        try:
            req_r, req_w = os.pipe()
            res_r, res_w = os.pipe()
            fds = [req_r, req_w, res_r, res_w]
            env = dict(os.environ)
            root = _package_root()
            env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            code = f"import {__name__} as m; m._worker_main({req_r}, {res_w})"
            proc = subprocess.Popen(
                [sys.executable, "-c", code],
                pass_fds=(req_r, res_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                close_fds=True,
                start_new_session=True,
            )
            os.close(req_r)
            os.close(res_w)
            fds = []
            w = _Worker(proc, Connection(req_w, readable=False), Connection(res_r, writable=False))
            if not w.recv_conn.poll(wait_s):
                w.kill()
                return None
            w.recv_conn.recv()  # ("ready", pid)
            return w
        except BaseException as e:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.broken = f"{type(e).__name__}: {e}"
            return None

    def _spawn_async(self) -> None:
        def run() -> None:
            w = self._spawn()
            if w is None:
                with self.lock:
                    self.alive -= 1
            else:
                self.idle.put(w)

        threading.Thread(target=run, daemon=True, name="arise-grader-respawn").start()

    def _acquire(self, deadline: float) -> _Worker | None:
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            pass
        spawn_now = False
        with self.lock:
            if self.alive < self.size:
                self.alive += 1
                spawn_now = True
        if spawn_now:
            w = self._spawn(wait_s=max(5.0, deadline - time.monotonic()))
            if w is None:
                with self.lock:
                    self.alive -= 1
            return w
        try:
            return self.idle.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def warmup(self, n: int | None = None) -> int:
        n = self.size if n is None else min(int(n), self.size)
        started = []
        for _ in range(n):
            with self.lock:
                if self.alive >= self.size:
                    break
                self.alive += 1
            w = self._spawn()
            if w is None:
                with self.lock:
                    self.alive -= 1
                break
            started.append(w)
        for w in started:
            self.idle.put(w)
        return len(started)

    def call(self, msg: tuple, timeout_s: float, acquire_grace_s: float = 0.0) -> tuple[bool, Any]:
        """(ok, result); ok=False on timeout / failure (worker killed and replaced)."""
        start = time.monotonic()
        w = self._acquire(start + timeout_s + acquire_grace_s)
        if w is None:
            return False, None
        self.calls += 1
        remaining = max(0.01, timeout_s - (time.monotonic() - start))
        try:
            w.send_conn.send(msg)
            if w.recv_conn.poll(remaining):
                res = w.recv_conn.recv()
                self.idle.put(w)
                return True, res
            self.timeouts += 1
        except (EOFError, OSError, ValueError):
            pass
        # overran or died: hard kill, replace in the background
        w.kill()
        self.kills += 1
        self._spawn_async()
        return False, None

    def shutdown(self) -> None:
        while True:
            try:
                w = self.idle.get_nowait()
            except queue.Empty:
                break
            w.kill()
        with self.lock:
            self.alive = 0


_CONFIG: dict[str, Any] = {"mode": "auto", "pool_size": min(4, os.cpu_count() or 1)}
_POOL: _GraderPool | None = None
_POOL_LOCK = threading.Lock()


def configure_grader(mode: str = "auto", pool_size: int | None = None) -> None:
    """mode: "auto" (pool, in-process fallback if it cannot start), "pool", or "inprocess"."""
    global _POOL
    if mode not in ("auto", "pool", "inprocess"):
        raise ValueError(f"mode must be auto|pool|inprocess, got {mode!r}")
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.shutdown()
            _POOL = None
        _CONFIG["mode"] = mode
        if pool_size is not None:
            _CONFIG["pool_size"] = max(1, int(pool_size))


def _get_pool() -> _GraderPool | None:
    global _POOL
    if _CONFIG["mode"] == "inprocess":
        return None
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():  # new process after fork: fresh pool
            _POOL = _GraderPool(_CONFIG["pool_size"])
        pool = _POOL
    if pool.broken and _CONFIG["mode"] == "auto" and pool.alive == 0:
        return None
    return pool


def warmup(n: int | None = None) -> int:
    """Start the grader workers now (first use otherwise pays ~0.5 s of process spawn)."""
    pool = _get_pool()
    return pool.warmup(n) if pool is not None else 0


def shutdown_grader() -> None:
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL.shutdown()
        _POOL = None


atexit.register(shutdown_grader)


def grader_stats() -> dict[str, Any]:
    p = _POOL
    if p is None:
        return {"mode": _CONFIG["mode"], "pool": None}
    return {
        "mode": _CONFIG["mode"],
        "pool_size": p.size,
        "alive": p.alive,
        "calls": p.calls,
        "timeouts": p.timeouts,
        "kills": p.kills,
        "broken": p.broken,
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
        ok, res = pool.call(("verify", (pred, gold, max(1, int(math.ceil(timeout_s))))), timeout_s)
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

    Never raises; bounded by ``timeout_s`` (plus process-spawn time on the very first
    call if :func:`warmup` was not called) from any thread."""
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
