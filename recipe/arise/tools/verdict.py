"""Is ARISE alive in this run, or silently plain GRPO? A verdict from verl's metrics file(s).

    python -m recipe.arise.tools.verdict [--expect arise|grpo] [--scale auto|tiny|gpu] [--launch-only]
        [--config RUN_CONFIG.yaml] RUN_DIR | METRICS.jsonl [MORE.jsonl ...]

``run_scripts/gpu_check.sh`` prints it after ~10 steps on the user's GPUs, ``run_scripts/
cpu_smoke_arise.sh`` after the tiny CPU run. One line per check: metric, value, threshold, status
(OK / WARN / FAIL, or INFO where the scale cannot judge it) and what to do. The checks are the ways
ARISE can degrade to GRPO without an error: ARISE logs nothing (the run was plain GRPO) or does
nothing, the skill scoring fails, no skill is ever injected, the confidence gate rejects everything
(or, calibrated, misses its target pass rate), the summaries never parse (the library does not
grow), no Phase II group mixes R=1 and R=2 (the hierarchical reward then gives the binary reward's
gradient), and rollout and actor disagree on the log-probs (the update is off-policy); plus ARISE's
share of the step time.

``--expect arise`` (the default): metrics without any ``arise/*`` key FAIL (the run was plain GRPO).
``--expect grpo`` (a baseline, ``arise.enable=false``): no ``arise/*`` key is the expected outcome,
"ARISE was off in this run (plain GRPO): nothing to judge"; ``arise/*`` keys FAIL. Exit status: 0 OK
or WARN (or ARISE off as expected), 1 FAIL, 2 the metrics could not be read (no such file or
folder, no metrics file in the folder, no parseable step) or ``--scale auto`` found no config.

Scales: ``gpu`` holds the paper's regime to the paper's numbers (skill use 42-89 %, summaries
parsed > 85 %); ``tiny`` (the CPU smoke run: a 0.4 M-parameter model, 6 steps) fails only what no
healthy tiny run shows (no skill used in >= 3 Phase II steps, scoring failing) and marks the rest
INFO. ``auto`` (the default): from the run's config, as the launches pass it (``trainer.device=cpu``:
tiny, else gpu), never from the metrics; no readable config is exit status 2 with what was looked
for (``--config`` or ``--scale`` then). Inputs: a run folder (its ``metrics.jsonl``,
:func:`recipe.arise.tools.report.find_metrics`) or metrics files, each one with the earlier
launches' parts (``metrics.launchN.jsonl``, :func:`recipe.arise.tools.report.metrics_launches`)
unless ``--launch-only``; later files' steps replace earlier ones. The run's config (the newest of
``hydra/.hydra/config.yaml``, the checkpoints' ``global_step_N/arise/config.yaml`` and the
preflight's ``run_config.yaml``, in the run folder or the metrics file's folder, or ``--config``)
says whether ARISE was on and the run's scale (:mod:`recipe.arise.tools.verdict_inputs`).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from recipe.arise.core.metrics import metric
from recipe.arise.tools.verdict_inputs import (  # scale_of, RUN_KEYS: re-exported
    RUN_KEYS,  # noqa: F401
    RunConfig,
    VerdictInputError,
    config_folder,
    find_config,
    is_run_key,
    load,
    read_config,
    scale_of,
)

OK, WARN, FAIL, INFO, OFF = "OK", "WARN", "FAIL", "INFO", "OFF"  # OFF: ARISE off, as --expect grpo said
EXIT_OK, EXIT_FAIL, EXIT_UNREADABLE = 0, 1, 2
MIN_PHASE2_STEPS = 3  # fewer Phase II steps say too little about rates to fail a run on them
GATE_TOLERANCE = 0.15  # the calibrated gate's Phase II pass rate vs its target (docs/design.md)
# what ARISE does in a step: any of them > 0 in some step is ARISE activity
ACTIVITY_KEYS = tuple(
    map(
        metric,  # the names come from the declaration (recipe/arise/core/metrics.py)
        (
            "arise/summary_attempts",
            "arise/new_skills",
            "arise/scoring_tokens",
            "arise/gate_pass_rate",
            "arise/skill_use_rate",
        ),
    )
)
OFF_SENTENCE = "ARISE was off in this run (plain GRPO): nothing to judge"


@dataclass
class Check:
    metric: str
    value: str
    threshold: str
    status: str
    todo: str = ""
    headline: str = ""  # the verdict's last line when this check decides it

    def line(self) -> str:
        todo = f"  -> {self.todo}" if self.todo and self.status != OK else ""
        return f"[verdict] {self.status:<4} {self.metric:<38} {self.value:<18} ({self.threshold}){todo}"


def _sum(rows, key) -> float:
    key = metric(key)  # every key the checks read is a declared one
    return float(sum(r.get(key, 0.0) for r in rows))


def _mean(rows, key) -> float | None:
    key = metric(key)
    vals = [r[key] for r in rows if key in r and math.isfinite(r[key])]
    return sum(vals) / len(vals) if vals else None


def _weighted(rows, key, weight="arise/trajectories") -> float | None:
    total, key = _sum(rows, weight), metric(key)
    if not total:
        return None
    return sum(r.get(key, 0.0) * r.get(weight, 0.0) for r in rows) / total


def gate_target_check(p2: list[dict[str, float]], target: float) -> Check:
    """The Phase II gate pass rate, pooled over every scored trajectory, against the calibration's
    target. OK within GATE_TOLERANCE, or within 3 binomial s.d. of the target for the number of
    Phase II queries (a 16-query tiny run cannot hold +-0.15: its s.d. is 0.11 at 0.73)."""
    scored = [r.get("arise/trajectories", 0.0) * (1.0 - r.get("arise/control_rate", 0.0)) for r in p2]
    total = sum(scored)
    rate = (
        sum(r.get("arise/gate_pass_rate", 0.0) * w for r, w in zip(p2, scored, strict=True)) / total if total else 0.0
    )
    queries = _sum(p2, "arise/queries")
    noise = 3.0 * math.sqrt(target * (1.0 - target) / queries) if queries else math.inf
    tolerance = max(GATE_TOLERANCE, noise)
    status = OK if abs(rate - target) <= tolerance else WARN
    return Check(
        "arise/gate_target (Phase II pass rate)",
        f"{rate:.2f} vs {target:.2f} ({queries:.0f} queries)",
        f"OK within +-{tolerance:.2f} (+-{GATE_TOLERANCE:.2f}, or 3 s.d. at this many queries)",
        status,
        "the calibrated sigma misses its target out of sample: the score vectors move faster than the window "
        "(arise.selection.calibration=rescore, calibration_window; arise/sigma, arise/gate_pass_rate_recent)",
    )


def expectation_checks(rows: list[dict[str, float]], expect: str, config: RunConfig | None) -> list[Check]:
    """Whether ARISE ran as expected; the run's only check when it was off or ran unexpectedly."""
    arise_steps = sum(1 for r in rows if any(k.startswith("arise/") and not is_run_key(k) for k in r))
    configured = f" (arise.enable={str(config.arise_enable).lower()} in {config.path})" if config else ""
    if expect == "grpo":
        if not arise_steps:
            return [Check("arise/*", f"absent in {len(rows)} steps", "plain GRPO expected (--expect grpo)", OFF)]
        return [
            Check(
                "arise/*",
                f"logged in {arise_steps} of {len(rows)} steps",
                "plain GRPO expected (--expect grpo): none",
                FAIL,
                f"ARISE ran in a run meant as plain GRPO{configured}: set arise.enable=false (run_scripts/"
                "baseline.sh does), or judge it as ARISE (--expect arise)",
                "ARISE ran in this run, but plain GRPO was expected (--expect grpo)",
            )
        ]
    if arise_steps:
        return []
    off = config is not None and config.arise_enable is False
    return [
        Check(
            "arise/*",
            f"absent in {len(rows)} steps",
            "an ARISE run logs arise/* every step",
            FAIL,
            (f"ARISE was off{configured}" if off else "the run did not go through ARISE's trainer (trainer: arise)")
            + "; for a plain GRPO baseline: --expect grpo",
            "no ARISE activity in these metrics (no arise/* key): "
            + ("ARISE was off in this run" if off else "this run was plain GRPO")
            + ", but an ARISE run was expected",
        )
    ]


