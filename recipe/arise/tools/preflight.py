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
registries), ARISE's own config, the project's rules (no mandatory value left unset in a component
the run uses, ``rollout.max_model_len`` covering prompt + response and the ARISE extra requests, an
actor attention backend that is installed), the data and checkpoint paths, and the model's
``config.json`` when it is reachable without network (a local folder or the Hugging Face cache).
From the model shape it prints a per-GPU memory estimate (actor under FSDP, vLLM weights and KV
cache) with a verdict. The run's folder: a bounded checkpoint retention, a metrics file verl does not
truncate across launches, a bounded validation batch, free disk for the checkpoints kept, LongRoPE
models whose rollout engine and actor would use different RoPE factors, and the checkpoint a run
would resume: its step, and the ``arise.*`` / ``algorithm.*`` settings it was written with, compared
with this launch's (a difference is an ERROR; ``ARISE_ALLOW_CONFIG_CHANGE=1`` continues anyway).
Exit status 1 on any ERROR. ``tests/test_run_scripts.py`` and ``tests/tools/test_preflight_checks.py``
run the same functions on every script's final config.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ARISE_ENTRY = "recipe.arise.adapters.main_arise"
GiB = 1024**3

# Attention backends the README's GPU install (`pip install "verl[vllm]==0.9.1"`) provides: the
# ones built into torch. flash_attention_2 needs the flash-attn package (verl's `fsdp` extra).
README_GPU_ATTENTION = ("sdpa", "eager")
# verl reads the actor's attention from model.override_config.attn_implementation, default
# flash_attention_2 (verl/workers/config/model.py, HFModelConfig.__post_init__)
VERL_DEFAULT_ATTENTION = "flash_attention_2"
ATTENTION_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
ROLLOUT_PACKAGES = {"vllm": "vllm", "sglang": "sglang"}

# ARISE's extra requests on the rollout engine, beyond prompt + response (run_scripts/common.sh)
SKILL_ROOM = 256  # "SKILL:{json}\n" with a <= 220-char skill document
SUMMARY_TEMPLATE_TOKENS = 300  # Figure-4 summary prompt + chat template
CHARS_PER_TOKEN = 3  # a rough bound for clipped traces (math text)

# Checkpoints: verl's FSDP checkpoint holds the fp32 model and AdamW's two fp32 moments (actor
# checkpoint.save_contents model, optimizer; + a bf16 copy with hf_model)
MODEL_BYTES_PER_PARAM, ADAMW_BYTES_PER_PARAM, HF_BYTES_PER_PARAM = 4, 8, 2
# Resume: the settings a checkpoint's run must share with the run that continues it. Whole sections,
# minus the keys that change how fast or how often, not what is learned.
RESUME_SECTIONS = ("arise", "algorithm")
RESUME_KEYS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.actor.policy_loss.loss_mode",
    "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.clip_ratio_low",
    "actor_rollout_ref.actor.clip_ratio_high",
    "actor_rollout_ref.rollout.n",
    "data.train_batch_size",
    "reward.reward_manager.name",
)
RESUME_EXEMPT = (
    "arise.log_dir",
    "arise.replay_poll_s",
    "arise.selection.scoring_timeout_s",
    "arise.selection.scoring_prefix_cache",
    "arise.summary.timeout_s",
    "arise.summary.stream",
    "arise.reward.timeout_s",
    "arise.ig.",
    "arise.validation.",
)
RUN_CONFIG = "run_config.yaml"  # the checkpoint folder's settings, written by the preflight at launch
STEP_CONFIG = os.path.join("arise", "config.yaml")  # global_step_N's own settings, when the trainer saves them
ALLOW_CONFIG_CHANGE = "ARISE_ALLOW_CONFIG_CHANGE"
ALLOW_LONGROPE = "ARISE_ALLOW_LONGROPE"
BRIEF_PREFIXES = tuple(f"[preflight] {x}" for x in ("WARNING", "ERROR", "INFO", "verdict"))

DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4, "float": 4}


@dataclass
class Finding:
    level: str  # OK | INFO | WARNING | ERROR
    what: str
    fix: str = ""

    def line(self) -> str:
        return f"[preflight] {self.level:<7} {self.what}" + (f"\n[preflight]         -> {self.fix}" if self.fix else "")


