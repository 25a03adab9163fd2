"""The ARISE trainer's per-step metrics (verl's tracker) and its one console line per step."""

from __future__ import annotations

from typing import Any

import numpy as np

from recipe.arise.core.groups import mechanism_metrics
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import utility_uplift_disagreement


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


def step_metrics(
    library: SkillLibrary, phase, observations, events, state, maintenance_s, norm_by_std
) -> dict[str, float]:
    """The ``arise/*`` metrics of one global step: its observations (one per training trajectory),
    the library's events and state after maintenance, and the step's summary/IG state."""
    n = len(observations)
    scored = [o for o in observations if o["scored"]]
    phase2 = [o for o in observations if o.get("phase") == 2]
    utilities = [e.utility for e in library.cache]
    uplifts = [e.uplift for e in library.entries() if e.uplift is not None]
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
        "arise/cache_size": float(len(library.cache)),
        "arise/reservoir_size": float(len(library.reservoir)),
        "arise/seeds_in_cache": float(sum(e.origin == "seed" for e in library.cache)),
        "arise/utility_mean": float(np.mean(utilities)) if utilities else 0.0,
        "arise/utility_max": float(np.max(utilities)) if utilities else 0.0,
        "arise/uplift_mean": float(np.mean(uplifts)) if uplifts else 0.0,
        "arise/uplift_skills": float(len(uplifts)),
        "arise/utility_uplift_disagree": float(len(utility_uplift_disagreement(library.cache))),
    }
    m.update({f"arise/{k}": float(v) for k, v in mechanism_metrics(observations, norm_by_std).items()})
    if state["ig"]:
        m["arise/ig_exact_mean"] = float(np.mean(list(state["ig"].values())))
    return m


__all__ = ["console_line", "step_metrics"]
