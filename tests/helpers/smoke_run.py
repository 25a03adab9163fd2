"""What the e2e modules read of a CPU smoke run's folder (importable as ``smoke_run``; see
tests/conftest.py): its metrics, its composed config, and why it is not a complete run; how they start
one; and the overrides a smoke script prints without starting anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from recipe.arise.tools.report import read_metrics

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "run_scripts" / "cpu_smoke_arise.sh"


def metrics(run: Path) -> dict[int, dict[str, float]]:
    """The run's metrics by step, every launch's part (recipe.arise.tools.report.read_metrics)."""
    return read_metrics(run / "metrics.jsonl")[0]


def config(run: Path):
    return OmegaConf.load(run / "hydra" / ".hydra" / "config.yaml")


def incomplete(run: Path, steps: int) -> tuple[str | None, object]:
    """(why ``run`` did not complete ``steps`` steps with the last checkpoint at ``steps``, or None;
    its config, None where it could not be read): the caller adds its own settings' checks."""
    try:
        logged = sorted(metrics(run))
        cfg = config(run)
        tracker = (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip()
    except (OSError, ValueError) as error:
        return f"{type(error).__name__}: {error}", None
    if logged != list(range(1, steps + 1)) or tracker != str(steps):
        return f"metrics for steps {logged}, last complete checkpoint {tracker!r}: not 1..{steps}", cfg
    return None, cfg


def reuse_or_run(variable: str, incomplete_why, run_here, tmp_folder: Path) -> Path:
    """The complete run named by the environment ``variable`` (CI's), else ``run_here(tmp_folder)``'s:
    ``incomplete_why(run)`` says why a run is not the expected one (None: it is)."""
    reuse = os.environ.get(variable)
    if reuse:
        why = incomplete_why(Path(reuse))
        if why is None:
            return Path(reuse)
        print(f"\n[e2e] {variable}={reuse} is not reused ({why}); running the command here")
    run_here(tmp_folder)
    assert incomplete_why(tmp_folder) is None, incomplete_why(tmp_folder)
    return tmp_folder


def print_overrides(script: str = "cpu_smoke_arise.sh", **env: str) -> subprocess.CompletedProcess:
    """``run_scripts/<script>`` with ``PRINT_OVERRIDES=1`` (it prints its entry and overrides and starts
    nothing), this interpreter as ``PYTHON``, ``TINY_DIR=/tmp/t`` and ``env`` on top of a minimal
    environment (``PATH``, ``HOME``, ``LANG``, ``ARISE_CACHE``)."""
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "ARISE_CACHE")}
    return subprocess.run(
        ["bash", str(REPO / "run_scripts" / script)],
        cwd=REPO,
        env={**clean, "PRINT_OVERRIDES": "1", "PYTHON": sys.executable, "TINY_DIR": "/tmp/t", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def printed_overrides(script: str = "cpu_smoke_arise.sh", **env: str) -> dict[str, str]:
    """The ``key=value`` overrides :func:`print_overrides` prints, the script having exited 0."""
    proc = print_overrides(script, **env)
    assert proc.returncode == 0, proc.stderr
    return dict(a.split("=", 1) for a in proc.stdout.split() if "=" in a)


def launch(out_dir: Path, *overrides: str, timeout: float = 1800, **env) -> subprocess.CompletedProcess:
    """``run_scripts/cpu_smoke_arise.sh [overrides]`` with ``OUT_DIR=out_dir`` and ``env`` on top of
    this process's environment (e.g. ``TINY_DIR``, ``TOOL``, ``ARISE``); its console goes to
    ``out_dir/console.log``, and a failed launch fails the test with the console's tail."""
    proc = subprocess.run(
        ["bash", str(SCRIPT), *overrides],
        cwd=REPO,
        env={**os.environ, "PYTHON": sys.executable, "OUT_DIR": str(out_dir), **{k: str(v) for k, v in env.items()}},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    (out_dir / "console.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"cpu smoke run failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-6000:]}"
    return proc


def launch_command(command: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """A shell command line that starts a launch (e.g. one a page of docs/ shows, read from it), run
    as written with ``bash -euo pipefail``; tests/test_tiers.py counts a call of it as a launch."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
