"""Every launch's start-up path (recipe.arise.tools.launch): the earlier launch's log kept, Ray's
start-up retried for the evaluation as for training, and nothing of a finished or killed run left
on the machine (its tagged shared memory and sandbox folders; recipe.arise.core.run_files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import run_main_stub

from recipe.arise.core import run_files
from recipe.arise.tools import evaluate, launch

REPO = Path(__file__).resolve().parents[2]
SHM = Path("/dev/shm")

# a stand-in for the trainer: what `$PYTHON -m ENTRY` would print, and its exit status
STUB = """\
echo "launch $STUB_NAME: Training Progress"
echo "[arise] step 1 phase 1"
exit "${STUB_RC:-0}"
"""


def _run_main(tmp_path: Path, name: str, rc: int = 0) -> subprocess.CompletedProcess:
    log = str(tmp_path / "out" / "run.log")
    return run_main_stub.run_main(tmp_path, STUB, LOG_FILE=log, STUB_NAME=name, STUB_RC=str(rc))


def test_a_second_launch_keeps_the_first_launchs_log(tmp_path):
    """A killed launch's run.log says why it died: the resumed launch moves it to run.launch1.log."""
    first = _run_main(tmp_path, "first", rc=137)
    assert first.returncode == 137
    second = _run_main(tmp_path, "second")
    assert second.returncode == 0, second.stderr
    out = tmp_path / "out"
    assert "launch first" in (out / "run.launch1.log").read_text()
    assert (out / "run.launch1.log").read_text().splitlines()[-1] == "[arise] exit status 137"
    assert "launch second" in (out / "run.log").read_text()
    assert f"the previous launch's log: {out / 'run.launch1.log'}" in second.stdout
    _run_main(tmp_path, "third")
    assert sorted(p.name for p in out.iterdir()) == ["run.launch1.log", "run.launch2.log", "run.log"]
    assert "launch second" in (out / "run.launch2.log").read_text()


def test_rotate_log_leaves_an_empty_or_missing_file(tmp_path):
    assert launch.rotate_log(tmp_path / "eval.log") is None
    (tmp_path / "eval.log").write_text("")
    assert launch.rotate_log(tmp_path / "eval.log") is None
    (tmp_path / "eval.log").write_text("x\n")
    assert launch.rotate_log(tmp_path / "eval.log") == tmp_path / "eval.launch1.log"


# a stand-in for the evaluation's validation run: Ray's start-up times out on the first attempt
FAKE_ENTRY = textwrap.dedent(
    """\
    import json, os, sys
    from pathlib import Path
    attempts = Path(os.environ["FAKE_ATTEMPTS"])
    attempts.write_text(attempts.read_text() + "x" if attempts.exists() else "x")
    if len(attempts.read_text()) == 1:
        print("Exception: The current node timed out during startup. This could happen ...")
        sys.exit(1)
    row = {"step": 0, "data": {"val-core/amc23/acc/mean@2": 0.5}}
    Path(os.environ["VERL_FILE_LOGGER_PATH"]).write_text(json.dumps(row) + "\\n")
    """
)


def test_the_evaluation_retries_a_ray_start_timeout_like_training(tmp_path, monkeypatch, capsys):
    """eval_arise.sh's run (recipe.arise.tools.evaluate) starts through the same launch path as
    training: Ray's start-up timing out once is launched again, the failed attempt's log kept."""
    (tmp_path / "fake_entry.py").write_text(FAKE_ENTRY)
    data = tmp_path / "amc23.parquet"
    data.write_text("")
    monkeypatch.setattr(evaluate, "ENTRY", "fake_entry")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FAKE_ATTEMPTS", str(tmp_path / "attempts"))
    out = tmp_path / "eval"
    rc = evaluate.main(["--model", "m", "--data", str(data), "--k", "2", "--out", str(out), "--skip-preflight"])
    console = capsys.readouterr()
    assert rc == 0, console.err
    assert (tmp_path / "attempts").read_text() == "xx"
    assert "launching again" in console.out
    assert "timed out during startup" in (out / "eval.launch1.log").read_text()
    assert json.loads((out / "eval.json").read_text())["results"]["amc23"]["pass@1"] == 0.5


def test_a_second_ray_start_timeout_ends_with_a_hint(tmp_path, capsys):
    cmd = [sys.executable, "-c", f"print({launch.RAY_START_TIMEOUT!r}); raise SystemExit(1)"]
    rc = launch.launch(cmd, tmp_path / "run.log", "[eval]")
    err = capsys.readouterr().err
    assert rc == 1 and "twice: the machine is too busy to start Ray" in err


