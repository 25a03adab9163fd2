"""Preflight: compose and check a run's config, and estimate its GPU memory, before any GPU is used.

    python -m recipe.arise.tools.preflight run_scripts/qwen3_4b_arise.sh [hydra overrides]
    python -m recipe.arise.tools.preflight recipe.arise.adapters.main_arise OVERRIDE ...     (what the scripts call)
    options, before the script: --gpu-mem-gib N (default: nvidia-smi, else 80 assumed), --no-paths,
    --brief (only what is not OK, and the verdict), --record (run_main: save the run's settings in its
    checkpoint folder, run_config.yaml, when the verdict is not ERROR)

The run scripts call it first (``run_scripts/common.sh: run_main``; ``recipe.arise.tools.evaluate``)
unless ``SKIP_PREFLIGHT=1``. It never touches CUDA or Ray: it composes the hydra config exactly as
the entry point does, then runs the checks verl's own start-up runs on it (``validate_config`` of
``verl.trainer.main_ppo``, the dataclass conversions of the actor, rollout and checkpoint-engine
configs, the reward manager and custom reward function look-ups, the policy-loss and advantage
registries), ARISE's own config, the trainer mode's limits (``preflight_trainer``: no
``parameter_sync_step`` > 1 under the sync trainer), the project's rules (no mandatory value left unset in a component
the run uses, ``rollout.max_model_len`` covering prompt + response and the ARISE extra requests, an
actor attention backend that is installed), the data and checkpoint paths, and the model's
``config.json`` when it is reachable without network (a local folder or the Hugging Face cache).
From the model shape it prints a per-GPU memory estimate (actor under FSDP, vLLM weights and KV
cache) with a verdict. The run's folder: a bounded checkpoint retention, a metrics file verl does not
truncate across launches, a bounded validation batch, free disk for the checkpoints kept, LongRoPE
models whose rollout engine and actor would use different RoPE factors, and the checkpoint a run
would resume: its step, and the ``arise.*`` / ``algorithm.*`` settings it was written with, compared
with this launch's (a difference is an ERROR; ``ARISE_ALLOW_CONFIG_CHANGE=1`` continues anyway).
On a GPU run (``preflight_gpu``): the NVIDIA driver against the CUDA the GPU stack is built for, the
GPUs' compute capability (>= 8.0, from nvidia-smi), and the checkpoint it loads against its GPU count
(FSDP shards per rank).
A tool run (``preflight_tool``, ``TOOL=python``): the tools load from their yaml, which isolation the
python sandbox gets here (a WARNING where it has no namespaces), and the multi-turn budget (turns,
tool-result length, prompt + tool schemas + response).
Exit status 1 on any ERROR. ``tests/test_run_scripts.py`` and ``tests/tools/test_preflight_checks.py``
run the same functions on every script's final config.
"""

from __future__ import annotations

# This module is the CLI and the driver; the checks live beside it: preflight_config (compose, verl's
# start-up checks, ARISE's rules), preflight_run_folder (retention, metrics, disk, resume, the launch
# record), preflight_model (config.json, shape, LongRoPE, memory) and preflight_common (constants).
# The names below are re-exported so ``from recipe.arise.tools import preflight`` reaches them all.
import contextlib
import io
import os
import sys
import time
from pathlib import Path

from recipe.arise.core.arise_overrides import check_arise_overrides
from recipe.arise.tools.preflight_common import (
    ALLOW_CONFIG_CHANGE,
    ALLOW_LONGROPE,
    ARISE_ENTRY,
    BRIEF_PREFIXES,
    README_GPU_ATTENTION,
    RUN_CONFIG,
    STEP_CONFIG,
    VERL_DEFAULT_ATTENTION,
    Finding,
)
from recipe.arise.tools.preflight_config import (
    attention_backend,
    check_backends,
    check_config,
    check_data_paths,
    compose,
    length_budget,
    missing_values,
    script_overrides,
    unused_components,
)
from recipe.arise.tools.preflight_env import check_envs
from recipe.arise.tools.preflight_gpu import check_gpu
from recipe.arise.tools.preflight_model import (
    MemoryEstimate,
    ModelShape,
    check_longrope,
    count_params,
    estimate_memory,
    find_model_file,
    gpu_memory_gib,
    longrope,
    model_shape,
    read_model_config,
)
from recipe.arise.tools.preflight_run_folder import (
    check_disk,
    check_resume,
    check_run_folder,
    checkpoint_bytes,
    checkpoint_root,
    latest_checkpoint,
    record_launch,
    resume_settings,
    saved_settings,
    setting_changes,
)
from recipe.arise.tools.preflight_tiny import resolve_placeholder
from recipe.arise.tools.preflight_tool import check_tool

