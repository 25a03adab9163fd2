"""The preflight's GPU checks (recipe/arise/tools/preflight_gpu.py): the NVIDIA driver against the
CUDA of the GPU stack, and a checkpoint's FSDP shards against the GPU count of the run loading it."""

import copy
import io
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from file_module import load_file
from omegaconf import OmegaConf

from recipe.arise.tools import preflight, preflight_gpu
from recipe.arise.tools.preflight_gpu import (
    ALLOW_DRIVER,
    GPU_STACK_CUDA_MAJOR,
    MIN_DRIVER,
    check_checkpoint_gpus,
    check_compute_capability,
    check_driver,
    checkpoint_shards,
    driver_version,
    gpu_models,
    installed_torch_cuda,
)

REPO = Path(__file__).resolve().parents[2]
GPU_RUN = OmegaConf.create({"trainer": {"device": "cuda"}})
PROC_TEXT = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  (dvs-builder@U16)\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)


@pytest.fixture(scope="module")
def base(paper_script_overrides):
    entry, overrides = paper_script_overrides
    return entry, overrides, preflight.compose(entry, overrides)


def _cfg(cfg, **updates):
    cfg = copy.deepcopy(cfg)
    for key, value in updates.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    return cfg


def _fake_smi(folder: Path, driver: str, memory_mib: str = "81559", gpus: str = "") -> Path:
    """An nvidia-smi that answers the three queries the preflight makes (``gpus``: the lines of
    ``--query-gpu=name,compute_cap``)."""
    smi = folder / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *driver_version*) echo "{driver}"; echo "{driver}";;\n'
        f' *compute_cap*) printf "{gpus}";;\n'
        f' *memory.total*) echo "{memory_mib}";; esac\n'
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return folder


# ---------------------------------------------------------------------------------- the driver
def test_the_minimum_driver_is_the_one_for_the_resolved_stacks_cuda():
    """GPU_STACK_CUDA_MAJOR is what scripts/install_gpu.sh installs: torch's cuda-toolkit."""
    gpu_stack = load_file(REPO / "scripts" / "gpu_stack.py", "arise_gpu_stack_pg")
    stack = gpu_stack.resolve()
    assert int(stack["cuda-toolkit"].split(".")[0]) == GPU_STACK_CUDA_MAJOR
    assert stack["torch"].split("+")[0] == "2.11.0"
    assert (GPU_STACK_CUDA_MAJOR, MIN_DRIVER) == (13, 580)  # NVIDIA: CUDA 13.x needs a driver >= 580


def test_driver_version_from_nvidia_smi_else_proc(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_fake_smi(tmp_path, "580.65.06")))
    assert driver_version() == "580.65.06"
    proc = tmp_path / "version"
    proc.write_text(PROC_TEXT)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(preflight_gpu, "PROC_DRIVER", str(proc))
    assert driver_version() == "535.104.05"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:50:39 UTC 2025\n")
    assert driver_version() == "580.95.05"
    monkeypatch.setattr(preflight_gpu, "PROC_DRIVER", str(tmp_path / "absent"))
    assert driver_version() is None


def test_an_old_driver_is_refused_with_the_fix(monkeypatch):
    monkeypatch.delenv(ALLOW_DRIVER, raising=False)
    (finding,) = check_driver(GPU_RUN, driver="535.104.05", torch_cuda="")
    assert finding.level == "ERROR"
    assert "535.104.05 < 580" in finding.what and "CUDA 13" in finding.what
    assert "driver >= 580" in finding.fix and "docs/gpu.md" in finding.fix
    # the installed torch's own CUDA decides when it is a GPU build (a CUDA 12.8 install: >= 525)
    assert check_driver(GPU_RUN, driver="535.104.05", torch_cuda="12.8")[0].level == "OK"
    assert check_driver(GPU_RUN, driver="580.65.06", torch_cuda="13.0")[0].level == "OK"
    assert check_driver(GPU_RUN, driver="580.65.06", torch_cuda="")[0].level == "OK"
    monkeypatch.setenv(ALLOW_DRIVER, "1")  # NVIDIA's forward-compatibility package on the node
    assert check_driver(GPU_RUN, driver="535.104.05", torch_cuda="")[0].level == "WARNING"


def test_no_driver_is_said_not_refused_and_a_cpu_run_needs_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(preflight_gpu, "PROC_DRIVER", str(tmp_path / "absent"))
    (finding,) = check_driver(GPU_RUN)
    assert finding.level == "INFO" and "no NVIDIA GPU driver found" in finding.what
    assert check_driver(OmegaConf.create({"trainer": {"device": "cpu"}}), driver="470.1") == []


