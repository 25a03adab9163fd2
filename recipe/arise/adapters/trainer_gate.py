"""The calibrated confidence gate of the ARISE trainer (``arise.selection.temperature: auto``).

A mixin of :class:`~recipe.arise.adapters.trainer.ARISEHooks`: sigma from the score vectors of the
last ``calibration_window`` Phase II groups (``calibration=window``) or from the recent training
queries scored against each new cache (``calibration=rescore``), published with the cache and saved
beside the library (``recipe.arise.core.calibration``, docs/design.md). What it reads of the trainer
it is mixed into is declared in :class:`GateHost`; its own state is declared on :class:`GateMixin`
(tests/adapters/test_trainer_interfaces.py checks both).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Protocol

from recipe.arise.adapters.scoring_requests import SCORING_PARAMS
from recipe.arise.adapters.trainer_setup import needs_set_up, set_by
from recipe.arise.core.calibration import GATE_FILE, GateCalibrator
from recipe.arise.core.observation import Observation
from recipe.arise.core.scoring import score_queries
from recipe.arise.core.selection import top_m_candidates
from recipe.arise.core.store import atomic_write

if TYPE_CHECKING:
    from recipe.arise.adapters.scoring_context import ScoringContext
    from recipe.arise.core.arise_config import ARISEConfig
    from recipe.arise.core.library import SkillLibrary

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))


def damaged_checkpoint(path: str, error: BaseException) -> RuntimeError:
    """The error for an unreadable file of the checkpoint being resumed: names it and how to resume
    the previous one (verl's auto resume follows latest_checkpointed_iteration.txt, so moving the
    damaged folder aside alone would start the run from step 0)."""
    folder = os.path.dirname(os.path.dirname(os.path.abspath(path)))  # .../global_step_N
    root = os.path.dirname(folder)
    return RuntimeError(
        f"ARISE: cannot resume: {path} is unreadable ({type(error).__name__}: {error}). The checkpoint "
        f"{folder} is damaged; resume an earlier one: add trainer.resume_mode=resume_path "
        f"trainer.resume_from_path={root}/global_step_<M>, or write M into {root}/latest_checkpointed_iteration.txt "
        "(python -m recipe.arise.tools.preflight <script> names the last intact checkpoint)"
    )


def observed_queries(observations: list[Observation]) -> list[list]:
    """The chat messages of each query group of a step's observations (all generated groups, those
    dynamic sampling dropped included), in the order their first trajectory was recorded. Only
    observations with ``calibration: rescore`` carry them (reward manager)."""
    first: dict[str, list] = {}
    for o in observations:
        if o.messages:
            first.setdefault(str(o.uid), o.messages)
    return list(first.values())


def observed_tool_selections(observations: list[Observation]) -> list[list[str] | None]:
    """Per query of :func:`observed_queries`, in its order: the sample's ``tool_selection`` (the
    tools its prompt rendered, and so its scoring context; None: all the loop's tools)."""
    first: dict[str, list[str] | None] = {}
    for o in observations:
        if o.messages:
            first.setdefault(str(o.uid), o.tool_selection)
    return list(first.values())


def gate_outcomes(observations: list[Observation]) -> list[float]:
    """Per query (uid) of a step, the share of its scored trajectories that passed the gate."""
    passed: dict[str, list[bool]] = {}
    for o in observations:
        if o.scored:
            passed.setdefault(str(o.uid), []).append(bool(o.trajectory.gate_passed))
    return [sum(v) / len(v) for v in passed.values()]


class GateHost(Protocol):
    """What :class:`GateMixin` reads of its host (:class:`~recipe.arise.adapters.trainer.ARISEHooks`),
    who sets each and when."""

    arise: ARISEConfig  # ARISETrainer.__init__, before verl's __init__
    tokenizer: Any  # PPOTrainer.__init__ (the actor's model config)
    global_steps: int  # PPOTrainer: 0, then the resumed step (its _load_checkpoint, before _restore_gate)
    # ARISETrainer._load_checkpoint (None before it, and with arise.enable=false)
    library: SkillLibrary | None

    def _gate_file(self) -> str | None:
        """ARISETrainer: where a restored library's sigma lies (None: nothing restored)."""

    def _generate_all(self, prompts: list[list[int]], params: dict, timeout_s: float) -> list:
        """ARISETrainer: one request per prompt on the rollout servers."""

    def _scoring_context(self, extra_info: Any = None) -> ScoringContext:
        """ARISETrainer: the agent loop's scoring context (selection scores in the same)."""


