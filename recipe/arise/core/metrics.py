"""Every ``arise/*`` metric, declared once: its name, what it says, and where it comes from.

The trainer refuses to log an ``arise/*`` key declared nowhere here (:func:`check_declared`, in
``ARISEHooks._compute_metrics``), the verdict reads its names through :func:`metric`, and
docs/metrics.md is :func:`markdown`'s output (tests/core/test_metrics.py holds all three). A name
with a ``<placeholder>`` segment declares a family (``arise/env_success/<task_type>``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

__all__ = ["METRICS", "Metric", "UndeclaredMetric", "check_declared", "markdown", "metric", "undeclared"]


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str  # arise/...; a <placeholder> segment stands for any one path segment
    help: str
    source: str  # where it comes from: the trainer hook and the module that computes it


# where each metric is computed (the hook of ARISEHooks, recipe/arise/adapters/trainer_hooks.py, and the module)
MAINT = "on_sample_end: library maintenance, once per global step (trainer_metrics.step_metrics)"
MECH = "on_sample_end: library maintenance (core.groups.mechanism_metrics)"
GATE = "on_sample_end: library maintenance (trainer_gate._gate_metrics)"
STALE = "on_sample_end: every sampled batch of the step (trainer_staleness)"
STEP = "_compute_metrics, every step (trainer.py)"
TOOL = "_compute_metrics, tool runs, ARISE on or off (python_tool.tool_step_metrics)"
ENV = "on_sample_end maintenance (all episodes); ARISE off: _compute_metrics (trainer_metrics.env_step_metrics)"
RESUME = "_load_checkpoint, the first step after a resume (trainer_resume.restore_pending)"
REISSUE = "_reissue_inflight_prompts, the first step after a resume (trainer_resume.reissued)"

_M = Metric
METRICS: tuple[Metric, ...] = (
    # ---- the step's trajectories (one observation each, dropped groups included)
    _M("arise/phase", "the step's phase: 1 (no selection) or 2", MAINT),
    _M(
        "arise/trajectories",
        "training trajectories observed this step (dynamic sampling's dropped ones included)",
        MAINT,
    ),
    _M("arise/queries", "query groups observed this step", MAINT),
    _M("arise/acc", "share of the step's trajectories graded right", MAINT),
    _M("arise/reward_mean", "mean reward R (r_task + r_skill) of the step's trajectories", MAINT),
    _M("arise/skill_use_rate", "share of the step's trajectories whose prompt carried a skill", MAINT),
    _M("arise/control_rate", "share of the Phase II trajectories in the control arm (unaided)", MAINT),
    _M("arise/gate_pass_rate", "share of the scored trajectories whose query passed the confidence gate", MAINT),
    _M("arise/scoring_failures", "trajectories sent unaided because their group's scoring failed", MAINT),
    _M("arise/grader_errors", "trajectories whose grading raised (graded wrong)", MAINT),
    _M("arise/scores_nonfinite", "non-finite skill scores left out of selection", MAINT),
    _M("arise/skill_overlong", "selected skills that did not fit rollout.prompt_length (trajectory unaided)", MAINT),
    _M("arise/prompt_overhead_tokens", "mean tokens the skill line added to a prompt", MAINT),
    # ---- token and time accounting
    _M("arise/prompt_tokens", "prompt tokens of the step's trajectories", MAINT),
    _M("arise/response_tokens", "response tokens of the step's trajectories", MAINT),
    _M("arise/scoring_tokens", "skill-scoring prompt tokens prefilled", MAINT),
    _M("arise/scoring_cached_tokens", "skill-scoring tokens read from vLLM's prefix cache instead", MAINT),
    _M("arise/scoring_rescored", "scoring requests sent again without the prefix cache", MAINT),
    _M("arise/scoring_s", "seconds of skill scoring (summed over query groups)", MAINT),
    _M("arise/summary_prompt_tokens", "summary-rollout prompt tokens", MAINT),
    _M("arise/summary_response_tokens", "summary-rollout reply tokens", MAINT),
    _M("arise/summary_s", "seconds in the Upload channel (summary rollouts, exact IG)", MAINT),
    _M("arise/maintenance_s", "seconds of library maintenance (and the gate's rescoring)", MAINT),
    # ---- Upload (O_{G+1})
    _M("arise/groups_with_tau_plus", "sampled query groups with tau+ non-empty", MAINT),
    _M("arise/summary_attempts", "summary rollouts started (failed and late ones included)", MAINT),
    _M("arise/summary_parsed", "summary replies that parsed as a skill", MAINT),
    _M("arise/summary_failed", "summary requests that errored or timed out", MAINT),
    _M("arise/summary_discarded", "parsed skills over 220 characters after clipping: no skill (App. D.1)", MAINT),
    _M("arise/summary_parse_rate", "summary_parsed / summary_attempts", MAINT),
    _M("arise/summary_fallback_rate", "share of summaries abstracted from the best trace (no valid JSON)", MAINT),
    _M("arise/summary_streamed", "summaries the reward workers streamed during the wave (summary.stream)", MAINT),
    _M("arise/summary_wait_s", "seconds the trainer waited for streamed summaries after the wave", MAINT),
    # ---- the library
    _M("arise/new_skills", "skills ADDed this step", MAINT),
    _M("arise/duplicates", "new skills dropped as duplicates (arise.library.dedupe)", MAINT),
    _M("arise/evicted", "cache skills EVICTed to the reservoir", MAINT),
    _M("arise/loaded", "reservoir skills LOADed into the cache", MAINT),
    _M("arise/deleted", "skills DELETEd (and reservoir overflow)", MAINT),
    _M("arise/observations_orphaned", "observations of skills deleted since their trajectory selected them", MAINT),
    _M("arise/cache_size", "skills in the cache after maintenance", MAINT),
    _M("arise/reservoir_size", "skills in the reservoir after maintenance", MAINT),
    _M("arise/seeds_in_cache", "seed skills in the cache", MAINT),
    _M("arise/utility_mean", "mean utility of the cache skills", MAINT),
    _M("arise/utility_max", "highest utility in the cache", MAINT),
    _M("arise/uplift_mean", "mean causal uplift of the skills that have one", MAINT),
    _M("arise/uplift_skills", "skills with an uplift estimate", MAINT),
    _M("arise/utility_uplift_disagree", "top-half-utility cache skills whose uplift interval is below 0", MAINT),
    _M("arise/ig_skipped", "exact-IG traces whose log-probs did not come back", MAINT),
    _M("arise/ig_clipped", "exact-IG traces clipped to arise.ig.max_logits_mb", MAINT),
    _M("arise/ig_exact_mean", "mean exact IG of the cache skills (every arise.ig.every_n_steps)", MAINT),
    # ---- is the hierarchical reward alive (docs/design.md)
    _M("arise/frac_reward_0", "share of trajectories with R = 0", MECH),
    _M("arise/frac_reward_1", "share of trajectories with R = 1", MECH),
    _M("arise/frac_reward_2", "share of trajectories with R = 2", MECH),
    _M("arise/phase2_groups", "Phase II query groups observed", MECH),
    _M("arise/mixed_group_rate", "share of Phase II groups holding both R = 1 and R = 2", MECH),
    _M("arise/adv_shift", "mean |A(R) - A(r_task)| over Phase II trajectories", MECH),
    _M("arise/adv_gap_2v1", "in mixed groups, mean advantage of R = 2 minus that of R = 1", MECH),
    _M("arise/step_uplift", "success of skill-conditioned minus control-arm trajectories (within groups)", MECH),
    # ---- the calibrated gate
    _M("arise/sigma", "the selection temperature this step's selection used", GATE),
    _M("arise/gate_target", "the gate pass rate sigma is calibrated to (temperature: auto)", GATE),
    _M("arise/calibration_groups", "score vectors in the calibration window", GATE),
    _M("arise/gate_pass_rate_recent", "Phase II pass rate over the last calibration_window queries", GATE),
    _M("arise/gate_recent_queries", "queries in that recent window", GATE),
    # ---- staleness (docs/trainer_modes.md)
    _M("arise/library_staleness/mean", "mean library versions between the trainer's and a trained trajectory's", STALE),
    _M("arise/library_staleness/max", "most library versions a trained trajectory was behind", STALE),
    _M(
        "arise/weight_staleness/mean", "mean policy versions between a trajectory's weights and the trained ones", STALE
    ),
    _M("arise/weight_staleness/max", "most policy versions a trained trajectory was behind", STALE),
    _M("arise/staleness_unknown", "trained trajectories without a library or weight version", STALE),
    # ---- every step, ARISE on or off
    _M("arise/rollout_failures", "training query groups a failed agent-loop session left incomplete", STEP),
    _M("arise/rollout_dropped", "trajectories verl dropped with those groups", STEP),
    _M("arise/val_rollout_failures", "failed query groups of the last validation", STEP),
    _M("arise/refilled_groups", "query groups verl refilled this step (dynamic sampling, failures)", STEP),
    _M("arise/rows_dropped", "training rows filter_overlong_prompts dropped at load", STEP),
    _M("arise/val_rows_dropped", "validation rows filter_overlong_prompts dropped at load", STEP),
    _M("arise/skill_tokens_in_loss", "skill tokens with loss mask 1 in the trained batch (train_manager)", STEP),
    # ---- the python tool
    _M("arise/tool_calls", "mean tool calls per trajectory that reached the tool", TOOL),
    _M("arise/tool_error_rate", "failed tool calls / tool calls", TOOL),
    _M("arise/tool_s", "mean tool seconds per trajectory", TOOL),
    _M("arise/tool_calls_malformed", "mean calls per trajectory that reached no tool (unknown name, bad JSON)", TOOL),
    # ---- text environments (arise_env_agent)
    _M("arise/env_success", "share of episodes won", ENV),
    _M("arise/env_success/<task_type>", "share of episodes of one task type won", ENV),
    _M("arise/env_turns", "mean replies per episode", ENV),
    _M("arise/env_invalid_actions", "mean invalid actions per episode", ENV),
    _M("arise/env_s", "mean seconds per episode", ENV),
    _M("arise/env_wait_s", "mean seconds an episode waited for an environment slot (arise.env.max_live)", ENV),
    _M("arise/env_failed", "episodes whose environment failed", ENV),
    # ---- resume
    _M("arise/restored_observations", "observations not yet drained at the checkpoint, restored", RESUME),
    _M("arise/reissued_groups", "query groups verl re-issued on resume (in flight at the checkpoint)", REISSUE),
    _M("arise/reissued_observations_dropped", "restored observations of those groups, dropped", REISSUE),
)


class UndeclaredMetric(ValueError):
    """An ``arise/*`` key that :data:`METRICS` does not declare."""


def _pattern(name: str) -> re.Pattern:
    return re.compile("/".join("[^/]+" if re.fullmatch(r"<\w+>", s) else re.escape(s) for s in name.split("/")))


_PATTERNS = [_pattern(m.name) for m in METRICS]
_BY_NAME = {m.name: m for m in METRICS}


def undeclared(keys: Iterable[str]) -> list[str]:
    """The ``arise/*`` keys of ``keys`` no declaration matches (other keys are verl's)."""
    return [k for k in keys if k.startswith("arise/") and not any(p.fullmatch(k) for p in _PATTERNS)]


def check_declared(keys: Iterable[str], where: str) -> None:
    """UndeclaredMetric naming every ``arise/*`` key of ``keys`` that :data:`METRICS` lacks."""
    missing = undeclared(keys)
    if missing:
        raise UndeclaredMetric(
            f"{where}: arise/* metric(s) {missing} are declared nowhere: add them to recipe/arise/core/metrics.py"
        )


def metric(name: str) -> str:
    """``name`` when it is a declared ``arise/*`` metric or another tracker key (verl's), a reader's
    guard against a misspelt or removed ``arise/*`` name."""
    if undeclared([name]):
        raise UndeclaredMetric(f"{name!r} is no declared metric (recipe/arise/core/metrics.py)")
    return name


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """docs/metrics.md: every declaration, grouped by where it comes from."""
    lines = [
        "# ARISE metrics",
        "",
        "Generated from `recipe/arise/core/metrics.py` (`markdown()`), the one declaration of every `arise/*` key",
        "the trainer logs to verl's tracker; tests/core/test_metrics.py fails when this page is stale. What each",
        "says about the mechanism: [design.md](design.md#is-the-mechanism-alive-what-to-watch).",
    ]
    sources = list(dict.fromkeys(m.source for m in METRICS))
    for source in sources:
        lines += ["", f"## {source}", "", "| metric | what |", "|---|---|"]
        lines += [f"| `{m.name}` | {_cell(m.help)} |" for m in METRICS if m.source == source]
    return "\n".join(lines) + "\n"