# ------------------------------------------------------------------------------------------ compose
def script_overrides(script: str | os.PathLike, extra=(), env: dict | None = None) -> tuple[str, list[str]]:
    """The entry and final overrides of a run script (its ``PRINT_OVERRIDES=1`` output)."""
    proc = subprocess.run(
        ["bash", str(script), *extra],
        env={**os.environ, **(env or {}), "PRINT_OVERRIDES": "1"},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed with exit code {proc.returncode}:\n{proc.stderr.strip()}")
    lines = proc.stdout.splitlines()
    if not lines or not lines[0].startswith("ENTRY="):
        raise RuntimeError(f"{script}: PRINT_OVERRIDES=1 printed no ENTRY= line:\n{proc.stdout[:2000]}")
    return lines[0][len("ENTRY=") :], [line for line in lines[1:] if line]


def _config_source(entry: str) -> tuple[Path, str]:
    if entry == ARISE_ENTRY:
        return Path(__file__).resolve().parents[1] / "config", "arise_trainer"
    if entry == "verl.trainer.main_ppo":
        spec = importlib.util.find_spec("verl")
        return Path(spec.origin).parent / "trainer" / "config", "ppo_trainer"
    raise ValueError(f"unknown entry {entry!r} (expected {ARISE_ENTRY} or verl.trainer.main_ppo)")


def compose(entry: str, overrides: list[str]):
    """The config the entry point's ``@hydra.main`` builds from these overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir, name = _config_source(entry)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return hydra_compose(config_name=name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


# ------------------------------------------------------------------------------------------ checks
def unused_components(cfg) -> list[str]:
    """Config sections this run never instantiates (their ``???`` values are never read).

    Decided with verl's own predicates: the critic (``need_critic``: GAE or ``critic.enable``), the
    reference policy (``need_reference_policy``: a KL loss or KL in reward), the reward model
    (``reward.reward_model.enable``), distillation (``need_teacher_policy``).
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy, need_teacher_policy

    unused = []
    with warnings.catch_warnings():  # need_critic warns when it decides "no critic"
        warnings.simplefilter("ignore")
        if not need_critic(cfg):
            unused.append("critic")
    if not need_reference_policy(cfg):
        unused.append("actor_rollout_ref.ref")
    if not cfg.reward.reward_model.enable:
        unused.append("reward.reward_model")
    if not need_teacher_policy(cfg):
        unused.append("distillation")
    return unused


def missing_values(cfg) -> list[str]:
    """Mandatory values (``???``) left unset in a component the run uses."""
    from omegaconf import OmegaConf

    unused = unused_components(cfg)
    return sorted(
        key
        for key in OmegaConf.missing_keys(cfg)
        if not any(key == prefix or key.startswith(prefix + ".") for prefix in unused)
    )


def attention_backend(cfg) -> str:
    override = cfg.actor_rollout_ref.model.get("override_config", None) or {}
    return str(override.get("attn_implementation", VERL_DEFAULT_ATTENTION))


def _select(cfg, key, default=None):
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=default)


def length_budget(cfg) -> dict[str, int]:
    """The longest request of each kind ARISE sends to the rollout engine (tokens, upper bounds)."""
    prompt = int(cfg.data.max_prompt_length)
    response = int(cfg.data.max_response_length)
    arise = cfg.get("arise", None)
    summary_chars = 2 * 400
    summary_tokens = 192
    skill_tokens = 128
    if arise is not None:
        summary_chars = int(arise.summary.get("max_traces", 2)) * int(arise.summary.get("trace_clip_chars", 400))
        summary_tokens = int(arise.summary.get("max_tokens", 192))
        skill_tokens = int(arise.selection.get("max_skill_tokens", 128))
    return {
        "solution": prompt + response,
        "solution_with_skill": prompt + SKILL_ROOM + response,
        "scoring": prompt + 8 + skill_tokens + 1,
        "summary": prompt + SUMMARY_TEMPLATE_TOKENS + summary_chars // CHARS_PER_TOKEN + summary_tokens,
    }


def _is_local_path(path: str) -> bool:
    return "://" not in path


def _files(value) -> list[str]:
    from omegaconf import ListConfig

    if value is None:
        return []
    if isinstance(value, list | tuple | ListConfig):
        return [str(v) for v in value]
    return [str(value)]


def _load_extern(path: str, name: str) -> str:
    from verl.utils.import_utils import load_extern_object

    load_extern_object(module_path=path, object_name=name)
    return f"{path}:{name}"


def check_config(cfg, entry: str = ARISE_ENTRY, check_paths: bool = True, check_runtime: bool = True) -> list[Finding]:
    """Every check that needs no GPU; ``check_runtime`` also checks this machine's installed packages."""
    from omegaconf import OmegaConf

    findings: list[Finding] = []

    def guarded(what, fn, fix=""):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                detail = fn()
            findings.append(Finding("OK", what + (f": {detail}" if detail else "")))
        except Exception as error:  # verl raises AssertionError, ValueError, hydra errors...
            message = str(error).strip().splitlines()
            findings.append(Finding("ERROR", f"{what}: {type(error).__name__}: {' '.join(message)[:600]}", fix))

    missing = missing_values(cfg)
    if missing:
        findings.append(
            Finding(
                "ERROR",
                f"mandatory values left unset (???) in components this run uses: {', '.join(missing)}",
                "set them (e.g. actor_rollout_ref.rollout.name=vllm)",
            )
        )
    else:
        findings.append(Finding("OK", f"no mandatory value unset (unused: {', '.join(unused_components(cfg))})"))

    def resolve():
        OmegaConf.resolve(OmegaConf.create(OmegaConf.to_container(cfg, resolve=False)))

    guarded("interpolations resolve (the TaskRunner resolves the config)", resolve)

    def verl_validate():
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        n = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes
        return f"{n} GPU(s), batch {cfg.data.train_batch_size} x n {cfg.actor_rollout_ref.rollout.n}"

    guarded("verl validate_config (main_ppo; actor config dataclass)", verl_validate)

    def dataclasses():
        from verl.utils.config import omega_conf_to_dataclass

        rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
        omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)
        return f"rollout {rollout.name}, tp {rollout.tensor_model_parallel_size}"

    guarded("verl RolloutConfig / CheckpointEngineConfig", dataclasses)

    def algorithms():
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn

        loss_mode = cfg.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
        get_policy_loss_fn(loss_mode)
        get_adv_estimator_fn(cfg.algorithm.adv_estimator)
        return f"adv_estimator {cfg.algorithm.adv_estimator}, policy loss {loss_mode}"

    guarded("verl policy-loss / advantage registries", algorithms)

    def reward_manager():
        manager = cfg.reward.reward_manager
        if manager.source == "register":
            from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

            get_reward_manager_cls(manager.name)
            detail = f"registered {manager.name!r}"
        elif manager.source == "importlib":
            detail = _load_extern(manager.module.path, manager.name)
        else:
            raise ValueError(f"unknown reward.reward_manager.source {manager.source!r}")
        custom = cfg.reward.get("custom_reward_function", None) or {}
        if custom.get("path"):
            detail += ", custom_reward_function " + _load_extern(custom.path, custom.name)
        return detail

    guarded("reward manager (verl resolve_reward_manager_cls)", reward_manager)

    if entry == ARISE_ENTRY:

        def arise():
            from recipe.arise.core.arise_config import ARISEConfig

            arise_cfg = ARISEConfig.from_trainer_config(cfg)
            if cfg.trainer.v1.trainer_mode != "arise":
                raise ValueError(f"trainer.v1.trainer_mode is {cfg.trainer.v1.trainer_mode!r}, expected 'arise'")
            if arise_cfg.enable and cfg.actor_rollout_ref.rollout.agent.default_agent_loop != "arise_agent":
                raise ValueError(
                    "arise.enable=true needs actor_rollout_ref.rollout.agent.default_agent_loop=arise_agent"
                )
            return f"enable={arise_cfg.enable}, phase1_steps={arise_cfg.phase1_steps}"

        guarded("ARISE config (arise: section)", arise)

    for what, check in (
        ("lengths", lambda: _check_lengths(cfg)),
        ("train_manager", lambda: _check_manager_response(cfg)),
        ("backends", lambda: _check_backends(cfg, check_runtime)),
        ("run folder", lambda: check_run_folder(cfg)),
        ("paths", lambda: _check_paths(cfg) if check_paths else []),
        ("resume", lambda: check_resume(cfg) if check_paths else []),
    ):
        try:
            findings += check()
        except Exception as error:  # e.g. a missing value read by the check, reported above too
            findings.append(Finding("ERROR", f"{what} check: {type(error).__name__}: {error}"))
    return findings


