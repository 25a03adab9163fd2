"""The preflight's GPU checks: the NVIDIA driver against the CUDA the GPU stack is built for, the GPUs'
compute capability (>= 8.0), and the checkpoint a run loads against the run's GPU count (docs/gpu.md,
"Preflight" and "Older NVIDIA drivers")."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections import Counter
from pathlib import Path

from recipe.arise.tools.preflight_common import Finding, select
from recipe.arise.tools.preflight_model import nvidia_smi
from recipe.arise.tools.preflight_run_folder import checkpoint_root, latest_checkpoint

# The GPU install (scripts/install_gpu.sh: verl[vllm]==0.9.1's pins, torch 2.11.0 and vllm 0.24.0 from
# PyPI) is built for CUDA 13: torch 2.11's PyPI wheel pulls cuda-toolkit 13.0 (the dry run resolves
# cuda-toolkit==13.0.2), and vLLM's default wheels are CUDA 13 builds from 0.20 on.
# tests/tools/test_preflight_gpu.py holds this to the resolved set.
GPU_STACK_CUDA_MAJOR = 13
# NVIDIA's minimum driver per CUDA major (CUDA Compatibility, "Minor Version Compatibility": any 13.x
# runs on a driver >= 580, 12.x on >= 525, 11.x on >= 450; older drivers only with the forward
# compatibility package, on data-center GPUs)
MIN_DRIVER_BY_CUDA_MAJOR = {11: 450, 12: 525, 13: 580}
MIN_DRIVER = MIN_DRIVER_BY_CUDA_MAJOR[GPU_STACK_CUDA_MAJOR]
# the driver check refused, but the node runs NVIDIA's CUDA forward-compatibility package (cuda-compat):
# nvidia-smi reports the kernel driver, not the newer user-mode one the run loads
ALLOW_DRIVER = "ARISE_ALLOW_DRIVER"
PROC_DRIVER = "/proc/driver/nvidia/version"
# bf16 and the stack's kernels need compute capability 8.0 (Ampere) or later: the actor computes in bf16
# (verl's FSDP mixed precision, param_dtype bf16) and vLLM refuses bfloat16 below 8.0
# (vllm/platforms/cuda.py: CudaPlatform.check_if_supports_dtype); CUDA 13 builds carry no kernels below
# 7.5 at all (CUDA 13.0 removed Maxwell, Pascal and Volta: a V100 is 7.0)
MIN_COMPUTE_CAPABILITY = (8, 0)
CUDA13_MIN_COMPUTE_CAPABILITY = (7, 5)
# verl 0.9.1's FSDP checkpoint (verl/utils/checkpoint/fsdp_checkpoint_manager.py): each rank saves
# model_world_size_{W}_rank_{R}.pt (and optim_, extra_state_) and loads the file of its own W and R
SHARD = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")


# ---------------------------------------------------------------------------------- the driver
def driver_version() -> str | None:
    """The NVIDIA driver's version (``580.65.06``) from nvidia-smi, else /proc/driver/nvidia/version;
    None without a driver. Creates no CUDA context."""
    lines = [line.strip() for line in (nvidia_smi("driver_version") or "").splitlines() if line.strip()]
    if lines and re.match(r"^\d+(\.\d+)*$", lines[0]):
        return lines[0]
    try:
        text = Path(PROC_DRIVER).read_text()
    except OSError:
        return None
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."; the open modules:
    # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build ..."
    found = re.search(r"NVRM version:.*?\s(\d{3,}\.\d+(?:\.\d+)*)\s", text)
    return found.group(1) if found else None


def installed_torch_cuda() -> str | None:
    """The CUDA version the installed torch was built for (``torch.version.cuda``, read from its
    file: importing torch here would be seconds), None for a CPU torch or none."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None
    found = re.search(r"^cuda(?:\s*:[^=]*)?=\s*['\"](\d+(?:\.\d+)*)['\"]", text, re.M)
    return found.group(1) if found else None


