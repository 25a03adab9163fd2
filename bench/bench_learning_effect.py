"""Does ARISE learn faster or end higher than GRPO where skills can transfer? (docs/learning_effect.md)

The transfer world (recipe/arise/cpu/world.py): families of queries, each family with a hidden
constant added to a small sum; a correct trace states it, so a skill summarised from one solved
query can carry it to the family's other queries. Every run goes through the real verl trainer
(run_scripts/cpu_smoke_arise.sh, one launch per run, the flock /tmp/arise_e2e.lock held per launch)
on the world's warm-started tiny Qwen3, the same budget, data, grader, dynamic sampling and seeds
for every arm:

    arise             defaults
    grpo              arise.enable=false (the same trainer, agent loop and reward path)
    no_summary        arise.summary.enable=false   (ablation c: the library holds the seeds only)
    random_selection  arise.selection.random=true  (ablation b)
    binary_reward     arise.reward.binary=true     (ablation a)
    arise_seeds_ordinary  arise.library.seed_trial_uses=0 (on request: seeds not kept until used 8 times)
    arise_pmi         arise.selection.score_norm=pmi (on request: the query's lift of each skill's log-prob)

Accuracy is verl's validation on the held-out queries of every family (5 per family), sampled at
the training temperature (``val_kwargs``: n=4, temperature 1), before training and every
``--eval-every`` steps; for the ARISE arms validation runs with the library (epsilon = 0, the gate),
for GRPO without one: the way each method is deployed (docs/learning_effect.md, "Evaluation").

    python bench/bench_learning_effect.py --quick        # 1 seed, arise + grpo, a few steps (smoke)
    python bench/bench_learning_effect.py                # 3 seeds of arise and grpo, 1 of each ablation
    python bench/bench_learning_effect.py --tool         # the tool world: arise and grpo with TOOL=python
    python bench/bench_learning_effect.py --env twx      # a text game: arise and grpo with ENV=twx

``--tool``: the tool world (recipe/arise/cpu/tool_world.py), each family's rule a Python expression
the tiny model gets right only by running it: both arms use the tool agent (``TOOL=python``: verl's
ToolAgentLoop, the sandboxed python tool; ARISE's skill layer on it for the ARISE arm); the curves go
to ``<out>/learning_effect_tool.png`` and the last line reads ``ARISE - GRPO final accuracy (tool): ...``.

``--env twx``: the ``ENV=twx`` smoke run's world (recipe/arise/cpu/tiny_env.py: TextWorldExpress's coin
collector, warm-started on the episode format; a coin skill lifts the noisy expert's rate per reply
from 0.5 to 0.95): both arms play episodes through the env agent (``arise_env_agent``), trained on
the assets' train games, validated on their held-out games (the engine's test seeds and test fold);
success is verl's ``val-core/env/twx/<task type>/acc/mean@n`` (acc = the episode won), averaged over
task types; the curves go to ``<out>/learning_effect_env_twx.png`` and the last line reads
``ARISE - GRPO final success (twx): ...``.

``--trainer-mode colocate_async|separate_async``: every arm under that verl trainer mode
(``TRAINER_MODE``, docs/trainer_modes.md; default sync), in ``<out>`` = outputs/bench_learning_effect_<mode>;
bench/bench_trainer_modes.py compares the modes with this machinery.

A launch costs 2-4.5 min on a quiet 2-core machine (start-up ~1.5 min; GRPO ~135 s, ARISE ~205-265 s
for 24 steps), so the default bench (9 launches) takes ~30 min; more when other jobs share the cores.

It prints a table (final accuracy, steps to the threshold, mean ± sd over seeds), writes the curves
to ``<out>/learning_effect.png`` and ``<out>/results.json``, and ends with the line
``ARISE - GRPO final accuracy: X ± Y over N seeds`` (paired by seed, ± the sd of the differences).
A finished run's metrics are reused when the bench is started again with the same ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = "/tmp/arise_e2e.lock"
ARMS = {
    "arise": ("true", []),
    "grpo": ("false", []),
    "no_summary": ("true", ["arise.summary.enable=false"]),
    "random_selection": ("true", ["arise.selection.random=true"]),
    "binary_reward": ("true", ["arise.reward.binary=true"]),
    # not an ablation: the seed skills as ordinary library entries (docs/learning_effect.md, results)
    "arise_seeds_ordinary": ("true", ["arise.library.seed_trial_uses=0"]),
    # not an ablation: the score as pointwise mutual information (relevance, not predictability)
    "arise_pmi": ("true", ["arise.selection.score_norm=pmi"]),
}
ABLATIONS = ("no_summary", "random_selection", "binary_reward")
# --env: the tiny env assets of the ENV=<name> smoke run (run_scripts/cpu_smoke_arise.sh), cached by content
ENV_WORLDS = {"twx": "recipe.arise.cpu.tiny_env"}
TRANSFER_SOURCES = "transfer_"  # the math worlds' data sources: transfer_<family>


def held_out_sources(args) -> str:
    """The prefix of the held-out data sources whose val-core accuracy is the curve: an environment's
    games are ``env/<env>/<task type>`` (acc = the episode won), the math worlds' ``transfer_<family>``."""
    return f"env/{args.env}/" if args.env else TRANSFER_SOURCES