def activity_check(arise_rows: list[dict[str, float]], p2: list[dict[str, float]]) -> Check:
    """ARISE logs its metrics but does nothing: no summary rollout, no skill scored or injected."""
    attempts = _sum(arise_rows, "arise/summary_attempts")
    new = _sum(arise_rows, "arise/new_skills")
    used = sum(r.get("arise/skill_use_rate", 0.0) * r.get("arise/trajectories", 0.0) for r in p2)
    active = any(_sum(arise_rows, k) > 0 for k in ACTIVITY_KEYS)
    if active:
        status = OK
    else:  # Phase I without summaries is an ablation's normal (no_summary); Phase II always scores
        status = FAIL if p2 else WARN if len(arise_rows) >= MIN_PHASE2_STEPS else INFO
    return Check(
        "arise activity",
        f"{attempts:.0f} summaries, {new:.0f} new skills, {used:.0f} skill uses",
        "FAIL: none in Phase II",
        status,
        "ARISE logs its metrics but neither summarises, scores nor injects: see the run log ('[arise]', "
        "'scoring', 'summary') and arise.summary.enable, arise.selection",
        ""
        if active
        else f"no ARISE activity in {len(arise_rows)} ARISE steps ({len(p2)} in Phase II): no summary, no skill "
        "scored or injected",
    )