def check_driver(cfg, driver: str | None = None, torch_cuda: str | None = None) -> list[Finding]:
    """The driver against the CUDA major of the installed torch (a GPU build), else of the GPU stack
    (:data:`GPU_STACK_CUDA_MAJOR`). ``driver``/``torch_cuda``: given (tests), else read here."""
    if str(select(cfg, "trainer.device", "cuda")) == "cpu":
        return []
    driver = driver if driver is not None else driver_version()
    if driver is None:
        return [
            Finding(
                "INFO",
                f"no NVIDIA GPU driver found (no nvidia-smi, no {PROC_DRIVER}): the driver check "
                f"(>= {MIN_DRIVER} for CUDA {GPU_STACK_CUDA_MAJOR}) runs on the GPU machine",
            )
        ]
    torch_cuda = torch_cuda if torch_cuda is not None else installed_torch_cuda()
    major = int(torch_cuda.split(".")[0]) if torch_cuda else GPU_STACK_CUDA_MAJOR
    built = f"the installed torch's CUDA {torch_cuda}" if torch_cuda else f"the GPU install's CUDA {major}"
    needed = MIN_DRIVER_BY_CUDA_MAJOR.get(major)
    try:
        have = int(driver.split(".")[0])
    except ValueError:
        return [Finding("WARNING", f"NVIDIA driver version {driver!r} not understood; not checked")]
    if needed is None or have >= needed:
        return [Finding("OK", f"NVIDIA driver {driver} (>= {needed} for {built})")]
    allowed = os.environ.get(ALLOW_DRIVER) == "1"
    return [
        Finding(
            "WARNING" if allowed else "ERROR",
            f"NVIDIA driver {driver} < {needed}, the minimum for {built} (torch 2.11 and vLLM 0.24 of "
            f"scripts/install_gpu.sh): torch finds no usable GPU and vLLM fails at start-up "
            "('CUDA driver version is insufficient for CUDA runtime version')",
            f"{ALLOW_DRIVER}=1 set: continuing (the CUDA forward-compatibility package must be loaded)"
            if allowed
            else f"a driver >= {needed} (R{needed} or later), or docs/gpu.md 'Older NVIDIA drivers' (a CUDA 12.8 "
            f"torch + vLLM install; {ALLOW_DRIVER}=1 with NVIDIA's cuda-compat package)",
        )
    ]


# ------------------------------------------------------------------------ the GPU's compute capability
def gpu_models() -> list[tuple[str, tuple[int, int]]] | None:
    """``[(name, (major, minor))]`` per GPU from ``nvidia-smi --query-gpu=name,compute_cap`` (no CUDA
    context: torch.cuda would create one); None without nvidia-smi or an answer it understands."""
    gpus = []
    for line in (nvidia_smi("name,compute_cap") or "").splitlines():
        name, _, cap = line.rpartition(",")
        found = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", cap)
        if not name.strip() or not found:
            return None  # an older nvidia-smi: 'Field "compute_cap" is not a valid field to query.'
        gpus.append((name.strip(), (int(found.group(1)), int(found.group(2)))))
    return gpus or None


def check_compute_capability(
    cfg, gpus: list[tuple[str, tuple[int, int]]] | None = None, torch_cuda: str | None = None
) -> list[Finding]:
    """Every GPU of this machine at compute capability >= 8.0. ``gpus`` (``[(name, (major, minor))]``)
    and ``torch_cuda``: given (tests), else read here (:func:`gpu_models`, :func:`installed_torch_cuda`)."""
    if str(select(cfg, "trainer.device", "cuda")) == "cpu":
        return []
    gpus = gpus if gpus is not None else gpu_models()
    if not gpus:
        if shutil.which("nvidia-smi") is None:
            return []  # no driver here: the driver check says so
        return [Finding("INFO", "nvidia-smi gave no compute capability (an older driver): not checked")]
    torch_cuda = torch_cuda if torch_cuda is not None else installed_torch_cuda()
    cuda = int(torch_cuda.split(".")[0]) if torch_cuda else GPU_STACK_CUDA_MAJOR
    counts = Counter(gpus)
    names = ", ".join(f"{n} x {name} ({major}.{minor})" for (name, (major, minor)), n in counts.items())
    old = [(name, cap) for name, cap in counts if cap < MIN_COMPUTE_CAPABILITY]
    if not old:
        return [Finding("OK", f"GPU(s): {names}; compute capability >= 8.0 (bf16)")]
    reasons = [
        "bf16: the actor computes in bf16 (FSDP mixed precision) and vLLM refuses bfloat16 below 8.0 "
        "('Bfloat16 is only supported on GPUs with compute capability of at least 8.0')"
    ]
    if cuda >= 13 and any(cap < CUDA13_MIN_COMPUTE_CAPABILITY for _, cap in old):
        reasons.append(f"CUDA {cuda} (torch and vLLM of the GPU install) has no kernels below 7.5")
    listed = ", ".join(f"{name} (compute capability {major}.{minor})" for name, (major, minor) in old)
    return [
        Finding(
            "ERROR",
            f"GPU {listed}: the stack needs compute capability >= 8.0 - {'; '.join(reasons)}",
            "a GPU of compute capability 8.0 or later (A100, A10/A40, L4/L40, H100/H200, RTX 30xx or later); "
            "docs/gpu.md 'Preflight'",
        )
    ]


