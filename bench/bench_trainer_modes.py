"""ARISE under verl's three trainer modes: seconds per step, and the learning effect (docs/performance.md).

``trainer.v1.trainer_mode`` = sync, colocate_async, separate_async (``TRAINER_MODE``,
docs/trainer_modes.md), each through the real verl trainer (run_scripts/cpu_smoke_arise.sh).

1. **Seconds per step** at the paper's token proportions, with bench/bench_step_overhead.py's setup
   and method: its ``--paper-proportions`` data and 10-skill library (``paper_setup``), ARISE in Phase
   II from step 1, one launch per mode per repetition, the modes interleaved (``interleaved``: the
   order reversed every other repetition) until each ratio to sync has its 95% interval
   (``ratio_interval``, paired by repetition) within +-``--target``, or ``--max-reps``. A step's
   seconds are the wall-clock time between two steps' rows in the run's metrics (``bench/wall_s``:
   what an async trainer overlaps shows there, not in ``timing_s/step``); step 1 (vLLM's warm-up)
   is dropped; a finished run is reused when the bench is started again with the same ``--work`` and
   ``--steps``. Prints ``colocate_async/sync step-time ratio: R (95% interval L-H, +-P%)`` and the
   same for separate_async.
2. **The learning effect** in each mode: bench/bench_learning_effect.py's transfer world, ARISE
   against GRPO, its ``launch`` with ``--trainer-mode``; seeds outermost, modes and arms alternating;
   finished runs are reused when the bench is started again with the same ``--work``. Per async
   mode: the paired (by seed) ARISE - GRPO final accuracy against sync's on the same seeds, the
   difference of the two gaps with its 95% interval, and the line
   ``async learning effect: ARISE - GRPO <mode> X ± Y vs sync X' ± Y' over N seeds``
   (mean ± sd over seeds of the paired differences).

    python bench/bench_trainer_modes.py [--steps 3] [--reps 2] [--max-reps 4] \\
        [--learning-seeds 0 1 2] [--learning-steps 24] [--skip-speed] [--skip-learning] [--work DIR]

Writes ``<work>/trainer_modes.png`` (the step times with their intervals; the held-out accuracy per
mode and arm) and ``<work>/results.json``. A speed repetition takes ~12-15 min on 2 cores (three
launches of ~4-5 min), a learning-effect seed ~25 min (six launches of 24 steps).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other benches' machinery, not a copy

import bench_learning_effect as effect  # noqa: E402
import bench_step_overhead as overhead  # noqa: E402

MODES = ("sync", "colocate_async", "separate_async")
ASYNC_MODES = MODES[1:]
LOCK = effect.LOCK  # one launch at a time on the machine, the other benches' and the e2e tests' lock


def wall_step_time(steps: list[dict]) -> float:
    """One run's seconds per step: its mean wall-clock time between two steps' rows."""
    walls = [m["bench/wall_s"] for m in steps if math.isfinite(m.get("bench/wall_s", math.nan))]
    if not walls:
        raise ValueError("no step with a wall-clock time (a run needs at least 2 steps)")
    return statistics.fmean(walls)


def paired_gap(mode_finals: dict, sync_finals: dict) -> tuple[list[int], list[float], list[float]]:
    """(seeds, ARISE - GRPO per seed under the mode, the same under sync), over the seeds where all
    four runs finished: both gaps then come from the same seeds."""
    seeds = sorted(
        s
        for s in mode_finals.get("arise", {})
        if s in mode_finals.get("grpo", {}) and s in sync_finals.get("arise", {}) and s in sync_finals.get("grpo", {})
    )
    gap = [mode_finals["arise"][s] - mode_finals["grpo"][s] for s in seeds]
    sync_gap = [sync_finals["arise"][s] - sync_finals["grpo"][s] for s in seeds]
    return seeds, gap, sync_gap


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def effect_line(mode: str, gap: list[float], sync_gap: list[float]) -> str:
    """``async learning effect: ARISE - GRPO <mode> X ± Y vs sync X' ± Y' over N seeds``."""
    if not gap or len(gap) != len(sync_gap):
        raise ValueError(f"{mode}: the gaps must be paired by seed, got {len(gap)} and {len(sync_gap)}")
    (m, sd), (sm, ssd) = mean_sd(gap), mean_sd(sync_gap)
    return (
        f"async learning effect: ARISE - GRPO {mode} {m:+.3f} ± {sd:.3f} vs sync {sm:+.3f} ± {ssd:.3f} "
        f"over {len(gap)} seeds"
    )


def gap_difference(gap: list[float], sync_gap: list[float]) -> tuple[float, float, float]:
    """(D, low, high): the mode's gap minus sync's, paired by seed, with its 95% Student-t interval
    (nan, nan with one seed)."""
    diffs = [a - b for a, b in zip(gap, sync_gap, strict=True)]
    d = statistics.fmean(diffs)
    n = len(diffs)
    if n < 2:
        return d, math.nan, math.nan
    t = overhead.T975[n - 2] if n - 1 <= len(overhead.T975) else 1.96
    half = t * statistics.stdev(diffs) / math.sqrt(n)
    return d, d - half, d + half


def describe_difference(mode: str, diff: tuple[float, float, float]) -> str:
    d, low, high = diff
    if not math.isfinite(low):
        return f"  {mode} gap - sync gap: {d:+.3f} (one seed: no interval)"
    verdict = "the gap holds (0 inside the interval)" if low <= 0.0 <= high else "the gap differs from sync's"
    return f"  {mode} gap - sync gap: {d:+.3f} (95% interval {low:+.3f} to {high:+.3f}): {verdict}"


# --------------------------------------------------------------------------------- seconds per step
def speed(args, work: Path) -> dict:
    tiny = overhead.with_positions(overhead.tiny_assets(), args.positions, work)
    env, overrides, facts = overhead.paper_setup(args, work, tiny)
    print(
        f"seconds per step at the paper's proportions: chat prompt {facts['prompt']:.1f} tokens, response "
        f"{facts['response']} (forced), injected skill {facts['skill_tokens']:.1f} tokens, G={args.group}, batch "
        f"{args.batch}, 10 cache skills; ARISE in Phase II from step 1; {args.reps}-{args.max_reps} run(s) per mode of "
        f"{args.steps} steps, interleaved",
        flush=True,
    )

    def run(mode, rep):
        # a finished run's steps are kept, so the bench started again with more --reps adds runs
        folder = work / f"{mode}_s{args.steps}_{rep}"
        kept = folder / "bench_steps.json"
        if kept.is_file():
            print(f"  {mode:12s} run: reusing {kept}", flush=True)
            return json.loads(kept.read_text())
        steps = overhead.run_once(mode, True, args, tiny, folder, {**env, "TRAINER_MODE": mode}, overrides, lock=LOCK)
        folder.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(steps))
        return steps

    runs, intervals, reached = overhead.interleaved(
        list(MODES), run, wall_step_time, args.reps, args.max_reps, args.target
    )
    reps = len(runs["sync"])
    print(f"\nmean over {reps} run(s) per mode of each run's mean over steps 2..{args.steps}")
    rows = [("wall-clock per step (the ratio's)", lambda m: m["bench/wall_s"]), *overhead.PHASES]
    rows += [
        ("weight staleness (mean)", lambda m: m.get("arise/weight_staleness/mean", 0.0)),
        ("library staleness (mean)", lambda m: m.get("arise/library_staleness/mean", 0.0)),
    ]
    print(f"\n{'per step (s)':38s} " + " ".join(f"{mode:>15s}" for mode in MODES))
    for label, get in rows:
        print(f"{label:38s} " + " ".join(f"{overhead.mean_of_runs(runs[mode], get):15.3f}" for mode in MODES))
    for mode in MODES:
        per_run = ", ".join(f"{wall_step_time(steps):.2f}" for steps in runs[mode])
        print(f"  {mode} seconds per step per run: {per_run}")
    overhead.say_precision(reached, reps, args)
    for mode in ASYNC_MODES:
        print(f"{mode}/sync step-time ratio: {overhead.describe(intervals[mode])}")
    return {
        "seconds_per_step": {mode: [wall_step_time(steps) for steps in runs[mode]] for mode in MODES},
        "ratios": {mode: list(intervals[mode]) for mode in ASYNC_MODES},
        "resolved": reached,
        "facts": {k: list(v) if isinstance(v, tuple) else v for k, v in facts.items()},
    }


# ----------------------------------------------------------------------------------- learning effect
def learning(args, work: Path) -> dict:
    base = [
        "--seeds",
        *map(str, args.learning_seeds),
        "--steps",
        str(args.learning_steps),
        "--eval-every",
        str(args.eval_every),
        "--arms",
        "arise",
        "grpo",
    ]
    modes = [m for m in MODES if m in args.learning_modes]  # sync first: the others are compared with it
    le = {mode: effect.parse_args([*base, "--trainer-mode", mode, "--out", str(work / mode)]) for mode in modes}
    assets = effect.world_assets(le["sync"].families, le["sync"].sft_steps)
    finals: dict[str, dict[str, dict[int, float]]] = {mode: {} for mode in modes}
    curves: dict[str, dict[str, list[dict[int, float]]]] = {mode: {} for mode in modes}
    failed = []
    # seeds outermost, modes and arms alternating: a cut-short bench still pairs every mode on its seeds
    for seed in args.learning_seeds:
        for mode in modes if seed % 2 == 0 else modes[::-1]:
            for arm in ("arise", "grpo"):
                out = work / mode / f"{arm}_seed{seed}"
                try:
                    metrics = effect.launch(arm, seed, out, assets, le[mode])
                except SystemExit as failure:  # counted and shown; the other runs still answer
                    failed.append(f"{mode} {arm} seed {seed}")
                    print(f"[bench] FAILED {mode} {arm} seed {seed}: {str(failure)[-600:]}", flush=True)
                    continue
                curve = effect.read_curve(metrics)[1]
                finals[mode].setdefault(arm, {})[seed] = curve[args.learning_steps]
                curves[mode].setdefault(arm, []).append(curve)
    print(
        f"\nlearning effect (transfer world, {args.learning_steps} steps, batch {le['sync'].batch} x "
        f"G={le['sync'].group}): held-out accuracy at the last step"
    )
    print(f"{'mode':16s} {'arm':6s} " + " ".join(f"seed {s:>2d}" for s in args.learning_seeds))
    for mode in modes:
        for arm in ("arise", "grpo"):
            got = finals[mode].get(arm, {})
            print(
                f"{mode:16s} {arm:6s} "
                + " ".join(f"{got[s]:7.3f}" if s in got else f"{'—':>7s}" for s in args.learning_seeds)
            )
    if failed:
        print(f"{len(failed)} run(s) failed, left out: {', '.join(failed)}")
    lines, gaps = [], {}
    for mode in modes[1:]:
        seeds, gap, sync_gap = paired_gap(finals[mode], finals["sync"])
        if not seeds:
            print(f"  {mode}: no seed with all four runs finished; no learning-effect line")
            continue
        print(describe_difference(mode, gap_difference(gap, sync_gap)))
        lines.append(effect_line(mode, gap, sync_gap))
        gaps[mode] = {"seeds": seeds, "gap": gap, "sync_gap": sync_gap}
    return {"finals": finals, "curves": curves, "gaps": gaps, "lines": lines, "failed": failed}


# --------------------------------------------------------------------------------------------- plot
def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in ("speed", "learning") if p in results]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        if panel == "speed":
            per_run = results["speed"]["seconds_per_step"]
            means = [statistics.fmean(per_run[m]) for m in MODES]
            ax.bar(MODES, means, color=["grey", "tab:blue", "tab:orange"])
            for i, mode in enumerate(MODES):
                ax.plot([i] * len(per_run[mode]), per_run[mode], "k.", ms=5)
                if mode in results["speed"]["ratios"]:
                    r, low, high = results["speed"]["ratios"][mode]
                    span = f"{low:.2f}-{high:.2f}" if math.isfinite(low) else "no interval"
                    ax.annotate(f"x{r:.2f}\n({span})", (i, means[i]), ha="center", va="bottom", fontsize=8)
            ax.set_ylabel("wall-clock seconds per step (dots: runs)")
            ax.set_title("ARISE per step, the paper's proportions (ratio to sync, 95%)")
        else:
            curves = results["learning"]["curves"]
            styles = {"sync": "grey", "colocate_async": "tab:blue", "separate_async": "tab:orange"}
            for mode in MODES:
                for arm, ls in (("arise", "-"), ("grpo", "--")):
                    # results.json holds the steps as strings
                    runs = [{int(k): v for k, v in c.items()} for c in curves.get(mode, {}).get(arm, [])]
                    if not runs:
                        continue
                    steps = sorted(set.intersection(*(set(c) for c in runs)))
                    means = [statistics.fmean(c[s] for c in runs) for s in steps]
                    label = f"{arm} {mode} (n={len(runs)})"
                    ax.plot(steps, means, ls, color=styles[mode], marker="o", ms=3, label=label)
            ax.set_xlabel("training step")
            ax.set_ylabel("held-out accuracy (transfer world)")
            ax.set_ylim(0, 1)
            ax.set_title("ARISE (solid) vs GRPO (dashed) per trainer mode")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def save(path: Path, part: str, value: dict) -> None:
    """Put one part's results into ``path``, read again just before: an invocation running only the
    other part in the same --work meanwhile keeps its own."""
    results = json.loads(path.read_text()) if path.is_file() else {}
    results[part] = value
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="steps per speed run (step 1 is dropped)")
    parser.add_argument("--reps", type=int, default=2, help="at least this many speed runs per mode")
    parser.add_argument("--max-reps", type=int, default=4, help="at most this many speed runs per mode")
    parser.add_argument("--target", type=float, default=overhead.TARGET, help="stop at a 95%% interval of +-target")
    parser.add_argument("--prompt-tokens", type=int, default=147, help="chat prompt length (bench_step_overhead)")
    parser.add_argument("--positions", type=int, default=1536, help="max_model_len: responses fill it")
    parser.add_argument("--group", type=int, default=8, help="G")
    parser.add_argument("--batch", type=int, default=2, help="queries per step")
    parser.add_argument("--learning-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--learning-steps", type=int, default=24)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument(
        "--learning-modes", nargs="+", choices=MODES, default=list(MODES), help="sync and the async modes to compare"
    )
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-learning", action="store_true")
    parser.add_argument("--work", default="outputs/bench_trainer_modes", help="runs, plot and results")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.reps < 1 or args.max_reps < args.reps:
        parser.error("--steps >= 2 (step 1 is dropped) and 1 <= --reps <= --max-reps")
    if "sync" not in args.learning_modes:
        parser.error("--learning-modes needs sync: each async mode's gap is compared with sync's")
    if args.learning_steps % args.eval_every:
        parser.error(f"--learning-steps {args.learning_steps} must be a multiple of --eval-every {args.eval_every}")
    args.phase1_steps = 0  # the paper-proportions setup: Phase II from step 1
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    # a part skipped keeps its results from an earlier invocation in the same --work (said below)
    path = work / "results.json"
    if not args.skip_speed:
        save(path, "speed", {**speed(args, work / "speed"), "args": vars(args)})
    if not args.skip_learning:
        save(path, "learning", {**learning(args, work / "learning"), "args": vars(args)})
    results = json.loads(path.read_text()) if path.is_file() else {}
    for part, skipped in (("speed", args.skip_speed), ("learning", args.skip_learning)):
        if skipped and part in results:
            print(f"{part}: the results of an earlier invocation in {work} (its arguments in results.json)")
    png = work / "trainer_modes.png"
    if "speed" in results or results.get("learning", {}).get("lines"):
        plot(results, png)
        print(f"\nplot: {png}")
    print(f"runs: {work}; bench time {time.time() - started:.0f} s on {os.cpu_count()} cores")
    for mode in ASYNC_MODES if "speed" in results else ():
        print(f"{mode}/sync step-time ratio: {overhead.describe(tuple(results['speed']['ratios'][mode]))}")
    for line in results.get("learning", {}).get("lines", []):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