def test_the_installed_torchs_cuda_is_read_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "torch"
    package.mkdir()
    (package / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
    monkeypatch.setattr(
        preflight_gpu.importlib.util,
        "find_spec",
        lambda name: SimpleNamespace(submodule_search_locations=[str(package)]),
    )
    assert installed_torch_cuda() == "13.0"
    (package / "version.py").write_text("cuda: Optional[str] = None\n")
    assert installed_torch_cuda() is None


# ------------------------------------------------------------------------ the GPU's compute capability
V100 = ("Tesla V100-SXM2-32GB", (7, 0))
T4 = ("Tesla T4", (7, 5))
H200 = ("NVIDIA H200", (9, 0))


def test_gpu_models_from_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_fake_smi(tmp_path, "580.65.06", gpus="Tesla V100-SXM2-32GB, 7.0\\n" * 2)))
    assert gpu_models() == [V100, V100]
    # an nvidia-smi too old for the field answers with a sentence: not understood, not checked
    _fake_smi(tmp_path, "470.1", gpus='Field \\"compute_cap\\" is not a valid field to query.\\n')
    assert gpu_models() is None
    (finding,) = check_compute_capability(GPU_RUN)
    assert finding.level == "INFO" and "not checked" in finding.what
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_models() is None and check_compute_capability(GPU_RUN) == []  # no driver: its own check says so


def test_a_gpu_below_compute_capability_8_is_refused_with_the_reason():
    (finding,) = check_compute_capability(GPU_RUN, gpus=[V100] * 8, torch_cuda="13.0")
    assert finding.level == "ERROR"
    assert "Tesla V100-SXM2-32GB (compute capability 7.0)" in finding.what and ">= 8.0" in finding.what
    assert "bfloat16" in finding.what and "CUDA 13" in finding.what and "no kernels below 7.5" in finding.what
    assert "A100" in finding.fix and "H100/H200" in finding.fix
    # a T4 (7.5) has CUDA 13 kernels but no bf16; a CUDA 12.8 install runs a V100's kernels, not bf16
    (t4,) = check_compute_capability(GPU_RUN, gpus=[T4], torch_cuda="13.0")
    assert t4.level == "ERROR" and "Tesla T4 (compute capability 7.5)" in t4.what and "CUDA 13" not in t4.what
    (cuda12,) = check_compute_capability(GPU_RUN, gpus=[V100], torch_cuda="12.8")
    assert cuda12.level == "ERROR" and "bfloat16" in cuda12.what and "CUDA 13" not in cuda12.what
    # one old GPU among new ones is named alone
    (mixed,) = check_compute_capability(GPU_RUN, gpus=[H200, T4], torch_cuda="13.0")
    assert mixed.level == "ERROR" and "T4" in mixed.what and "H200" not in mixed.what


def test_gpus_of_compute_capability_8_or_later_pass_and_a_cpu_run_needs_none():
    (finding,) = check_compute_capability(GPU_RUN, gpus=[H200] * 8, torch_cuda="13.0")
    assert finding.level == "OK" and "8 x NVIDIA H200 (9.0)" in finding.what
    assert check_compute_capability(GPU_RUN, gpus=[("NVIDIA A100-SXM4-80GB", (8, 0))])[0].level == "OK"
    assert check_compute_capability(OmegaConf.create({"trainer": {"device": "cpu"}}), gpus=[V100]) == []


# ------------------------------------------------------------------------ checkpoint vs GPU count
def _checkpoint(root: Path, step: int, world: int, ranks=None) -> Path:
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for rank in range(world) if ranks is None else ranks:
        for kind in ("model", "optim", "extra_state"):
            (actor / f"{kind}_world_size_{world}_rank_{rank}.pt").write_bytes(b"")
    (actor / "huggingface").mkdir()
    return actor.parent


def test_checkpoint_shards_are_read_from_verls_file_names(tmp_path):
    folder = _checkpoint(tmp_path, 2, 4, ranks=[0, 1, 3])
    assert checkpoint_shards(folder / "actor") == {4: [0, 1, 3]}
    assert checkpoint_shards(tmp_path / "none") == {}


def test_evaluating_on_another_gpu_count_is_refused_with_the_merger(tmp_path, base):
    _, _, cfg = base
    folder = _checkpoint(tmp_path, 2000, 8)
    run = _cfg(
        cfg,
        trainer__resume_mode="resume_path",
        trainer__resume_from_path=str(folder),
        trainer__val_only=True,
        trainer__n_gpus_per_node=4,
        trainer__nnodes=1,
    )
    (finding,) = check_checkpoint_gpus(run)
    assert finding.level == "ERROR"
    assert "8 rank(s)" in finding.what and "4 GPU(s)" in finding.what and "model_world_size_4_rank_R.pt" in finding.what
    assert f"python -m verl.model_merger merge --backend fsdp --local_dir {folder}/actor" in finding.fix
    assert "MODEL_PATH=" in finding.fix and "library.parquet" in finding.fix
    # the same count loads; two nodes of four are eight
    assert check_checkpoint_gpus(_cfg(run, trainer__n_gpus_per_node=8))[0].level == "OK"
    assert check_checkpoint_gpus(_cfg(run, trainer__nnodes=2))[0].level == "OK"