# ------------------------------------------------------------------------ checkpoint vs GPU count
def checkpoint_shards(actor: str | os.PathLike) -> dict[int, list[int]]:
    """``{world size: ranks}`` of the FSDP model shards in a checkpoint's ``actor/`` folder ({} for none)."""
    try:
        names = [p.name for p in Path(actor).iterdir()]
    except OSError:
        return {}
    shards: dict[int, list[int]] = {}
    for found in filter(None, map(SHARD.match, names)):
        shards.setdefault(int(found.group(1)), []).append(int(found.group(2)))
    return {world: sorted(ranks) for world, ranks in shards.items()}


def loaded_checkpoint(cfg) -> Path | None:
    """The global_step_N folder verl's ``_load_checkpoint`` will load (resume_path, or auto's latest)."""
    trainer = cfg.trainer
    mode = str(trainer.get("resume_mode", "auto"))
    if mode == "resume_path":
        path = str(trainer.get("resume_from_path") or "")
        return Path(os.path.abspath(path)) if path else None
    if mode == "auto":
        found = latest_checkpoint(checkpoint_root(cfg))
        return found[1] if found else None
    return None


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")


def check_checkpoint_gpus(cfg) -> list[Finding]:
    """A checkpoint's FSDP shards were written by as many ranks as this run has GPUs, and none is
    missing (on several nodes: a WARNING, the other nodes' files may be on their own disks)."""
    folder = loaded_checkpoint(cfg)
    if folder is None:
        return []
    shards = checkpoint_shards(folder / "actor")
    if not shards:  # no actor/ or no shard: the paths check says so
        return []
    trainer = cfg.trainer
    per_node, nodes = int(trainer.n_gpus_per_node), int(trainer.nnodes)
    gpus = per_node * nodes
    world = gpus if gpus in shards else max(shards)
    missing = sorted(set(range(world)) - set(shards[world]))
    if missing and nodes > 1 and world == gpus:
        # each rank saves on its own node: without a shared file system the other nodes' shards are not
        # here, and this node cannot tell that from an interrupted save
        return [
            Finding(
                "WARNING",
                f"checkpoint {folder}/actor: this node holds model shards of rank(s) {_ranks(shards[world])} of "
                f"world size {world}, not {_ranks(missing)}: on {nodes} nodes without a shared file system the "
                "other nodes hold theirs (the preflight cannot see them); on a shared one, an interrupted save or copy",
                f"check that each node's model_world_size_{world}_rank_R.pt files are there, or put "
                "trainer.default_local_dir (CKPT_DIR) on a file system every node shares",
            )
        ]
    if missing and nodes == 1:
        return [
            Finding(
                "ERROR",
                f"checkpoint {folder}/actor: model shards of world size {world} lack rank(s) {_ranks(missing)} "
                "(an interrupted save or copy)",
                "an earlier global_step_N folder, or copy the missing model_world_size_*_rank_*.pt files",
            )
        ]
    if world == gpus:
        return [Finding("OK", f"checkpoint {folder.name}: FSDP shards of {world} rank(s), as this run's {gpus} GPU(s)")]
    merged = folder / "merged_hf"
    if trainer.get("val_only", False):  # evaluation: the weights alone matter, merged they load anywhere
        fix = (
            f"evaluate with GPUS_PER_NODE x NNODES = {world} GPUs, or merge the shards into a Hugging Face folder "
            f"and evaluate that: python -m verl.model_merger merge --backend fsdp --local_dir {folder}/actor "
            f"--target_dir {merged}; then MODEL_PATH={merged} LIBRARY={folder}/arise/library.parquet "
            f"without CKPT (and arise.selection.temperature=<sigma of {folder}/arise/gate.json> for the "
            "checkpoint's gate)"
        )
    else:  # resume: the optimizer state is sharded too, and only the same world size reads it back
        fix = (
            f"resume with GPUS_PER_NODE x NNODES = {world} GPUs; or start a new run (EXPERIMENT=<name>) from the "
            f"merged weights (python -m verl.model_merger merge --backend fsdp --local_dir {folder}/actor "
            f"--target_dir {merged}, MODEL_PATH={merged}), without the optimizer state"
        )
    return [
        Finding(
            "ERROR",
            f"checkpoint {folder}/actor holds FSDP shards of {world} rank(s) (model_world_size_{world}_rank_R.pt); "
            f"this run has {gpus} GPU(s) (trainer.n_gpus_per_node {per_node} x trainer.nnodes {nodes}): verl's "
            f"FSDP loader opens model_world_size_{gpus}_rank_R.pt and fails",
            fix,
        )
    ]


def check_gpu(cfg, check_paths: bool = True) -> list[Finding]:
    """The driver, the GPUs' compute capability, and (with ``check_paths``) the loaded checkpoint's
    shards against the GPU count."""
    findings = check_driver(cfg) + check_compute_capability(cfg)
    if check_paths:
        findings += check_checkpoint_gpus(cfg)
    return findings
