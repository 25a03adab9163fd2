"""Does the hierarchical reward change training? Full ARISE vs ablation (a) `binary_reward` on CPU.

Runs the README's CPU proof run (run_scripts/cpu_smoke_arise.sh: the tiny model, 6 steps, 2 in
Phase I, default settings) for each seed, once with the default config and once with
``arise.reward.binary=true``, and prints, per variant, the Phase II means over seeds of the
metrics that say whether the R=1/R=2 mechanism acted on the gradient (docs/design.md, "Is the
mechanism alive?"): the fraction of groups holding both R=1 and R=2, the advantage gap between
them, the mean |A(R) - A(r_task)| over Phase II trajectories, the fraction of R=2, skill use,
gate pass, accuracy.

    python bench/bench_mechanism.py --seeds 0 1 2            # ~6 runs x 3-5 min on 2 cores

The seed is ``arise.seed`` (the selection and summary draws); vLLM's sampling on CPU is not seeded,
so runs with one seed differ anyway: the seeds are repetitions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASE2_KEYS = (
    ("arise/mixed_group_rate", "groups with R=1 and R=2"),
    ("arise/adv_gap_2v1", "A(R=2) - A(R=1) in them"),
    ("arise/adv_shift", "mean |A(R) - A(binary)|"),
    ("arise/frac_reward_2", "fraction R=2"),
    ("arise/frac_reward_1", "fraction R=1"),
    ("arise/skill_use_rate", "skill use"),
    ("arise/gate_pass_rate", "gate pass"),
    ("arise/step_uplift", "skill - control success"),
    ("arise/acc", "accuracy"),
)
VARIANTS = {"full": [], "binary_reward": ["arise.reward.binary=true"]}


def run(out: Path, seed: int, overrides: list[str]) -> dict[int, dict]:
    env = {**os.environ, "PYTHON": sys.executable, "OUT_DIR": str(out)}
    cmd = ["bash", str(REPO / "run_scripts" / "cpu_smoke_arise.sh"), f"arise.seed={seed}", *overrides]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({out}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["data"] for r in rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default=None, help="keep the runs here (default: a temp folder)")
    args = parser.parse_args(argv)
    root = Path(args.out or tempfile.mkdtemp(prefix="bench_mechanism_"))
    results: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for seed in args.seeds:
        for variant, overrides in VARIANTS.items():  # alternate variants: load drifts hit both
            started = time.time()
            metrics = run(root / f"{variant}_seed{seed}", seed, overrides)
            phase2 = [m for m in metrics.values() if m.get("arise/phase") == 2.0]
            means = {k: sum(m[k] for m in phase2) / len(phase2) for k, _ in PHASE2_KEYS}
            results[variant].append(means)
            print(f"[bench] {variant} seed {seed}: {time.time() - started:.0f} s", flush=True)
    print(f"\nPhase II means over steps, then over seeds {args.seeds} (runs in {root}):\n")
    print(f"| metric | {' | '.join(VARIANTS)} |")
    print("|---|" + "---|" * len(VARIANTS))
    for key, label in PHASE2_KEYS:
        cells = []
        for variant in VARIANTS:
            values = [r[key] for r in results[variant]]
            mean = sum(values) / len(values)
            spread = max(values) - min(values)
            cells.append(f"{mean:.3f} (±{spread / 2:.3f})")
        print(f"| {label} (`{key}`) | {' | '.join(cells)} |")
    shift = [sum(r["arise/adv_shift"] for r in results[v]) / len(results[v]) for v in VARIANTS]
    print(f"\nadvantage shift full / binary_reward: {shift[0]:.3f} / {shift[1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
