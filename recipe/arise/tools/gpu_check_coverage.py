"""Did ``run_scripts/gpu_check.sh`` exercise what a long run does only now and then?

    python -m recipe.arise.tools.gpu_check_coverage --resumed-at H --steps N --ig-every K METRICS.jsonl

gpu_check runs two launches: steps 1..H, then a resume of global_step_H to N, each validated at its
end, with the exact IG every K steps. A check that was never reached passes nothing: this tool
reads the launches' metrics files (``metrics.launchN.jsonl`` then ``metrics.jsonl``, as
:func:`recipe.arise.tools.report.metrics_launches` finds them) and prints one line per part, in
the verdict's format, FAIL where it did not happen:

- **resume**: the last launch's first step is H+1 (verl loaded global_step_H: a launch that started
  from scratch logs step 1 again) and the launch before it ended at H;
- **validation**: verl's ``val-core/*`` metrics at step H and at step N;
- **exact IG**: ``arise/ig_exact_mean`` finite at one step or more of each launch that had a step
  divisible by K, with ``arise/ig_skipped`` reported beside it (a step with no correct unaided
  trace measures nothing; one such step per launch is enough).

Exit status: 0 all OK, 1 a FAIL, 2 the metrics could not be read.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from recipe.arise.tools.report import metrics_launches, read_metrics
from recipe.arise.tools.verdict import FAIL, OK, Check

EXIT_OK, EXIT_FAIL, EXIT_UNREADABLE = 0, 1, 2


def launch_steps(path: str | Path) -> list[dict[int, dict[str, float]]]:
    """Each launch's ``{step: {key: value}}``, oldest launch first. Raises ValueError naming the file
    and line that cannot be read (:func:`recipe.arise.tools.report.read_metrics`)."""
    launches = []
    for file in metrics_launches(path):
        steps, warnings = read_metrics(file, launches=False)
        if warnings:
            raise ValueError(f"{file}: not a metrics line: {warnings[0]}")
        launches.append(steps)
    if not launches:
        raise ValueError(f"{path}: no metrics file (nor an earlier launch's)")
    return launches


def check_resume(launches, resumed_at: int) -> Check:
    want = f"2 launches, the last from step {resumed_at + 1}"
    if len(launches) < 2:
        return Check("resume", f"{len(launches)} launch", want, FAIL, "launch 2 did not run: see its log")
    before, last = launches[-2], launches[-1]
    first, ended = min(last, default=0), max(before, default=0)
    if first != resumed_at + 1 or ended != resumed_at:
        value = f"{ended} -> {first}"
        return Check("resume", value, want, FAIL, "launch 2 did not resume global_step_H: see its log")
    return Check("resume", f"{ended} -> {first}", want, OK)


def check_validation(launches, steps: list[int]) -> list[Check]:
    merged: dict[int, dict[str, float]] = {}
    for launch in launches:
        merged.update(launch)
    out = []
    for step in steps:
        found = any(k.startswith("val-core/") for k in merged.get(step, {}))
        status, todo = (OK, "") if found else (FAIL, "no validation logged: trainer.test_freq, val_files")
        out.append(Check(f"validation at step {step}", "val-core/*" if found else "none", "logged", status, todo))
    return out


def check_ig(launches, ig_every: int) -> list[Check]:
    out = []
    for n, launch in enumerate(launches, start=1):
        due = [s for s in launch if s % ig_every == 0]
        if not due:
            continue
        values = [launch[s].get("arise/ig_exact_mean") for s in due]
        measured = [v for v in values if v is not None and math.isfinite(v)]
        skipped = sum(launch[s].get("arise/ig_skipped", 0.0) for s in due)
        value = f"{len(measured)}/{len(due)} steps, {skipped:g} skipped"
        status = OK if measured else FAIL
        todo = "" if measured else "no IG measured: arise/ig_skipped, the prompt log-probs (docs/gpu.md)"
        out.append(Check(f"exact IG, launch {n}", value, ">= 1 step measured", status, todo))
    if not out:
        out.append(Check("exact IG", "no IG step", f"a step divisible by {ig_every}", FAIL, "raise STEPS"))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m recipe.arise.tools.gpu_check_coverage", description=__doc__)
    p.add_argument("metrics", help="the run's metrics.jsonl (its earlier launches' parts beside it)")
    p.add_argument("--resumed-at", type=int, required=True, help="H: launch 1's last step, launch 2's checkpoint")
    p.add_argument("--steps", type=int, required=True, help="N: launch 2's last step")
    p.add_argument("--ig-every", type=int, required=True, help="arise.ig.every_n_steps")
    args = p.parse_args(argv)
    try:
        launches = launch_steps(args.metrics)
    except (OSError, ValueError) as error:
        print(f"[gpu_check] cannot read the metrics: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    checks = [
        check_resume(launches, args.resumed_at),
        *check_validation(launches, [args.resumed_at, args.steps]),
        *check_ig(launches, args.ig_every),
    ]
    for c in checks:
        print(c.line().replace("[verdict]", "[gpu_check]", 1))
    failed = [c for c in checks if c.status == FAIL]
    verdict = "FAIL: resume, validation and exact IG did not all run" if failed else "OK: resume, validation, exact IG"
    print(f"[gpu_check] {verdict}")
    return EXIT_FAIL if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