def tool_checks(rows: list[dict[str, float]]) -> list[Check]:
    """A tool run's (TOOL=python) calls and errors, ARISE on or off; [] for a run without the tool."""
    tool_rows = [r for r in rows if "arise/tool_calls" in r]
    if not tool_rows:
        return []
    calls = _mean(tool_rows, "arise/tool_calls") or 0.0
    malformed = _mean(tool_rows, "arise/tool_calls_malformed") or 0.0
    tried = f" (it made {malformed:.2f} malformed calls per trajectory)" if malformed > 0 else ""
    checks = [
        Check(
            "arise/tool_calls",
            f"{calls:.2f} per trajectory over {len(tool_rows)} steps",
            "> 0 in a tool run",
            OK if calls > 0 else FAIL,
            f"the model never called the tool{tried}: the tool-call format (multi_turn.format), the tool schema "
            "in the prompt (multi_turn.tool_config_path), the tool-use data (data_prep --tool python)",
            "" if calls > 0 else "a tool run whose model never called the tool",
        )
    ]
    called = [r for r in tool_rows if r.get("arise/tool_calls", 0.0) > 0]
    if called:
        errors = _mean(called, "arise/tool_error_rate") or 0.0
        checks.append(
            Check(
                "arise/tool_error_rate",
                f"{errors:.2f}",
                "WARN > 0.5",
                WARN if errors > 0.5 else OK,
                "most tool calls fail: the tool's messages in the rollouts; its limits (docs/sandbox.md)",
            )
        )
    return checks


