"""Per-step cost of ARISE vs plain GRPO on the CPU end-to-end setup (same settings and seeds).

Runs ``run_scripts/cpu_smoke_arise.sh`` with ``ARISE=true`` and ``ARISE=false`` alternately
(``--reps`` times each, order swapped every rep), reads verl's per-step timings and the ``arise/*``
token counters from each run's ``metrics.jsonl``, drops the first step of every run (vLLM
warm-up), and prints per-phase seconds side by side with the ARISE/GRPO ratio, plus the token
accounting per query the paper's overhead table reports.

    python bench/bench_step_overhead.py [--steps 5] [--reps 2] [--phase1-steps 0] [--work DIR]

``--phase1-steps 0`` measures Phase II (selection + scoring + summary) from the first step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "run_scripts" / "cpu_smoke_arise.sh"

# (label, how to get seconds from one step's metrics)
PHASES = [
    (
        "generation (incl. scoring, reward)",
        lambda m: (
            m.get("timing_s/gen", 0.0) - m.get("timing_s/arise_summary", 0.0) - m.get("timing_s/arise_library", 0.0)
        ),
    ),
    ("summary rollout O_G+1", lambda m: m.get("timing_s/arise_summary", 0.0)),
    ("library maintenance", lambda m: m.get("timing_s/arise_library", 0.0)),
    ("old log-prob", lambda m: m.get("timing_s/old_log_prob", 0.0)),
    ("advantage", lambda m: m.get("timing_s/adv", 0.0)),
    ("actor update", lambda m: m.get("timing_s/update_actor", 0.0)),
    ("weight sync", lambda m: m.get("timing_s/update_weights", 0.0)),
    ("step total", lambda m: m.get("timing_s/step", 0.0)),
]


def run_once(arise: bool, steps: int, phase1_steps: int, tiny: Path, out: Path) -> list[dict]:
    metrics = out / "metrics.jsonl"
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "OUT_DIR": str(out),
        "TINY_DIR": str(tiny),
        "VERL_FILE_LOGGER_PATH": str(metrics),
        "STEPS": str(steps),
        "PHASE1_STEPS": str(phase1_steps),
        "SAVE_FREQ": "-1",
        "ARISE": "true" if arise else "false",
    }
    started = time.time()
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True)
    (out / "run.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({'arise' if arise else 'grpo'}), log: {out / 'run.log'}")
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    print(f"  {'ARISE' if arise else 'GRPO '} run: {len(rows)} steps in {time.time() - started:.0f} s", flush=True)
    return [row["data"] for row in rows if row["step"] > 1]  # step 1 includes vLLM warm-up


def mean(values):
    return statistics.fmean(values) if values else 0.0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--phase1-steps", type=int, default=0)
    parser.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="arise_overhead_"))
    tiny = work / "tiny"
    if not (tiny / "tiny_assets.json").exists():
        subprocess.run([sys.executable, "-m", "recipe.arise.cpu.tiny", str(tiny)], cwd=REPO, check=True)

    steps = {"grpo": [], "arise": []}
    for rep in range(args.reps):
        order = [False, True] if rep % 2 == 0 else [True, False]
        for arise in order:
            name = "arise" if arise else "grpo"
            steps[name] += run_once(arise, args.steps, args.phase1_steps, tiny, work / f"{name}_{rep}")

    print(
        f"\nCPU end-to-end setup (tiny model), {args.reps} runs each, steps 2..{args.steps} of every run, "
        f"ARISE Phase II from step {args.phase1_steps + 1}; machine: {os.cpu_count()} cores"
    )
    print(f"\n{'per step (s)':38s} {'GRPO':>9s} {'ARISE':>9s} {'ratio':>7s}")
    for label, get in PHASES:
        g = mean([get(m) for m in steps["grpo"]])
        a = mean([get(m) for m in steps["arise"]])
        ratio = f"{a / g:.2f}" if g > 0 else "—"
        print(f"{label:38s} {g:9.3f} {a:9.3f} {ratio:>7s}")

    arise_steps = steps["arise"]
    queries = sum(m.get("arise/queries", 0.0) for m in arise_steps) or 1.0

    def per_query(key):
        return sum(m.get(key, 0.0) for m in arise_steps) / queries

    grpo_prompt = mean([m.get("prompt_length/mean", 0.0) for m in steps["grpo"]])
    grpo_response = mean([m.get("response_length/mean", 0.0) for m in steps["grpo"]])
    arise_prompt = mean([m.get("prompt_length/mean", 0.0) for m in arise_steps])
    arise_response = mean([m.get("response_length/mean", 0.0) for m in arise_steps])
    print("\ntokens (per trajectory unless noted)       GRPO     ARISE")
    print(f"{'prompt':38s} {grpo_prompt:9.1f} {arise_prompt:9.1f}")
    print(f"{'response':38s} {grpo_response:9.1f} {arise_response:9.1f}")
    print(
        f"{'injected skill (prompt overhead)':38s} {0.0:9.1f} "
        f"{mean([m.get('arise/prompt_overhead_tokens', 0.0) for m in arise_steps]):9.1f}"
    )
    print(f"{'scoring tokens per query':38s} {0.0:9.1f} {per_query('arise/scoring_tokens'):9.1f}")
    print(f"{'summary prompt tokens per query':38s} {0.0:9.1f} {per_query('arise/summary_prompt_tokens'):9.1f}")
    print(f"{'summary response tokens per query':38s} {0.0:9.1f} {per_query('arise/summary_response_tokens'):9.1f}")
    g_total = mean([m.get("timing_s/step", 0.0) for m in steps["grpo"]])
    a_total = mean([m.get("timing_s/step", 0.0) for m in arise_steps])
    if g_total:
        print(f"\nARISE/GRPO step-time ratio: {a_total / g_total:.3f} (goal on GPU: <= 1.05)")
    print(f"runs and logs: {work}")


if __name__ == "__main__":
    main()