def _check_manager_response(cfg) -> list[Finding]:
    """train_manager puts the skill line in the response: a response budget that cannot hold it
    sends every selected trajectory unaided (counted in arise/skill_overlong), silently inert."""
    arise = cfg.get("arise", None)
    if arise is None or not arise.get("enable", False) or not arise.selection.get("train_manager", False):
        return []
    response = int(cfg.data.max_response_length)
    skill = int(arise.selection.max_skill_tokens)
    if response > 2 * skill:
        return []
    return [
        Finding(
            "WARNING",
            f"arise.selection.train_manager: data.max_response_length {response} leaves little or no room after "
            f"the skill line (up to {skill} + ~4 tokens); a selected skill that does not fit goes unaided "
            "(arise/skill_overlong)",
            f"data.max_response_length > {2 * skill} (or a smaller arise.selection.max_skill_tokens)",
        )
    ]


def _check_lengths(cfg) -> list[Finding]:
    rollout = cfg.actor_rollout_ref.rollout
    budget = length_budget(cfg)
    max_len = rollout.get("max_model_len", None)
    if max_len is None:
        return [
            Finding(
                "ERROR",
                "actor_rollout_ref.rollout.max_model_len is not set: vLLM sizes for the model's full context "
                "(262,144 for Qwen3-4B-Instruct-2507) and fails or starves its KV cache",
                f"actor_rollout_ref.rollout.max_model_len={budget['solution_with_skill']} (MAX_MODEL_LEN)",
            )
        ]
    max_len = int(max_len)
    if max_len < budget["solution"]:
        return [
            Finding(
                "ERROR",
                f"rollout.max_model_len {max_len} < prompt + response {budget['solution']}",
                f"MAX_MODEL_LEN / actor_rollout_ref.rollout.max_model_len >= {budget['solution_with_skill']}",
            )
        ]
    short = {kind: need for kind, need in budget.items() if need > max_len and kind != "solution"}
    if short:
        return [
            Finding(
                "WARNING",
                f"rollout.max_model_len {max_len} may be short for ARISE's extra requests: "
                + ", ".join(f"{kind} up to {need}" for kind, need in short.items())
                + " (a too long summary request fails and is counted in arise/summary_*)",
                f"MAX_MODEL_LEN={max(short.values())}",
            )
        ]
    return [
        Finding("OK", f"rollout.max_model_len {max_len} covers " + ", ".join(f"{k} {v}" for k, v in budget.items()))
    ]


def _check_backends(cfg, check_runtime: bool) -> list[Finding]:
    findings = []
    attn = attention_backend(cfg)
    remove_padding = bool(cfg.actor_rollout_ref.model.get("use_remove_padding", True))
    package = ATTENTION_PACKAGES.get(attn)
    where = "installed by the README's GPU install" if attn in README_GPU_ATTENTION else "not in the README install"
    level, fix = "OK", ""
    if package and check_runtime and importlib.util.find_spec(package) is None:
        level = "ERROR"
        fix = (
            f"ATTN=sdpa (++actor_rollout_ref.model.override_config.attn_implementation=sdpa), or pip install {package}"
        )
    layout = "packed micro-batches" if remove_padding else "padded micro-batches"
    detail = f"actor attention {attn} with {layout} (use_remove_padding={remove_padding}; {where})"
    if attn in ("sdpa", "eager") and check_runtime and importlib.util.find_spec("flash_attn") is None:
        detail += "; flash-attn is not installed: docs/gpu.md gives its install for the packed path"
    findings.append(Finding(level, detail, fix))
    if attn in ("sdpa", "eager") and remove_padding:
        findings.append(
            Finding(
                "INFO",
                "use_remove_padding with sdpa/eager: correct (transformers masks packed sequences by position_ids) "
                "but the mask spans the whole packed micro-batch",
                "REMOVE_PADDING=False pads instead (the default with sdpa)",
            )
        )
    name = str(_select(cfg, "actor_rollout_ref.rollout.name", "???"))
    if name not in ROLLOUT_PACKAGES:
        findings.append(
            Finding("ERROR", f"rollout.name {name!r}: ARISE supports vllm and sglang", "ROLLOUT=vllm or ROLLOUT=sglang")
        )
    elif check_runtime and importlib.util.find_spec(ROLLOUT_PACKAGES[name]) is None:
        extra = "vllm" if name == "vllm" else "sglang"
        findings.append(
            Finding("ERROR", f"rollout.name={name} but {name} is not installed", f'pip install "verl[{extra}]==0.9.1"')
        )
    else:
        findings.append(Finding("OK", f"rollout engine {name} (prompt log-probs for skill scoring: supported)"))
    return findings


