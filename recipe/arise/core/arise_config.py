"""The ``arise:`` config section as typed dataclasses (framework-free).

Defaults are the paper's hyperparameter table (App. A.1, Table "ARISE-specific
hyperparameters"). These dataclasses are the one source of truth: each key carries one line of help
and its group (:data:`GROUPS`), ``docs/config.md`` is generated from them
(``python -m recipe.arise.tools.config_reference``), and ``tests/core/test_config_reference.py``
checks that the yaml in ``recipe/arise/config/arise_trainer.yaml`` holds exactly these keys and
defaults. Every paper ambiguity is a switch here, explained in ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .env_config import EnvConfig
from .library import SkillLibrary
from .skill import MAX_DOC_CHARS

# the keys' groups in docs/config.md: the paper's hyperparameters (App. A.1), its four ablation
# switches, and everything else
GROUPS = ("paper", "ablation", "advanced")


def _key(default: Any, help: str, group: str = "advanced") -> Any:
    """A config key: its default, one line of help and its group (docs/config.md is generated from
    these by ``python -m recipe.arise.tools.config_reference``; the yaml is checked against them)."""
    return field(default=default, metadata={"help": help, "group": group})


def _section(factory: Any, help: str) -> Any:
    return field(default_factory=factory, metadata={"help": help, "group": "advanced"})


@dataclass
class SelectionConfig:
    # sigma: "auto" (default) = calibrated so the gate passes gate_target_use of the queries
    # (recipe.arise.core.calibration, docs/design.md: the calibrated gate); a number = that fixed sigma
    temperature: float | str = _key(
        "auto",
        "sigma of softmax(s_k / sigma): auto = calibrated to the gate's target pass rate; a number = fixed (paper 1)",
        "paper",
    )
    # auto: the gate's target pass rate; None = the paper's skill use at this delta (sensitivity table)
    gate_target_use: float | None = _key(
        None, "auto sigma: the gate pass rate to hit; null = the paper's skill use at delta (73% at 0.35)"
    )
    # auto: which score vectors set sigma. "rescore": each step the last calibration_window training
    # queries are scored against the new cache the next step selects from (one more scoring pass per
    # step); "window": the agent loop's vectors of the last Phase II groups (no cost; lags the cache)
    calibration: str = _key(
        "rescore",
        "auto sigma from: rescore = recent queries scored on the next cache | window = recent score vectors (lags)",
    )
    calibration_window: int = _key(
        64, "auto sigma: the last this-many training queries (rescore) or Phase II groups (window)"
    )
    # auto: sigma before the first calibration (the last Phase I step's queries are scored against
    # the cache Phase II starts with in either mode, so this is for runs without Phase I)
    initial_temperature: float = _key(1.0, "auto sigma: sigma before the first calibration (runs without Phase I)")
    epsilon: float = _key(
        0.1, "epsilon: share of selections that take a uniform random cache skill (epsilon-greedy)", "paper"
    )
    gate: float = _key(
        0.35, "delta: a selection is injected only when max_k p_k >= delta (the confidence gate)", "paper"
    )
    use_gate: bool = _key(True, "ablation (d) no_gate: false admits every selection", "ablation")
    max_skill_tokens: int = _key(128, "a skill's text is truncated to this many tokens for scoring", "paper")
    # sigma and delta behave as the paper reports only with "mean" (docs/design.md); pmi: +1 request per skill
    score_norm: str = _key(
        "mean",
        "s_k from the skill's token log-probs: mean (authors' code) | sum (Eq. 2) | pmi (mean minus query-free mean)",
    )
    granularity: str = _key("trajectory", "trajectory = one selection per trajectory (Alg. 1) | query = one per group")
    control_share: float = _key(
        0.25, "share of each Phase II group left unaided (control arm: R=2 vs R=1 in one group, causal uplift)"
    )
    random: bool = _key(
        False, "ablation (b) random_selection: a uniform random cache skill instead of the policy's scoring", "ablation"
    )
    val_epsilon: float = _key(0.0, "epsilon at evaluation (paper: exploration disabled)")
    scoring_timeout_s: float = _key(
        600.0, "a group's scoring requests (s); on error or timeout the group goes unaided (counted)"
    )
    # the Manager trained end to end (§3.1): the selected skill opens the assistant turn
    # (chat(query) + "SKILL:{json}\n" + solution), is scored there, and its tokens are policy tokens
    # of the response (mask 1) so GRPO reaches log pi(skill | query). False: the paper's setup, the
    # skill in the user turn and out of the loss (docs/design.md: Training the Manager)
    train_manager: bool = _key(
        False,
        "true: the skill opens the assistant turn, is scored there and trained (mask 1); false: the paper's setup",
    )
    # scoring cost: 0 = score every cache skill (the paper); M > 0 = only the M cache skills of
    # highest library utility are scored and are the query's candidates (docs/performance.md)
    score_top_m: int = _key(
        0, "0 = score every cache skill (paper); M > 0 = only the M of highest utility are scored and candidates"
    )
    # scoring cost: the query's requests read the query prefix from vLLM's prefix cache (one first, the
    # rest after it); a hit reaching into the skill tokens is scored again without the cache. Needs
    # rollout.name=vllm and enable_prefix_caching; else the paper's full prefills (docs/performance.md)
    scoring_prefix_cache: bool = _key(
        True,
        "scoring requests read the query prefix from vLLM's prefix cache (same scores; needs enable_prefix_caching)",
    )

    def __post_init__(self):
        _check_types(self)
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

    def posts_queries(self, phase: int) -> bool:
        """Whether a trajectory's observation carries its query (reward manager): with rescore always;
        with window in Phase I, whose last step scores the recent queries against the cache Phase II
        starts with (so step N_w + 1 is calibrated; its own observations then carry score vectors)."""
        return self.calibrates_gate and (self.calibration == "rescore" or phase != 2)

    @property
    def gate_target(self) -> float:
        """The gate's target pass rate: ``gate_target_use``, else the paper's skill use at delta."""
        from recipe.arise.core.calibration import paper_target_use

        return float(self.gate_target_use) if self.gate_target_use is not None else paper_target_use(self.gate)


@dataclass
class LibraryConfig:
    cache_capacity: int = _key(10, "C_c: skills in the cache, the ones scored and selected", "paper")
    reservoir_capacity: int = _key(100, "C_r: skills in the reservoir (evicted, reloadable)", "paper")
    ema_beta: float = _key(0.9, "beta: the utility EMA coefficient", "paper")
    seed_skills: str | None = _key(
        None, "JSON file of seed skills; null = the paper's 5 seeds (recipe/arise/data/seed_skills.json)", "paper"
    )
    # start from a stored library instead of the seeds: a library.parquet or an exported skills.jsonl
    # (`python -m recipe.arise.tools.inspect_run RUN --export F`); this run's settings apply (docs/design_core.md)
    load_from: str | None = _key(None, "a library.parquet or exported skills.jsonl to start from instead of the seeds")
    # false: evaluate a checkpoint's weights with another library
    from_checkpoint: bool = _key(
        True, "on resume, restore the checkpoint's library; false: build it from load_from or the seeds"
    )
    new_skill_policy: str = _key(
        "fair_trial",
        "new skills: fair_trial = mean cache utility, protected for a trial | literal = utility 0 (freezes)",
    )
    trial_uses: int = _key(8, "fair_trial: a new skill is protected until used this many times...")
    trial_steps: int = _key(20, "...or for this many steps")
    # seeds are kept (not evicted or deleted) until used this many times, so they reach Phase II;
    # 0 makes them ordinary entries (in Phase I, with every utility 0, they are flushed first)
    seed_trial_uses: int = _key(
        8, "seeds are kept until used this many times (so they reach Phase II); 0 = ordinary entries"
    )
    # ...and for at most this many Phase II steps (use counts alone can keep never-picked seeds in the
    # cache for the whole run, docs/learning_effect.md); null = no step limit
    seed_trial_steps: int | None = _key(20, "...or for at most this many Phase II steps; null = no step limit")
    rank_by: str = _key("utility", "what EVICT/LOAD rank by: utility (paper) | uplift (measured causal uplift)")
    dedupe: bool = _key(True, "ADD drops a new skill whose name and key insight match an entry's (not in the paper)")

    def __post_init__(self):
        _check_types(self)
        if self.cache_capacity < 1:
            raise ValueError(f"arise.library.cache_capacity must be >= 1, got {self.cache_capacity}")
        for name in ("reservoir_capacity", "trial_uses", "trial_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"arise.library.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.ema_beta <= 1.0:
            raise ValueError(f"arise.library.ema_beta must be in [0, 1], got {self.ema_beta}")
        if self.rank_by not in ("utility", "uplift"):
            raise ValueError(f"arise.library.rank_by must be 'utility' or 'uplift', got {self.rank_by!r}")
        if self.seed_trial_uses < 0:
            raise ValueError("arise.library.seed_trial_uses must be >= 0")
        if self.seed_trial_steps is not None and self.seed_trial_steps < 0:
            raise ValueError("arise.library.seed_trial_steps must be >= 0 or null")


@dataclass
class SummaryConfig:
    enable: bool = _key(
        True, "ablation (c) no_summary: false = no summary rollout O_{G+1}, the library stays at its seeds", "ablation"
    )
    temperature: float = _key(0.7, "sampling temperature of the summary rollout (0: greedy)", "paper")
    top_p: float = _key(0.95, "top-p of the summary rollout", "paper")
    max_tokens: int = _key(192, "max new tokens of the summary rollout", "paper")
    max_chars: int = _key(MAX_DOC_CHARS, "a skill document's length cap in characters (fixed)", "paper")
    max_traces: int = _key(2, "tau+ traces shown in the summary prompt")
    trace_clip_chars: int = _key(400, "each trace clipped to this many characters in the summary prompt")
    # multi-turn (tool) traces, as transcripts (recipe.arise.core.transcript): each tool result is
    # clipped to tool_result_chars, the whole transcript to transcript_chars (prose and code parts
    # to trace_clip_chars each). docs/design.md: multi-turn summary prompt.
    tool_result_chars: int = _key(200, "multi-turn (tool) traces: each tool result clipped to this many characters")
    transcript_chars: int = _key(1600, "multi-turn (tool) traces: the whole transcript clipped to this many characters")
    fallback: bool = _key(True, "a generation that does not parse falls back to an abstract of the trace")
    timeout_s: float = _key(600.0, "the step's summary rollouts (s); on error or timeout a summary counts as failed")
    on_overlong: str = _key(
        "shrink",
        "a parsed skill over 220 chars: shrink it to fit, else discard | discard (App. D.1); never the fallback",
    )
    # summary rollouts per step and which groups (choose "first": with streaming, the first groups to
    # complete with tau+); docs/design.md: summary cadence.
    max_per_step: int = _key(
        1,
        "summary rollouts per step: at most k (1 = App. E's single sequence); -1 = every group with tau+ (Alg. 1)",
    )
    choose: str = _key(
        "hardest", "which groups when capped: hardest (lowest success rate) | random | first (batch order)"
    )
    # True: a group's summary starts as soon as its G rewards are in, during the generation wave
    # (recipe.arise.core.stream; needs choose: first). docs/performance.md.
    stream: bool = _key(False, "true: a group's summary starts as soon as its G rewards are in (needs choose: first)")

    def __post_init__(self):
        _check_types(self)
        for name in ("max_tokens", "trace_clip_chars", "timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"arise.summary.{name} must be > 0, got {getattr(self, name)!r}")
        if self.max_chars != MAX_DOC_CHARS:  # another value would be silently ignored: refused
            raise ValueError(
                f"arise.summary.max_chars is fixed at {MAX_DOC_CHARS} (the paper's cap, which "
                f"recipe.arise.core.skill holds every skill to), got {self.max_chars!r}"
            )
        if not self.temperature >= 0:  # 0: greedy
            raise ValueError(f"arise.summary.temperature must be >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"arise.summary.top_p must be in (0, 1], got {self.top_p!r}")
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
        for key in ("tool_result_chars", "transcript_chars"):
            if getattr(self, key) < 1:
                raise ValueError(f"arise.summary.{key} must be >= 1, got {getattr(self, key)}")


@dataclass
class RewardConfig:
    skill_bonus: float = _key(1.0, "r_skill: added to a correct skill-conditioned answer in Phase II (R = 2)", "paper")
    binary: bool = _key(False, "ablation (a) binary_reward: the 0/1 reward in Phase II too", "ablation")
    timeout_s: float = _key(5.0, "per-response grading bound (s)")

    def __post_init__(self):
        _check_types(self)
        if not math.isfinite(self.skill_bonus):
            raise ValueError(f"arise.reward.skill_bonus must be a finite number, got {self.skill_bonus!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"arise.reward.timeout_s must be > 0, got {self.timeout_s!r}")


@dataclass
class IGConfig:
    """The paper's exact information gain (App. D.3), a diagnostic measured on the rollout engine."""

    every_n_steps: int = _key(100, "measure every this many steps; 0 = never")
    max_traces: int = _key(8, "traces per measurement, one per query group (each scored with and without every skill)")
    max_response_tokens: int = _key(0, "each trace is clipped to this many tokens; 0 = the whole response")

    def __post_init__(self):
        _check_types(self)
        if self.every_n_steps < 0 or self.max_traces < 1 or self.max_response_tokens < 0:
            raise ValueError("arise.ig: every_n_steps >= 0, max_traces >= 1, max_response_tokens >= 0")


