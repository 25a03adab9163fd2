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
  ``on_sample_begin``, see ``recipe.arise.core.stream``); every
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
import collections
import json
import logging
import math
import os
import time
from typing import Any
from uuid import uuid4

import numpy as np
import ray
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer

from recipe.arise.adapters.library_replica import get_or_create_pool
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.calibration import GATE_FILE, GateCalibrator
from recipe.arise.core.groups import (
    choose_summary_groups,
    exact_information_gain,
    group_contrasts,
    mechanism_metrics,
    positive_advantage_sessions,
)
from recipe.arise.core.library import SkillLibrary, atomic_write, library_from_jsonl, load_library_file
from recipe.arise.core.library_log import record_resume, set_aside_steps_after, write_step_log
from recipe.arise.core.prompts import inject_skill
from recipe.arise.core.scoring import scoring_prefix_ids, scoring_suffix
from recipe.arise.core.selection import top_m_candidates, truncate_skill_for_scoring
from recipe.arise.core.skill import load_seed_skills
from recipe.arise.core.summary import chat_ids, summary_prompt_ids, summary_sampling_params, summary_skills
from recipe.arise.tools.calibrate import score_queries

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
        self._init_gate()

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

    def _library_settings(self) -> dict[str, Any]:
        """The run's ``arise.library.*`` settings as :class:`SkillLibrary` keywords (max_protected:
        the default C_c // 2); they win over the settings a restored library was saved with."""
        lib_cfg = self.arise.library
        return {
            "cache_capacity": lib_cfg.cache_capacity,
            "reservoir_capacity": lib_cfg.reservoir_capacity,
            "ema_beta": lib_cfg.ema_beta,
            "new_skill_policy": lib_cfg.new_skill_policy,
            "trial_uses": lib_cfg.trial_uses,
            "trial_steps": lib_cfg.trial_steps,
            "max_protected": None,
            "seed_trial_uses": lib_cfg.seed_trial_uses,
            "rank_by": lib_cfg.rank_by,
        }

    def _new_library(self) -> SkillLibrary:
        return SkillLibrary(seed_skills=load_seed_skills(self.arise.library.seed_skills), **self._library_settings())

    def _restore_library(self, path: str) -> SkillLibrary:
        """A stored library (``library.parquet`` or an exported ``.jsonl``) under this run's settings.

        Training: the run's ``arise.library.*`` win over the file's, each difference is logged, and
        a smaller capacity evicts by the configured ranking (logged, and in the next step's library
        events). Evaluation (``trainer.val_only``) evaluates the library as it was saved: the
        differences are logged as not applied."""
        settings = self._library_settings()
        if self.config.trainer.get("val_only", False):
            if path.endswith(".jsonl"):  # a JSONL file holds no settings: the run's are the only ones
                return library_from_jsonl(path, step=self.global_steps, **settings)[0]
            library = SkillLibrary.load(path)
            diff = library.settings_diff(**settings)
            if diff:
                logger.warning(
                    f"ARISE: evaluating the library of {path} as saved; these arise.library settings of this run "
                    f"differ and are not applied: {_format_changes(diff, 'saved', 'this run')}"
                )
            return library
        library, changes, events = load_library_file(path, step=self.global_steps, **settings)
        if changes:
            logger.warning(
                f"ARISE: {path} was saved with other arise.library settings; this run's apply: "
                f"{_format_changes(changes, 'saved', 'now')}"
            )
        if events.evicted or events.overflow:
            logger.warning(
                f"ARISE: fitting the run's capacities (cache {library.cache_capacity}, reservoir "
                f"{library.reservoir_capacity}) moved {len(events.evicted)} cache skill(s) to the reservoir "
                f"{events.evicted} (ranked by {library.rank_by}) and dropped {len(events.overflow)} reservoir "
                f"skill(s) {events.overflow}; the next step's library log lists them"
            )
        return library

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if not self.arise.enable:
            return
        lib_cfg = self.arise.library
        if self.global_steps > 0 and lib_cfg.from_checkpoint:
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
            self.library = self._restore_library(path)
            record_resume(self.arise_log_dir, self.global_steps, path, self.library)
            moved = set_aside_steps_after(self.arise_log_dir, self.global_steps)
            if moved:
                logger.warning(
                    f"ARISE: {len(moved)} library-log step(s) past global_step_{self.global_steps} were written "
                    f"by an interrupted run; moved to {moved[0].parent} (this run redoes those steps)"
                )
            logger.info(f"ARISE: restored skill library from {path}: {self.library!r}")
        else:
            if self.global_steps > 0:  # arise.library.from_checkpoint=false
                logger.warning(
                    f"ARISE: resuming at step {self.global_steps} without the checkpoint's skill library "
                    f"(arise.library.from_checkpoint=false): {lib_cfg.load_from or 'the seed skills'} instead"
                )
            if lib_cfg.load_from:
                self.library = self._restore_library(lib_cfg.load_from)
                logger.info(f"ARISE: starting from the skill library in {lib_cfg.load_from}: {self.library!r}")
            else:
                self.library = self._new_library()
        self._restore_gate()
        self.skill_pool = get_or_create_pool()
        self._publish()

    def _save_checkpoint(self):
        if self.library is not None:
            path = os.path.join(self._checkpoint_folder(self.global_steps), LIBRARY_FILE)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.library.save(path)
            gate_path = self._save_gate(os.path.dirname(path))
            hdfs_dir = self.config.trainer.get("default_hdfs_dir", None)
            if hdfs_dir:  # next to the actor's remote copy (verl: <hdfs>/global_step_N/actor)
                from verl.utils import hdfs_io

                remote = os.path.join(hdfs_dir, f"global_step_{self.global_steps}", "arise")
                hdfs_io.makedirs(remote, exist_ok=True)
                hdfs_io.copy(path, os.path.join(remote, os.path.basename(path)))
                hdfs_io.copy(gate_path, os.path.join(remote, GATE_FILE))
        # the settings this step was trained with (the preflight compares a resume's against them),
        # for every run, the baselines' included
        step_config = os.path.join(self._checkpoint_folder(self.global_steps), "arise", "config.yaml")
        os.makedirs(os.path.dirname(step_config), exist_ok=True)
        atomic_write(step_config, lambda f: f.write(OmegaConf.to_yaml(self.config, resolve=True).encode()))
        super()._save_checkpoint()

    def _publish(self):
        self._arise_version += 1
        cache = [(entry.skill_id, entry.doc.to_json()) for entry in self.library.cache]
        utilities = [entry.utility for entry in self.library.cache]  # ranks arise.selection.score_top_m
        ray.get(self.skill_pool.publish.remote(self._arise_version, cache, utilities, self._gate.sigma))

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
        # ---- train_manager: the skill tokens GRPO trained on this step (arise/skill_tokens_in_loss)
        if self.library is not None and self.arise.selection.train_manager:
            metrics["arise/skill_tokens_in_loss"] = self._skill_tokens_in_loss(batch)
        # ---- end train_manager
        print(console_line(global_steps, self.total_training_steps, metrics), flush=True)

    def _skill_tokens_in_loss(self, batch) -> float:
        """train_manager: the response tokens with mask 1 inside the skill lines (the first
        ``arise_skill_tokens`` tokens of a response that opens with one) of the batch the actor
        trained on; verl's policy loss masks with ``response_mask`` (its ``loss_mask``). 0 means
        the Manager got no gradient this step."""
        keys = [key for key, tag in zip(batch.keys, batch.tags, strict=True) if not tag.get("is_padding", False)]
        if not keys:
            return 0.0
        fields = ["response_mask", "extra_fields"]
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
        masks = data["response_mask"].to_padded_tensor(padding=0)
        total = 0
        for row, extra in enumerate(_as_list(data["extra_fields"])):
            if bool(_plain(extra.get("arise_skill_in_response", False))):
                total += int(masks[row, : int(_plain(extra.get("arise_skill_tokens", 0)) or 0)].sum())
        return float(total)

    # ------------------------------------------------------------------ the ARISE step
    def _arise_sample(self, batch) -> None:
        """Per sampled batch (replicas awake): summary rollouts within the step's budget; exact IG."""
        state = self._step_state
        state["batches"] += 1
        step = self.global_steps
        cfg = self.arise.summary
        if batch is not None and self._gate_calibrates():
            self._remember_queries(self._batch_queries(batch))
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
            sigma_used = self._gate.sigma
            self._calibrate_gate(observations)
            used = [(o["skill_id"], o["reward"]) for o in observations if o["skill_id"]]
            events = self.library.step(
                used,
                state["new_skills"],
                step=step,
                global_rewards=[o["reward"] for o in observations],
                contrasts=group_contrasts(observations),
            )
            if self._gate_rescores(step):  # the next step's cache is in place: calibrate on it
                self._calibrate_gate_on_queries(step)
            self._publish()
            write_step_log(self.arise_log_dir, step, phase, events, self.library)
            maintenance_s = time.perf_counter() - started
        norm = bool(self.config.algorithm.get("norm_adv_by_std_in_grpo", True))
        self._arise_metrics = self._step_metrics(phase, observations, events, state, maintenance_s, norm)
        self._arise_metrics.update(self._gate_metrics(phase, sigma_used, observations))

    # ------------------------------------------------------------------ the calibrated gate
    # arise.selection.temperature: auto (recipe.arise.core.calibration, docs/design.md): sigma from the
    # score vectors of the last calibration_window Phase II groups, published with the cache
    def _init_gate(self) -> None:
        sel = self.arise.selection
        self._gate = GateCalibrator(
            delta=sel.gate,
            target=sel.gate_target,
            window=sel.calibration_window,
            initial=sel.initial_temperature,
            fixed=None if sel.auto_temperature else float(sel.temperature),
        )
        # the most recent training queries (key: their messages), scored against each new cache
        self._gate_queries: collections.OrderedDict[str, list] = collections.OrderedDict()

    def _gate_calibrates(self) -> bool:
        sel = self.arise.selection
        return self._gate.auto and sel.use_gate and not sel.random

    def _gate_rescores(self, step: int) -> bool:
        """Whether this step's queries are scored against the cache the next step selects from:
        every step from the last Phase I one with calibration=rescore; with window only the last
        Phase I step, so Phase II starts calibrated."""
        if not self._gate_calibrates() or step < self.arise.phase1_steps:
            return False
        return step == self.arise.phase1_steps or self.arise.selection.calibration == "rescore"

    def _gate_file(self) -> str | None:
        """Where a restored library's sigma lies: the checkpoint's arise/ folder, or beside load_from."""
        if self.global_steps > 0:
            folder = (
                self.config.trainer.resume_from_path
                if self.config.trainer.resume_mode == "resume_path"
                else self._checkpoint_folder(self.global_steps)
            )
            return os.path.join(os.path.abspath(folder), os.path.dirname(LIBRARY_FILE), GATE_FILE)
        if self.arise.library.load_from:
            return os.path.join(os.path.dirname(os.path.abspath(self.arise.library.load_from)), GATE_FILE)
        return None

    def _restore_gate(self) -> None:
        path = self._gate_file()
        if path is None:
            return
        if not os.path.exists(path):
            logger.warning(
                f"ARISE: no {GATE_FILE} beside the restored library ({path}); sigma = "
                f"{self._gate.sigma:g} until the gate is calibrated"
            )
            return
        with open(path) as f:
            state = json.load(f)
        logger.info(f"ARISE: restored the gate from {path}: {self._gate.restore(state)}")

    def _save_gate(self, folder: str) -> str:
        path = os.path.join(folder, GATE_FILE)
        with open(path, "w") as f:
            json.dump(self._gate.state(), f)
        return path

    def _calibrate_gate(self, observations: list[dict[str, Any]]) -> None:
        """Add this step's Phase II groups (one score vector per query group: its trajectories share
        it; control-arm trajectories carry none) to the window and recalibrate."""
        if not self._gate_calibrates() or self.arise.selection.calibration != "window":
            return
        vectors: dict[str, list[float]] = {}
        for o in observations:
            scores = o.get("scores")
            if o.get("phase") == 2 and scores is not None and len(scores) and o["uid"] not in vectors:
                vectors[o["uid"]] = scores
        if vectors:
            self._gate.add(vectors.values())
            self._gate.update()

    def _remember_queries(self, queries: list[list]) -> None:
        """Keep the most recent calibration_window distinct training queries (rescored each step)."""
        for messages in queries:
            key = json.dumps(messages, sort_keys=True, default=str)
            self._gate_queries.pop(key, None)
            self._gate_queries[key] = messages
        while len(self._gate_queries) > self.arise.selection.calibration_window:
            self._gate_queries.popitem(last=False)

    def _batch_queries(self, batch) -> list[list]:
        """The chat messages of each query group of a sampled batch."""
        keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        if not keep:
            return []
        keys = [batch.keys[i] for i in keep]
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["uid", "raw_prompt"])
        first: dict[str, list] = {}
        for uid, messages in zip(_as_list(data.pop("uid")), _as_list(data.pop("raw_prompt")), strict=True):
            first.setdefault(str(uid), list(messages or []))
        return list(first.values())

    def _calibrate_gate_on_queries(self, step: int) -> None:
        """Score the last calibration_window training queries against the cache the next step
        selects from, on the rollout servers and with the agent loop's scoring, and calibrate on
        them (with calibration=rescore they replace the window: older vectors saw another cache)."""
        sel = self.arise.selection
        queries = list(self._gate_queries.values())
        cache = list(self.library.cache)
        if not queries or not cache:
            return
        candidates = top_m_candidates(len(cache), sel.score_top_m, [e.utility for e in cache])
        params = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "prompt_logprobs": 0}

        def engine(prompts):  # a failed request gives None rows: that skill's score is NaN
            outputs = self._generate_all(prompts, params, sel.scoring_timeout_s)
            return [None if isinstance(o, BaseException) else o.extra_fields.get("prompt_logprobs") for o in outputs]

        started = time.perf_counter()
        vectors = score_queries(
            engine,
            self.tokenizer,
            queries,
            [cache[i].doc.to_json() for i in candidates],
            max_skill_tokens=sel.max_skill_tokens,
            score_norm=sel.score_norm,
            train_manager=sel.train_manager,
            chat_kwargs=self.config.data.get("apply_chat_template_kwargs", None) or {},
        )
        if sel.calibration == "rescore":
            self._gate.window.clear()
        added = self._gate.add(vectors)
        sigma = self._gate.update()
        logger.info(
            f"ARISE: gate calibrated on {added} queries of step {step} scored against the new cache "
            f"({time.perf_counter() - started:.1f}s): sigma={sigma:.4g}"
        )

    def _gate_metrics(self, phase: int, sigma_used: float, observations: list[dict[str, Any]]) -> dict[str, float]:
        """arise/sigma: the sigma this step's selection used; with auto the target and the window.
        A fixed sigma that keeps the gate (almost) always shut or open is warned about."""
        m = {"arise/sigma": float(sigma_used)}
        if self._gate_calibrates():
            m["arise/gate_target"] = self._gate.target
            m["arise/calibration_groups"] = float(len(self._gate.window))
        if phase == 2 and self.arise.selection.use_gate and any(o["scored"] for o in observations):
            warning = self._gate.watch(self._arise_metrics["arise/gate_pass_rate"])
            if warning:
                logger.warning(warning)
        return m

    def _tau_plus_groups(self, batch) -> list[dict[str, Any]]:
        """Each query group with tau+ non-empty: question, messages, success rate, and its tau+
        traces best reward first (text, reward, token ids)."""
        keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        if not keep:
            return []
        keys = [batch.keys[i] for i in keep]
        # verl's TQ agent loop stores AgentLoopOutput.extra_fields (the arise_* keys) as one field
        fields = ["uid", "responses", "rm_scores", "raw_prompt", "extra_info", "extra_fields"]
        train_manager = self.arise.selection.train_manager
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
        lengths = data["responses"].offsets().diff().tolist()  # jagged: each row's own length
        responses = data["responses"].to_padded_tensor(padding=self.tokenizer.pad_token_id)
        extra = _as_list(data.pop("extra_fields"))
        # the skill each trajectory was generated under ("" = unaided): the exact IG uses unaided ones
        skill_of = [str(_plain(e.get("arise_skill_id", "")) or "") for e in extra]
        # with train_manager the response starts with the skill line: a trace is what follows it
        starts = [0] * len(lengths)
        if train_manager:
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
                traces.append({"text": text, "reward": float(member_rewards[j]), "ids": ids, "skill_id": skill_of[row]})
            # correct unaided traces (also those outside tau+: in Phase II an R=1 control-arm trace
            # often has a negative advantage beside R=2 ones), best reward first: the exact IG's traces
            unaided = sorted(
                (j for j, r in enumerate(member_rewards) if r > 0 and not skill_of[members[j]]),
                key=lambda j: -member_rewards[j],
            )
            unaided_traces = [
                {
                    "reward": float(member_rewards[j]),
                    "ids": [int(t) for t in responses[members[j]][: int(lengths[members[j]])].tolist()],
                }
                for j in unaided
            ]
            out.append(
                {
                    "uid": uid,
                    "question": info.get("question") or _last_user_turn(messages),
                    "messages": messages,
                    "success_rate": float(np.mean([r > 0 for r in member_rewards])),
                    "traces": traces,
                    "unaided": unaided_traces,
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
        """The paper's exact IG (App. D.3) of every cache skill over up to ``ig.max_traces`` correct
        *unaided* traces of this step (one per query group, its best): prompt log-probs of each
        trace with and without the skill, on the rollout engine. Unaided traces only: a trace
        generated under one skill is likelier under that skill's context than under any other's,
        which would favour the skill that wrote it. The skill goes where the agent loop injects it
        (:meth:`_ig_context`). Stored on the entries (``ig_exact``, ``ig_step``); a diagnostic only."""
        cfg = self.arise.ig
        rng = np.random.default_rng([self.arise.seed, step, 7])
        traces = []
        for i in rng.permutation(len(groups)):
            ids = _unaided_trace(groups[i])
            if ids:
                traces.append((groups[i]["messages"], ids[: cfg.max_response_tokens]))
            if len(traces) >= cfg.max_traces:
                break
        cache = list(self.library.cache)
        if not traces or not cache:
            return {}
        prompts, spans = [], []
        for skill in [None, *cache]:
            for messages, ids in traces:
                context = self._ig_context(messages, None if skill is None else skill.doc)
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

    def _ig_context(self, messages, doc) -> list[int]:
        """The token context a trace follows, with the skill where the agent loop puts it: in the
        user turn (``SKILL:{json}`` line before the question), or with ``train_manager`` at the start
        of the assistant turn (chat(query) + ``SKILL:`` + the scored skill tokens + ``\\n``)."""
        sel = self.arise.selection
        if doc is None:
            return self._chat_ids(messages)
        if not sel.train_manager:
            return self._chat_ids(inject_skill(messages, doc))
        kwargs = self.config.data.get("apply_chat_template_kwargs", None) or {}
        prefix = scoring_prefix_ids(self.tokenizer, messages, scoring_suffix(True), **kwargs)
        skill_ids = truncate_skill_for_scoring(doc.to_json(), self.tokenizer, sel.max_skill_tokens)
        return prefix + skill_ids + list(self.tokenizer.encode("\n", add_special_tokens=False))

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


def _unaided_trace(group: dict[str, Any]) -> list[int] | None:
    """The token ids of a query group's best correct unaided trace, or None."""
    unaided = group.get("unaided")
    if unaided is None:  # a group built without that list: its unaided tau+ traces
        unaided = [t for t in group.get("traces", []) if not t.get("skill_id")]
    return list(unaided[0]["ids"]) if unaided else None


def _format_changes(changes: dict[str, tuple[Any, Any]], old: str, new: str) -> str:
    return "; ".join(f"{name}: {a!r} ({old}) -> {b!r} ({new})" for name, (a, b) in changes.items())


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