def _check_paths(cfg) -> list[Finding]:
    findings = []
    missing = [
        f
        for key in ("data.train_files", "data.val_files")
        for f in _files(_select(cfg, key))
        if _is_local_path(f) and not os.path.exists(f)
    ]
    if missing:
        findings.append(
            Finding(
                "ERROR",
                "data file(s) not found: " + ", ".join(missing),
                "bash data_prep/prepare_all.sh, or set DATA_DIR / TRAIN_FILES / VAL_FILES",
            )
        )
    else:
        findings.append(Finding("OK", "data files exist"))
    trainer = cfg.trainer
    if trainer.get("resume_mode") == "resume_path":
        folder = str(trainer.get("resume_from_path") or "")
        if not folder or not os.path.isdir(folder):
            findings.append(Finding("ERROR", f"checkpoint folder not found: {folder!r}", "CKPT=<.../global_step_N>"))
        elif not os.path.isdir(os.path.join(folder, "actor")):
            findings.append(
                Finding(
                    "ERROR",
                    f"{folder} holds no actor/ (verl's retention, trainer.max_actor_ckpt_to_keep, removed it; the "
                    "step's arise/library.parquet and data.pt stay)",
                    "a kept step: the newest global_step_N folders of the run",
                )
            )
        elif _select(cfg, "arise.enable") and not os.path.exists(os.path.join(folder, "arise", "library.parquet")):
            findings.append(
                Finding(
                    "ERROR",
                    f"{folder} holds no ARISE skill library (arise/library.parquet)",
                    "SKILLS=false for a baseline checkpoint",
                )
            )
        else:
            findings.append(Finding("OK", f"checkpoint {folder}"))
    load_from = _select(cfg, "arise.library.load_from")
    if load_from and not os.path.exists(str(load_from)):
        findings.append(Finding("ERROR", f"arise.library.load_from not found: {load_from}"))
    return findings


# ------------------------------------------------------------------------------------------ run folder
def _flat(node, prefix: str) -> dict[str, object]:
    """``{dotted.key: value}`` of a config section, interpolations resolved where they resolve."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if not isinstance(node, DictConfig | ListConfig):
        return {prefix: node}
    try:
        data = OmegaConf.to_container(node, resolve=True)
    except Exception:  # an interpolation that needs the whole config: keep it as written
        data = OmegaConf.to_container(node, resolve=False)
    out: dict[str, object] = {}

    def walk(value, key):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}")
        else:
            out[key] = value

    walk(data, prefix)
    return out


def resume_settings(cfg) -> dict[str, object]:
    """The settings a resumed checkpoint must share with this run (RESUME_SECTIONS, RESUME_KEYS)."""
    out: dict[str, object] = {}
    for section in RESUME_SECTIONS:
        node = _select(cfg, section)
        if node is not None:
            out.update(_flat(node, section))
    for key in RESUME_KEYS:
        out[key] = _flat(_select(cfg, key), key)[key] if _select(cfg, key) is not None else None
    return {k: v for k, v in out.items() if not any(k == e or k.startswith(e) for e in RESUME_EXEMPT)}


def setting_changes(saved: dict, now: dict) -> list[str]:
    """``key: old -> new`` for every setting that differs (a key only one side has counts)."""
    missing = object()
    return [
        f"{k}: {saved.get(k, missing) if k in saved else '(unset)'} -> {now[k] if k in now else '(unset)'}"
        for k in sorted(set(saved) | set(now))
        if saved.get(k, missing) != now.get(k, missing)
    ]


def checkpoint_root(cfg) -> Path:
    return Path(os.path.abspath(str(cfg.trainer.default_local_dir)))


def latest_checkpoint(root: str | os.PathLike) -> tuple[int, Path] | None:
    """The step verl's ``resume_mode=auto`` resumes (``latest_checkpointed_iteration.txt``), None for none."""
    tracker = Path(root) / "latest_checkpointed_iteration.txt"
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None
    folder = Path(root) / f"global_step_{step}"
    return (step, folder) if folder.is_dir() else None


def saved_settings(root: Path, folder: Path) -> tuple[dict | None, str]:
    """The settings the checkpoint was written with: the step's own config (when the trainer saved
    one), else the folder's run_config.yaml (the preflight's record of the last launch)."""
    from omegaconf import OmegaConf

    for path in (folder / STEP_CONFIG, root / RUN_CONFIG):
        if path.is_file():
            try:
                return resume_settings(OmegaConf.load(path)), str(path)
            except Exception as error:  # a damaged record: say so, compare nothing
                return None, f"{path} (unreadable: {type(error).__name__}: {error})"
    return None, ""


