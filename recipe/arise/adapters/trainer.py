"""The ARISE steps at the hooks of verl's v1 PPO trainer: :class:`ARISEHooks`, one component.

The registered trainers (:mod:`~recipe.arise.adapters.trainers`: ``arise``, ``arise_colocate_async``,
``arise_separate_async`` on verl's three) are this class before a verl base. Nothing of
``fit()``/``step()`` is copied: which hooks it overrides, in which order verl calls them, the ARISE step
at each and what it reads of verl's trainer are declared in :mod:`~recipe.arise.adapters.trainer_hooks`
(docs/design.md, docs/trainer_modes.md).

Parts of the class live beside it: the Upload channel (summary rollouts, exact IG) in
:mod:`~recipe.arise.adapters.trainer_upload`, the calibrated gate in
:mod:`~recipe.arise.adapters.trainer_gate` (each declares what it reads of this class), the step's
metrics in :mod:`~recipe.arise.adapters.trainer_metrics` (every name declared in
:mod:`recipe.arise.core.metrics`), the replay-buffer wrapper in
:mod:`~recipe.arise.adapters.replay_sampler`. What each trajectory carries of ARISE is read from
verl's ``extra_fields`` as a :class:`~recipe.arise.core.trajectory.TrajectoryInfo`.
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
from omegaconf import OmegaConf
from verl.utils.debug import marked_timer

from recipe.arise.adapters import trainer_resume
from recipe.arise.adapters.library_replica import get_or_create_replica
from recipe.arise.adapters.python_tool import TOOL_AGENT_LOOPS, tool_step_metrics
from recipe.arise.adapters.replay_sampler import RecordingSampler
from recipe.arise.adapters.rollout_failures import FailureTally, check_failures
from recipe.arise.adapters.scoring_context import ScoringContext, active_tool_schemas, trainer_scoring_parts
from recipe.arise.adapters.scoring_requests import engine_params
from recipe.arise.adapters.skill_layer import check_agent_loop
from recipe.arise.adapters.trainer_gate import (
    GateMixin,
    damaged_checkpoint,
    observed_queries,
    observed_tool_selections,
)
from recipe.arise.adapters.trainer_hooks import check_composition
from recipe.arise.adapters.trainer_metrics import StepState, console_line, env_step_metrics, step_metrics
from recipe.arise.adapters.trainer_upload import UploadMixin, batch_fields
from recipe.arise.adapters.validation_rows import FlaggedValLoader
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.calibration import GATE_FILE
from recipe.arise.core.groups import choose_summary_groups, group_contrasts, positive_advantage_sessions
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_jsonl import library_from_jsonl, load_library_file
from recipe.arise.core.library_log import record_resume, set_aside_steps_after, write_step_log
from recipe.arise.core.library_store import LibraryFormatError
from recipe.arise.core.metrics import check_declared
from recipe.arise.core.skill import load_seed_skills
from recipe.arise.core.store import atomic_write
from recipe.arise.core.trajectory import TrajectoryInfo, as_list

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

LIBRARY_FILE = os.path.join("arise", "library.parquet")
__all__ = ["ARISEHooks", "LIBRARY_FILE", "positive_advantage_sessions", "console_line"]


class ARISEHooks(GateMixin, UploadMixin):
    """The ARISE steps at verl's v1 trainer hooks, with no verl base: each registered trainer of
    :mod:`~recipe.arise.adapters.trainers` puts it before one of verl's v1 trainers (every hook ends
    or starts with ``super()``) and pins ``trainer_mode``.

    The host of its mixins: it provides what :class:`~recipe.arise.adapters.trainer_gate.GateHost`
    and :class:`~recipe.arise.adapters.trainer_upload.UploadHost` declare, and calls ``_init_gate``
    in ``__init__`` (tests/adapters/test_trainer_interfaces.py)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        check_composition(cls, ARISEHooks)  # each trainer: this component before a verl base with every hook

    def __init__(self, config):
        self.arise = ARISEConfig.from_trainer_config(config, required=True)  # before the base builds the replay buffer
        check_agent_loop(config.actor_rollout_ref.rollout.agent.default_agent_loop, self.arise)  # at start-up
        super().__init__(config)
        self.library: SkillLibrary | None = None
        self.library_replica = None
        self._arise_metrics: dict[str, float] = {}
        self._arise_version = 0
        self._step_state = StepState()
        self._maintained_step: int | None = None
        self._val_failures: FailureTally | None = None  # the last evaluation's, until the next metrics
        self._scoring_parts = None  # (builder, tools by name) of the agent loop's scoring context
        self._client_published = False
        self._init_gate()

    # ------------------------------------------------------------------ setup / checkpoints
    def _build_replay_buffer(self):
        inner = super()._build_replay_buffer()
        # verl's ReplayBuffer.sample polls every 2.0 s (no config key): ~1 s lost a step, GRPO baseline too
        if hasattr(inner, "poll_interval"):
            inner.poll_interval = self.arise.replay_poll_s
        return RecordingSampler(inner, self.config.actor_rollout_ref.rollout, self.arise.max_refill_batches)

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
            "seed_trial_steps": lib_cfg.seed_trial_steps,
            "selection_start_step": self.arise.phase1_steps + 1,
            "rank_by": lib_cfg.rank_by,
            "dedupe": lib_cfg.dedupe,
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
        # every run, the baselines' included: the agent loops record their failures there
        self.library_replica = get_or_create_replica()
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
            try:
                self.library = self._restore_library(path)
            except LibraryFormatError as error:
                raise damaged_checkpoint(path, error) from error
            record_resume(self.arise_log_dir, self.global_steps, path, self.library)
            self._arise_metrics.update(trainer_resume.restore_pending(self.library_replica, path, self.global_steps))
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
        self._publish()

    def _save_checkpoint(self):
        if self.library is not None:
            path = os.path.join(self._checkpoint_folder(self.global_steps), LIBRARY_FILE)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.library.save(path)
            gate_path = self._save_gate(os.path.dirname(path))
            pending = trainer_resume.save_pending(self.library_replica, path, self.global_steps)
            hdfs_dir = self.config.trainer.get("default_hdfs_dir", None)
            if hdfs_dir:  # next to the actor's remote copy (verl: <hdfs>/global_step_N/actor)
                from verl.utils import hdfs_io

                remote = os.path.join(hdfs_dir, f"global_step_{self.global_steps}", "arise")
                hdfs_io.makedirs(remote, exist_ok=True)
                for local in (path, gate_path, pending):
                    hdfs_io.copy(local, os.path.join(remote, os.path.basename(local)))
        # the settings this step was trained with (the preflight compares a resume's against them),
        # for every run, the baselines' included
        step_config = os.path.join(self._checkpoint_folder(self.global_steps), "arise", "config.yaml")
        os.makedirs(os.path.dirname(step_config), exist_ok=True)
        atomic_write(step_config, lambda f: f.write(OmegaConf.to_yaml(self.config, resolve=True).encode()))
        super()._save_checkpoint()

    def _reissue_inflight_prompts(self, partition_id: str = "train") -> int:
        uids = trainer_resume.inflight_groups(self.trainer_mode, partition_id)  # before verl re-tags them
        self._arise_metrics.update(trainer_resume.reissued(self.library_replica, uids, self.global_steps))
        return super()._reissue_inflight_prompts(partition_id=partition_id)

    def _publish(self):
        self._arise_version = self.global_steps + 1  # one per maintenance; a resumed run's continues
        cache = [(entry.skill_id, entry.doc.to_json()) for entry in self.library.cache]
        utilities = [entry.utility for entry in self.library.cache]  # ranks arise.selection.score_top_m
        ray.get(self.library_replica.publish.remote(self._arise_version, cache, utilities, self._gate.sigma))

    def _generate_all(self, prompts: list[list[int]], params: dict, timeout_s: float) -> list:
        """One request per prompt on the rollout servers, concurrently; errors come back as values (the
        gate's rescoring, the summary rollouts and the exact IG send theirs through it)."""
        client = self.get_llm_client()

        async def one(ids):
            return await client.generate(
                request_id=uuid4().hex, prompt_ids=ids, sampling_params=engine_params(params, self.config)
            )

        async def run():
            tasks = [asyncio.wait_for(one(ids), timeout=timeout_s) for ids in prompts]
            return await asyncio.gather(*tasks, return_exceptions=True)

        return asyncio.run(run())

    def _scoring_context(self, extra_info=None) -> ScoringContext:
        """The scoring context the run's agent loop selects in (its builder, its tools after the
        sample's ``extra_info.tool_selection``): the gate's rescoring and the exact IG use it."""
        if self._scoring_parts is None:
            self._scoring_parts = trainer_scoring_parts(self.config, self.tokenizer)
        builder, tools = self._scoring_parts
        selected = None if tools is None else active_tool_schemas(tools, extra_info)
        return ScoringContext(builder, self.tokenizer, selected)

    @property
    def arise_log_dir(self) -> str:
        if self.arise.log_dir:
            return self.arise.log_dir
        return os.path.join(self.config.trainer.default_local_dir, "arise")

    # ------------------------------------------------------------------ hooks
    def _init_dataloader(self):
        super()._init_dataloader()
        self.val_dataloader = FlaggedValLoader(self.val_dataloader)  # each validation row says so

    def on_validate_end(self):
        super().on_validate_end()
        self._check_rollout_failures("val", "validation")

    def _check_rollout_failures(self, partition: str, where: str) -> None:
        """Stop on a programming error an agent loop recorded, or on too many failed query groups
        (:mod:`~recipe.arise.adapters.rollout_failures`)."""
        records = ray.get(self.library_replica.drain_failures.remote()) if self.library_replica is not None else []
        tally = self.replay_buffer.failures[partition]
        if partition == "val":  # one evaluation's count, shown with the next step's metrics
            self._val_failures, self.replay_buffer.failures["val"] = tally, FailureTally()
        check_failures(tally, records, self.arise.max_failed_group_share, where)

    def _batch_budget(self) -> int:
        """Summary rollouts this sampled batch may start: the step's budget spread over its batches."""
        cfg = self.arise.summary
        if cfg.max_per_step < 0:
            return -1
        left = cfg.max_per_step - self._step_state.summary.attempts
        batches_left = max(1, self.parameter_sync_step - self.local_trigger_step)
        return max(0, math.ceil(left / batches_left))

    def on_sample_begin(self):
        super().on_sample_begin()
        cfg = self.arise.summary
        if self.library is not None and cfg.enable and cfg.stream:
            # the reward workers claim groups for summary rollouts as their G rewards come in, and
            # generate them through the same client as the trainer's own summary rollouts
            if not self._client_published:
                ray.get(self.library_replica.set_llm_client.remote(self.get_llm_client()))
                self._client_published = True
            key = (self.global_steps, self.local_trigger_step, uuid4().hex)
            group_size = int(self.config.actor_rollout_ref.rollout.n)
            ray.get(self.library_replica.stream_begin.remote(key, self._batch_budget(), group_size))

    def on_sample_end(self):
        # before this batch trains: a programming error or too many failed groups stop the run here
        self._check_rollout_failures("train", f"step {self.global_steps}")
        if self.library is not None:
            batch = self.replay_buffer.last_train_batch
            self.replay_buffer.last_train_batch = None
            self._step_state.staleness.add_batch(batch, batch_fields, self.global_steps, self._arise_version)
            self._arise_sample(batch)
            # verl samples parameter_sync_step batches per global step; maintain the library once
            if self.local_trigger_step >= self.parameter_sync_step - 1:
                self._arise_maintain()
        super().on_sample_end()  # replicas go to sleep only after the summary rollouts

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        metrics.update(self._arise_metrics)
        self._arise_metrics = {}
        # query groups a failed agent-loop session left incomplete, and the trajectories dropped
        tally, self.replay_buffer.failures["train"] = self.replay_buffer.failures["train"], FailureTally()
        metrics["arise/rollout_failures"], metrics["arise/rollout_dropped"] = float(tally.failed), float(tally.dropped)
        metrics["arise/refilled_groups"], self.replay_buffer.refilled_step = float(self.replay_buffer.refilled_step), 0
        if self._val_failures is not None:
            metrics["arise/val_rollout_failures"] = float(self._val_failures.failed)
            self._val_failures = None
        # prompts verl's filter_overlong_prompts dropped at load (recipe.arise.adapters.dataset)
        metrics["arise/rows_dropped"] = float(getattr(self.train_dataset, "rows_dropped", 0))
        metrics["arise/val_rows_dropped"] = float(getattr(self.val_dataset, "rows_dropped", 0))
        # the python tool's calls, errors and seconds per trajectory (tool runs, ARISE on or off): with a
        # tool agent every step, 0 included (a model that never calls the tool is the verdict's FAIL)
        rollout = self.config.actor_rollout_ref.rollout
        tool_run = rollout.get("agent", {}).get("default_agent_loop") in TOOL_AGENT_LOOPS
        extras = self._extra_fields(batch)
        if tool_run or rollout.multi_turn.enable:
            metrics.update(tool_step_metrics(extras, tool_run=tool_run))
        if "arise/env_success" not in metrics:  # ARISE off: the trained batch's episodes (on: every generated one)
            metrics.update(env_step_metrics(extras))
        # ---- train_manager: the skill tokens GRPO trained on this step (arise/skill_tokens_in_loss)
        if self.library is not None and self.arise.selection.train_manager:
            metrics["arise/skill_tokens_in_loss"] = self._skill_tokens_in_loss(batch)
        check_declared(metrics, f"step {global_steps}")  # every arise/* key is one of core.metrics'
        print(console_line(global_steps, self.total_training_steps, metrics), flush=True)

    def _extra_fields(self, batch) -> list:
        """Each trajectory's extra fields in the batch the actor trained on."""
        data = batch_fields(batch, ["extra_fields"])
        return [] if data is None else as_list(data["extra_fields"])

    def _skill_tokens_in_loss(self, batch) -> float:
        """train_manager: the response tokens with mask 1 inside the skill lines (the first
        ``arise_skill_tokens`` tokens of a response that opens with one) of the batch the actor
        trained on; verl's policy loss masks with ``response_mask`` (its ``loss_mask``). 0 means
        the Manager got no gradient this step."""
        data = batch_fields(batch, ["response_mask", "extra_fields"])
        if data is None:
            return 0.0
        masks = data["response_mask"].to_padded_tensor(padding=0)
        total = 0
        for row, extra in enumerate(as_list(data["extra_fields"])):
            record = TrajectoryInfo.from_extra_fields(extra)
            if record.skill_in_response:
                total += int(masks[row, : record.skill_tokens].sum())
        return float(total)

    # ------------------------------------------------------------------ the ARISE step
    def _arise_sample(self, batch) -> None:
        """Per sampled batch (replicas awake): summary rollouts within the step's budget; exact IG."""
        state = self._step_state
        state.batches += 1
        step = self.global_steps
        cfg = self.arise.summary
        if batch is None and not (cfg.enable and cfg.stream):  # a streamed batch is closed even so
            return
        with marked_timer("arise_summary", self.timing_raw, color="purple"):
            started = time.perf_counter()
            # the exact IG takes unaided traces from every group; the summaries need tau+
            ig_groups = self._tau_plus_groups(batch) if batch is not None else []
            groups = [g for g in ig_groups if g["traces"]]
            state.groups_with_tau_plus += len(groups)
            if cfg.enable and cfg.stream:
                new_skills, stats = self._streamed_summaries(step)
            elif cfg.enable and groups:
                rng = np.random.default_rng([self.arise.seed, step, state.batches])
                chosen = choose_summary_groups(groups, self._batch_budget(), cfg.choose, rng)
                new_skills, stats = self._summary_rollouts(chosen, step)
            else:
                new_skills, stats = [], {}
            state.new_skills += new_skills
            state.summary.add(stats)
            ig = self.arise.ig
            if ig.every_n_steps and step % ig.every_n_steps == 0 and ig_groups and not state.ig:
                state.ig, skipped = self._exact_ig(ig_groups, step)
                state.ig_skipped += skipped
            state.summary_s += time.perf_counter() - started

    def _arise_maintain(self) -> None:
        step = self.global_steps
        if self._maintained_step == step:  # never twice in one global step
            return
        self._maintained_step = step
        state, self._step_state = self._step_state, StepState()
        phase = self.arise.phase(step)
        with marked_timer("arise_library", self.timing_raw, color="purple"):
            started = time.perf_counter()
            observations = trainer_resume.drain(self.library_replica, self.trainer_mode)  # whole groups
            sigma_used = self._gate.sigma
            # rescore; window: Phase I
            self._remember_queries(observed_queries(observations), observed_tool_selections(observations))
            self._calibrate_gate(observations)
            used = [(o.trajectory.skill_id, o.reward) for o in observations if o.trajectory.skill_id]
            events = self.library.step(
                used,
                state.new_skills,
                step=step,
                global_rewards=[o.reward for o in observations],
                contrasts=group_contrasts(observations),
            )
            if self._gate_rescores(step):  # the next step's cache is in place: calibrate on it
                self._calibrate_gate_on_queries(step)
            self._publish()
            write_step_log(self.arise_log_dir, step, phase, events, self.library)
            maintenance_s = time.perf_counter() - started
        norm = bool(self.config.algorithm.get("norm_adv_by_std_in_grpo", True))
        self._arise_metrics.update(step_metrics(self.library, phase, observations, events, state, maintenance_s, norm))
        pass_rate = self._arise_metrics["arise/gate_pass_rate"]
        self._arise_metrics.update(self._gate_metrics(phase, sigma_used, observations, pass_rate))

    # the calibrated gate (trainer_gate.GateMixin) restores sigma from beside the restored library
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


def _format_changes(changes: dict[str, tuple[Any, Any]], old: str, new: str) -> str:
    return "; ".join(f"{name}: {a!r} ({old}) -> {b!r} ({new})" for name, (a, b) in changes.items())
