"""ARISE's warnings reach the run's log from every process verl imports ARISE in: a process whose
root logger prints nothing (a NullHandler: verl's ``basicConfig`` then adds no handler, and Python's
last-resort handler is not used) and ``VERL_LOGGING_LEVEL=ERROR`` (which sets the ARISE module
loggers' level) still shows the agent loop's warning, once, and a root console handler added later
prints it instead of ARISE's, not as well."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import logging, sys
    logging.getLogger().addHandler(logging.NullHandler())
    import recipe.arise.adapters.verl_register  # what verl imports in each Ray worker
    logging.getLogger("recipe.arise.adapters.agent_loop").warning("PROBE-1 ARISE skill scoring failed")
    logging.getLogger("recipe.arise.adapters.trainer").warning("PROBE-2 from the trainer")
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("ROOT %(message)s"))
    logging.getLogger().addHandler(console)
    logging.getLogger("recipe.arise.adapters.trainer").warning("PROBE-3 with a root console")
    import recipe.arise.adapters.verl_register as again, importlib
    importlib.reload(again)  # registering twice adds no second handler
    logging.getLogger("recipe.arise.adapters.agent_loop").warning("PROBE-4 after a reload")
    """
)


def test_arise_warnings_reach_stderr_once_in_every_process():
    env = dict(os.environ, VERL_LOGGING_LEVEL="ERROR", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    for probe in ("PROBE-1", "PROBE-2", "PROBE-3", "PROBE-4"):
        hits = [line for line in lines if probe in line]
        assert len(hits) == 1, (probe, hits, proc.stderr[-3000:])
    (first,) = [line for line in lines if "PROBE-1" in line]
    assert first.startswith("WARNING ") and "recipe.arise.adapters.agent_loop:" in first  # which module said it
    assert any(line == "ROOT PROBE-3 with a root console" for line in lines)
