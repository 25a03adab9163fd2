"""The ``arise:`` config section as typed dataclasses (framework-free).

Defaults are the paper's hyperparameter table (App. A.1, Table "ARISE-specific
hyperparameters"); the yaml in ``recipe/arise/config/arise_trainer.yaml`` mirrors them. Every
paper ambiguity is a switch here, explained in ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SelectionConfig:
    # sigma: "auto" (default) = calibrated so the gate passes gate_target_use of the queries
    # (recipe.arise.core.calibration, docs/design.md: the calibrated gate); a number = that fixed sigma
    temperature: float | str = "auto"
    # auto: the gate's target pass rate; None = the paper's skill use at this delta (sensitivity table)
    gate_target_use: float | None = None
    # auto: which score vectors set sigma. "rescore": after each step's library maintenance the last
    # calibration_window training queries are scored against the new cache, the one the next step
    # selects from (one more scoring pass per step at a batch of 64); "window": the score vectors the
    # agent loop computed for the last calibration_window Phase II groups (no extra cost; lags a
    # changing cache)
    calibration: str = "rescore"
    calibration_window: int = 64
    # auto: sigma before the first calibration (the last Phase I step's queries are scored against
    # the cache Phase II starts with in either mode, so this is for runs without Phase I)
    initial_temperature: float = 1.0
    epsilon: float = 0.1  # epsilon-greedy exploration
    gate: float = 0.35  # delta, confidence gate on max_k p_k
    use_gate: bool = True  # ablation (d): False admits every selection
    max_skill_tokens: int = 128  # skill text truncated to this many tokens for scoring
    # s_k = mean (length-normalised, the authors' code) or sum (Eq. 2 as written) of the skill's
    # token log-probs; the paper's sigma and delta only behave as reported with "mean" (docs/design.md).
    # "pmi": the mean minus the skill's mean in a query-free context (how much the query raises the
    # skill, not how predictable its text is); one extra request per cache skill and library version
    score_norm: str = "mean"
    granularity: str = "trajectory"  # "trajectory" (Alg. 1: z_i per trajectory) | "query" (one z per group)
    # control arm: this fraction of each Phase II training group goes unaided, so a group holds
    # skill-conditioned and unaided trajectories (R=2 vs R=1, App. B) and measures causal uplift
    control_share: float = 0.25
    random: bool = False  # ablation (b): uniform random skill instead of policy scoring
    val_epsilon: float = 0.0  # epsilon at evaluation (paper: exploration disabled)
    scoring_timeout_s: float = 600.0  # a group's scoring requests; on timeout the group goes unaided
    # the Manager trained end to end (§3.1): the selected skill opens the assistant turn
    # (chat(query) + "SKILL:{json}\n" + solution), is scored there, and its tokens are policy tokens
    # of the response (mask 1) so GRPO reaches log pi(skill | query). False: the paper's setup, the
    # skill in the user turn and out of the loss (docs/design.md: Training the Manager)
    train_manager: bool = False
    # scoring cost: 0 = score every cache skill (the paper); M > 0 = only the M cache skills of
    # highest library utility are scored and are the query's candidates (docs/performance.md)
    score_top_m: int = 0
    # scoring cost: the query's 10 requests read the query prefix from vLLM's prefix cache
    # (skip_reading_prefix_cache=False; one request first, the rest after it). Same scores: a
    # request whose cache hit reached into the skill tokens is scored again without the cache.
    # Needs rollout.name=vllm and rollout.enable_prefix_caching; otherwise the paper's 10 full
    # prefills (docs/performance.md)
    scoring_prefix_cache: bool = True

    def __post_init__(self):
        if isinstance(self.temperature, str):
            if self.temperature != "auto":
                raise ValueError(
                    f"arise.selection.temperature must be a number > 0 or 'auto', got {self.temperature!r}"
                )
        elif isinstance(self.temperature, bool) or not float(self.temperature) > 0 or self.temperature == float("inf"):
            raise ValueError(f"arise.selection.temperature must be a number > 0 or 'auto', got {self.temperature!r}")
        if not float(self.initial_temperature) > 0 or self.initial_temperature == float("inf"):
            raise ValueError(f"arise.selection.initial_temperature must be > 0, got {self.initial_temperature!r}")
        if self.gate_target_use is not None and not 0.0 <= float(self.gate_target_use) <= 1.0:
            raise ValueError(f"arise.selection.gate_target_use must be in [0, 1] or null, got {self.gate_target_use!r}")
        if self.calibration not in ("rescore", "window"):
            raise ValueError(f"arise.selection.calibration must be 'rescore' or 'window', got {self.calibration!r}")
        if isinstance(self.calibration_window, bool) or int(self.calibration_window) < 1:
            raise ValueError(f"arise.selection.calibration_window must be >= 1, got {self.calibration_window!r}")
        if self.score_norm not in ("mean", "sum", "pmi"):
            raise ValueError(f"arise.selection.score_norm must be 'mean', 'sum' or 'pmi', got {self.score_norm!r}")
        for name in ("epsilon", "gate", "control_share", "val_epsilon"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"arise.selection.{name} must be in [0, 1], got {value}")
        if self.granularity not in ("trajectory", "query"):
            raise ValueError(f"arise.selection.granularity must be 'trajectory' or 'query', got {self.granularity!r}")
        if self.max_skill_tokens < 1:
            raise ValueError("arise.selection.max_skill_tokens must be >= 1")
        if self.scoring_timeout_s <= 0:
            raise ValueError("arise.selection.scoring_timeout_s must be > 0")
        if isinstance(self.score_top_m, bool) or not isinstance(self.score_top_m, int) or self.score_top_m < 0:
            raise ValueError(
                f"arise.selection.score_top_m must be an integer >= 0 (0 = score every cache skill), "
                f"got {self.score_top_m!r}"
            )
        if self.train_manager and self.random:
            raise ValueError(
                "arise.selection.train_manager trains the policy's scoring of the skills; "
                "it cannot be combined with arise.selection.random (ablation b, no scoring)"
            )

    @property
    def auto_temperature(self) -> bool:
        """sigma is calibrated by the trainer (``temperature: auto``)."""
        return self.temperature == "auto"

    @property
    def calibrates_gate(self) -> bool:
        """The trainer calibrates sigma (auto, with the gate on and the policy's own selection)."""
        return self.auto_temperature and self.use_gate and not self.random

    @property
    def rescores_gate(self) -> bool:
        """The trainer calibrates sigma on recent training queries rescored (``calibration: rescore``):
        every trajectory's observation then carries its query (reward manager)."""
        return self.calibrates_gate and self.calibration == "rescore"

    @property
    def gate_target(self) -> float:
        """The gate's target pass rate: ``gate_target_use``, else the paper's skill use at delta."""
        from recipe.arise.core.calibration import paper_target_use

        return float(self.gate_target_use) if self.gate_target_use is not None else paper_target_use(self.gate)


@dataclass
class LibraryConfig:
    cache_capacity: int = 10  # C_c
    reservoir_capacity: int = 100  # C_r
    ema_beta: float = 0.9  # beta
    seed_skills: str | None = None  # JSON file; None = the paper's 5 seeds shipped in recipe/arise/data
    # start from a stored library instead of the seeds: a library.parquet or an exported skills.jsonl
    # (`python -m recipe.arise.tools.inspect_run RUN --export F`); this run's settings apply (docs/design_core.md)
    load_from: str | None = None
    # on resume, restore the checkpoint's library (true); false: build it from load_from or the seeds
    # although a checkpoint is resumed (evaluate a checkpoint's weights with another library)
    from_checkpoint: bool = True
    new_skill_policy: str = "fair_trial"  # "fair_trial" (default) | "literal" (freezes, see docs)
    trial_uses: int = 8
    trial_steps: int = 20
    # seeds are kept (not evicted or deleted) until used this many times, so they reach Phase II;
    # 0 makes them ordinary entries (in Phase I, with every utility 0, they are flushed first)
    seed_trial_uses: int = 8
    # ...and for at most this many Phase II steps: where the manager never picks a seed and
    # epsilon reaches each cache skill rarely (small batches), use counts alone would keep the
    # seeds in the cache for the whole run (docs/learning_effect.md); null = no step limit
    seed_trial_steps: int | None = 20
    rank_by: str = "utility"  # what EVICT/LOAD rank by: "utility" (paper) | "uplift" (measured causal uplift)

    def __post_init__(self):
        if self.rank_by not in ("utility", "uplift"):
            raise ValueError(f"arise.library.rank_by must be 'utility' or 'uplift', got {self.rank_by!r}")
        if self.seed_trial_uses < 0:
            raise ValueError("arise.library.seed_trial_uses must be >= 0")
        if self.seed_trial_steps is not None and self.seed_trial_steps < 0:
            raise ValueError("arise.library.seed_trial_steps must be >= 0 or null")


@dataclass
class SummaryConfig:
    enable: bool = True  # ablation (c): False = no O_{G+1}, the library stays at its seeds
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 192
    max_chars: int = 220  # skill document cap (enforced by recipe.arise.core.skill)
    max_traces: int = 2
    trace_clip_chars: int = 400
    fallback: bool = True  # trace_abstract fallback when the generation does not parse
    timeout_s: float = 600.0  # the step's summary rollouts; on timeout they count as failed
    on_overlong: str = "shrink"  # a valid doc over 220 chars: "shrink" fields to fit | "discard" (App. D.1 literal)
    # summary rollouts per step: -1 = one per group with tau+ (Alg. 1); k > 0 = at most k (App. E's
    # "single sequence" per step is 1). Which groups: "hardest" = lowest success rate first (ties
    # random), "random", "first" (batch order; with streaming: the first groups to complete with
    # tau+). docs/design.md: summary cadence.
    max_per_step: int = 1
    choose: str = "hardest"
    # True: a group's summary starts as soon as its G rewards are in, during the generation wave
    # (recipe.arise.core.stream; needs choose: first). docs/performance.md.
    stream: bool = False

    def __post_init__(self):
        if self.on_overlong not in ("shrink", "discard"):
            raise ValueError(f"arise.summary.on_overlong must be 'shrink' or 'discard', got {self.on_overlong!r}")
        if self.max_per_step == 0 or self.max_per_step < -1:
            raise ValueError(f"arise.summary.max_per_step must be -1 (all groups) or >= 1, got {self.max_per_step}")
        if self.choose not in ("hardest", "random", "first"):
            raise ValueError(f"arise.summary.choose must be 'hardest', 'random' or 'first', got {self.choose!r}")
        if self.stream and self.choose != "first":
            raise ValueError(
                f"arise.summary.stream=true needs arise.summary.choose=first, got {self.choose!r}: a streamed "
                "group is claimed when its G rewards are in, before the other groups' rewards exist"
            )
        if self.max_traces < 1:
            raise ValueError("arise.summary.max_traces must be >= 1")


@dataclass
class RewardConfig:
    skill_bonus: float = 1.0  # r_skill
    binary: bool = False  # ablation (a): binary reward in Phase II too
    timeout_s: float = 5.0  # per-response grading bound


@dataclass
class IGConfig:
    """The paper's exact information gain (App. D.3), a diagnostic measured on the rollout engine."""

    every_n_steps: int = 100  # 0 = never
    max_traces: int = 8  # tau+ traces per measurement (each scored with and without every cache skill)
    max_response_tokens: int = 1024  # each trace is clipped to this many tokens

    def __post_init__(self):
        if self.every_n_steps < 0 or self.max_traces < 1 or self.max_response_tokens < 1:
            raise ValueError("arise.ig: every_n_steps >= 0, max_traces >= 1, max_response_tokens >= 1")


@dataclass
class ValidationConfig:
    active: bool = True  # evaluate with the ARISE pipeline (selection with val_epsilon, gate)


@dataclass
class ARISEConfig:
    enable: bool = True
    phase1_steps: int = 500  # N_w: Phase I = steps 1..N_w, Phase II from N_w + 1
    seed: int = 0
    log_dir: str | None = None  # per-step library log; None = <trainer.default_local_dir>/arise
    # how often the trainer looks for finished rollouts (verl's ReplayBuffer.poll_interval, 2.0 s
    # there): a generation phase ends on this grid; applies with enable=false too (the baseline)
    replay_poll_s: float = 0.2
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    library: LibraryConfig = field(default_factory=LibraryConfig)
    summary: SummaryConfig = field(default_factory=SummaryConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    ig: IGConfig = field(default_factory=IGConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)

    def __post_init__(self):
        if not float(self.replay_poll_s) > 0:
            raise ValueError(f"arise.replay_poll_s must be > 0 (seconds), got {self.replay_poll_s}")

    def phase(self, global_step: int) -> int:
        return 1 if int(global_step) <= self.phase1_steps else 2

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ARISEConfig:
        """Build from a plain mapping (e.g. ``OmegaConf.to_container(cfg.arise)``); unknown keys fail."""
        return _build(cls, dict(data or {}), "arise")

    @classmethod
    def from_trainer_config(cls, config: Any) -> ARISEConfig:
        """From the whole trainer config (DictConfig or dict); a missing section means ARISE disabled."""
        section = config.get("arise", None) if hasattr(config, "get") else None
        if section is None:
            return cls(enable=False)
        try:
            from omegaconf import OmegaConf

            if OmegaConf.is_config(section):
                section = OmegaConf.to_container(section, resolve=True)
        except ImportError:  # pragma: no cover - omegaconf ships with verl
            pass
        return cls.from_dict(section)


def _build(cls, data: dict, path: str):
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown key(s) in {path}: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    kwargs = {}
    for name, value in data.items():
        default = known[name].default_factory if known[name].default_factory is not dataclasses.MISSING else None
        if default is not None and dataclasses.is_dataclass(default):
            kwargs[name] = _build(default, dict(value or {}), f"{path}.{name}")
        else:
            kwargs[name] = value
    return cls(**kwargs)
