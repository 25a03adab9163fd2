"""The ARISE trainer's per-step metrics (verl's tracker), its one console line per step, and the
:class:`StepState` it gathers over a global step's sampled batches."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from recipe.arise.adapters.trainer_staleness import StalenessTally
from recipe.arise.core.groups import mechanism_metrics
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import Provenance, utility_uplift_disagreement
from recipe.arise.core.observation import Observation
from recipe.arise.core.skill import SkillDoc


@dataclasses.dataclass
class SummaryCounts:
    """A step's summary rollouts O_{G+1}, as ``core.summary.summary_skills`` counts them."""

    attempts: int = 0  # rollouts started (failed ones and those not back by the deadline included)
    parsed: int = 0  # replies that parsed as a skill
    fallback: int = 0  # replies with no valid JSON skill, abstracted from the best trace (summary.fallback)
    discarded: int = 0  # skills that parsed but stayed over 220 chars (summary.on_overlong): no skill
    failed: int = 0  # requests that errored or timed out: no skill
    prompt_tokens: int = 0  # summary prompt tokens
    response_tokens: int = 0  # summary reply tokens

    def add(self, counts: Mapping[str, int]) -> None:
        """Add one batch's counts; a key this record does not define raises ValueError."""
        for key, value in counts.items():
            if key not in self.__dataclass_fields__:
                raise ValueError(f"summary counts: unknown count {key!r}; known: {list(self.__dataclass_fields__)}")
            setattr(self, key, getattr(self, key) + value)


@dataclasses.dataclass
class StepState:
    """What the trainer gathers over one global step's sampled batches (``parameter_sync_step`` of
    them) for the library's maintenance and the step's metrics; a fresh one each step."""

    new_skills: list[tuple[SkillDoc, Provenance]] = dataclasses.field(default_factory=list)  # for ADD
    summary: SummaryCounts = dataclasses.field(default_factory=SummaryCounts)  # the summary rollouts
    groups_with_tau_plus: int = 0  # sampled query groups with tau+ non-empty
    summary_s: float = 0.0  # seconds in the Upload channel (summary rollouts, exact IG)
    summary_wait_s: float = 0.0  # streaming: the trainer's wait, after the wave, for streamed summaries
    summary_streamed: int = 0  # streamed summaries delivered
    ig: dict[str, float] = dataclasses.field(default_factory=dict)  # exact IG per cache skill id (once a step)
    ig_skipped: int = 0  # exact-IG traces whose log-probs did not come back
    ig_clipped: int = 0  # exact-IG traces clipped to arise.ig.max_logits_mb
    batches: int = 0  # sampled batches so far
    staleness: StalenessTally = dataclasses.field(default_factory=StalenessTally)  # of the trained trajectories


def console_line(step: int, total: int, metrics: dict[str, Any]) -> str:
    """The one line per step the console shows (the full metrics go to verl's tracker)."""
    t = metrics.get("timing_s/step", 0.0)
    tool = ""
    if "arise/tool_calls" in metrics:  # a tool run: calls per trajectory, and those that reached no tool
        tool = (
            f" | tool calls {metrics['arise/tool_calls']:.2f}"
            f" (malformed {metrics.get('arise/tool_calls_malformed', 0.0):.2f})"
        )
    if "arise/env_success" in metrics:  # arise_env_agent's episodes: success, and environments that failed
        tool += f" | env success {metrics['arise/env_success']:.2f} failed {int(metrics['arise/env_failed'])}"
    # query groups a failed agent-loop session left incomplete (recipe.arise.adapters.rollout_failures)
    failed = f" | failed groups {int(metrics.get('arise/rollout_failures', 0))}"
    orphaned = int(metrics.get("arise/observations_orphaned", 0))  # their skill was dropped since selection
    failed += f" | orphaned obs {orphaned}" if orphaned else ""
    if "arise/phase" not in metrics:  # arise.enable=false: plain GRPO through the same trainer
        score = metrics.get("critic/score/mean", 0.0)
        return f"[arise] step {step}/{total} | GRPO | score {score:.3f}{tool}{failed} | {t:.1f}s"
    # a maintenance that drained no observation (resumed, or every group still in flight) has no acc/mean R
    acc, mean_r = (f"{metrics[k]:.3f}" if k in metrics else "-" for k in ("arise/acc", "arise/reward_mean"))
    return (
        f"[arise] step {step}/{total} | phase {int(metrics['arise/phase'])}"
        f" | acc {acc} ({int(metrics['arise/trajectories'])} obs)"
        f" | mean R {mean_r} | skill use {metrics['arise/skill_use_rate']:.2f}"
        f" | gate pass {metrics['arise/gate_pass_rate']:.2f} | R=1/R=2 mixed groups"
        f" {metrics['arise/mixed_group_rate']:.2f} | parsed {int(metrics['arise/summary_parsed'])}"
        f"/{int(metrics['arise/summary_attempts'])} | library {int(metrics['arise/cache_size'])}"
        f"+{int(metrics['arise/reservoir_size'])} (new {int(metrics['arise/new_skills'])}){tool}{failed} | {t:.1f}s"
    )


