"""The preflight's shared pieces: its constants, a :class:`Finding`, and a config look-up.

``recipe.arise.tools.preflight`` (the CLI and driver) documents the checks; the other
``preflight_*`` modules hold them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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
    "arise.max_failed_group_share",
    "arise.max_refill_batches",
    "arise.selection.scoring_timeout_s",
    "arise.selection.scoring_prefix_cache",
    "arise.summary.timeout_s",
    "arise.summary.stream",
    "arise.reward.timeout_s",
    "arise.ig.",
    "arise.validation.",
)
# run_scripts/cpu_smoke_arise.sh's stand-in for its tiny assets when it only prints its overrides
# (PRINT_OVERRIDES=1, what the preflight reads) and TINY_DIR is unset: it builds them, or takes them
# from its cache, at launch; the preflight reports files under it as INFO, not as missing
TINY_PLACEHOLDER = "/arise-tiny-assets-built-at-launch"


def on_placeholder(value) -> bool:
    """A path under TINY_PLACEHOLDER (the tiny assets a launch builds or takes from its cache)."""
    return str(value).startswith(TINY_PLACEHOLDER + "/")


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


def select(cfg, key, default=None):
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=default)


def listed_files(value) -> list[str]:
    """A data-files setting (one path or a list of them) as a list of strings."""
    from omegaconf import ListConfig

    if value is None:
        return []
    if isinstance(value, list | tuple | ListConfig):
        return [str(v) for v in value]
    return [str(value)]
