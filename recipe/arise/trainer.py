"""The ARISE trainer: verl's v1 synchronous PPO trainer plus the ARISE steps, through its hooks.

Registered as ``trainer.v1.trainer_mode=arise``. Nothing of ``fit()``/``step()`` is copied; each
ARISE step sits at a hook of :class:`verl.trainer.ppo.v1.PPOTrainerSync` (docs/design.md):

- ``_load_checkpoint`` (called once by ``init``): build the library from the seed skills, or
  restore it from ``global_step_N/arise/library.parquet``; publish the cache to the skill pool.
- ``on_validate_begin`` / ``on_validate_end``: switch the pool to evaluation mode (epsilon=0).
- ``on_sample_end`` (after a sampled batch's rollouts and rewards, *before* the replicas sleep):
  Upload channel — the summary rollouts O_{G+1} (at most ``arise.summary.max_per_step`` per
  step, groups chosen by ``arise.summary.choose``) on the same rollout servers, or, with
  ``arise.summary.stream``, the ones the reward workers started during the wave (opened in
  ``on_sample_begin``, see ``recipe.arise.stream``); every
  ``arise.ig.every_n_steps`` the exact IG of the cache skills. After the step's last sampled
  batch (``parameter_sync_step`` batches make one global step) and once per global step:
  UPDATE -> ADD -> EVICT -> LOAD -> DELETE with the step's observations and within-group
  contrasts; publish the new cache; append the per-step library log.
- ``_save_checkpoint``: the library is written into the checkpoint folder (and copied to
  ``trainer.default_hdfs_dir`` with the actor) before verl marks the checkpoint complete.
- ``_compute_metrics``: ARISE metrics go to verl's tracker with the step's other metrics, and one
  ``[arise] step ...`` line goes to the console.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from typing import Any
from uuid import uuid4

import numpy as np
import ray
import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer

from recipe.arise.arise_config import ARISEConfig
from recipe.arise.groups import (
    choose_summary_groups,
    exact_information_gain,
    group_contrasts,
    mechanism_metrics,
    positive_advantage_sessions,
)
from recipe.arise.library import SkillLibrary
from recipe.arise.library_log import record_resume, set_aside_steps_after, write_step_log
from recipe.arise.pool import get_or_create_pool
from recipe.arise.prompts import inject_skill
from recipe.arise.skill import load_seed_skills
from recipe.arise.summary import chat_ids, summary_prompt_ids, summary_sampling_params, summary_skills

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "INFO"))

LIBRARY_FILE = os.path.join("arise", "library.parquet")
__all__ = ["ARISETrainer", "LIBRARY_FILE", "positive_advantage_sessions", "console_line"]


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


def _new_step_state() -> dict[str, Any]:
    return {
        "new_skills": [],
        "summary": {"attempts": 0, "parsed": 0, "fallback": 0, "failed": 0, "prompt_tokens": 0, "response_tokens": 0},
        "groups_with_tau_plus": 0,
        "summary_s": 0.0,
        "summary_wait_s": 0.0,  # streaming: the trainer's wait, after the wave, for streamed summaries
        "summary_streamed": 0,
        "ig": {},
        "batches": 0,
    }


def console_line(step: int, total: int, metrics: dict[str, Any]) -> str:
    """The one line per step the console shows (the full metrics go to verl's tracker)."""
    t = metrics.get("timing_s/step", 0.0)
    if "arise/phase" not in metrics:  # arise.enable=false: plain GRPO through the same trainer
        return f"[arise] step {step}/{total} | GRPO | score {metrics.get('critic/score/mean', 0.0):.3f} | {t:.1f}s"
    return (
        f"[arise] step {step}/{total} | phase {int(metrics['arise/phase'])} | acc {metrics['arise/acc']:.3f}"
        f" | mean R {metrics['arise/reward_mean']:.3f} | skill use {metrics['arise/skill_use_rate']:.2f}"
        f" | gate pass {metrics['arise/gate_pass_rate']:.2f} | R=1/R=2 mixed groups"
        f" {metrics['arise/mixed_group_rate']:.2f} | parsed {int(metrics['arise/summary_parsed'])}"
        f"/{int(metrics['arise/summary_attempts'])} | library {int(metrics['arise/cache_size'])}"
        f"+{int(metrics['arise/reservoir_size'])} (new {int(metrics['arise/new_skills'])}) | {t:.1f}s"
    )


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
        self.arise = ARISEConfig.from_trainer_config(config)  # before the base builds the replay buffer
        super().__init__(config)
        self.library: SkillLibrary | None = None
        self.skill_pool = None
        self._arise_metrics: dict[str, float] = {}
        self._arise_version = 0
        self._step_state = _new_step_state()
        self._maintained_step: int | None = None
        self._client_published = False

    # ------------------------------------------------------------------ setup / checkpoints
    def _build_replay_buffer(self):
        inner = super()._build_replay_buffer()
        # verl's ReplayBuffer.sample checks for finished rollouts every poll_interval (2.0 s, no
        # config key), so every generation phase ends on a 2-s grid: ~1 s lost per step on average,
        # in the GRPO baseline too (arise.enable=false takes this trainer as well)
        if hasattr(inner, "poll_interval"):
            inner.poll_interval = self.arise.replay_poll_s
        return _RecordingSampler(inner)

    def _checkpoint_folder(self, step: int) -> str:
        root = self.config.trainer.default_local_dir
        if not os.path.isabs(root):
            root = os.path.join(os.getcwd(), root)
        return os.path.join(root, f"global_step_{step}")

    def _new_library(self) -> SkillLibrary:
        lib_cfg = self.arise.library
        return SkillLibrary(
            cache_capacity=lib_cfg.cache_capacity,
            reservoir_capacity=lib_cfg.reservoir_capacity,
            ema_beta=lib_cfg.ema_beta,
            seed_skills=load_seed_skills(lib_cfg.seed_skills),
            new_skill_policy=lib_cfg.new_skill_policy,
            trial_uses=lib_cfg.trial_uses,
            trial_steps=lib_cfg.trial_steps,
            seed_trial_uses=lib_cfg.seed_trial_uses,
            rank_by=lib_cfg.rank_by,
        )

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
            moved = set_aside_steps_after(self.arise_log_dir, self.global_steps)
            if moved:
                logger.warning(
                    f"ARISE: {len(moved)} library-log step(s) past global_step_{self.global_steps} were written "
                    f"by an interrupted run; moved to {moved[0].parent} (this run redoes those steps)"
                )
            logger.info(f"ARISE: restored skill library from {path}: {self.library!r}")
        elif lib_cfg.load_from:
            self.library = SkillLibrary.load(lib_cfg.load_from)
            logger.info(f"ARISE: starting from the skill library in {lib_cfg.load_from}: {self.library!r}")
        else:
            self.library = self._new_library()
        self.skill_pool = get_or_create_pool()
        self._publish()

    def _save_checkpoint(self):
        if self.library is not None:
            path = os.path.join(self._checkpoint_folder(self.global_steps), LIBRARY_FILE)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.library.save(path)
            hdfs_dir = self.config.trainer.get("default_hdfs_dir", None)
            if hdfs_dir:  # next to the actor's remote copy (verl: <hdfs>/global_step_N/actor)
                from verl.utils import hdfs_io

                remote = os.path.join(hdfs_dir, f"global_step_{self.global_steps}", "arise")
                hdfs_io.makedirs(remote, exist_ok=True)
                hdfs_io.copy(path, os.path.join(remote, os.path.basename(path)))
        super()._save_checkpoint()

    def _publish(self):
        self._arise_version += 1
        cache = [(entry.skill_id, entry.doc.to_json()) for entry in self.library.cache]
        utilities = [entry.utility for entry in self.library.cache]  # ranks arise.selection.score_top_m
        ray.get(self.skill_pool.publish.remote(self._arise_version, cache, utilities))

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

    def _batch_budget(self) -> int:
        """Summary rollouts this sampled batch may start: the step's budget spread over its batches."""
        cfg = self.arise.summary
        if cfg.max_per_step < 0:
            return -1
        left = cfg.max_per_step - self._step_state["summary"]["attempts"]
        batches_left = max(1, self.parameter_sync_step - self.local_trigger_step)
        return max(0, math.ceil(left / batches_left))

    def on_sample_begin(self):
        super().on_sample_begin()
        cfg = self.arise.summary
        if self.library is not None and cfg.enable and cfg.stream:
            # the reward workers claim groups for summary rollouts as their G rewards come in, and
            # generate them through the same client as the trainer's own summary rollouts
            if not self._client_published:
                ray.get(self.skill_pool.set_llm_client.remote(self.get_llm_client()))
                self._client_published = True
            key = (self.global_steps, self.local_trigger_step, uuid4().hex)
            group_size = int(self.config.actor_rollout_ref.rollout.n)
            ray.get(self.skill_pool.stream_begin.remote(key, self._batch_budget(), group_size))

    def on_sample_end(self):
        if self.library is not None:
            batch = self.replay_buffer.last_train_batch
            self.replay_buffer.last_train_batch = None
            self._arise_sample(batch)
            # verl samples parameter_sync_step batches per global step; maintain the library once
            if self.local_trigger_step >= self.parameter_sync_step - 1:
                self._arise_maintain()
        super().on_sample_end()  # replicas go to sleep only after the summary rollouts

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        metrics.update(self._arise_metrics)
        self._arise_metrics = {}
        print(console_line(global_steps, self.total_training_steps, metrics), flush=True)

    # ------------------------------------------------------------------ the ARISE step
    def _arise_sample(self, batch) -> None:
        """Per sampled batch (replicas awake): summary rollouts within the step's budget; exact IG."""
        state = self._step_state
        state["batches"] += 1
        step = self.global_steps
        cfg = self.arise.summary
        if batch is None and not (cfg.enable and cfg.stream):  # a streamed batch is closed even so
            return
        with marked_timer("arise_summary", self.timing_raw, color="purple"):
            started = time.perf_counter()
            groups = self._tau_plus_groups(batch) if batch is not None else []
            state["groups_with_tau_plus"] += len(groups)
            if cfg.enable and cfg.stream:
                new_skills, stats = self._streamed_summaries(step)
            elif cfg.enable and groups:
                rng = np.random.default_rng([self.arise.seed, step, state["batches"]])
                chosen = choose_summary_groups(groups, self._batch_budget(), cfg.choose, rng)
                new_skills, stats = self._summary_rollouts(chosen, step)
            else:
                new_skills, stats = [], {}
            state["new_skills"] += new_skills
            for key, value in stats.items():
                state["summary"][key] += value
            ig = self.arise.ig
            if ig.every_n_steps and step % ig.every_n_steps == 0 and groups and not state["ig"]:
                state["ig"] = self._exact_ig(groups, step)
            state["summary_s"] += time.perf_counter() - started

    def _arise_maintain(self) -> None:
        step = self.global_steps
        if self._maintained_step == step:  # never twice in one global step
            return
        self._maintained_step = step
        state, self._step_state = self._step_state, _new_step_state()
        phase = self.arise.phase(step)
        with marked_timer("arise_library", self.timing_raw, color="purple"):
            started = time.perf_counter()
            observations = ray.get(self.skill_pool.drain.remote())
            used = [(o["skill_id"], o["reward"]) for o in observations if o["skill_id"]]
            events = self.library.step(
                used,
                state["new_skills"],
                step=step,
                global_rewards=[o["reward"] for o in observations],
                contrasts=group_contrasts(observations),
            )
            self._publish()
            write_step_log(self.arise_log_dir, step, phase, events, self.library)
            maintenance_s = time.perf_counter() - started
        norm = bool(self.config.algorithm.get("norm_adv_by_std_in_grpo", True))
        self._arise_metrics = self._step_metrics(phase, observations, events, state, maintenance_s, norm)

    def _tau_plus_groups(self, batch) -> list[dict[str, Any]]:
        """Each query group with tau+ non-empty: question, messages, success rate, and its tau+
        traces best reward first (text, reward, token ids)."""
        keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        if not keep:
            return []
        keys = [batch.keys[i] for i in keep]
        fields = ["uid", "responses", "rm_scores", "raw_prompt", "extra_info"]
        train_manager = self.arise.selection.train_manager
        if train_manager:  # verl's TQ agent loop stores AgentLoopOutput.extra_fields as one field
            fields.append("extra_fields")
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
        lengths = data["responses"].offsets().diff().tolist()  # jagged: each row's own length
        responses = data["responses"].to_padded_tensor(padding=self.tokenizer.pad_token_id)
        # with train_manager the response starts with the skill line: a trace is what follows it
        starts = [0] * len(lengths)
        if train_manager:
            extra = _as_list(data.pop("extra_fields"))
            in_response = [bool(_plain(e.get("arise_skill_in_response", False))) for e in extra]
            skill_tokens = [int(_plain(e.get("arise_skill_tokens", 0)) or 0) for e in extra]
            starts = [n if flag else 0 for flag, n in zip(in_response, skill_tokens, strict=True)]
        rewards = data["rm_scores"].to_padded_tensor(padding=0.0).sum(dim=1).tolist()
        uids = _as_list(data.pop("uid"))
        raw_prompts = _as_list(data.pop("raw_prompt"))
        extra_infos = _as_list(data.pop("extra_info"))

        members_of: dict[str, list[int]] = {}
        for i, uid in enumerate(uids):
            members_of.setdefault(str(uid), []).append(i)
        out = []
        for uid, members in members_of.items():
            member_rewards = [rewards[i] for i in members]
            positive = positive_advantage_sessions(member_rewards)
            if not positive:
                continue
            positive.sort(key=lambda j: -member_rewards[j])  # best rewards first, ties in session order
            first = members[0]
            info = extra_infos[first] if isinstance(extra_infos[first], dict) else {}
            messages = list(raw_prompts[first] or [])
            traces = []
            for j in positive:
                row = members[j]
                ids = [int(t) for t in responses[row][starts[row] : int(lengths[row])].tolist()]
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                traces.append({"text": text, "reward": float(member_rewards[j]), "ids": ids})
            out.append(
                {
                    "uid": uid,
                    "question": info.get("question") or _last_user_turn(messages),
                    "messages": messages,
                    "success_rate": float(np.mean([r > 0 for r in member_rewards])),
                    "traces": traces,
                }
            )
        return out

    def _generate_all(self, prompts: list[list[int]], params: dict, timeout_s: float) -> list:
        """One request per prompt on the rollout servers, concurrently; errors come back as values."""
        client = self.get_llm_client()

        async def one(ids):
            return await client.generate(request_id=uuid4().hex, prompt_ids=ids, sampling_params=dict(params))

        async def run():
            tasks = [asyncio.wait_for(one(ids), timeout=timeout_s) for ids in prompts]
            return await asyncio.gather(*tasks, return_exceptions=True)

        return asyncio.run(run())

    def _chat_ids(self, messages) -> list[int]:
        return chat_ids(self.tokenizer, messages, self.config.data.get("apply_chat_template_kwargs", None))

    def _summary_rollouts(self, groups: list[dict[str, Any]], step: int):
        """The summary rollouts of ``groups`` after the wave, concurrently on the rollout servers."""
        cfg = self.arise.summary
        if not groups:
            return summary_skills(self.tokenizer, [], [], 0, cfg, step, logger)
        kwargs = self.config.data.get("apply_chat_template_kwargs", None)
        prompts = [summary_prompt_ids(self.tokenizer, group, cfg, kwargs) for group in groups]
        outputs = self._generate_all(prompts, summary_sampling_params(cfg), cfg.timeout_s)
        return summary_skills(self.tokenizer, groups, outputs, sum(len(ids) for ids in prompts), cfg, step, logger)

    def _streamed_summaries(self, step: int):
        """The summaries the reward workers started during the wave (``arise.summary.stream``):
        wait for those still running (at most ``timeout_s``), then close the batch's stream."""
        cfg = self.arise.summary
        deadline = time.perf_counter() + cfg.timeout_s
        delivered: list[dict[str, Any]] = []
        waited = time.perf_counter()
        while True:
            claimed, new = ray.get(self.skill_pool.stream_collect.remote())
            delivered += new
            if len(delivered) >= claimed or time.perf_counter() > deadline:
                break
            time.sleep(0.01)
        ray.get(self.skill_pool.stream_end.remote())
        self._step_state["summary_wait_s"] += time.perf_counter() - waited
        self._step_state["summary_streamed"] += len(delivered)
        groups = [r["group"] for r in delivered]
        outputs = [
            r["token_ids"] if r.get("token_ids") is not None else RuntimeError(r.get("error")) for r in delivered
        ]
        missing = claimed - len(delivered)  # still running at the deadline: failed, as without streaming
        if missing > 0:
            logger.warning(f"ARISE: {missing} streamed summary rollout(s) not back after {cfg.timeout_s}s")
        new_skills, stats = summary_skills(
            self.tokenizer, groups, outputs, sum(int(r.get("prompt_tokens", 0)) for r in delivered), cfg, step, logger
        )
        stats["attempts"] += max(0, missing)
        stats["failed"] += max(0, missing)
        return new_skills, stats

    def _exact_ig(self, groups: list[dict[str, Any]], step: int) -> dict[str, float]:
        """The paper's exact IG (App. D.3) of every cache skill over up to ``ig.max_traces`` tau+
        traces of this step: prompt log-probs of each trace with and without the skill, on the
        rollout engine. Stored on the entries (``ig_exact``, ``ig_step``); a diagnostic only."""
        cfg = self.arise.ig
        rng = np.random.default_rng([self.arise.seed, step, 7])
        picked = [groups[i] for i in rng.permutation(len(groups))[: cfg.max_traces]]
        traces = [(g["messages"], g["traces"][0]["ids"][: cfg.max_response_tokens]) for g in picked]
        traces = [(m, ids) for m, ids in traces if ids]
        cache = list(self.library.cache)
        if not traces or not cache:
            return {}
        prompts, spans = [], []
        for skill in [None, *cache]:
            for messages, ids in traces:
                context = self._chat_ids(messages if skill is None else inject_skill(messages, skill.doc))
                prompts.append(context + ids)
                spans.append((len(context), len(context) + len(ids)))
        params = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "prompt_logprobs": 0}
        outputs = self._generate_all(prompts, params, self.arise.selection.scoring_timeout_s)
        sums = []
        for output, (lo, hi) in zip(outputs, spans, strict=True):
            if isinstance(output, BaseException):
                logger.warning(f"ARISE exact IG: a request failed ({output!r}); skipped this time")
                return {}
            lp = output.extra_fields.get("prompt_logprobs")
            sums.append(float(sum(lp[j - 1][0] for j in range(lo, hi))))
        n = len(traces)
        ig = exact_information_gain([sums[(k + 1) * n : (k + 2) * n] for k in range(len(cache))], sums[:n])
        out = {}
        for entry, value in zip(cache, ig, strict=True):
            entry.ig_exact, entry.ig_step = value, step
            out[entry.skill_id] = value
        return out

    def _step_metrics(self, phase, observations, events, state, maintenance_s, norm_by_std) -> dict[str, float]:
        n = len(observations)
        scored = [o for o in observations if o["scored"]]
        phase2 = [o for o in observations if o.get("phase") == 2]
        utilities = [e.utility for e in self.library.cache]
        uplifts = [e.uplift for e in self.library.entries() if e.uplift is not None]
        summary = state["summary"]
        attempts = summary["attempts"]
        m = {
            "arise/phase": float(phase),
            "arise/trajectories": float(n),
            "arise/skill_use_rate": sum(bool(o["skill_id"]) for o in observations) / n if n else 0.0,
            "arise/control_rate": (sum(bool(o.get("control")) for o in phase2) / len(phase2)) if phase2 else 0.0,
            "arise/gate_pass_rate": (sum(bool(o["gate_passed"]) for o in scored) / len(scored)) if scored else 0.0,
            "arise/scoring_failures": float(sum(bool(o.get("scoring_failed")) for o in observations)),
            "arise/scores_nonfinite": float(sum(int(o.get("scores_nonfinite", 0)) for o in observations)),
            "arise/skill_overlong": float(sum(bool(o.get("skill_overlong")) for o in observations)),
            "arise/reward_mean": float(np.mean([o["reward"] for o in observations])) if n else 0.0,
            "arise/acc": float(np.mean([o["correct"] for o in observations])) if n else 0.0,
            "arise/prompt_overhead_tokens": float(np.mean([o["skill_tokens"] for o in observations])) if n else 0.0,
            "arise/scoring_s": float(sum(o["scoring_s"] for o in observations)),
            # token accounting (per step; divide by arise/queries for per-query figures)
            "arise/queries": float(len({o["uid"] for o in observations})),
            "arise/prompt_tokens": float(sum(o.get("prompt_tokens", 0) for o in observations)),
            "arise/response_tokens": float(sum(o.get("response_tokens", 0) for o in observations)),
            "arise/scoring_tokens": float(sum(o.get("scoring_tokens", 0) for o in observations)),  # prefilled
            "arise/scoring_cached_tokens": float(sum(o.get("scoring_cached_tokens", 0) for o in observations)),
            "arise/scoring_rescored": float(sum(o.get("scoring_rescored", 0) for o in observations)),
            "arise/summary_prompt_tokens": float(summary["prompt_tokens"]),
            "arise/summary_response_tokens": float(summary["response_tokens"]),
            "arise/summary_s": float(state["summary_s"]),
            "arise/summary_wait_s": float(state["summary_wait_s"]),
            "arise/summary_streamed": float(state["summary_streamed"]),
            "arise/groups_with_tau_plus": float(state["groups_with_tau_plus"]),
            "arise/summary_attempts": float(attempts),
            "arise/summary_parsed": float(summary["parsed"]),
            "arise/summary_failed": float(summary["failed"]),
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
            "arise/seeds_in_cache": float(sum(e.origin == "seed" for e in self.library.cache)),
            "arise/utility_mean": float(np.mean(utilities)) if utilities else 0.0,
            "arise/utility_max": float(np.max(utilities)) if utilities else 0.0,
            "arise/uplift_mean": float(np.mean(uplifts)) if uplifts else 0.0,
            "arise/uplift_skills": float(len(uplifts)),
        }
        m.update({f"arise/{k}": float(v) for k, v in mechanism_metrics(observations, norm_by_std).items()})
        if state["ig"]:
            m["arise/ig_exact_mean"] = float(np.mean(list(state["ig"].values())))
        return m


def _plain(value):
    """A Python value from what TransferQueue returns inside a stored dict (tensor, NonTensorData)."""
    value = getattr(value, "data", value) if type(value).__name__ == "NonTensorData" else value
    return value.tolist() if hasattr(value, "tolist") else value


def _as_list(value) -> list:
    """TransferQueue hands non-tensor fields back as NonTensorStack or tensordict LinkedList."""
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _last_user_turn(messages) -> str:
    for message in reversed(list(messages or [])):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content", ""))
    return ""