@dataclass
class ValidationConfig:
    active: bool = _key(True, "evaluate with the ARISE pipeline (selection with val_epsilon, the gate)")

    def __post_init__(self):
        _check_types(self)


@dataclass
class ARISEConfig:
    enable: bool = _key(True, "ARISE on; false: plain GRPO through the same trainer (the baselines)", "paper")
    phase1_steps: int = _key(
        500, "N_w: Phase I (binary reward, summaries fill the library) is steps 1..N_w, Phase II from N_w + 1", "paper"
    )
    seed: int = _key(0, "seed of ARISE's own draws (epsilon-greedy, random selection, control arm, summary choice)")
    log_dir: str | None = _key(None, "per-step library log folder; null: <trainer.default_local_dir>/arise")
    replay_poll_s: float = _key(
        0.2, "how often (s) the trainer looks for finished rollouts (verl's ReplayBuffer: 2.0); also with enable: false"
    )
    max_failed_group_share: float = _key(
        0.1, "stop the run when more than this share of a step's query groups failed in the agent loop; 1 = never"
    )
    # dynamic sampling refills dropped groups; groups that all get one reward would refill for ever
    max_refill_batches: int = _key(16, "stop after this many batches of refilled groups for one batch; 0 = never")
    selection: SelectionConfig = _section(SelectionConfig, "Download: scoring, selection, the confidence gate")
    library: LibraryConfig = _section(LibraryConfig, "the two-tier skill library: cache and reservoir")
    summary: SummaryConfig = _section(SummaryConfig, "Upload: the summary rollout O_{G+1}")
    reward: RewardConfig = _section(RewardConfig, "the hierarchical reward 0 / 1 / 2")
    ig: IGConfig = _section(IGConfig, "exact information gain (App. D.3), a diagnostic")
    validation: ValidationConfig = _section(ValidationConfig, "evaluation with ARISE active")
    env: EnvConfig = _section(EnvConfig, "arise_env_agent's episodes: time limits, the summary's domain")

    def __post_init__(self):
        _check_types(self)
        if not self.replay_poll_s > 0:
            raise ValueError(f"arise.replay_poll_s must be > 0 (seconds), got {self.replay_poll_s}")
        if not 0.0 <= self.max_failed_group_share <= 1.0:
            raise ValueError(f"arise.max_failed_group_share must be in [0, 1], got {self.max_failed_group_share}")
        for name in ("phase1_steps", "max_refill_batches"):
            if getattr(self, name) < 0:
                raise ValueError(f"arise.{name} must be >= 0, got {getattr(self, name)}")
        # the library's own validation now, so a value it refuses fails at preflight / start-up,
        # not when the trainer first builds the library (after the workers are up)
        try:
            SkillLibrary(**self.library_settings())
        except ValueError as error:
            raise ValueError(f"arise.library: {error}") from error

    def library_settings(self) -> dict[str, Any]:
        """``arise.library.*`` as :class:`SkillLibrary` keywords (the trainer's ``_library_settings``)."""
        lib = self.library
        return {
            "cache_capacity": lib.cache_capacity,
            "reservoir_capacity": lib.reservoir_capacity,
            "ema_beta": lib.ema_beta,
            "new_skill_policy": lib.new_skill_policy,
            "trial_uses": lib.trial_uses,
            "trial_steps": lib.trial_steps,
            "max_protected": None,
            "seed_trial_uses": lib.seed_trial_uses,
            "seed_trial_steps": lib.seed_trial_steps,
            "selection_start_step": self.phase1_steps + 1,
            "rank_by": lib.rank_by,
            "dedupe": lib.dedupe,
        }

    def phase(self, global_step: int) -> int:
        return 1 if int(global_step) <= self.phase1_steps else 2

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ARISEConfig:
        """Build from a plain mapping (e.g. ``OmegaConf.to_container(cfg.arise)``); unknown keys fail."""
        return _build(cls, dict(data or {}), "arise")

    @classmethod
    def from_trainer_config(cls, config: Any, required: bool = False) -> ARISEConfig:
        """From the whole trainer config (DictConfig or dict); a missing section means ARISE disabled,
        unless ``required`` (the ARISE trainer: a config not composed from arise_trainer.yaml)."""
        section = config.get("arise", None) if hasattr(config, "get") else None
        if section is None:
            if required:
                trainer = config.get("trainer", None) if hasattr(config, "get") else None
                name = trainer.get("experiment_name", None) if hasattr(trainer, "get") else None
                raise ValueError(
                    f"the trainer config{f' of experiment {name!r}' if name else ''} has no 'arise:' section; "
                    "the ARISE trainer needs one (compose recipe/arise/config/arise_trainer.yaml, the entry point "
                    "recipe.arise.adapters.main_arise; arise.enable=false for a baseline)"
                )
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
            if value is not None and not isinstance(value, Mapping):
                raise ValueError(f"{path}.{name} must be a section (a mapping), got {value!r}")
            kwargs[name] = _build(default, dict(value or {}), f"{path}.{name}")
        else:
            kwargs[name] = value
    return cls(**kwargs)


