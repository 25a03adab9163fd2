"""scripts/gpu_stack.py: the dry run's output and the file CI hands to the tests."""

import subprocess
import sys
from pathlib import Path

import pytest
from file_module import load_file

REPO = Path(__file__).resolve().parents[2]


def _gpu_stack():
    return load_file(REPO / "scripts" / "gpu_stack.py", "arise_gpu_stack_t")


def test_an_empty_stack_file_is_an_error_not_an_empty_stack(tmp_path, monkeypatch):
    empty = tmp_path / "stack.txt"
    empty.write_text("")
    monkeypatch.setenv("ARISE_GPU_STACK", str(empty))
    gs = _gpu_stack()
    with pytest.raises(gs.ResolutionError, match="empty"):
        gs.resolve()


def test_the_dry_run_resolves_even_where_its_output_file_is_named(tmp_path):
    """CI exports ARISE_GPU_STACK=FILE, then runs the dry run into FILE: the shell empties FILE
    first, and a dry run reading it would print nothing (it did, and every [gpu] contract failed)."""
    out = tmp_path / "stack.txt"
    env = {"ARISE_GPU_STACK": str(out), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    with open(out, "w") as f:
        proc = subprocess.run(
            ["bash", str(REPO / "scripts" / "install_gpu.sh"), "--dry-run", str(tmp_path / "no_venv")],
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
            timeout=900,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split("==") for line in out.read_text().splitlines())
    assert {"torch", "vllm", "transformers", "verl", "matplotlib"} <= set(lines)