# what vLLM does in each engine: shared memory through multiprocessing.shared_memory (named by
# the vLLM plugin's call), and a tool call's sandbox folder; then the "trainer" is killed or ends
LEAKER = textwrap.dedent(
    """\
    import multiprocessing, os, signal, sys, tempfile
    from multiprocessing import resource_tracker, shared_memory
    from recipe.arise.core import run_files
    run_files.name_shared_memory()
    shm = shared_memory.SharedMemory(create=True, size=4096)
    resource_tracker.unregister(shm._name, "shared_memory")  # as vLLM's queues: nobody unlinks them
    lock = multiprocessing.get_context("spawn").Lock()
    resource_tracker.unregister(lock._semlock.name, "semaphore")  # its tracker killed with the run
    folder = tempfile.mkdtemp(prefix=run_files.sandbox_prefix())
    open(os.path.join(folder, "main.py"), "w").write("print(1)")
    print("made", shm.name, folder, lock._semlock.name, flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("end", ["finish", "kill"])
def test_nothing_of_a_finished_or_killed_run_stays_on_the_machine(tmp_path, end, capsys):
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    before = set(os.listdir(SHM))
    rc = launch.launch([sys.executable, "-c", LEAKER, end], tmp_path / "run.log", env=env)
    assert rc == (-9 if end == "kill" else 0)
    made = (tmp_path / "run.log").read_text().split("made ", 1)[1].split()
    shm_name, folder, sem_name = made[0].lstrip("/"), Path(made[1]), "sem." + made[2].lstrip("/")
    assert shm_name.startswith("psm_arise.") and folder.name.startswith("arise-sandbox-")  # tagged
    assert sem_name.startswith("sem.mp-arise.")
    assert not (SHM / shm_name).exists() and not folder.exists() and not (SHM / sem_name).exists()
    assert not [n for n in set(os.listdir(SHM)) - before if "arise" in n]
    assert "removed the run's shared memory and sandbox folders (" in capsys.readouterr().out


def test_a_killed_launchers_files_are_swept_by_the_next_launch_and_no_others(tmp_path, capsys):
    """The launcher itself SIGKILLed (the faults test kills the whole session) cannot clean up: the
    next launch removes the files of tags whose launcher is gone, and only those."""
    dead = "4194999.1"  # above Linux's pid_max: never a running process
    alive = run_files.new_tag(1)  # init: a launch still running
    names = [f"psm_arise.{dead}.00ff", f"sem.mp-arise.{dead}-x1", f"psm_arise.{alive}.00ff", "psm_0123abcd"]
    names += ["psm_arise.junk", "sem.mp-0123"]
    for name in names:
        (SHM / name).write_bytes(b"x" * 10)
    for tag in (dead, alive):
        (tmp_path / f"arise-sandbox-{tag}-abc").mkdir()
    (tmp_path / "arise-sandbox-untagged").mkdir()
    try:
        env = {**os.environ, "TMPDIR": str(tmp_path)}
        assert launch.launch([sys.executable, "-c", "pass"], env=env) == 0
        assert not (SHM / names[0]).exists() and not (SHM / names[1]).exists()
        assert not (tmp_path / f"arise-sandbox-{dead}-abc").exists()
        assert all((SHM / n).exists() for n in names[2:])  # a live launch's, another program's, unknown
        assert (tmp_path / f"arise-sandbox-{alive}-abc").exists() and (tmp_path / "arise-sandbox-untagged").exists()
        assert f"left by a killed launch ({dead}" in capsys.readouterr().out
    finally:
        for name in names:
            (SHM / name).unlink(missing_ok=True)


def test_the_tag_tells_a_reused_pid_apart():
    tag = run_files.new_tag()
    assert run_files.tag_alive(tag)
    pid, start = tag.split(".")
    assert not run_files.tag_alive(f"{pid}.{int(start) + 1}")  # the same pid, another process
    assert run_files.tag_alive("not-a-tag")  # unknown names are kept


def test_a_killed_launcher_left_a_zombie_counts_as_dead():
    """A killed launcher whose parent does not reap it (PID 1 of some containers, CI's among them)
    stays in /proc as a zombie with its start time: its files must still be swept."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tag = run_files.new_tag(child.pid)
        assert run_files.tag_alive(tag)
        child.kill()
        for _ in range(200):  # not reaped: the child stays a zombie until wait()
            if Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.01)
        assert Path(f"/proc/{child.pid}").exists()  # still listed, as in the failing CI run
        assert not run_files.tag_alive(tag)
    finally:
        child.kill()
        child.wait()
