"""End to end: ARISE under verl's colocate_async trainer on CPU, killed after a checkpoint and resumed
(docs/trainer_modes.md, "Checkpoint and resume").

``TRAINER_MODE=colocate_async run_scripts/cpu_smoke_arise.sh`` with the script's defaults (6 steps,
Phase I steps 1-2, checkpoints every 2), in two launches on one ``OUT_DIR``:

A  started in its own session; as soon as ``global_step_2`` is complete (the tracker says 2) and
   step 2's metrics are logged (verl logs a step after its checkpoint), every process of it is
   killed with SIGKILL: its session and whatever carries the launch's marker
   variable (Ray's workers and the vLLM server sit in process groups of their own). Under
   colocate_async the next batch is generating by then: groups finished ahead are in the
   checkpoint's TransferQueue and pending observations, groups still running are re-issued.
B  the same command: it resumes from ``global_step_2`` (``trainer.resume_mode=auto``), runs steps 3-6
   and ends with the verdict over both launches' metrics.

Checked: the verdict FAILs nothing, the run as the other async runs (tests/helpers/async_checks.py),
the library B restored is exactly the one saved with step 2, and B's first step logs what the resume
restored and re-issued (``arise/restored_observations`` equal to the checkpoint's pending
observations, ``arise/reissued_groups``, ``arise/reissued_observations_dropped``); no step's
library staleness is negative (the version continues from the checkpoint's step). This module is the
single-turn colocate_async run of CI (the tool agent's is in test_cpu_async_e2e.py): the kill costs
one launch's start-up more than an uninterrupted run, not a second run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import smoke_run
from async_checks import check_run, verdict_not_failed

from recipe.arise.adapters.trainer_resume import PENDING_FILE, load_pending_observations
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_log import library_digest
from recipe.arise.tools.report import read_metrics

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "run_scripts" / "cpu_smoke_arise.sh"
MARKER = "ARISE_RESUME_RUN"  # in the environment of every process of launch A
KILL_AT = 2  # the checkpoint after which A is killed
START_TIMEOUT_S = 1500


def _tracker(run: Path) -> str:
    try:
        return (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip()
    except FileNotFoundError:
        return ""


def _logged(run: Path, step: int) -> bool:
    """verl's file logger has written ``step``'s metrics (this launch's file)."""
    path = run / "metrics.jsonl"
    return path.exists() and step in read_metrics(path, launches=False)[0]


def _members(launcher: int, marker: str) -> list[psutil.Process]:
    """Every live process of a launch: the launcher's session, or the marker in its environment."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue  # dead, waiting for its parent (the launcher's: proc.wait)
            if os.getsid(p.pid) == launcher or p.environ().get(MARKER) == marker:
                found.append(p)
        except (OSError, psutil.Error):
            continue
    return found


def _kill(proc: subprocess.Popen, marker: str) -> int:
    """SIGKILL every process of the launch, by pid, until none is left; returns how many."""
    killed: set[int] = set()
    for _ in range(10):
        found = _members(proc.pid, marker)
        if not found:
            break
        for p in found:
            try:
                p.kill()
            except psutil.Error:
                continue
        killed |= {p.pid for p in found}
        psutil.wait_procs(found, timeout=30)
    proc.wait(timeout=60)
    assert not _members(proc.pid, marker), "processes of the killed launch are left"
    return len(killed)


@pytest.mark.launch
def test_colocate_async_killed_after_a_checkpoint_resumes(tmp_path, tiny):
    env = {"TINY_DIR": str(tiny), "TRAINER_MODE": "colocate_async", "SKIP_PREFLIGHT": "1"}
    marker = uuid.uuid4().hex
    started = time.monotonic()
    with open(tmp_path / "console.a.log", "w") as console:
        a = subprocess.Popen(
            ["bash", str(SCRIPT)],
            cwd=REPO,
            env={**os.environ, "PYTHON": sys.executable, "OUT_DIR": str(tmp_path), **env, MARKER: marker},
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            due = lambda: _tracker(tmp_path) == str(KILL_AT) and _logged(tmp_path, KILL_AT)  # noqa: E731
            while not due() and a.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            reached = due()
        finally:
            killed = _kill(a, marker)
    a_s = time.monotonic() - started
    assert reached, (tmp_path / "console.a.log").read_text()[-4000:]
    pending = load_pending_observations(
        str(tmp_path / "checkpoints" / f"global_step_{KILL_AT}" / "arise" / PENDING_FILE), KILL_AT
    )
    saved = SkillLibrary.load(tmp_path / "checkpoints" / f"global_step_{KILL_AT}" / "arise" / "library.parquet")

    proc = smoke_run.launch(tmp_path, **env)
    b_s = time.monotonic() - started - a_s
    print(f"\n[resume] A killed after global_step_{KILL_AT} ({killed} processes) at {a_s:.0f} s; B {b_s:.0f} s")
    verdict_not_failed(proc.stdout)
    metrics = check_run(tmp_path, "colocate_async")
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert re.search(rf"Resuming from \S*global_step_{KILL_AT}\b", log) and "Training from scratch" not in log
    # the library B restored is the one saved with the checkpoint
    resumes = [json.loads(x) for x in (tmp_path / "checkpoints" / "arise" / "resumes.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumes] == [KILL_AT]
    assert resumes[0]["digest"] == library_digest(saved) and resumes[0]["entries"] == len(saved.entries())
    # B's first step: the pending observations put back, the groups verl re-issued counted
    first = metrics[KILL_AT + 1]
    assert first["arise/restored_observations"] == len(pending)
    assert first["arise/reissued_groups"] >= 0.0
    assert 0.0 <= first["arise/reissued_observations_dropped"] <= len(pending)
    # the library version continues from the checkpoint: a restored trajectory is never newer
    staleness = {s: metrics[s]["arise/library_staleness/mean"] for s in metrics}
    assert min(staleness.values()) >= 0.0, staleness
    print(
        f"[resume] restored {len(pending)} observation(s), re-issued {first['arise/reissued_groups']:.0f} group(s), "
        f"dropped {first['arise/reissued_observations_dropped']:.0f}"
    )
