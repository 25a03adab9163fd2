"""A run whose log disk fills up still shows why it failed: run_scripts/common.sh's run_main with
LOG_FILE on a full disk (/dev/full, and a tiny tmpfs where this process may mount one) and a stub
in place of the trainer that fails on a full disk; the console must get the exception, the exit
status and a line saying the log file is incomplete."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import run_main_stub

REPO = Path(__file__).resolve().parents[2]
CAUSE = "OSError: [Errno 28] No space left on device: '/ckpt/global_step_2/actor'"

# the stub trainer: ~120 kB of start-up noise, one step line, then the exception and exit 1
STUB = f"""\
for i in $(seq 1 1500); do echo "(TaskRunner pid=1) INFO hydra noise line $i: ............................"; done
echo "(TaskRunner pid=1) [arise] step 1 phase 1 reward 0.50"
[ "${{STUB_OK:-0}}" = 1 ] && exit 0
echo "Traceback (most recent call last):" >&2
echo "{CAUSE}" >&2
exit 1
"""


def run_main(tmp_path: Path, log_file: str, ok: bool = False) -> subprocess.CompletedProcess:
    return run_main_stub.run_main(tmp_path, STUB, LOG_FILE=log_file, STUB_OK="1" if ok else "0")


def _assert_cause_on_console(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "[arise] step 1 phase 1" in proc.stdout  # the step line still came through
    assert CAUSE in proc.stderr and "the run failed (exit 1)" in proc.stderr
    assert "is incomplete: writing it failed" in proc.stderr


def test_the_cause_reaches_the_console_when_the_log_cannot_be_written(tmp_path):
    _assert_cause_on_console(run_main(tmp_path, "/dev/full"))


@pytest.fixture
def tiny_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_the_cause_reaches_the_console_when_the_log_disk_fills_up(tmp_path, tiny_disk):
    log = tiny_disk / "run.log"
    proc = run_main(tmp_path, str(log))
    _assert_cause_on_console(proc)
    assert CAUSE not in log.read_text()  # the disk filled up before it: the file alone would lose it
    assert "No space left on device" in proc.stderr


def test_a_healthy_run_keeps_the_console_quiet_and_the_log_whole(tmp_path):
    log = tmp_path / "logs" / "run.log"
    proc = run_main(tmp_path, str(log), ok=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "[arise] step 1 phase 1 reward 0.50"
    assert "failed" not in proc.stderr and "incomplete" not in proc.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 1502 and lines[-1] == "[arise] exit status 0"
    failed = run_main(tmp_path, str(log))  # a failure with room on the disk: the end of the run, as before
    assert failed.returncode == 1 and CAUSE in failed.stderr and "incomplete" not in failed.stderr
    assert CAUSE in log.read_text()
