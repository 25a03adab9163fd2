"""Faults in the grader's worker processes (``recipe.arise.core.grader_workers.WorkerPool``), in this process.

``grade()`` is called from many threads at once (the reward manager's executor).  Whatever
happens to a worker, every call returns within its time bound, and a fault costs at most the
task that was running in the process that died -- and that task only after one retry:

* a task that never finishes is cut at its timeout (False, reason ``timeout``), its worker is
  killed and replaced; the other tasks grade right;
* a worker killed under a task: the task is retried once on a fresh pool and graded right; killed
  again: False, reason ``worker_died``;
* tasks queued behind a failure (a killed worker, a worker that died holding pebble's channel
  lock, an idle worker killed) still grade right;
* KeyboardInterrupt in a waiting caller propagates, and the pool keeps serving;
* interpreter exit with a task in flight neither waits for it nor leaves workers behind.

Each test runs on a pool of its own, built and warmed up here.  Tasks that announce their worker
(so that a test can kill it mid-task) come from ``grader_tasks.py`` next to this file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from recipe.arise.core import grader as gr

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the workers import grader_tasks by name (they inherit sys.path)
import grader_tasks as tasks  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="kills worker processes with POSIX signals")

REPO = HERE.parents[1]
POOL_SIZE = 2
SLACK_S = 1.0  # thread scheduling on a loaded 2-core machine
# deadlines and waits where timing is not what a test is about: generous, because a fresh worker
# can take seconds to start when the 2 cores are busy (a fault still shows as a wrong or missing result)
T_S = 30.0
# (pred, gold, expected): math-verify work (no integer shortcut), right and wrong answers
CASES = [
    ("\\frac{3}{4}\\sqrt{3}", "\\frac{3\\sqrt{3}}{4}", True),
    ("x \\in (2, \\infty)", "(2,\\infty)", True),
    ("[2, \\infty)", "(2,\\infty)", False),
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}", True),
    ("5\\pi/7", "\\frac{5\\pi}{7}", True),
    ("5\\pi/8", "\\frac{5\\pi}{7}", False),
]


@pytest.fixture
def pool():
    p = gr.WorkerPool(POOL_SIZE)
    assert p.warmup(wait_s=30.0) == POOL_SIZE, p.stats()
    yield p
    p.shutdown()


def _wait_for(cond, timeout_s: float = T_S) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its parent (the forkserver) to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _equal(pool, pred: str, gold: str, timeout_s: float = T_S):
    return pool.call(gr._mv_equal, (pred, gold, None), timeout_s)


def _grade_all(pool, cases, threads: int = 6, timeout_s: float = T_S) -> list:
    with ThreadPoolExecutor(max_workers=threads) as ex:
        return list(ex.map(lambda c: _equal(pool, c[0], c[1], timeout_s), cases))


def _in_thread(fn, *args) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        t0 = time.perf_counter()
        out["res"] = fn(*args)
        out["dt"] = time.perf_counter() - t0

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def _kill_when_running(tmp_path, tag: str, n: int, timeout_s: float = T_S) -> list[int]:
    """SIGKILL the workers of the first ``n`` attempts of the task tagged ``tag``, each as soon as
    it has started; their pids."""
    killed: list[int] = []
    for _ in range(n):
        assert _wait_for(lambda: len(tasks.pids(tmp_path, tag)) > len(killed), timeout_s), (tag, killed)
        pid = tasks.pids(tmp_path, tag)[len(killed)]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    return killed


def test_hanging_task_times_out_and_costs_only_itself(pool, tmp_path):
    th, out = _in_thread(pool.call, tasks.hang, (str(tmp_path), "hang"), 1.5)
    assert _wait_for(lambda: tasks.pids(tmp_path, "hang"))
    results = _grade_all(pool, CASES * 2)  # on the other slot, then on both
    th.join(10)
    assert out["res"] == (False, "timeout") and 1.5 <= out["dt"] < 1.5 + SLACK_S, out
    assert results == [(True, expected) for _p, _g, expected in CASES * 2], results
    (hung,) = tasks.pids(tmp_path, "hang")
    assert _wait_for(lambda: _dead(hung)), "pebble did not kill the worker of the hanging task"
    assert _wait_for(lambda: pool.stats()["kills"] == 1)
    stats = pool.stats()
    assert stats["failures"] == {"timeout": 1, "worker_died": 0, "error": 0, "no_worker": 0}, stats
    assert stats["crashes"] == stats["retries"] == stats["restarts"] == 0, stats
    assert pool.warmup(wait_s=T_S) == POOL_SIZE and hung not in pool.worker_pids()  # replaced, serving


def test_killed_worker_costs_one_retry_and_the_task_grades_right(pool, tmp_path):
    th, out = _in_thread(
        pool.call, tasks.slow_equal, (str(tmp_path), "t", 0.5, "\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}"), T_S
    )
    (killed,) = _kill_when_running(tmp_path, "t", 1)
    th.join(T_S + 10)
    assert out["res"] == (True, True) and out["dt"] < T_S, out
    attempts = tasks.pids(tmp_path, "t")
    assert len(attempts) == 2 and attempts[0] == killed and _dead(killed)
    stats = pool.stats()
    assert (stats["crashes"], stats["retries"], stats["restarts"]) == (1, 1, 1), stats
    assert sum(stats["failures"].values()) == 0, stats
    assert _grade_all(pool, CASES) == [(True, e) for _p, _g, e in CASES]


def test_worker_killed_twice_grades_false_with_the_reason(pool, tmp_path):
    th, out = _in_thread(pool.call, tasks.slow_equal, (str(tmp_path), "t", 2.0, "1", "1"), T_S)
    _kill_when_running(tmp_path, "t", 2)
    th.join(T_S + 10)
    assert out["res"] == (False, "worker_died") and out["dt"] < T_S, out
    assert len(tasks.pids(tmp_path, "t")) == 2  # never a third attempt
    stats = pool.stats()
    assert stats["failures"]["worker_died"] == 1 and stats["crashes"] == 2 and stats["retries"] == 1, stats
    assert _grade_all(pool, CASES) == [(True, e) for _p, _g, e in CASES]


def test_tasks_queued_behind_killed_workers_grade_right(pool, tmp_path):
    """Two slow tasks fill both slots, twelve grades queue behind them; both slow tasks' workers
    are killed (one of them twice): every queued grade is exactly right, the once-killed task too."""
    args_a = (str(tmp_path), "a", 1.0, "\\frac{2}{4}", "\\frac12")
    args_b = (str(tmp_path), "b", 1.0, "\\frac{2}{4}", "\\frac12")
    th_a, out_a = _in_thread(pool.call, tasks.slow_equal, args_a, T_S)
    th_b, out_b = _in_thread(pool.call, tasks.slow_equal, args_b, T_S)
    assert _wait_for(lambda: tasks.pids(tmp_path, "a") and tasks.pids(tmp_path, "b"))
    with ThreadPoolExecutor(max_workers=12) as ex:
        queued = ex.map(lambda c: _equal(pool, c[0], c[1], T_S), CASES * 2)
        _kill_when_running(tmp_path, "a", 1)
        _kill_when_running(tmp_path, "b", 2)
        results = list(queued)
    th_a.join(T_S + 10)
    th_b.join(T_S + 10)
    assert results == [(True, e) for _p, _g, e in CASES * 2], (results, pool.stats())
    assert out_a["res"] == (True, True) and out_b["res"] == (False, "worker_died"), (out_a, out_b)
    stats = pool.stats()
    assert stats["crashes"] == 3 and stats["retries"] == 2 and stats["failures"]["worker_died"] == 1, stats


def test_idle_worker_killed_costs_nothing(pool):
    victim = pool.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    assert _wait_for(lambda: _dead(victim))
    time.sleep(0.3)  # pebble notices within 0.1 s and gives up on that slot's pool
    assert _grade_all(pool, CASES * 2) == [(True, e) for _p, _g, e in CASES * 2]
    stats = pool.stats()
    assert stats["crashes"] == 0 and sum(stats["failures"].values()) == 0, stats
    assert pool.warmup(wait_s=T_S) == POOL_SIZE and victim not in pool.worker_pids()


def test_worker_dying_holding_the_channel_lock_costs_no_other_task(pool, tmp_path):
    """The fault behind the old flaky test, injected through pebble's internals (the grader uses
    none): a worker dies while it holds its pool's channel lock, before its task is acknowledged.
    pebble then finds no running task for the dead worker and gives up on that pool (and the lock
    stays held).  The grader retries the task on a fresh pool; the task on the other slot is
    untouched."""
    th_a, out_a = _in_thread(pool.call, tasks.slow_equal, (str(tmp_path), "a", 1.5, "0.5", "\\frac12"), T_S)
    assert _wait_for(lambda: tasks.pids(tmp_path, "a"))
    (slot,) = list(pool._idle.queue)  # the one idle slot: the next task goes there
    writer = slot.pool._pool_manager.worker_manager.workers_channel.mutex.writer_mutex
    victim = slot.pid
    assert writer.acquire(timeout=5)
    try:
        th_b, out_b = _in_thread(_equal, pool, "x \\in (2, \\infty)", "(2,\\infty)", T_S)
        time.sleep(0.5)  # the worker wakes for the task, takes the read half and waits for the write half
        os.kill(victim, signal.SIGKILL)
        assert _wait_for(lambda: _dead(victim))
    finally:
        writer.release()
    th_a.join(T_S + 10)
    th_b.join(T_S + 10)
    assert out_a["res"] == (True, True) and out_b["res"] == (True, True), (out_a, out_b, pool.stats())
    assert out_b["dt"] < T_S, out_b
    stats = pool.stats()
    assert stats["restarts"] == 1 and stats["retries"] == 1 and sum(stats["failures"].values()) == 0, stats
    assert _grade_all(pool, CASES) == [(True, e) for _p, _g, e in CASES]


def test_keyboard_interrupt_propagates(pool, tmp_path):
    """SIGINT while the main thread waits for a worker (and, below, for a free slot): the
    KeyboardInterrupt reaches the caller; the pool keeps serving afterwards.  The tasks in the
    workers run until the test creates their go file, so the waits last until the signal."""
    assert threading.current_thread() is threading.main_thread()
    # a shell's background job (`&`, nohup) starts with SIGINT ignored: install Python's handler
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_twice(pool, tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_twice(pool, tmp_path):
    go = tmp_path / "go"
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.call(tasks.wait_for, (str(tmp_path), "t", str(go)), 20.0)
    finally:
        timer.join()
    go.touch()
    assert _wait_for(lambda: pool._idle.qsize() == POOL_SIZE)  # the slot came back when the task ended
    # both slots busy: the main thread waits in the queue for a slot
    go.unlink()
    busy = [_in_thread(pool.call, tasks.wait_for, (str(tmp_path), f"b{k}", str(go)), 20.0) for k in range(2)]
    assert _wait_for(lambda: tasks.pids(tmp_path, "b0") and tasks.pids(tmp_path, "b1"))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.call(gr._mv_equal, ("\\frac{2}{4}", "\\frac12", None), 8.0)
    finally:
        timer.join()
    go.touch()
    for th, _out in busy:
        th.join(10)
    assert all(out["res"] == (True, True) for _th, out in busy), busy
    assert _wait_for(lambda: pool._idle.qsize() == POOL_SIZE)  # every slot came back
    assert _grade_all(pool, CASES) == [(True, e) for _p, _g, e in CASES]


EXIT_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    sys.path.insert(0, {repo!r})
    from recipe.arise.core import grader as gr

    if __name__ == "__main__":
        gr.configure_grader("auto", pool_size=2)
        assert gr.warmup() == 2
        print(" ".join(map(str, gr._get_pool().worker_pids())), flush=True)
        # a task in flight at exit: a daemon thread waiting 60 s on a worker that sleeps 60 s
        threading.Thread(target=gr._get_pool().call, args=(time.sleep, (60,), 60.0), daemon=True).start()
        time.sleep(0.5)
        print("exiting", flush=True)
    """
)


def test_interpreter_exit_with_a_task_in_flight(tmp_path):
    script = tmp_path / "exit_with_task.py"
    script.write_text(EXIT_SCRIPT.format(repo=str(REPO)))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=40)
    dt = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split("\n")
    assert lines[1] == "exiting", proc.stdout
    pids = [int(p) for p in lines[0].split()]
    assert len(pids) == 2
    assert dt < 30, dt  # start-up + 0.5 s + exit; the 60 s task is not waited for
    assert _wait_for(lambda: all(_dead(p) for p in pids), 5.0), "grader workers outlived the interpreter"
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