def check_resume(cfg) -> list[Finding]:
    """What this launch resumes, and whether its settings match the checkpoint's."""
    trainer = cfg.trainer
    if trainer.get("val_only", False):
        return []
    root = checkpoint_root(cfg)
    mode = str(trainer.get("resume_mode", "auto"))
    if mode == "resume_path":
        folder = Path(os.path.abspath(str(trainer.get("resume_from_path") or "")))
        try:
            step = int(folder.name.split("global_step_")[-1])
        except ValueError:
            return [Finding("ERROR", f"trainer.resume_from_path {folder}: not a global_step_N folder")]
    else:
        found = latest_checkpoint(root)
        if mode == "disable":
            if found:
                return [
                    Finding(
                        "INFO",
                        f"trainer.resume_mode=disable: starts from step 0 in {root}, which holds global_step_"
                        f"{found[0]} (its steps are written again)",
                    )
                ]
            return []
        if found is None:
            return [Finding("OK", f"checkpoints: {root} holds none, a new run from step 0")]
        step, folder = found
    total = trainer.get("total_training_steps")
    saved, source = saved_settings(root, folder)
    findings = [
        Finding(
            "INFO",
            f"resume: {folder} (step {step} of {total})"
            + (f", written with the settings in {source}" if source else ", whose settings were not recorded"),
        )
    ]
    if saved is None:
        return findings
    changes = setting_changes(saved, resume_settings(cfg))
    if not changes:
        findings.append(Finding("OK", "resume: arise.*, algorithm.*, model, loss and batch settings unchanged"))
        return findings
    allowed = os.environ.get(ALLOW_CONFIG_CHANGE) == "1"
    findings.append(
        Finding(
            "WARNING" if allowed else "ERROR",
            f"resume: {len(changes)} setting(s) differ from the checkpoint's run: " + "; ".join(changes[:12]),
            f"{ALLOW_CONFIG_CHANGE}=1 set: continuing with the new settings"
            if allowed
            else f"a new run in its own folder (EXPERIMENT=<name> or CKPT_DIR=<dir>), or {ALLOW_CONFIG_CHANGE}=1 to "
            "continue this checkpoint with the new settings",
        )
    )
    return findings


def check_run_folder(cfg) -> list[Finding]:
    """Checkpoint retention, the metrics file, the validation batch (config only)."""
    findings = []
    trainer = cfg.trainer
    if not trainer.get("val_only", False) and int(trainer.get("save_freq", -1) or -1) > 0:
        keep = trainer.get("max_actor_ckpt_to_keep", None)
        if keep is None or int(keep) <= 0:
            total, freq = trainer.get("total_training_steps") or 0, int(trainer.save_freq)
            findings.append(
                Finding(
                    "WARNING",
                    f"trainer.max_actor_ckpt_to_keep unset: every checkpoint is kept (up to {int(total) // freq}, "
                    "each ~12 bytes/param)",
                    "KEEP_CKPTS=3 (trainer.max_actor_ckpt_to_keep)",
                )
            )
        else:
            findings.append(Finding("OK", f"checkpoint retention: the newest {int(keep)} (verl removes their actor/)"))
    logger = trainer.get("logger", [])
    loggers = [str(x) for x in (logger if not isinstance(logger, str) else [logger])]
    if "file" in loggers and not trainer.get("val_only", False):
        env = _select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars") or {}
        path = env.get("VERL_FILE_LOGGER_PATH") if hasattr(env, "get") else None
        if not path:
            findings.append(
                Finding(
                    "WARNING",
                    "metrics: verl's file logger writes <cwd>/<project>/<experiment>.jsonl and truncates it at every "
                    "launch (a resume loses the earlier steps' metrics)",
                    "VERL_FILE_LOGGER_PATH (run_scripts/common.sh sets it and moves an earlier launch's file aside)",
                )
            )
        else:
            findings.append(Finding("OK", f"metrics: {path} (an earlier launch's file is moved to *.launchN.jsonl)"))
    validates = (
        trainer.get("val_only", False)
        or trainer.get("val_before_train", False)
        or (int(trainer.get("test_freq", -1) or -1) > 0)
    )
    if validates:
        batch = _select(cfg, "data.val_batch_size")
        if batch is None:
            findings.append(
                Finding(
                    "WARNING",
                    "data.val_batch_size unset: verl validates the whole validation set as one batch "
                    "(x val_kwargs.n samples at once)",
                    "VAL_BATCH=128 (data.val_batch_size)",
                )
            )
        else:
            findings.append(Finding("OK", f"validation batch: {int(batch)} questions"))
    return findings


def checkpoint_bytes(cfg, num_params: int) -> int:
    """One saved actor checkpoint (FSDP: fp32 model + AdamW m, v; + the bf16 HF model when saved)."""
    contents = _select(cfg, "actor_rollout_ref.actor.checkpoint.save_contents") or ["model", "optimizer", "extra"]
    per_param = MODEL_BYTES_PER_PARAM * ("model" in contents) + ADAMW_BYTES_PER_PARAM * ("optimizer" in contents)
    per_param += HF_BYTES_PER_PARAM if "hf_model" in contents else 0
    return int(num_params * per_param)


def _dir_bytes(path: Path) -> int:
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(base, name))
    return total