# each section's key prefix, for the errors of _check_types
_PATHS = {
    ARISEConfig: "arise",
    SelectionConfig: "arise.selection",
    LibraryConfig: "arise.library",
    SummaryConfig: "arise.summary",
    RewardConfig: "arise.reward",
    IGConfig: "arise.ig",
    ValidationConfig: "arise.validation",
}
_KIND_NAMES = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string", "None": "null"}


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "None":
        return value is None
    return type(value).__name__ == kind  # a nested section


def _check_types(obj: Any) -> None:
    """Every field holds its annotated type. Why: hydra hands ``arise.enable=maybe`` over as the
    string 'maybe', which is truthy, and ``cache_capacity=1.5`` or ``use_gate=1`` would pass a range
    check; each would run quietly with a value nobody meant."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        kinds = [k.strip() for k in str(f.type).split("|")]
        if not any(_is_kind(value, k) for k in kinds):
            expected = " or ".join(_KIND_NAMES.get(k, f"a section ({k})") for k in kinds)
            raise ValueError(f"{_PATHS[type(obj)]}.{f.name} must be {expected}, got {value!r} ({type(value).__name__})")


class ConfigKey(NamedTuple):
    """One ``arise.*`` key as docs/config.md lists it."""

    key: str  # dotted, e.g. "arise.selection.gate"
    default: Any
    type: str  # e.g. "float or str"
    group: str  # one of GROUPS
    help: str


def config_keys(cls: type = None, prefix: str = "arise") -> list[ConfigKey]:
    """Every leaf key of the ``arise:`` section (sections recursed), in declaration order."""
    cls = cls or ARISEConfig
    out = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}"
        if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            out.extend(config_keys(f.default_factory, key))
            continue
        kinds = [k.strip() for k in str(f.type).split("|")]
        type_text = " or ".join("null" if k == "None" else k for k in kinds)
        out.append(ConfigKey(key, f.default, type_text, f.metadata.get("group", ""), f.metadata.get("help", "")))
    return out


def default_section(cls: type = None) -> dict[str, Any]:
    """The ``arise:`` section's defaults as a nested mapping (what the yaml must hold)."""
    obj = (cls or ARISEConfig)()
    return dataclasses.asdict(obj)