__all__ = [
    "ALLOW_CONFIG_CHANGE",
    "ALLOW_LONGROPE",
    "ARISE_ENTRY",
    "README_GPU_ATTENTION",
    "RUN_CONFIG",
    "STEP_CONFIG",
    "VERL_DEFAULT_ATTENTION",
    "Finding",
    "MemoryEstimate",
    "ModelShape",
    "attention_backend",
    "check_backends",
    "check_config",
    "check_data_paths",
    "check_disk",
    "check_longrope",
    "check_resume",
    "check_run_folder",
    "checkpoint_bytes",
    "checkpoint_root",
    "compose",
    "count_params",
    "estimate_memory",
    "find_model_file",
    "gpu_memory_gib",
    "latest_checkpoint",
    "length_budget",
    "longrope",
    "main",
    "missing_values",
    "model_shape",
    "read_model_config",
    "record_launch",
    "resume_settings",
    "run_preflight",
    "saved_settings",
    "script_overrides",
    "setting_changes",
    "unused_components",
]


# ------------------------------------------------------------------------------------------ main
def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.2f} M"


def run_preflight(
    entry: str,
    overrides: list[str],
    gpu_mem_gib: float | None = None,
    check_paths: bool = True,
    out=None,
    brief: bool = False,
    record: bool = False,
    found: list[Finding] | None = None,
) -> int:
    """Compose, check and estimate; print the report; 0 when nothing is an ERROR. ``brief``: print
    only the findings that are not OK and the verdict; ``record``: when the verdict is not ERROR,
    save the config in the checkpoint folder (:func:`record_launch`); ``found``: findings made before
    composing (reported first)."""
    out = out or sys.stdout
    started = time.time()

    def say(text):
        if brief and not text.startswith(BRIEF_PREFIXES):
            return
        print(text, file=out, flush=True)

    if entry == ARISE_ENTRY:  # a mistyped arise key: the schema's message, not Hydra's "append it with +"
        try:
            check_arise_overrides(overrides)
        except ValueError as error:
            say(f"[preflight] ERROR   {error}")
            return 1
    try:
        cfg = compose(entry, overrides)
    except Exception as error:
        say(f"[preflight] ERROR   the config does not compose: {type(error).__name__}: {error}")
        return 1
    say(f"[preflight] {entry}: {len(overrides)} overrides composed in {time.time() - started:.1f} s")
    findings = list(found or []) + check_config(cfg, entry, check_paths=check_paths, check_runtime=True)
    findings += check_gpu(cfg, check_paths=check_paths)  # the NVIDIA driver; the checkpoint's GPU count
    findings += check_tool(cfg, check_paths=check_paths)  # TOOL=python: tools, sandbox isolation, turn budget
    findings += check_envs(cfg, check_paths=check_paths)  # environment rows: the package, Java, extra_info.env

    model = str(cfg.actor_rollout_ref.model.path)
    config = None
    try:
        config = read_model_config(model)
    except (OSError, ValueError) as error:
        findings.append(Finding("WARNING", f"model config.json unreadable: {error}"))
    estimate = None
    if config is None:
        findings.append(
            Finding("INFO", f"model {model}: config.json not reachable offline; no max-length or memory check")
        )
    else:
        shape = model_shape(config, count_params(model, config))
        how = "counted" if shape.params_counted else "from the shape"
        findings.append(
            Finding(
                "OK",
                f"model {model}: {_count(shape.num_params)} params ({how}), {shape.num_layers} layers, "
                f"{shape.num_kv_heads} KV heads x {shape.head_dim}",
            )
        )
        findings += check_longrope(cfg, config)
        if check_paths:
            findings += check_disk(cfg, shape.num_params)
        max_len = cfg.actor_rollout_ref.rollout.get("max_model_len")
        limit = shape.max_position_embeddings
        if max_len is not None and limit is not None and int(max_len) > int(limit):
            findings.append(
                Finding(
                    "ERROR",
                    f"rollout.max_model_len {max_len} > the model's max_position_embeddings {limit} "
                    "(verl's rollout server refuses it)",
                    f"MAX_MODEL_LEN<={limit}",
                )
            )
        if Path(model).is_dir():

            def model_dataclass():
                from verl.utils.config import omega_conf_to_dataclass

                model_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
                return f"{model_cfg.architectures[0]}, tokenizer {type(model_cfg.tokenizer).__name__}"

            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    detail = model_dataclass()
                findings.append(Finding("OK", f"verl HFModelConfig (model, tokenizer): {detail}"))
            except Exception as error:
                findings.append(Finding("ERROR", f"verl HFModelConfig: {type(error).__name__}: {error}"))
        if str(cfg.trainer.get("device", "cuda")) == "cpu":
            findings.append(Finding("INFO", "trainer.device=cpu: no GPU memory to estimate"))
        else:
            source = "given"
            if gpu_mem_gib is None:
                gpu_mem_gib, source = gpu_memory_gib(), "nvidia-smi"
            if gpu_mem_gib is None:
                gpu_mem_gib, source = 80.0, "assumed (no nvidia-smi; --gpu-mem-gib N)"
            estimate = estimate_memory(cfg, shape, gpu_mem_gib, source)

    for finding in findings:
        say(finding.line())
    level = "ERROR" if any(f.level == "ERROR" for f in findings) else "OK"
    if estimate is not None:
        for line in estimate.lines():
            say(f"[preflight] {line}")
        for finding in estimate.findings:
            if finding.level == "ERROR" and estimate.gpu_source.startswith("assumed"):
                finding = Finding("WARNING", finding.what + " (with the assumed GPU size)", finding.fix)
            say(finding.line())
            if finding.level == "ERROR":
                level = "ERROR"
        if level != "ERROR" and any(f.level == "WARNING" for f in findings + estimate.findings):
            level = "WARNING"
    elif level != "ERROR" and any(f.level == "WARNING" for f in findings):
        level = "WARNING"
    if record and level != "ERROR":
        try:
            recorded = record_launch(cfg)
            if recorded is not None:
                say(f"[preflight] OK      the run's settings: {recorded}")
        except OSError as error:
            say(f"[preflight] WARNING could not record the run's settings: {error}")
    say(f"[preflight] verdict: {level} ({time.time() - started:.1f} s)")
    return 1 if level == "ERROR" else 0


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    gpu_mem, check_paths, brief, record = None, True, False, False
    while args and args[0].startswith("--"):
        option = args.pop(0)
        if option == "--no-paths":
            check_paths = False
        elif option == "--brief":
            brief = True
        elif option == "--record":
            record = True
        elif option.startswith("--gpu-mem-gib"):
            gpu_mem = float(option.split("=", 1)[1] if "=" in option else args.pop(0))
        elif option in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            print(f"unknown option {option}\n{__doc__}", file=sys.stderr)
            return 2
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    target, overrides = args[0], args[1:]
    found = []
    if target.endswith(".sh") or os.path.isfile(target):
        try:
            entry, overrides = script_overrides(target, overrides)
        except RuntimeError as error:
            print(f"[preflight] ERROR   {error}", file=sys.stderr)
            return 1
        overrides, found = resolve_placeholder(overrides)  # cpu_smoke_arise.sh: its cached tiny assets
    else:
        entry = target
    return run_preflight(
        entry, overrides, gpu_mem_gib=gpu_mem, check_paths=check_paths, brief=brief, record=record, found=found
    )


if __name__ == "__main__":
    sys.exit(main())