def env_assets(env: str) -> Path:
    import importlib

    return importlib.import_module(ENV_WORLDS[env]).cached_assets()


def env_task_types(assets: Path) -> list[str]:
    """The held-out games' data sources (one per task type) in the assets' val.parquet."""
    import pandas as pd

    path = assets / "data" / "val.parquet"
    if not path.is_file():
        raise SystemExit(f"{assets} holds no data/val.parquet: not tiny env assets (recipe.arise.cpu.tiny_env)")
    return sorted(set(pd.read_parquet(path, columns=["data_source"])["data_source"]))


def world_assets(families: int, sft_steps: int | None, tool: bool = False) -> Path:
    if tool:
        from recipe.arise.cpu.tool_world import cached_world

        return cached_world(n_families=families, **({} if sft_steps is None else {"sft_steps": sft_steps}))
    from recipe.arise.cpu.world import cached_world

    return cached_world(n_families=families, sft_steps=600 if sft_steps is None else sft_steps)


def launch(arm: str, seed: int, out: Path, assets: Path, args) -> Path:
    """One training run under the e2e lock; returns its metrics file (reused if already complete)."""
    metrics = out / "metrics.jsonl"
    sources = held_out_sources(args)
    if metrics.is_file() and args.steps in read_curve(metrics, sources)[1]:
        print(f"[bench] {arm} seed {seed}: reusing {metrics}", flush=True)
        return metrics
    enable, overrides = ARMS[arm]
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "OUT_DIR": str(out),
        "TINY_DIR": str(assets),
        "ARISE": enable,
        "STEPS": str(args.steps),
        "PHASE1_STEPS": str(args.phase1_steps),
        "SAVE_FREQ": str(args.steps),
        "BATCH": str(args.batch),
        "GROUP": str(args.group),
        "LR": str(args.lr),
        "TOOL": "python" if args.tool else "",  # the same tool agent path for every arm
        "ENV": args.env or "",  # the same env agent for every arm
        "TRAINER_MODE": args.trainer_mode,  # verl's v1 trainer mode, the same for every arm
    }
    cmd = [
        "flock",
        LOCK,
        "bash",
        str(REPO / "run_scripts" / "cpu_smoke_arise.sh"),
        f"arise.seed={seed}",
        f"data.seed={seed}",
        f"trainer.test_freq={args.eval_every}",
        "trainer.val_before_train=True",
        f"actor_rollout_ref.rollout.val_kwargs.n={args.eval_n}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "actor_rollout_ref.rollout.val_kwargs.top_p=1.0",
        "trainer.resume_mode=disable",
        *overrides,
    ]
    started = time.time()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    (out / "bench_console.log").write_text(proc.stdout + proc.stderr)
    # cpu_smoke_arise.sh exits 1 when the tiny verdict says FAIL (e.g. no skill used without
    # summaries); the run itself is complete when its last step's validation is in the metrics
    if not metrics.is_file() or args.steps not in read_curve(metrics, sources)[1]:
        raise SystemExit(f"{arm} seed {seed} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    print(f"[bench] {arm} seed {seed}: {time.time() - started:.0f} s (exit {proc.returncode})", flush=True)
    return metrics


def read_curve(path: Path, sources: str = TRANSFER_SOURCES) -> tuple[list[int], dict[int, float], dict[int, dict]]:
    """(eval steps, step -> held-out accuracy (mean over the data sources starting with ``sources``:
    families, or an environment's task types), step -> the step's metrics). A validation that logged
    accuracy only for other data sources is an error naming them (a wrong world, not a flat curve)."""
    curve, rows, others = {}, {}, set()
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        step, data = int(rec["step"]), rec["data"]
        rows.setdefault(step, {}).update(data)
        keys = [k for k in data if k.startswith("val-core/") and "/acc/mean@" in k]
        accs = [data[k] for k in keys if k.startswith(f"val-core/{sources}")]
        if accs:
            curve[step] = sum(accs) / len(accs)
        else:
            others.update(keys)
    if others and not curve:
        raise ValueError(f"{path}: no held-out accuracy of data sources {sources}*; validation logged {sorted(others)}")
    return sorted(curve), curve, rows


def final_skill_use(path: Path, step: int, sources: str = TRANSFER_SOURCES) -> float | None:
    """Mean over families of the held-out skill-use rate at ``step`` (None without the ARISE agent loop's key)."""
    data = read_curve(path, sources)[2].get(step, {})
    uses = [v for k, v in data.items() if k.startswith(f"val-aux/{sources}") and "/skill_used/mean@" in k]
    return sum(uses) / len(uses) if uses else None


def gate_summary(path: Path, window: int = 64, sources: str = TRANSFER_SOURCES) -> str | None:
    """The calibrated gate over a run's Phase II (docs/design.md, "how meets the target is judged"):
    the pass rate pooled over Phase II against arise/gate_target, the per-step rates' spread, and
    the range of the rate over the last ``window`` queries once that many were seen (None: no target)."""
    rows = read_curve(path, sources)[2]
    p2 = [rows[s] for s in sorted(rows) if rows[s].get("arise/phase") == 2 and "arise/gate_target" in rows[s]]
    if not p2:
        return None
    target = p2[0]["arise/gate_target"]
    queries = [r.get("arise/queries", 0.0) for r in p2]
    rates = [r["arise/gate_pass_rate"] for r in p2]
    pooled = sum(q * x for q, x in zip(queries, rates, strict=True)) / sum(queries)
    rolling = []
    for i in range(len(p2)):
        n = passed = 0.0
        for j in range(i, -1, -1):  # back from step i until the window is full
            n, passed = n + queries[j], passed + queries[j] * rates[j]
            if n >= window:
                rolling.append(passed / n)
                break
    spread = f", last-{window}-query rate {min(rolling):.2f}-{max(rolling):.2f}" if rolling else ""
    return (
        f"pooled {pooled:.2f} vs target {target:.2f} over {sum(queries):.0f} queries; per step "
        f"{statistics.fmean(rates):.2f} ± {statistics.stdev(rates) if len(rates) > 1 else 0.0:.2f}{spread}"
    )


def steps_to(curve: dict[int, float], threshold: float) -> int | None:
    return next((s for s in sorted(curve) if curve[s] >= threshold), None)


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def plot(
    curves: dict[str, list[dict[int, float]]],
    path: Path,
    threshold: float,
    title: str,
    ylabel: str = "held-out accuracy (all families)",
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm, runs in curves.items():
        steps = sorted(set.intersection(*(set(c) for c in runs)))
        means = [statistics.fmean(c[s] for c in runs) for s in steps]
        line = ax.plot(steps, means, marker="o", ms=3, label=f"{arm} (n={len(runs)})")[0]
        if len(runs) > 1:
            lo = [min(c[s] for c in runs) for s in steps]
            hi = [max(c[s] for c in runs) for s in steps]
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15)
    ax.axhline(threshold, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1)
    ax.set_title(f"{title}: ARISE vs GRPO (band: min-max over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 seed, arise and grpo, 4 steps: a smoke check")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=None, help=f"default: arise grpo {' '.join(ABLATIONS)}")
    parser.add_argument(
        "--ablation-seeds",
        type=int,
        default=1,
        help="seeds per ablation (the first N of --seeds; run after arise and grpo)",
    )
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--phase1-steps", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--eval-n", type=int, default=4, help="samples per held-out query")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--families", type=int, default=None, help="the math worlds' families (default 6)")
    parser.add_argument("--sft-steps", type=int, default=None, help="the world's warm start (default 600, tool 400)")
    parser.add_argument(
        "--assets",
        default=None,
        help="a world built by `python -m recipe.arise.cpu.world DIR` (--env: `... recipe.arise.cpu.tiny_env DIR`)",
    )
    parser.add_argument("--tool", action="store_true", help="the tool world, both arms with TOOL=python")
    parser.add_argument(
        "--env",
        default=None,
        choices=sorted(ENV_WORLDS),
        help="a text game: the ENV=<name> smoke run's world, both arms with the env agent (success = episodes won)",
    )
    parser.add_argument("--threshold", type=float, default=0.6, help="accuracy for 'steps to threshold'")
    parser.add_argument(
        "--trainer-mode",
        default="sync",
        choices=["sync", "colocate_async", "separate_async"],
        help="verl's trainer.v1.trainer_mode for every arm (TRAINER_MODE, docs/trainer_modes.md)",
    )
    parser.add_argument("--out", default=None, help="default outputs/bench_learning_effect[_tool][_MODE]")
    args = parser.parse_args(argv)
    if args.env and args.tool:
        parser.error(f"--env {args.env} and --tool together: a run has one agent (the env agent or the tool agent)")
    if args.env and (args.families is not None or args.sft_steps is not None):
        parser.error(
            f"--families and --sft-steps build the math worlds; --env {args.env} plays its smoke run's assets, or "
            f"--assets DIR built by `python -m {ENV_WORLDS[args.env]} DIR --sft-steps N`"
        )
    args.families = 6 if args.families is None else args.families
    mode = "" if args.trainer_mode == "sync" else f"_{args.trainer_mode}"
    world = "_tool" if args.tool else f"_env_{args.env}" if args.env else ""
    args.out = args.out or "outputs/bench_learning_effect" + world + mode
    if args.tool or args.env:  # the question is ARISE against GRPO, both through the same agent
        args.arms = args.arms or ["arise", "grpo"]
    if args.quick:
        args.seeds, args.steps, args.eval_every = args.seeds[:1], 4, 2
        args.arms = args.arms or ["arise", "grpo"]
    args.arms = args.arms or ["arise", "grpo", *ABLATIONS]
    return args