def judge(
    metrics: dict[int, dict[str, float]],
    scale: str = "auto",
    expect: str = "arise",
    config: RunConfig | None = None,
) -> list[Check]:
    """The checks on a run's metrics ``{step: {key: value}}``; ``expect``: ``arise`` or ``grpo``
    (ARISE off); ``config``: what the run's config says (quoted when ARISE was off)."""
    if scale == "auto":
        scale = scale_of(config)
    tiny = scale == "tiny"
    steps = sorted(metrics)
    rows = [metrics[s] for s in steps]
    checks: list[Check] = []
    arise_rows = [r for r in rows if "arise/phase" in r]
    p2 = [r for r in arise_rows if r["arise/phase"] == 2]
    enough = len(p2) >= MIN_PHASE2_STEPS

    if not rows:
        return [Check("metrics", "no steps", "at least 1 logged step", FAIL, "the run logged nothing: see its log")]
    expected = expectation_checks(rows, expect, config)
    if expected:  # ARISE off (expected or not) or ARISE where GRPO was expected: nothing of ARISE to judge
        return expected + tool_checks(rows)
    if not arise_rows:  # arise/* keys without arise/phase: not a layout this trainer writes
        return [
            Check(
                "arise/phase",
                "absent",
                "logged every ARISE step",
                FAIL,
                "arise/* keys without arise/phase: not the metrics of recipe.arise's trainer",
                "no ARISE step in these metrics (no arise/phase)",
            )
        ]
    if not p2:
        checks.append(
            Check(
                "arise/phase",
                f"Phase I only ({len(arise_rows)} steps)",
                "Phase II reached",
                INFO,
                "Phase II starts after arise.phase1_steps (PHASE1_STEPS); the Phase II checks need it",
            )
        )
    else:
        checks.append(Check("arise/phase", f"{len(p2)} Phase II steps", f">= {MIN_PHASE2_STEPS} to judge rates", OK))
    checks.append(activity_check(arise_rows, p2))
    checks += tool_checks(rows)

    if p2:
        # -- scoring failures: a failed group goes unaided (no skill), the run continues as GRPO
        scored = sum(r.get("arise/trajectories", 0.0) * (1.0 - r.get("arise/control_rate", 0.0)) for r in p2)
        failures = _sum(p2, "arise/scoring_failures")
        rate = failures / scored if scored else 0.0
        status = OK if rate < 0.01 else WARN if rate < 0.25 else FAIL
        checks.append(
            Check(
                "arise/scoring_failures",
                f"{failures:.0f} ({rate:.0%})",
                "OK < 1%, FAIL >= 25% of scored trajectories",
                status,
                "the scoring requests error or time out (run log: 'scoring'; arise.selection.scoring_timeout_s; "
                "the rollout engine must return prompt log-probs)",
            )
        )
        # -- skill use
        use = _weighted(p2, "arise/skill_use_rate") or 0.0
        cache = min((r.get("arise/cache_size", 0.0) for r in p2), default=0.0)
        if use == 0.0:
            status = FAIL if enough else INFO
        elif tiny:
            status = OK
        else:
            status = OK if use >= 0.2 else WARN
        checks.append(
            Check(
                "arise/skill_use_rate (Phase II)",
                f"{use:.2f}",
                ("FAIL = 0 over >= 3 Phase II steps" if tiny else "paper 0.42-0.89; WARN < 0.20, FAIL = 0")
                + ("" if enough else "; too few Phase II steps to fail"),
                status,
                f"no skill reached a prompt (cache {cache:.0f} skills at least): see arise/gate_pass_rate and "
                "arise/scoring_failures; arise/skill_overlong counts skills that did not fit",
            )
        )
        # -- gate pass rate
        gate = _weighted(p2, "arise/gate_pass_rate") or 0.0
        if gate == 0.0 and use == 0.0:
            status = FAIL if enough else INFO
        elif gate == 0.0 or tiny:
            status = OK  # skills used with no gate pass: the gate is off (ablation no_gate) or random selection
        else:
            status = OK if gate >= 0.1 else WARN
        checks.append(
            Check(
                "arise/gate_pass_rate (Phase II)",
                f"{gate:.2f}",
                "FAIL = 0 with no skill used" + ("" if tiny else "; WARN < 0.10"),
                status,
                "the gate delta rejects (almost) every query: the skill scores are too flat "
                "(arise.selection.gate, arise.selection.temperature; docs/design.md)",
            )
        )
        # -- the calibrated gate (temperature: auto) against its target
        target = _mean(p2, "arise/gate_target")
        if target is not None:
            checks.append(gate_target_check(p2, target))
        # -- R=1 / R=2 mixing: the only groups where the hierarchical reward changes the gradient
        mixed = _weighted(p2, "arise/mixed_group_rate", "arise/phase2_groups")
        mixed = mixed if mixed is not None else (_mean(p2, "arise/mixed_group_rate") or 0.0)
        shift = _mean(p2, "arise/adv_shift") or 0.0
        r2 = _mean(p2, "arise/frac_reward_2") or 0.0
        if tiny:
            status = OK if mixed > 0 else INFO
        elif mixed > 0:
            status = OK if mixed >= 0.05 else WARN
        else:
            status = FAIL if enough and use > 0 else WARN if enough else INFO
        checks.append(
            Check(
                "arise/mixed_group_rate (Phase II)",
                f"{mixed:.2f} (R=2 {r2:.2f}, shift {shift:.2f})",
                "tiny run: rare, not judged" if tiny else "WARN < 0.05, FAIL = 0 with skills used",
                status,
                "no group holds R=1 and R=2: the gradient is the binary reward's (arise/adv_shift 0); "
                "check arise/frac_reward_2 and arise.selection.control_share",
            )
        )
    # -- summaries (Phase I and II): the library's only source of new skills
    if arise_rows:
        attempts = _sum(arise_rows, "arise/summary_attempts")
        parsed = _sum(arise_rows, "arise/summary_parsed")
        new = _sum(arise_rows, "arise/new_skills")
        if attempts == 0:
            status, value = (WARN if len(arise_rows) >= MIN_PHASE2_STEPS else INFO), "no attempts"
        else:
            rate = parsed / attempts
            value = f"{rate:.2f} ({parsed:.0f}/{attempts:.0f}, {new:.0f} new)"
            if tiny:
                status = OK if parsed > 0 else INFO
            else:
                status = OK if rate >= 0.85 else WARN if rate >= 0.2 else FAIL
        checks.append(
            Check(
                "arise/summary_parse_rate",
                value,
                "tiny run: any parsed" if tiny else "paper > 0.85; WARN < 0.85, FAIL < 0.20",
                status,
                "the summary rollouts do not return the JSON skill (arise/summary_fallback_rate; a too short "
                "max_model_len is ruled out by the preflight); no attempts: arise.summary.enable, or no group had a "
                "correct trajectory (tau+)",
            )
        )

    # -- rollout vs actor log-probs (verl: rollout.calculate_log_probs)
    diff = _mean(rows, "training/rollout_probs_diff_mean")
    corr = _mean(rows, "training/rollout_actor_probs_pearson_corr")
    if diff is None:
        checks.append(
            Check(
                "training/rollout_probs_diff_mean",
                "absent",
                "logged with rollout.calculate_log_probs",
                INFO if tiny else WARN,
                "set actor_rollout_ref.rollout.calculate_log_probs=True to compare rollout and actor",
            )
        )
    else:
        first = [r["training/rollout_probs_diff_mean"] for r in rows if "training/rollout_probs_diff_mean" in r]
        third = max(1, len(first) // 3)
        growth = (sum(first[-third:]) / third) / max(sum(first[:third]) / third, 1e-9)
        if tiny:
            status = INFO  # vLLM-CPU in bf16 against an fp32 actor: not the GPU path's numbers
        else:
            bad = diff > 0.05 or (corr is not None and corr < 0.9)
            status = FAIL if bad else WARN if diff > 0.01 or growth > 2.0 or (corr or 1.0) < 0.98 else OK
        checks.append(
            Check(
                "training/rollout_probs_diff_mean",
                f"{diff:.4f} (corr {corr if corr is not None else float('nan'):.3f}, x{growth:.1f})",
                "tiny run (bf16 vLLM-CPU vs fp32 actor): not judged"
                if tiny
                else "OK <= 0.01 and corr >= 0.98; FAIL > 0.05 or corr < 0.9",
                status,
                "rollout and actor compute different policies: attention backend, dtype, LongRoPE "
                "(docs/gpu.md), or the weight sync (a difference growing over steps, x = last/first third)",
            )
        )

    # -- ARISE's share of the step time (summary rollouts + library maintenance, after the wave)
    step_s = _sum(rows, "timing_s/step")
    if arise_rows and step_s > 0:
        own = _sum(rows, "timing_s/arise_summary") + _sum(rows, "timing_s/arise_library")
        scoring = _sum(p2, "arise/scoring_s") if p2 else 0.0
        share = own / step_s
        status = INFO if tiny else OK if share <= 0.15 else WARN
        checks.append(
            Check(
                "timing_s/arise_* / timing_s/step",
                f"{share:.1%} (+ scoring {scoring / step_s:.1%})",
                "tiny run: not judged" if tiny else "WARN > 15% (paper: +16.6% per step in all)",
                status,
                "arise.summary.max_per_step, arise.summary.stream, arise.ig.every_n_steps; scoring (inside "
                "generation, summed over concurrent queries): arise.selection.score_top_m (docs/performance.md)",
            )
        )
    return checks


def outcome(checks: list[Check]) -> tuple[str, str, int]:
    """The verdict's status, its sentence and the exit status."""
    # ARISE off as expected; a tool run's own checks may sit beside the OFF line
    if any(c.status == OFF for c in checks) and all(c.status in (OFF, OK) for c in checks):
        return OFF, OFF_SENTENCE, EXIT_OK
    worst = FAIL if any(c.status == FAIL for c in checks) else WARN if any(c.status == WARN for c in checks) else OK
    headline = next((c.headline for c in checks if c.status == worst and c.headline), "")
    default = {OK: "ARISE is alive", WARN: "see the WARN lines", FAIL: "see the FAIL lines"}[worst]
    return worst, headline or default, EXIT_FAIL if worst == FAIL else EXIT_OK


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m recipe.arise.tools.verdict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "metrics", nargs="+", help="a run folder (holding metrics.jsonl) or verl file-tracker jsonl files, oldest first"
    )
    p.add_argument(
        "--expect",
        choices=("arise", "grpo"),
        default="arise",
        help="arise (default): no ARISE activity FAILs; grpo: a baseline, ARISE must be off",
    )
    p.add_argument("--scale", choices=("auto", "tiny", "gpu"), default="auto")
    p.add_argument("--launch-only", action="store_true", help="not the earlier launches' metrics.launchN.jsonl")
    p.add_argument("--config", default=None, help="the run's config (default: found in the run folder)")
    args = p.parse_args(argv)
    try:
        metrics = load(args.metrics, args.launch_only)
        config = read_config(args.config) if args.config else find_config(args.metrics)
    except VerdictInputError as error:
        print(f"[verdict] cannot read the metrics: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    source = "given"
    if args.scale == "auto":
        try:
            scale = scale_of(config, config_folder(args.metrics))
        except VerdictInputError as error:
            print(f"[verdict] cannot tell the run's scale: {error}", file=sys.stderr)
            return EXIT_UNREADABLE
        source = f"trainer.device={config.device} in {config.path}"
    else:
        scale = args.scale
    checks = judge(metrics, scale, args.expect, config)
    steps = sorted(metrics)
    print(
        f"[verdict] {', '.join(str(m) for m in args.metrics)}: steps {steps[0]}-{steps[-1]}, scale {scale} ({source})"
    )
    for c in checks:
        print(c.line())
    status, sentence, code = outcome(checks)
    print(f"[verdict] {status}: {sentence}")
    return code


if __name__ == "__main__":
    sys.exit(main())
