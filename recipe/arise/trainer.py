"""The ARISE trainer: verl's v1 synchronous PPO trainer plus the ARISE steps, through its hooks.

Registered as ``trainer.v1.trainer_mode=arise``. Nothing of ``fit()``/``step()`` is copied; each
ARISE step sits at a hook of :class:`verl.trainer.ppo.v1.PPOTrainerSync` (docs/design.md):

- ``_load_checkpoint`` (called once by ``init``): build the library from the seed skills, or
  restore it from ``global_step_N/arise/library.parquet``; publish the cache to the skill pool.
- ``on_validate_begin`` / ``on_validate_end``: switch the pool to evaluation mode (epsilon=0).
- ``on_sample_end`` (after the step's rollouts and rewards, *before* the replicas sleep):
  Upload channel — the summary rollout O_{G+1} for every group with tau+ != {} on the same
  rollout servers, batched over the step's groups; then UPDATE -> ADD -> EVICT -> LOAD ->
  DELETE; publish the new cache; append the per-step library log.
- ``_save_checkpoint``: the library is written into the checkpoint folder before verl marks
  the checkpoint complete (``latest_checkpointed_iteration.txt``).
- ``_compute_metrics``: ARISE metrics go to verl's tracker with the step's other metrics.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from typing import Any
from uuid import uuid4

import numpy as np
import ray
import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer

from recipe.arise.arise_config import ARISEConfig
from recipe.arise.library import SkillLibrary
from recipe.arise.library_log import record_resume, write_step_log
from recipe.arise.pool import get_or_create_pool
from recipe.arise.prompts import summary_messages
from recipe.arise.skill import fallback_skill, load_seed_skills, parse_skill

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "INFO"))

LIBRARY_FILE = os.path.join("arise", "library.parquet")


class _RecordingSampler:
    """Wraps verl's replay buffer and remembers the last training batch it handed out.

    ``on_sample_end`` gets no arguments; the summary rollout needs that batch.
    """

    def __init__(self, inner):
        self._inner = inner
        self.last_train_batch = None

    def sample(self, global_steps, partition_id, batch_size):
        batch, metrics = self._inner.sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        if partition_id == "train":
            self.last_train_batch = batch
        return batch, metrics

    def __getattr__(self, name):
        return getattr(self._inner, name)


def positive_advantage_sessions(rewards: list[float]) -> list[int]:
    """tau+ = {i : A_i > 0}. For GRPO (with or without std normalisation) sign(A_i) = sign(R_i - mean R)."""
    mean = float(np.mean(rewards))
    return [i for i, r in enumerate(rewards) if r > mean + 1e-9]


@register_trainer("arise")
class ARISETrainer(PPOTrainerSync):
    """v1 sync trainer + ARISE. ``trainer_mode`` reads "sync" so verl keeps its sync semantics."""

    @property
    def trainer_mode(self) -> str:
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value) -> None:  # the base class assigns the config value; sync it is
        pass

    def __init__(self, config):
        super().__init__(config)
        self.arise = ARISEConfig.from_trainer_config(config)
        self.library: SkillLibrary | None = None
        self.skill_pool = None
        self._arise_metrics: dict[str, float] = {}
        self._arise_version = 0

    # ------------------------------------------------------------------ setup / checkpoints
    def _build_replay_buffer(self):
        return _RecordingSampler(super()._build_replay_buffer())

    def _checkpoint_folder(self, step: int) -> str:
        root = self.config.trainer.default_local_dir
        if not os.path.isabs(root):
            root = os.path.join(os.getcwd(), root)
        return os.path.join(root, f"global_step_{step}")

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if not self.arise.enable:
            return
        lib_cfg = self.arise.library
        if self.global_steps > 0:
            folder = (
                self.config.trainer.resume_from_path
                if self.config.trainer.resume_mode == "resume_path"
                else self._checkpoint_folder(self.global_steps)
            )
            if not os.path.isabs(folder):
                folder = os.path.join(os.getcwd(), folder)
            path = os.path.join(folder, LIBRARY_FILE)
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"resuming from {folder}, but it holds no ARISE skill library ({LIBRARY_FILE}); "
                    "was it written by a run with arise.enable=true?"
                )
            self.library = SkillLibrary.load(path)
            record_resume(self.arise_log_dir, self.global_steps, path, self.library)
            logger.info(f"ARISE: restored skill library from {path}: {self.library!r}")
        elif lib_cfg.load_from:
            self.library = SkillLibrary.load(lib_cfg.load_from)
            logger.info(f"ARISE: starting from the skill library in {lib_cfg.load_from}: {self.library!r}")
        else:
            self.library = SkillLibrary(
                cache_capacity=lib_cfg.cache_capacity,
                reservoir_capacity=lib_cfg.reservoir_capacity,
                ema_beta=lib_cfg.ema_beta,
                seed_skills=load_seed_skills(lib_cfg.seed_skills),
                new_skill_policy=lib_cfg.new_skill_policy,
                trial_uses=lib_cfg.trial_uses,
                trial_steps=lib_cfg.trial_steps,
            )
        self.skill_pool = get_or_create_pool()
        self._publish()

    def _save_checkpoint(self):
        if self.library is not None:
            path = os.path.join(self._checkpoint_folder(self.global_steps), LIBRARY_FILE)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.library.save(path)
        super()._save_checkpoint()

    def _publish(self):
        self._arise_version += 1
        cache = [(entry.skill_id, entry.doc.to_json()) for entry in self.library.cache]
        ray.get(self.skill_pool.publish.remote(self._arise_version, cache))

    @property
    def arise_log_dir(self) -> str:
        if self.arise.log_dir:
            return self.arise.log_dir
        return os.path.join(self.config.trainer.default_local_dir, "arise")

    # ------------------------------------------------------------------ hooks
    def on_validate_begin(self):
        super().on_validate_begin()
        if self.skill_pool is not None:
            ray.get(self.skill_pool.set_mode.remote("val"))

    def on_validate_end(self):
        super().on_validate_end()
        if self.skill_pool is not None:
            ray.get(self.skill_pool.set_mode.remote("train"))

    def on_sample_end(self):
        if self.library is not None:
            batch = self.replay_buffer.last_train_batch
            self.replay_buffer.last_train_batch = None
            self._arise_step(batch)
        super().on_sample_end()  # replicas go to sleep only after the summary rollouts

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        metrics.update(self._arise_metrics)
        self._arise_metrics = {}

    # ------------------------------------------------------------------ the ARISE step
    def _arise_step(self, batch) -> None:
        step = self.global_steps
        phase = self.arise.phase(step)
        new_skills: list = []
        summary_stats = {"attempts": 0, "parsed": 0, "fallback": 0, "failed": 0, "seconds": 0.0}
        if self.arise.summary.enable and batch is not None:
            with marked_timer("arise_summary", self.timing_raw, color="purple"):
                started = time.perf_counter()
                groups = self._positive_groups(batch)
                new_skills, summary_stats = self._summary_rollouts(groups)
                summary_stats["seconds"] = time.perf_counter() - started
                summary_stats["groups_with_tau_plus"] = len(groups)

        with marked_timer("arise_library", self.timing_raw, color="purple"):
            started = time.perf_counter()
            observations = ray.get(self.skill_pool.drain.remote())
            used = [(o["skill_id"], o["reward"]) for o in observations if o["skill_id"]]
            events = self.library.step(used, new_skills, step=step, global_rewards=[o["reward"] for o in observations])
            self._publish()
            write_step_log(self.arise_log_dir, step, phase, events, self.library)
            maintenance_s = time.perf_counter() - started

        self._arise_metrics = self._step_metrics(phase, observations, events, summary_stats, maintenance_s)

    def _positive_groups(self, batch) -> list[dict[str, Any]]:
        """Per query group with tau+ non-empty: the question and up to ``max_traces`` best traces."""
        keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        if not keep:
            return []
        keys = [batch.keys[i] for i in keep]
        fields = ["uid", "responses", "rm_scores", "raw_prompt", "extra_info"]
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
        pad = self.tokenizer.pad_token_id
        responses = data["responses"].to_padded_tensor(padding=pad)
        rewards = data["rm_scores"].to_padded_tensor(padding=0.0).sum(dim=1).tolist()
        uids = _as_list(data.pop("uid"))
        raw_prompts = _as_list(data.pop("raw_prompt"))
        extra_infos = _as_list(data.pop("extra_info"))

        groups: OrderedDict[str, list[int]] = OrderedDict()
        for i, uid in enumerate(uids):
            groups.setdefault(str(uid), []).append(i)
        out = []
        max_traces = self.arise.summary.max_traces
        for members in groups.values():
            member_rewards = [rewards[i] for i in members]
            positive = positive_advantage_sessions(member_rewards)
            if not positive:
                continue
            # best rewards first, ties in session order
            positive.sort(key=lambda j: -member_rewards[j])
            traces = [
                self.tokenizer.decode(responses[members[j]], skip_special_tokens=True) for j in positive[:max_traces]
            ]
            first = members[0]
            info = extra_infos[first] if isinstance(extra_infos[first], dict) else {}
            question = info.get("question") or _last_user_turn(raw_prompts[first])
            out.append({"question": question, "traces": traces})
        return out

    def _summary_rollouts(self, groups: list[dict[str, Any]]):
        stats = {
            "attempts": len(groups),
            "parsed": 0,
            "fallback": 0,
            "failed": 0,
            "prompt_tokens": 0,
            "response_tokens": 0,
        }
        if not groups:
            return [], stats
        cfg = self.arise.summary
        prompts = []
        for group in groups:
            messages = summary_messages(group["question"], group["traces"], clip_chars=cfg.trace_clip_chars)
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            prompts.append(list(ids["input_ids"] if not isinstance(ids, list) else ids))
        params = {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}
        client = self.get_llm_client()

        async def generate_all():
            return await asyncio.gather(
                *[
                    client.generate(request_id=uuid4().hex, prompt_ids=ids, sampling_params=dict(params))
                    for ids in prompts
                ],
                return_exceptions=True,
            )

        outputs = asyncio.run(generate_all())
        stats["prompt_tokens"] = sum(len(ids) for ids in prompts)
        new_skills = []
        for group, output in zip(groups, outputs, strict=True):
            if isinstance(output, BaseException):
                logger.warning(f"ARISE summary rollout failed: {output!r}")
                stats["failed"] += 1
                text = ""
            else:
                text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
                stats["response_tokens"] += len(output.token_ids)
            skill = parse_skill(text, shrink=cfg.on_overlong == "shrink")
            if skill is not None:
                stats["parsed"] += 1
            elif cfg.fallback:
                skill = fallback_skill(group["traces"][0])
                stats["fallback"] += 1
            if skill is not None:
                new_skills.append(skill)
        return new_skills, stats

    def _step_metrics(self, phase, observations, events, summary, maintenance_s) -> dict[str, float]:
        n = len(observations)
        scored = [o for o in observations if o["scored"]]
        utilities = [e.utility for e in self.library.cache]
        attempts = summary["attempts"]
        m = {
            "arise/phase": float(phase),
            "arise/trajectories": float(n),
            "arise/skill_use_rate": sum(bool(o["skill_id"]) for o in observations) / n if n else 0.0,
            "arise/gate_pass_rate": (sum(bool(o["gate_passed"]) for o in scored) / len(scored)) if scored else 0.0,
            "arise/reward_mean": float(np.mean([o["reward"] for o in observations])) if n else 0.0,
            "arise/acc": float(np.mean([o["correct"] for o in observations])) if n else 0.0,
            "arise/frac_reward_2": (sum(o["reward"] > 1.0 for o in observations) / n) if n else 0.0,
            "arise/prompt_overhead_tokens": float(np.mean([o["skill_tokens"] for o in observations])) if n else 0.0,
            "arise/scoring_s": float(sum(o["scoring_s"] for o in observations)),
            # token accounting (per step; divide by arise/queries for per-query figures)
            "arise/queries": float(len({o["uid"] for o in observations})),
            "arise/prompt_tokens": float(sum(o.get("prompt_tokens", 0) for o in observations)),
            "arise/response_tokens": float(sum(o.get("response_tokens", 0) for o in observations)),
            "arise/scoring_tokens": float(sum(o.get("scoring_tokens", 0) for o in observations)),
            "arise/summary_prompt_tokens": float(summary.get("prompt_tokens", 0)),
            "arise/summary_response_tokens": float(summary.get("response_tokens", 0)),
            "arise/summary_s": float(summary.get("seconds", 0.0)),
            "arise/summary_attempts": float(attempts),
            "arise/summary_parse_rate": summary["parsed"] / attempts if attempts else 0.0,
            "arise/summary_fallback_rate": summary["fallback"] / attempts if attempts else 0.0,
            "arise/maintenance_s": float(maintenance_s),
            "arise/new_skills": float(len(events.added)),
            "arise/duplicates": float(len(events.dropped_duplicates)),
            "arise/evicted": float(len(events.evicted)),
            "arise/loaded": float(len(events.loaded)),
            "arise/deleted": float(len(events.deleted) + len(events.overflow)),
            "arise/cache_size": float(len(self.library.cache)),
            "arise/reservoir_size": float(len(self.library.reservoir)),
            "arise/utility_mean": float(np.mean(utilities)) if utilities else 0.0,
            "arise/utility_max": float(np.max(utilities)) if utilities else 0.0,
        }
        return m


def _as_list(value) -> list:
    """TransferQueue hands non-tensor fields back as NonTensorStack or tensordict LinkedList."""
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _last_user_turn(messages) -> str:
    for message in reversed(list(messages or [])):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content", ""))
    return ""