def effect_line(finals: dict[str, dict[int, float]], args) -> str | None:
    """The bench's last line: ARISE's final held-out accuracy (success, in an environment) minus
    GRPO's, paired by seed, ± the sd of the differences (None: no seed where both finished)."""
    paired = [finals["arise"][s] - finals["grpo"][s] for s in finals.get("arise", {}) if s in finals.get("grpo", {})]
    if not paired:
        return None
    diff, sd = mean_sd(paired)
    measure, label = ("success", f" ({args.env})") if args.env else ("accuracy", " (tool)" if args.tool else "")
    return f"ARISE - GRPO final {measure}{label}: {diff:+.3f} ± {sd:.3f} over {len(paired)} seeds"


def main(argv=None) -> int:
    args = parse_args(argv)
    arms = args.arms
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    started = time.time()
    if args.env:
        assets = Path(args.assets).resolve() if args.assets else env_assets(args.env)
        families = env_task_types(assets)  # an environment's task types, one data source each
    else:
        assets = Path(args.assets).resolve() if args.assets else world_assets(args.families, args.sft_steps, args.tool)
        families = json.loads((assets / "world.json").read_text())["families"]
    sources = held_out_sources(args)
    print(f"[bench] world {assets}: families {families}", flush=True)
    curves: dict[str, list[dict[int, float]]] = {}
    finals: dict[str, dict[int, float]] = {}
    metrics_paths: dict[str, list[Path]] = {}
    # seeds outermost, arms alternating (load drift on the shared machine hits every arm); ARISE and
    # GRPO over all seeds first, the ablations after, so that a cut-short bench still answers the
    # main question
    main_arms = [a for a in arms if a not in ABLATIONS]
    plan = [(seed, arm) for seed in args.seeds for arm in main_arms]
    plan += [(seed, arm) for seed in args.seeds[: args.ablation_seeds] for arm in arms if arm in ABLATIONS]
    for seed, arm in plan:
        metrics = launch(arm, seed, out / f"{arm}_seed{seed}", assets, args)
        _, curve, _ = read_curve(metrics, sources)
        curves.setdefault(arm, []).append(curve)
        metrics_paths.setdefault(arm, []).append(metrics)
        finals.setdefault(arm, {})[seed] = curve[args.steps]

    held_out = (
        f"Held-out success (episodes won, mean over {len(families)} task types, {args.eval_n} episodes per game"
        if args.env
        else f"Held-out accuracy (mean over {len(families)} families, {args.eval_n} samples per query"
    )
    lines = [
        f"{held_out}, temperature 1), "
        f"{args.steps} steps, batch {args.batch} x G={args.group}, lr {args.lr}; mean ± sd over seeds",
        "",
        f"| arm | seeds | step 0 | final | steps to {args.threshold:.2f} | best |",
        "|---|---|---|---|---|---|",
    ]
    for arm, runs in curves.items():
        start = mean_sd([c[0] for c in runs if 0 in c] or [float("nan")])
        final = mean_sd([c[args.steps] for c in runs])
        reached = [steps_to(c, args.threshold) for c in runs]
        hit = [s for s in reached if s is not None]
        reach = f"{statistics.fmean(hit):.1f} ({len(hit)}/{len(runs)} reached)" if hit else f"— (0/{len(runs)})"
        best = mean_sd([max(c.values()) for c in runs])
        lines.append(
            f"| {arm} | {len(runs)} | {start[0]:.3f} ± {start[1]:.3f} | {final[0]:.3f} ± {final[1]:.3f} "
            f"| {reach} | {best[0]:.3f} ± {best[1]:.3f} |"
        )
    lines += ["", "Held-out skill use at the last evaluation (share of samples with an injected skill):", ""]
    for arm, paths in metrics_paths.items():
        uses = [final_skill_use(p, args.steps, sources) for p in paths]
        lines.append(f"  {arm:17s} " + ", ".join("—" if u is None else f"{u:.2f}" for u in uses))
    lines += ["", "The calibrated gate in Phase II (training queries; target: the paper's skill use at delta):", ""]
    for arm, paths in metrics_paths.items():
        for seed, path in zip(finals[arm], paths, strict=True):
            gate = gate_summary(path, sources=sources)
            if gate:
                lines.append(f"  {arm:17s} seed {seed}: {gate}")
    lines += ["", "Curves (mean over seeds):", ""]
    for arm, runs in curves.items():
        steps = sorted(set.intersection(*(set(c) for c in runs)))
        lines.append(f"  {arm:17s} " + "  ".join(f"{s}:{statistics.fmean(c[s] for c in runs):.2f}" for s in steps))
    if args.env:
        png = out / f"learning_effect_env_{args.env}.png"
        types = ", ".join(f.removeprefix(sources) for f in families)
        plot(curves, png, args.threshold, f"{args.env} ({types})", "held-out success (episodes won)")
    else:
        png = out / ("learning_effect_tool.png" if args.tool else "learning_effect.png")
        plot(curves, png, args.threshold, "Tool world (python)" if args.tool else "Transfer world")
    paired = [finals["arise"][s] - finals["grpo"][s] for s in finals.get("arise", {}) if s in finals.get("grpo", {})]
    (out / "results.json").write_text(
        json.dumps({"args": vars(args), "families": families, "curves": curves, "paired_final_diff": paired}, indent=1)
    )
    print("\n".join(lines))
    print(
        f"\nplot: {png}\nruns: {out} (ARISE library: python -m recipe.arise.tools.inspect_run "
        f"{out}/arise_seed{args.seeds[0]}/checkpoints)\nbench time: {time.time() - started:.0f} s"
    )
    line = effect_line(finals, args)
    if line:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
