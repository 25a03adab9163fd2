"""The preflight's config checks: compose the hydra config as the entry point does, then run verl's
own start-up checks on it and ARISE's rules (mandatory values, lengths, backends, data paths)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
import warnings
from pathlib import Path

from recipe.arise.tools.preflight_common import (
    ARISE_ENTRY,
    ATTENTION_PACKAGES,
    CHARS_PER_TOKEN,
    README_GPU_ATTENTION,
    ROLLOUT_PACKAGES,
    SKILL_ROOM,
    SUMMARY_TEMPLATE_TOKENS,
    TINY_PLACEHOLDER,
    VERL_DEFAULT_ATTENTION,
    Finding,
    listed_files,
    select,
)
from recipe.arise.tools.preflight_data import check_data_rows
from recipe.arise.tools.preflight_run_folder import check_resume, check_run_folder
from recipe.arise.tools.preflight_trainer import check_parameter_sync_step


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


def length_budget(cfg) -> dict[str, int]:
    """The longest request of each kind ARISE sends to the rollout engine (tokens, upper bounds)."""
    prompt = int(cfg.data.max_prompt_length)
    response = int(cfg.data.max_response_length)
    arise = cfg.get("arise", None)
    summary_chars = 2 * 400
    summary_tokens = 192
    skill_tokens = 128
    if arise is not None:
        trace_chars = int(arise.summary.get("trace_clip_chars", 400))
        rollout = cfg.actor_rollout_ref.rollout
        episodes = rollout.get("agent", {}).get("default_agent_loop", None) == "arise_env_agent"
        if rollout.get("multi_turn", {}).get("enable", False) or episodes:  # tool or episode traces: transcripts
            trace_chars = max(trace_chars, int(arise.summary.get("transcript_chars", 1600)))
        summary_chars = int(arise.summary.get("max_traces", 2)) * trace_chars
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
    findings += check_parameter_sync_step(cfg)  # the sync trainer: one sampled batch per weight sync

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
        parsed = []

        def arise():
            from recipe.arise.core.arise_config import ARISEConfig

            # the types of every arise.* value and the library's own validation of its settings
            arise_cfg = ARISEConfig.from_trainer_config(cfg, required=True)
            parsed.append(arise_cfg)
            from recipe.arise.adapters.skill_layer import check_agent_loop
            from recipe.arise.adapters.trainer_modes import arise_trainer_mode

            mode = arise_trainer_mode(cfg.trainer.v1.trainer_mode)  # an ARISE trainer exists for it (main_arise maps)
            # verl's own loops (no ARISE), an arise.* option the loop cannot honour: as the trainer checks
            check_agent_loop(cfg.actor_rollout_ref.rollout.agent.default_agent_loop, arise_cfg)
            return f"enable={arise_cfg.enable}, phase1_steps={arise_cfg.phase1_steps}, trainer {mode}"

        guarded("ARISE config (arise: section)", arise)
        load_from = parsed[0].library.load_from if parsed else None
        if parsed and parsed[0].enable and check_paths and (not load_from or os.path.exists(load_from)):
            guarded("ARISE initial library (seeds or arise.library.load_from)", lambda: _initial_library(parsed[0]))

    for what, check in (
        ("lengths", lambda: _check_lengths(cfg)),
        ("train_manager", lambda: _check_manager_response(cfg)),
        ("backends", lambda: check_backends(cfg, check_runtime)),
        ("run folder", lambda: check_run_folder(cfg)),
        ("paths", lambda: check_data_paths(cfg) if check_paths else []),
        ("data rows", lambda: check_data_rows(cfg) if check_paths else []),
        ("resume", lambda: check_resume(cfg) if check_paths else []),
    ):
        try:
            findings += check()
        except Exception as error:  # e.g. a missing value read by the check, reported above too
            findings.append(Finding("ERROR", f"{what} check: {type(error).__name__}: {error}"))
    return findings


def _initial_library(arise_cfg) -> str:
    """The library a fresh start builds (the trainer's ``_load_checkpoint``), so a bad seeds or
    load_from file fails here, naming its line, and not after the workers are up."""
    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.library_jsonl import load_library_file
    from recipe.arise.core.skill import load_seed_skills

    settings, source = arise_cfg.library_settings(), arise_cfg.library.load_from
    if source:
        library = load_library_file(source, step=0, **settings)[0]
    else:
        library = SkillLibrary(seed_skills=load_seed_skills(arise_cfg.library.seed_skills), **settings)
        source = arise_cfg.library.seed_skills or "the paper's seed skills"
    return f"{source}: {library!r}"


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


def check_backends(cfg, check_runtime: bool) -> list[Finding]:
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
    name = str(select(cfg, "actor_rollout_ref.rollout.name", "???"))
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


def check_data_paths(cfg) -> list[Finding]:
    findings = []
    missing = [
        f
        for key in ("data.train_files", "data.val_files")
        for f in listed_files(select(cfg, key))
        if _is_local_path(f) and not os.path.exists(f)
    ]
    built_at_launch = [f for f in missing if f.startswith(TINY_PLACEHOLDER + "/")]
    missing = [f for f in missing if f not in built_at_launch]
    if built_at_launch:
        findings.append(
            Finding(
                "INFO",
                f"data: the CPU smoke run's tiny assets ({TINY_PLACEHOLDER} stands for them), built or taken from "
                "its cache at launch: not checked here",
                "TINY_DIR=<a folder of built assets> checks them (python -m recipe.arise.cpu.tiny DIR builds one)",
            )
        )
    if missing:
        findings.append(
            Finding(
                "ERROR",
                "data file(s) not found: " + ", ".join(missing),
                "bash data_prep/prepare_all.sh, or set DATA_DIR / TRAIN_FILES / VAL_FILES",
            )
        )
    elif not built_at_launch:
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
        elif select(cfg, "arise.enable") and not os.path.exists(os.path.join(folder, "arise", "library.parquet")):
            findings.append(
                Finding(
                    "ERROR",
                    f"{folder} holds no ARISE skill library (arise/library.parquet)",
                    "SKILLS=false for a baseline checkpoint",
                )
            )
        else:
            findings.append(Finding("OK", f"checkpoint {folder}"))
    load_from = select(cfg, "arise.library.load_from")
    if load_from and not os.path.exists(str(load_from)):
        findings.append(Finding("ERROR", f"arise.library.load_from not found: {load_from}"))
    return findings
