"""A "cpu" platform for verl's platform registry (verl ships nvidia/npu/rocm only)."""

import types
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


class _CpuDeviceModule(types.ModuleType):
    """torch.cpu plus no-op stand-ins for the torch.cuda memory/stat calls verl makes."""

    _FIXED = {
        "get_device_name": lambda *a, **k: "CPU",  # flops counter looks the name up
        "mem_get_info": lambda *a, **k: (0, 0),
        "memory_stats": lambda *a, **k: {},
        "get_rng_state": lambda *a, **k: torch.get_rng_state(),
        "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
        "manual_seed": lambda seed: torch.manual_seed(seed),
        "manual_seed_all": lambda seed: torch.manual_seed(seed),
    }

    def __init__(self):
        super().__init__("arise_cpu_device")

    def __getattr__(self, name):
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name in self._FIXED:
            return self._FIXED[name]
        return lambda *a, **k: 0


class _CpuId(str):
    """Acts as the device "cpu" for ``x.to(dev)`` but formats as "0" inside ``f"{dev}:{id}"``."""

    def __format__(self, spec):
        return "0"


_CPU_MOD = _CpuDeviceModule()
_CPU_ID = _CpuId("cpu")


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        return _CPU_MOD

    def is_available(self) -> bool:
        return True

    def current_device(self):
        return _CPU_ID

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    # Ray placement asks for "GPU" bundles; the CPU run starts Ray with num_gpus=1 slots.
    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