def check_disk(cfg, num_params: int, free_bytes: int | None = None) -> list[Finding]:
    """Free disk for the checkpoints this launch writes and keeps."""
    trainer = cfg.trainer
    freq = int(trainer.get("save_freq", -1) or -1)
    if trainer.get("val_only", False) or freq <= 0:
        return []
    root = checkpoint_root(cfg)
    total = int(trainer.get("total_training_steps") or 0)
    found = latest_checkpoint(root) if str(trainer.get("resume_mode", "auto")) == "auto" else None
    start = found[0] if found else 0
    saves = len({s for s in range(start + 1, total + 1) if s % freq == 0} | ({total} if total > start else set()))
    keep = trainer.get("max_actor_ckpt_to_keep", None)
    keep = int(keep) if keep is not None and int(keep) > 0 else saves
    # verl removes an old one before saving when keeping >= 2, after saving when keeping 1
    peak = min(saves, keep + 1 if keep == 1 else keep)
    one = checkpoint_bytes(cfg, num_params)
    need = peak * one
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free if free_bytes is None else free_bytes
    findings = []
    earlier = sorted(p for p in root.glob("global_step_*/actor") if p.is_dir()) if root.is_dir() else []
    if earlier:
        findings.append(
            Finding(
                "INFO",
                f"{len(earlier)} earlier checkpoint(s) with actor/ in {root} ({_dir_bytes(root) / GiB:.1f} GiB): "
                "verl's retention counts only this launch's saves, so these stay until you delete their actor/",
            )
        )
    what = (
        f"disk: {peak} checkpoint(s) of ~{one / GiB:.1f} GiB kept at once ({num_params / 1e9:.2f} B params "
        f"x {one // max(num_params, 1)} bytes), {free / GiB:.1f} GiB free on {probe}"
    )
    if free < need:
        findings.append(
            Finding(
                "ERROR",
                what + ": the save fails part-way",
                "free space, CKPT_DIR=<a larger disk>, or KEEP_CKPTS=1 / a larger SAVE_FREQ",
            )
        )
    else:
        findings.append(Finding("OK", what))
    return findings


def longrope(config: dict) -> int | None:
    """original_max_position_embeddings of a LongRoPE model's ``config.json``, else None."""
    text = config.get("text_config") or config
    rope = text.get("rope_scaling") or text.get("rope_parameters") or {}
    if not isinstance(rope, dict) or (rope.get("rope_type") or rope.get("type")) != "longrope":
        return None
    original = rope.get("original_max_position_embeddings") or text.get("original_max_position_embeddings")
    return int(original) if original else None


def check_longrope(cfg, config: dict) -> list[Finding]:
    """vLLM picks LongRoPE's long factors for every position once max_model_len exceeds the original
    positions (vllm Phi3LongRoPEScaledRotaryEmbedding: use_long_rope); transformers picks them per
    forward, only when the sequence is longer (modeling_rope_utils: longrope_frequency_update). Above
    the original length the actor's micro-batches of shorter sequences use the short ones: the
    rollouts and the update then come from two different policies."""
    original = longrope(config)
    if original is None:
        return []
    max_len = _select(cfg, "actor_rollout_ref.rollout.max_model_len")
    if max_len is not None and int(max_len) <= original:
        return [
            Finding(
                "OK",
                f"LongRoPE (original_max_position_embeddings {original}): max_model_len {max_len} keeps vLLM and the "
                "actor on the short factors",
            )
        ]
    correction = _select(cfg, "algorithm.rollout_correction") or {}
    corrected = bool(correction.get("rollout_is") or correction.get("rollout_rs")) if correction else False
    allowed = os.environ.get(ALLOW_LONGROPE) == "1"
    prompt = int(cfg.data.max_prompt_length)
    return [
        Finding(
            "WARNING" if corrected or allowed else "ERROR",
            f"LongRoPE (original_max_position_embeddings {original}) with rollout.max_model_len {max_len}: vLLM uses "
            f"the long factors at every position, the actor the short ones for micro-batches of <= {original} tokens, "
            "so rollouts and updates come from different policies (training/rollout_probs_diff_*)"
            + (" - verl's rollout correction reweights them" if corrected else ""),
            f"MAX_MODEL_LEN<={original} (MAX_RESPONSE={original - prompt - SKILL_ROOM} with MAX_PROMPT={prompt}; "
            f"the phi4_mini profile of run_scripts/common.sh), or algorithm.rollout_correction.rollout_is=token, "
            f"or {ALLOW_LONGROPE}=1 to run as is",
        )
    ]


def record_launch(cfg, out=None) -> Path | None:
    """Save this launch's config as the checkpoint folder's run_config.yaml (what a later resume is
    compared with) and append a line to its launches.jsonl."""
    from omegaconf import OmegaConf

    if cfg.trainer.get("val_only", False):
        return None
    root = checkpoint_root(cfg)
    root.mkdir(parents=True, exist_ok=True)
    path = root / RUN_CONFIG
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except Exception:
        data = OmegaConf.to_container(cfg, resolve=False)
    tmp = path.with_suffix(".yaml.tmp")
    OmegaConf.save(OmegaConf.create(data), tmp)
    os.replace(tmp, path)
    found = latest_checkpoint(root) if str(cfg.trainer.get("resume_mode", "auto")) == "auto" else None
    with open(root / "launches.jsonl", "a", encoding="utf-8") as f:
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "resumed_step": found[0] if found else 0}
        f.write(json.dumps(line) + "\n")
    return path


# ------------------------------------------------------------------------------------------ model
def find_model_file(model: str, filename: str) -> Path | None:
    """``filename`` of a local model folder or of a hub id in the local Hugging Face cache (no network)."""
    local = Path(model)
    if local.is_dir():
        return local / filename if (local / filename).exists() else None
    if model.count("/") != 1 or local.exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(model, filename)
    except Exception:
        return None
    return Path(found) if isinstance(found, str) and os.path.exists(found) else None


def read_model_config(model: str) -> dict | None:
    path = find_model_file(model, "config.json")
    return json.loads(path.read_text()) if path else None


def _safetensors_params(path: Path) -> int:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return sum(math.prod(t["shape"]) for key, t in header.items() if key != "__metadata__")