def env_step_metrics(extras: Sequence[Any]) -> dict[str, float]:
    """``arise_env_agent``'s episodes among the trajectories (their ``extra_fields["env"]``, one dict
    per trajectory): success rate, mean replies, invalid actions and seconds per episode, the
    episodes whose environment failed (a count), and the success rate per task type
    (``arise/env_success/<task_type>``); {} when no trajectory is an episode. With ARISE on the step
    counts every generated episode (the observations); off, the batch the actor trained on."""
    episodes = [e["env"] for e in extras if isinstance(e, Mapping) and isinstance(e.get("env"), Mapping)]
    if not episodes:
        return {}
    m = {
        "arise/env_success": float(np.mean([bool(e["won"]) for e in episodes])),
        "arise/env_turns": float(np.mean([e["turns"] for e in episodes])),
        "arise/env_invalid_actions": float(np.mean([e["invalid_actions"] for e in episodes])),
        "arise/env_s": float(np.mean([e.get("seconds", 0.0) for e in episodes])),
        "arise/env_wait_s": float(np.mean([e.get("wait_s", 0.0) for e in episodes])),
        "arise/env_failed": float(sum(e.get("failed") is not None for e in episodes)),
    }
    by_type: dict[str, list[bool]] = {}
    for e in episodes:
        by_type.setdefault(str(e.get("task_type") or "unknown"), []).append(bool(e["won"]))
    m.update({f"arise/env_success/{t}": float(np.mean(won)) for t, won in sorted(by_type.items())})
    return m