def test_a_training_resume_on_another_gpu_count_is_refused(tmp_path, base):
    _, _, cfg = base
    root = tmp_path / "run"
    _checkpoint(root, 40, 8)
    (root / "latest_checkpointed_iteration.txt").write_text("40")
    run = _cfg(cfg, trainer__default_local_dir=str(root), trainer__resume_mode="auto", trainer__n_gpus_per_node=2)
    (finding,) = check_checkpoint_gpus(run)
    assert finding.level == "ERROR" and "global_step_40" in finding.what
    assert "resume with GPUS_PER_NODE x NNODES = 8 GPUs" in finding.fix
    assert check_checkpoint_gpus(_cfg(run, trainer__resume_mode="disable")) == []


def test_a_checkpoint_missing_a_rank_is_refused(tmp_path, base):
    _, _, cfg = base
    folder = _checkpoint(tmp_path, 6, 8, ranks=[0, 1, 2, 3, 4, 5, 7])
    run = _cfg(cfg, trainer__resume_mode="resume_path", trainer__resume_from_path=str(folder))
    (finding,) = check_checkpoint_gpus(_cfg(run, trainer__n_gpus_per_node=8))
    assert finding.level == "ERROR" and "lack rank(s) 6" in finding.what


def test_several_nodes_without_a_shared_file_system_are_not_missing_ranks(tmp_path, base):
    """2 nodes x 8 GPUs, each saving on its own disk: this node sees ranks 0-7 of 16. A WARNING that
    it cannot see the other node's files, not an ERROR of missing ranks; on one node it stays one."""
    _, _, cfg = base
    folder = _checkpoint(tmp_path, 40, 16, ranks=range(8))
    run = _cfg(
        cfg,
        trainer__resume_mode="resume_path",
        trainer__resume_from_path=str(folder),
        trainer__n_gpus_per_node=8,
        trainer__nnodes=2,
    )
    (finding,) = check_checkpoint_gpus(run)
    assert finding.level == "WARNING", finding.line()
    assert "rank(s) 0, 1, 2, 3, 4, 5, 6, 7 of world size 16" in finding.what and "cannot see" in finding.what
    assert "every node shares" in finding.fix
    (one_node,) = check_checkpoint_gpus(_cfg(run, trainer__n_gpus_per_node=16, trainer__nnodes=1))
    assert one_node.level == "ERROR" and "lack rank(s) 8, 9" in one_node.what
    # another GPU count is refused on several nodes too
    (other,) = check_checkpoint_gpus(_cfg(run, trainer__n_gpus_per_node=4))
    assert other.level == "ERROR" and "holds FSDP shards of 16 rank(s)" in other.what


def test_the_merger_the_fix_names_exists_in_verl():
    import sys

    from verl.model_merger.base_model_merger import parse_args

    argv = ["prog", "merge", "--backend", "fsdp", "--local_dir", "ckpt/actor", "--target_dir", "merged"]
    old, sys.argv = sys.argv, argv
    try:
        args = parse_args()
    finally:
        sys.argv = old
    assert (args.operation, args.backend, args.local_dir, args.target_dir) == ("merge", "fsdp", "ckpt/actor", "merged")


def test_the_preflight_runs_both_checks(tmp_path, base, monkeypatch):
    """The whole preflight on the paper script's config, evaluating an 8-GPU checkpoint on 4 GPUs
    of a machine whose driver is too old: both refusals in its report, exit 1."""
    entry, overrides, _ = base
    monkeypatch.delenv(ALLOW_DRIVER, raising=False)
    monkeypatch.setenv("PATH", f"{_fake_smi(tmp_path, '535.104.05')}:{os.environ['PATH']}")
    monkeypatch.setattr(preflight_gpu, "installed_torch_cuda", lambda: None)
    folder = _checkpoint(tmp_path, 2000, 8)
    extra = [
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={folder}",
        "trainer.val_only=True",
        "trainer.n_gpus_per_node=4",
    ]
    out = io.StringIO()
    assert preflight.run_preflight(entry, overrides + extra, out=out, brief=True) == 1
    report = out.getvalue()
    assert "ERROR   NVIDIA driver 535.104.05 < 580" in report
    assert "holds FSDP shards of 8 rank(s)" in report


def test_the_preflight_refuses_a_v100(tmp_path, base, monkeypatch):
    """The whole preflight on a machine of V100s with a recent driver: the GPU is refused, exit 1."""
    entry, overrides, _ = base
    smi = _fake_smi(tmp_path, "580.65.06", gpus="Tesla V100-SXM2-32GB, 7.0\\n" * 8)
    monkeypatch.setenv("PATH", f"{smi}:{os.environ['PATH']}")
    monkeypatch.setattr(preflight_gpu, "installed_torch_cuda", lambda: None)
    out = io.StringIO()
    assert preflight.run_preflight(entry, overrides, check_paths=False, out=out, brief=True) == 1
    assert "ERROR   GPU Tesla V100-SXM2-32GB (compute capability 7.0)" in out.getvalue()