def count_params(model: str, config: dict) -> int | None:
    """Exact parameter count from the safetensors headers or index, when they are reachable."""
    single = find_model_file(model, "model.safetensors")
    if single is not None:
        try:
            return _safetensors_params(single)
        except (OSError, ValueError, KeyError, struct.error):
            return None
    index = find_model_file(model, "model.safetensors.index.json")
    if index is not None:
        try:
            total = json.loads(index.read_text())["metadata"]["total_size"]
        except (OSError, ValueError, KeyError):
            return None
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
        return int(total) // DTYPE_BYTES.get(dtype, 2)
    return None


@dataclass
class ModelShape:
    num_params: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None
    params_counted: bool = False  # True: from the weights' headers; False: from the shape


def model_shape(config: dict, num_params: int | None = None) -> ModelShape:
    """The shape numbers the estimate needs, from a Hugging Face ``config.json``."""
    text = config.get("text_config") or config
    hidden = int(text["hidden_size"])
    layers = int(text["num_hidden_layers"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    vocab = int(text.get("vocab_size") or config["vocab_size"])
    counted = num_params is not None
    if num_params is None:
        tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
        experts = int(text.get("num_experts") or text.get("num_local_experts") or 1)
        inter = int(text.get("moe_intermediate_size") if experts > 1 else 0) or int(
            text.get("intermediate_size") or 4 * hidden
        )
        attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
        mlp = 3 * hidden * inter * experts
        num_params = vocab * hidden * (1 if tied else 2) + layers * (attn + mlp + 2 * hidden) + hidden
    return ModelShape(
        num_params=int(num_params),
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        vocab_size=vocab,
        max_position_embeddings=text.get("max_position_embeddings"),
        params_counted=counted,
    )


# ------------------------------------------------------------------------------------------ memory
CUDA_CONTEXTS_GIB = 1.0  # the actor's and vLLM's CUDA contexts and NCCL buffers on one GPU
VLLM_OVERHEAD_GIB = 2.0  # vLLM's activation peak (profiled at start-up) besides weights and KV cache
CUDA_GRAPHS_GIB = 1.0  # captured CUDA graphs (not with enforce_eager)


@dataclass
class MemoryEstimate:
    gpu_gib: float
    gpu_source: str
    n_gpus: int
    tp: int
    actor_gib: float  # FSDP: fp32 params + grads + AdamW m, v, sharded over n GPUs
    logits_gib: float  # one micro-batch's logits and their gradient (bf16)
    activations_gib: float
    train_peak_gib: float
    rollout_peak_gib: float  # actor state + what vLLM claims (gpu_memory_utilization x GPU)
    vllm_reserved_gib: float
    vllm_weights_gib: float
    vllm_overhead_gib: float
    kv_gib: float
    kv_bytes_per_token: int
    max_model_len: int
    full_length_seqs: int
    seqs_per_replica: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def level(self) -> str:
        levels = [f.level for f in self.findings]
        return "ERROR" if "ERROR" in levels else "WARNING" if "WARNING" in levels else "OK"

    def lines(self) -> list[str]:
        rows = [
            (f"actor (FSDP: fp32 params + grads + AdamW m, v; /{self.n_gpus})", self.actor_gib),
            ("+ one micro-batch's logits and their grad (bf16)", self.logits_gib),
            ("+ checkpointed activations", self.activations_gib),
            ("= training peak (rollout engine asleep)", self.train_peak_gib),
            ("rollout engine: gpu_memory_utilization x GPU", self.vllm_reserved_gib),
            ("= rollout peak (actor state + engine)", self.rollout_peak_gib),
        ]
        lines = [f"memory per GPU ({self.gpu_gib:.1f} GiB, {self.gpu_source}; {self.n_gpus} GPU(s), TP {self.tp}):"]
        lines += [f"  {label:<58} {gib:6.1f} GiB" for label, gib in rows]
        lines.insert(
            6,
            f"    engine = weights {self.vllm_weights_gib:.1f} + overhead {self.vllm_overhead_gib:.1f}"
            f" + KV cache {self.kv_gib:.1f} GiB ({self.kv_bytes_per_token / 1024:.0f} KiB/token)",
        )
        lines.append(
            f"  KV cache holds {self.full_length_seqs} sequences of max_model_len {self.max_model_len} at once;"
            f" a step sends up to {self.seqs_per_replica} per replica"
        )
        return lines


def gpu_memory_gib() -> float | None:
    """The smallest GPU's memory from nvidia-smi (no CUDA context is created), None without it."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
        values = [float(v) for v in out.split() if v.strip()]
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return min(values) / 1024 if values else None


def estimate_memory(cfg, shape: ModelShape, gpu_gib: float, gpu_source: str = "given") -> MemoryEstimate:
    """Per-GPU memory of a colocated (hybrid-engine) run, and a verdict with the override to change."""
    actor_cfg = cfg.actor_rollout_ref.actor
    rollout = cfg.actor_rollout_ref.rollout
    n_gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    tp = int(rollout.tensor_model_parallel_size)
    params = shape.num_params
    fsdp = actor_cfg.get("fsdp_config", None) or {}
    param_bytes = 0 if fsdp.get("param_offload", False) else 4 + 4  # fp32 master weights + fp32 grads
    optim_bytes = 0 if fsdp.get("optimizer_offload", False) else 8  # AdamW m and v, fp32
    actor = params * (param_bytes + optim_bytes) / n_gpus / GiB

    prompt, response = int(cfg.data.max_prompt_length), int(cfg.data.max_response_length)
    micro = int(actor_cfg.get("ppo_micro_batch_size_per_gpu") or 1)
    tokens = micro * (prompt + response)
    logits = 2 * tokens * shape.vocab_size * 2 / GiB
    checkpointing = bool(cfg.actor_rollout_ref.model.get("enable_gradient_checkpointing", True))
    per_layer = tokens * shape.hidden_size * 2 * (1 if checkpointing else 16)
    activations = shape.num_layers * per_layer / GiB
    train_peak = CUDA_CONTEXTS_GIB + actor + logits + activations

    util = float(rollout.gpu_memory_utilization)
    reserved = util * gpu_gib
    dtype_bytes = DTYPE_BYTES.get(str(rollout.get("dtype", "bfloat16")), 2)
    weights = params * dtype_bytes / tp / GiB
    overhead = VLLM_OVERHEAD_GIB + (0.0 if rollout.get("enforce_eager", False) else CUDA_GRAPHS_GIB)
    kv = reserved - weights - overhead
    kv_heads = max(1, shape.num_kv_heads // tp)
    kv_per_token = 2 * shape.num_layers * kv_heads * shape.head_dim * dtype_bytes
    max_len = int(rollout.get("max_model_len") or shape.max_position_embeddings or (prompt + response))
    full_seqs = max(0, int(kv * GiB // (kv_per_token * max_len)))
    replicas = max(1, n_gpus // tp)
    per_replica = math.ceil(int(cfg.data.train_batch_size) * int(rollout.n) / replicas)
    rollout_peak = CUDA_CONTEXTS_GIB + actor + reserved
    if not rollout.get("free_cache_engine", True):
        train_peak += reserved  # the engine keeps its memory while the actor trains

    est = MemoryEstimate(
        gpu_gib=gpu_gib,
        gpu_source=gpu_source,
        n_gpus=n_gpus,
        tp=tp,
        actor_gib=actor,
        logits_gib=logits,
        activations_gib=activations,
        train_peak_gib=train_peak,
        rollout_peak_gib=rollout_peak,
        vllm_reserved_gib=reserved,
        vllm_weights_gib=weights,
        vllm_overhead_gib=overhead,
        kv_gib=kv,
        kv_bytes_per_token=kv_per_token,
        max_model_len=max_len,
        full_length_seqs=full_seqs,
        seqs_per_replica=per_replica,
    )
    findings = est.findings
    if rollout_peak > gpu_gib:
        room = math.floor((gpu_gib - CUDA_CONTEXTS_GIB - actor) / gpu_gib * 20) / 20
        fix = (
            f"GPU_MEM_UTIL={room:.2f} (actor_rollout_ref.rollout.gpu_memory_utilization)"
            if room >= 0.2
            else "more GPUs (GPUS_PER_NODE/NNODES), or actor_rollout_ref.actor.fsdp_config.optimizer_offload=True"
        )
        findings.append(
            Finding(
                "ERROR",
                f"actor state {actor:.1f} GiB + the rollout engine's {util} x {gpu_gib:.0f} GiB exceed the GPU: "
                "vLLM refuses to start (free memory below gpu_memory_utilization) or the run runs out of memory",
                fix,
            )
        )
    if kv <= 0 or full_seqs < 1:
        fit = int(max(kv, 0) * GiB // kv_per_token)
        findings.append(
            Finding(
                "ERROR",
                f"KV cache {kv:.1f} GiB cannot hold one sequence of max_model_len {max_len} "
                f"({kv_per_token * max_len / GiB:.1f} GiB): vLLM refuses to start",
                f"MAX_MODEL_LEN<={fit} (actor_rollout_ref.rollout.max_model_len), a higher GPU_MEM_UTIL, or TP",
            )
        )
    elif full_seqs < per_replica / 2:
        findings.append(
            Finding(
                "WARNING",
                f"the KV cache holds {full_seqs} full-length sequences, a step sends {per_replica} per replica: "
                "long rollouts queue or are preempted (slower, not an error)",
                "a higher GPU_MEM_UTIL, TP, or a smaller MAX_RESPONSE",
            )
        )
    if train_peak > gpu_gib:
        findings.append(
            Finding(
                "ERROR",
                f"training peak {train_peak:.1f} GiB exceeds the GPU",
                f"MICRO_BATCH={max(1, micro // 2)} (actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)",
            )
        )
    if not findings:
        findings.append(Finding("OK", "memory estimate fits"))
    return est


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
) -> int:
    """Compose, check and estimate; print the report; 0 when nothing is an ERROR. ``brief``: print
    only the findings that are not OK and the verdict; ``record``: when the verdict is not ERROR,
    save the config in the checkpoint folder (:func:`record_launch`)."""
    out = out or sys.stdout
    started = time.time()

    def say(text):
        if brief and not text.startswith(BRIEF_PREFIXES):
            return
        print(text, file=out, flush=True)

    try:
        cfg = compose(entry, overrides)
    except Exception as error:
        say(f"[preflight] ERROR   the config does not compose: {type(error).__name__}: {error}")
        return 1
    say(f"[preflight] {entry}: {len(overrides)} overrides composed in {time.time() - started:.1f} s")
    findings = check_config(cfg, entry, check_paths=check_paths, check_runtime=True)

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
    if target.endswith(".sh") or os.path.isfile(target):
        try:
            entry, overrides = script_overrides(target, overrides)
        except RuntimeError as error:
            print(f"[preflight] ERROR   {error}", file=sys.stderr)
            return 1
    else:
        entry = target
    return run_preflight(entry, overrides, gpu_mem_gib=gpu_mem, check_paths=check_paths, brief=brief, record=record)


if __name__ == "__main__":
    sys.exit(main())