def step_metrics(
    library: SkillLibrary,
    phase: int,
    observations: Sequence[Observation],
    events,
    state: StepState,
    maintenance_s: float,
    norm_by_std: bool,
) -> dict[str, float]:
    """The ``arise/*`` metrics of one global step: its observations (one per training trajectory),
    the library's events and state after maintenance, and the step's summary/IG state."""
    n = len(observations)
    records = [o.trajectory for o in observations]  # what each agent loop recorded
    scored = [o.trajectory for o in observations if o.scored]
    phase2 = [r for r in records if r.phase == 2]
    utilities = [e.utility for e in library.cache]
    uplifts = [e.uplift for e in library.entries() if e.uplift is not None]
    summary = state.summary
    attempts = summary.attempts
    m = {
        "arise/phase": float(phase),
        "arise/trajectories": float(n),
        "arise/skill_use_rate": sum(bool(r.skill_id) for r in records) / n if n else 0.0,
        "arise/control_rate": (sum(bool(r.control) for r in phase2) / len(phase2)) if phase2 else 0.0,
        "arise/gate_pass_rate": (sum(bool(r.gate_passed) for r in scored) / len(scored)) if scored else 0.0,
        "arise/scoring_failures": float(sum(bool(r.scoring_failed) for r in records)),
        "arise/grader_errors": float(sum(o.grader_error is not None for o in observations)),
        "arise/scores_nonfinite": float(sum(int(r.scores_nonfinite) for r in records)),
        "arise/skill_overlong": float(sum(bool(r.skill_overlong) for r in records)),
        "arise/prompt_overhead_tokens": float(np.mean([r.skill_tokens for r in records])) if n else 0.0,
        "arise/scoring_s": float(sum(r.scoring_s for r in records)),
        # token accounting (per step; divide by arise/queries for per-query figures)
        "arise/queries": float(len({o.uid for o in observations})),
        "arise/prompt_tokens": float(sum(o.prompt_tokens for o in observations)),
        "arise/response_tokens": float(sum(o.response_tokens for o in observations)),
        "arise/scoring_tokens": float(sum(r.scoring_tokens for r in records)),  # prefilled
        "arise/scoring_cached_tokens": float(sum(r.scoring_cached_tokens for r in records)),
        "arise/scoring_rescored": float(sum(r.scoring_rescored for r in records)),
        "arise/summary_prompt_tokens": float(summary.prompt_tokens),
        "arise/summary_response_tokens": float(summary.response_tokens),
        "arise/summary_s": float(state.summary_s),
        "arise/summary_wait_s": float(state.summary_wait_s),
        "arise/summary_streamed": float(state.summary_streamed),
        "arise/groups_with_tau_plus": float(state.groups_with_tau_plus),
        "arise/summary_attempts": float(attempts),
        "arise/summary_parsed": float(summary.parsed),
        "arise/summary_failed": float(summary.failed),
        "arise/summary_discarded": float(summary.discarded),
        "arise/summary_parse_rate": summary.parsed / attempts if attempts else 0.0,
        "arise/summary_fallback_rate": summary.fallback / attempts if attempts else 0.0,
        "arise/maintenance_s": float(maintenance_s),
        "arise/new_skills": float(len(events.added)),
        "arise/duplicates": float(len(events.dropped_duplicates)),
        "arise/evicted": float(len(events.evicted)),
        "arise/loaded": float(len(events.loaded)),
        "arise/deleted": float(len(events.deleted) + len(events.overflow)),
        # observations of skills the library dropped since their trajectory selected them (not applied)
        "arise/observations_orphaned": float(len(events.orphaned)),
        "arise/cache_size": float(len(library.cache)),
        "arise/reservoir_size": float(len(library.reservoir)),
        "arise/seeds_in_cache": float(sum(e.origin == "seed" for e in library.cache)),
        "arise/utility_mean": float(np.mean(utilities)) if utilities else 0.0,
        "arise/utility_max": float(np.max(utilities)) if utilities else 0.0,
        "arise/uplift_mean": float(np.mean(uplifts)) if uplifts else 0.0,
        "arise/uplift_skills": float(len(uplifts)),
        "arise/utility_uplift_disagree": float(len(utility_uplift_disagreement(library.cache))),
    }
    if n:  # no observation drained, no mean: a 0 would read as a step that got every answer wrong
        m["arise/reward_mean"] = float(np.mean([o.reward for o in observations]))
        m["arise/acc"] = float(np.mean([o.correct for o in observations]))
    m.update({f"arise/{k}": float(v) for k, v in mechanism_metrics(observations, norm_by_std).items()})
    m.update(state.staleness.metrics())
    # every generated episode (the trained batch lacks the groups dynamic sampling dropped)
    m.update(env_step_metrics([{"env": o.env} for o in observations if o.env is not None]))
    m["arise/ig_skipped"] = float(state.ig_skipped)
    m["arise/ig_clipped"] = float(state.ig_clipped)
    if state.ig:
        m["arise/ig_exact_mean"] = float(np.mean(list(state.ig.values())))
    return m


__all__ = ["StepState", "SummaryCounts", "console_line", "env_step_metrics", "step_metrics"]