class GateMixin:
    """The trainer's gate: ``_gate`` (a :class:`GateCalibrator`) and the queries it rescores.

    Its host (:class:`GateHost`) calls :meth:`_init_gate` in its ``__init__`` (a read of the state
    before raises :class:`~recipe.arise.adapters.trainer_setup.SetUpError`), :meth:`_restore_gate`
    once its library is in place, and :meth:`_calibrate_gate_on_queries` only with a library."""

    _gate: GateCalibrator = set_by("GateMixin._init_gate()")
    # the most recent training queries (key: their messages), scored against each new cache
    _gate_queries: collections.OrderedDict[str, list] = set_by("GateMixin._init_gate()")

    def _init_gate(self) -> None:
        sel = self.arise.selection
        self._gate = GateCalibrator(
            delta=sel.gate,
            target=sel.gate_target,
            window=sel.calibration_window,
            initial=sel.initial_temperature,
            fixed=None if sel.auto_temperature else float(sel.temperature),
        )
        self._gate_queries = collections.OrderedDict()

    def _gate_calibrates(self) -> bool:
        return self.arise.selection.calibrates_gate

    def _gate_rescores(self, step: int) -> bool:
        """Whether this step's queries are scored against the cache the next step selects from:
        every step from the last Phase I one with calibration=rescore; with window only the last
        Phase I step, so Phase II starts calibrated."""
        if not self._gate_calibrates() or step < self.arise.phase1_steps:
            return False
        return step == self.arise.phase1_steps or self.arise.selection.calibration == "rescore"

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
        try:
            with open(path) as f:
                state = json.load(f)
            restored = self._gate.restore(state)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
            if self.global_steps > 0:  # resuming a checkpoint
                raise damaged_checkpoint(path, error) from error
            raise ValueError(f"ARISE: {path} (the gate beside arise.library.load_from): unreadable: {error}") from error
        logger.info(f"ARISE: restored the gate from {path}: {restored}")

    def _save_gate(self, folder: str) -> str:
        path = os.path.join(folder, GATE_FILE)
        # atomic: a crash or a full disk mid-save leaves the previous file, never a truncated one
        atomic_write(path, lambda f: f.write(json.dumps(self._gate.state()).encode()))
        return path

    def _calibrate_gate(self, observations: list[Observation]) -> None:
        """Add this step's Phase II groups (one score vector per query group: its trajectories share
        it; control-arm trajectories carry none) to the window and recalibrate."""
        if not self._gate_calibrates() or self.arise.selection.calibration != "window":
            return
        vectors: dict[str, list[float]] = {}
        for o in observations:
            scores = o.trajectory.scores
            if o.trajectory.phase == 2 and len(scores) and o.uid not in vectors:
                vectors[o.uid] = scores
        if vectors:
            self._gate.add(vectors.values())
            self._gate.update()

    def _remember_queries(self, queries: list[list], tool_selections: list | None = None) -> None:
        """Keep the most recent calibration_window distinct training queries (rescored each step):
        those of every generated group (:func:`observed_queries`), not only of the kept batch, each
        with its sample's tool selection (:func:`observed_tool_selections`; None: all tools)."""
        for messages, selection in zip(queries, tool_selections or [None] * len(queries), strict=True):
            # the key holds the tool selection too: it is part of the query's scoring context
            key = json.dumps([messages, selection], sort_keys=True, default=str)
            self._gate_queries.pop(key, None)
            self._gate_queries[key] = messages
        while len(self._gate_queries) > self.arise.selection.calibration_window:
            self._gate_queries.popitem(last=False)

    def _calibrate_gate_on_queries(self, step: int) -> None:
        """Score the last calibration_window training queries against the cache the next step
        selects from, on the rollout servers and with the agent loop's scoring, and calibrate on
        them (with calibration=rescore they replace the window: older vectors saw another cache)."""
        sel = self.arise.selection
        queries = list(self._gate_queries.values())
        cache = list(needs_set_up(self.library, "library", "ARISETrainer._load_checkpoint()").cache)
        if not queries:
            logger.warning(
                f"ARISE: no training queries to calibrate the gate on at step {step} (the observations carry "
                f"no 'messages': is raw_prompt missing from the reward loop's data?); sigma stays {self._gate.sigma:g}"
            )
        if not queries or not cache:
            return
        candidates = top_m_candidates(len(cache), sel.score_top_m, [e.utility for e in cache])
        params = SCORING_PARAMS

        def engine(prompts):  # a failed request gives None rows: that skill's score is NaN
            outputs = self._generate_all(prompts, params, sel.scoring_timeout_s)
            return [None if isinstance(o, BaseException) else o.extra_fields.get("prompt_logprobs") for o in outputs]

        started = time.perf_counter()
        # each query in the agent loop's context, its tools included: one pass per tool selection
        by_tools: dict[str, list[int]] = {}
        for i, key in enumerate(self._gate_queries):
            by_tools.setdefault(json.dumps(json.loads(key)[1]), []).append(i)
        vectors: list = [None] * len(queries)
        for selection, members in by_tools.items():
            tools = json.loads(selection)
            context = self._scoring_context(None if tools is None else {"tool_selection": tools})
            scored = score_queries(
                engine,
                self.tokenizer,
                [queries[i] for i in members],
                [cache[i].doc.to_json() for i in candidates],
                max_skill_tokens=sel.max_skill_tokens,
                score_norm=sel.score_norm,
                train_manager=sel.train_manager,
                prefix=context.prefix,
            )
            for i, vector in zip(members, scored, strict=True):
                vectors[i] = vector
        if sel.calibration == "rescore":
            self._gate.window.clear()
        added = self._gate.add(vectors)
        sigma = self._gate.update()
        logger.info(
            f"ARISE: gate calibrated on {added} queries of step {step} scored against the new cache "
            f"({time.perf_counter() - started:.1f}s): sigma={sigma:.4g}"
        )

    def _gate_metrics(
        self, phase: int, sigma_used: float, observations: list[Observation], gate_pass_rate: float
    ) -> dict[str, float]:
        """arise/sigma: the sigma this step's selection used; with auto the target and the window;
        in Phase II the pass rate over the last calibration_window queries (the rate the target is
        judged on). A fixed sigma that keeps the gate (almost) always shut or open (the step's
        ``gate_pass_rate``, arise/gate_pass_rate) is warned about."""
        m = {"arise/sigma": float(sigma_used)}
        if self._gate_calibrates():
            m["arise/gate_target"] = self._gate.target
            m["arise/calibration_groups"] = float(len(self._gate.window))
        if phase == 2 and self.arise.selection.use_gate and any(o.scored for o in observations):
            m["arise/gate_pass_rate_recent"] = self._gate.observe(gate_outcomes(observations))
            m["arise/gate_recent_queries"] = float(len(self._gate.recent))
            warning = self._gate.watch(gate_pass_rate)
            if warning:
                logger.warning(warning)
        return m
