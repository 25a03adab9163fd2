"""Per-step cost of ARISE vs plain GRPO on the CPU end-to-end setup (same settings and seeds).

Runs ``run_scripts/cpu_smoke_arise.sh`` with ``ARISE=true`` and ``ARISE=false`` interleaved (one
run of each arm per repetition, the order reversed every other repetition), reads verl's per-step
timings and the ``arise/*`` token counters from each run's ``metrics.jsonl``, drops the first step
of every run (vLLM warm-up), and prints per-phase seconds side by side with the ARISE/GRPO ratio,
plus the token accounting per query the paper's overhead table reports.

The step-time ratio is the ratio of the arms' mean step times, with its 95% interval over the
paired repetitions (:func:`ratio_interval`, delta method): the repetitions go on, at least
``--reps`` and at most ``--max-reps``, until every ratio's interval is within +- ``--target``
(3%); where the cap comes first the bench says NOT RESOLVED (the noise between runs of one arm is
larger than that).

    python bench/bench_step_overhead.py [--steps 5] [--reps 3] [--max-reps 8] [--phase1-steps 0] [--work DIR]

``--phase1-steps 0`` measures Phase II (selection + scoring + summary) from the first step.

``--paper-proportions`` runs the same tiny model and script path at the paper's token proportions
(App. E: prompt 312, response 2,847 tokens, an injected skill of 66 tokens, G=8, a 10-skill cache):

* prompts padded (worked examples before the question) to ``--prompt-tokens`` (default 147) chat
  tokens, responses forced to ``rollout.max_model_len`` (``--positions``, default 1,536) minus the
  longest injected prompt, ~9x the prompt, with verl's ``actor_rollout_ref.rollout.ignore_eos``
  (verl 0.9.1's vLLM server puts it into every request's ``SamplingParams`` unless the request sets
  it; the agent loop's sampling params cannot carry vLLM's ``min_tokens``). Every trajectory then
  has exactly the same response length in both arms;
* G=8 (``GROUP``), ARISE in Phase II from step 1 (``PHASE1_STEPS=0``), and a library whose cache
  holds 10 seed-like skills of ~30 tokens each from step 1 (``arise.library.load_from``, a
  ``SkillLibrary`` parquet built here): the shortest skill JSON the schema allows is ~27 tiny
  tokens, so the prompt is 147 tokens for a skill of 21% of it (the paper's 66 / 312). The tiny
  model has 1,024 positions; ``--positions`` above that runs a copy of it whose config allows more
  (same weights; RoPE needs no trained positions). ``--prompt-tokens 99 --positions 1024
  --batch 4`` is the earlier setting (a skill 32% of the prompt, heavier on ARISE);
* batch 2 queries per step (``--batch``), so that the longer sequences keep a run ~5 minutes;
* the confidence gate off (``arise.selection.use_gate=false``): the tiny model scores the 10
  look-alike skills almost flat and delta=0.35 would reject every selection, so a skill goes to the
  75% of trajectories outside the control arm, the paper's training skill-use rate (~73%, App. E.1);
  the scoring itself runs exactly as with the gate;
* dynamic sampling off in both arms (``algorithm.filter_groups.enable=False``): every step
  generates exactly batch x G trajectories, whatever the rewards;
* the mean over the runs of an arm of each run's mean per step (steps 2..``--steps``),
  the arms interleaved; ``--score-top-m M`` adds an arm scoring only the top-M cache skills
  (``arise.selection.score_top_m``), ``--full-prefill-arm`` one where every scoring request
  prefills query + skill (``arise.selection.scoring_prefix_cache=false``, the paper's cost; the
  default reads the query from vLLM's prefix cache), ``--stream-arm`` one whose summary rollout
  starts as soon as its group's rewards are in (``arise.summary.stream=true``), measured side by
  side.

A repetition (``--steps 3``, two arms) takes ~10 minutes on 2 cores, each extra arm ~5 more: the
defaults run 30-80 minutes.

Its last printed line is ``ARISE/GRPO step-time ratio: X (95% interval L-H, +-P%)``. Extra hydra overrides for every arm
can follow ``--``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "run_scripts" / "cpu_smoke_arise.sh"
TINY_POSITIONS = 1024  # the tiny model's max_position_embeddings (run_scripts/cpu_env.sh)

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

# Ten seed-like skills for --paper-proportions: the schema's fields, short values in the tiny
# tokenizer's vocabulary (each injection "SKILL:{json}\n" is ~28-32 tokens).
PAPER_SKILLS = [
    ("count_up", "algebra", "Count up", ["Start", "Count up"], "Recheck"),
    ("make_ten", "general", "Add the rest", ["Find ten", "Add"], "Recheck"),
    ("swap_order", "general", "Add the smaller one", ["Order", "Add"], "Recheck"),
    ("count_check", "algebra", "Count up to check", ["Count up", "Check"], "Recheck"),
    ("equation_setup", "algebra", "Write the sum", ["Name unknowns", "Solve"], "Plug in"),
    ("case_enumeration", "general", "Split into cases", ["Split", "Solve each"], "Recheck"),
    ("symmetry", "general", "Spot symmetry", ["Spot symmetry", "Solve a case"], "Recheck"),
    ("extremal", "general", "Try extremes", ["Try extremes", "Bound it"], "Check equality"),
    ("modular_check", "algebra", "Reduce modulo ten", ["Pick modulus", "Reduce"], "Recheck"),
    ("sum_check", "general", "Add in order", ["Add", "Check"], "Recheck"),
]


def tiny_assets() -> Path:
    """The tiny model, tokenizer and dataset of the CPU smoke run (content-keyed cache)."""
    command = [sys.executable, "-m", "recipe.arise.cpu.tiny", "--cached"]
    out = subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def watch_run(cmd: list[str], env: dict, metrics: Path, console: Path, poll_s: float = 0.25):
    """Run ``cmd`` (output to ``console``), noting when each step's row reaches ``metrics``: verl's
    file logger writes one row per step, unbuffered, once the step is done. Returns (exit status,
    {step: seconds since the start at which its last row arrived})."""
    arrived: dict[int, float] = {}
    started, seen = time.monotonic(), 0

    def read_new():
        nonlocal seen
        if not metrics.is_file():
            return
        with metrics.open("rb") as f:
            f.seek(seen)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a row still being written waits for the next poll
        seen += len(complete)
        for line in complete.splitlines():
            if line.strip():
                arrived[int(json.loads(line)["step"])] = time.monotonic() - started

    with console.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        while proc.poll() is None:
            read_new()
            time.sleep(poll_s)
    read_new()
    return proc.returncode, arrived


def run_once(
    arm: str,
    arise: bool,
    args,
    tiny: Path,
    out: Path,
    env_extra: dict,
    overrides: list[str],
    lock: str | None = None,
) -> list[dict]:
    """One launch of the CPU smoke script; its steps 2.. (step 1 includes vLLM's warm-up), each with
    ``bench/wall_s``: the wall-clock seconds since the previous step's row (the whole iteration,
    validation and verl's metrics included: where an async trainer overlaps work, it shows here).
    ``lock``: a file to hold (flock) for the launch, so that no other launch shares the cores."""
    out.mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "OUT_DIR": str(out),
        "TINY_DIR": str(tiny),
        "VERL_FILE_LOGGER_PATH": str(metrics),
        "STEPS": str(args.steps),
        "PHASE1_STEPS": str(args.phase1_steps),
        "SAVE_FREQ": "-1",
        "ARISE": "true" if arise else "false",
        **env_extra,
    }
    started = time.time()
    cmd = [*(["flock", lock] if lock else []), "bash", str(SCRIPT), *overrides]
    code, arrived = watch_run(cmd, env, metrics, out / "console.log")
    if code != 0:
        raise SystemExit(f"run failed ({arm}), log: {out / 'run.log'} and {out / 'console.log'}")
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    print(f"  {arm:12s} run: {len(rows)} steps in {time.time() - started:.0f} s", flush=True)
    steps = []
    for row in rows:
        step = row["step"]
        if step > 1:  # step 1 includes vLLM warm-up
            wall = arrived[step] - arrived[step - 1] if step in arrived and step - 1 in arrived else math.nan
            steps.append({**row["data"], "bench/wall_s": wall})
    return steps


def mean(values):
    return statistics.fmean(values) if values else 0.0


# ------------------------------------------------------------------------- repetitions and intervals
# A step-time ratio is reported with its 95% interval, and the arms are repeated until that interval
# is within +-TARGET of the ratio: one run of the same arm moves by +-12% on a shared 2-core machine,
# more than the 5% the ratio checks (docs/performance.md).
TARGET = 0.03
# two-sided 95% Student-t quantiles t_0.975 for 1..30 degrees of freedom (beyond: the normal's 1.96)
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def ratio_interval(arm: list[float], base: list[float]) -> tuple[float, float, float]:
    """(R, low, high): R = mean(arm) / mean(base) over paired repetitions (``arm[i]`` and ``base[i]``
    ran back to back) and its 95% interval by the delta method, R +- t_{n-1} sd(arm_i - R base_i) /
    (sqrt(n) mean(base)); pairing takes out the drift the machine's load puts on both. Fewer than
    two pairs: no interval (nan, nan)."""
    if len(arm) != len(base) or not arm:
        raise ValueError(f"ratio_interval needs paired values: {len(arm)} vs {len(base)}")
    base_mean = statistics.fmean(base)
    if not base_mean > 0:
        raise ValueError(f"ratio_interval: the base arm's mean is {base_mean}, not > 0")
    ratio = statistics.fmean(arm) / base_mean
    n = len(arm)
    if n < 2:
        return ratio, math.nan, math.nan
    residuals = [a - ratio * b for a, b in zip(arm, base, strict=True)]
    half = (T975[n - 2] if n - 1 <= len(T975) else 1.96) * statistics.stdev(residuals) / (math.sqrt(n) * base_mean)
    return ratio, ratio - half, ratio + half


def within(interval: tuple[float, float, float], target: float = TARGET) -> bool:
    """Whether the interval lies within +-target (relative) of its ratio."""
    ratio, low, high = interval
    return math.isfinite(low) and max(high - ratio, ratio - low) <= target * ratio


def describe(interval: tuple[float, float, float]) -> str:
    """``1.047 (95% interval 1.012-1.082, +-3.3%)``."""
    ratio, low, high = interval
    if not math.isfinite(low):
        return f"{ratio:.3f} (no interval from one run per arm)"
    return f"{ratio:.3f} (95% interval {low:.3f}-{high:.3f}, +-{(high - ratio) / ratio:.1%})"


def interleaved(arms: list[str], run, value, min_reps: int, max_reps: int, target: float = TARGET, say=None):
    """Run every arm once per repetition, the order reversed every other one (A B C, C B A, ...),
    ``run(arm, rep)`` giving a run's result and ``value(result)`` its step time, until each arm's
    ratio to ``arms[0]`` has its interval within +-target: at least ``min_reps``, at most
    ``max_reps`` repetitions. Returns ``({arm: [result per rep]}, {arm: interval}, reached)``."""
    say = say or (lambda line: print(line, flush=True))
    results: dict[str, list] = {arm: [] for arm in arms}
    intervals: dict[str, tuple[float, float, float]] = {}
    for rep in range(max_reps):
        for arm in arms if rep % 2 == 0 else arms[::-1]:
            results[arm].append(run(arm, rep))
        base = [value(r) for r in results[arms[0]]]
        intervals = {arm: ratio_interval([value(r) for r in results[arm]], base) for arm in arms[1:]}
        say(
            f"  after {rep + 1} repetition(s): "
            + "; ".join(f"{a}/{arms[0]} {describe(i)}" for a, i in intervals.items())
        )
        if rep + 1 >= min_reps and all(within(i, target) for i in intervals.values()):
            return results, intervals, True
    return results, intervals, False


def run_step_time(steps: list[dict]) -> float:
    """One run's step time: its mean ``timing_s/step`` over the measured steps."""
    return mean([m.get("timing_s/step", 0.0) for m in steps])


def say_precision(reached: bool, reps: int, args) -> None:
    if reached:
        print(f"{reps} paired repetition(s); every ratio's 95% interval within +-{args.target:.0%}")
    else:
        print(
            f"NOT RESOLVED: after {reps} paired repetition(s) (--max-reps) a 95% interval is wider than "
            f"+-{args.target:.0%}: the run-to-run noise is larger than that; more repetitions or a quieter machine"
        )


# ---------------------------------------------------------------------------------- default mode
def default_mode(args, work: Path, tiny: Path) -> None:
    runs, intervals, reached = interleaved(
        ["grpo", "arise"],
        lambda name, rep: run_once(name, name == "arise", args, tiny, work / f"{name}_{rep}", {}, args.overrides),
        run_step_time,
        args.reps,
        args.max_reps,
        args.target,
    )
    steps = {name: [m for run in name_runs for m in run] for name, name_runs in runs.items()}
    reps = len(runs["grpo"])
    print(
        f"\nCPU end-to-end setup (tiny model), {reps} runs each, steps 2..{args.steps} of every run, "
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
    print(f"{'scoring tokens per query (prefilled)':38s} {0.0:9.1f} {per_query('arise/scoring_tokens'):9.1f}")
    print(f"{'scoring tokens per query (cache read)':38s} {0.0:9.1f} {per_query('arise/scoring_cached_tokens'):9.1f}")
    print(f"{'summary prompt tokens per query':38s} {0.0:9.1f} {per_query('arise/summary_prompt_tokens'):9.1f}")
    print(f"{'summary response tokens per query':38s} {0.0:9.1f} {per_query('arise/summary_response_tokens'):9.1f}")
    print(f"runs and logs: {work}")
    print("(goal on GPU at the paper's proportions: <= 1.05; see --paper-proportions)")
    say_precision(reached, reps, args)
    print(f"ARISE/GRPO step-time ratio: {describe(intervals['arise'])}")


# ------------------------------------------------------------------------ paper-proportions mode
def chat_len(tokenizer, content: str) -> int:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
        ids = list(ids["input_ids"])
    return len(ids)


def pad_question(tokenizer, question: str, target: int, rng: random.Random) -> str:
    """Worked examples ("a plus b is c.") before the question until the chat prompt has ``target``
    tokens (or as close below as the fragments allow)."""
    head = ""
    while True:
        a, b = rng.randrange(10), rng.randrange(10)
        for fragment in (f"{a} plus {b} is {a + b}. ", "So. ", ". "):
            if chat_len(tokenizer, head + fragment + question) <= target:
                head += fragment
                break
        else:
            return head + question


def with_positions(tiny: Path, positions: int, work: Path) -> Path:
    """The tiny assets, or a copy whose model config allows ``positions`` (same weights, tokenizer
    and data: vLLM refuses a max_model_len above the config's max_position_embeddings)."""
    if positions <= TINY_POSITIONS:
        return tiny
    out = work / f"tiny_positions_{positions}"
    if (out / "tiny_assets.json").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tiny / "model", out / "model")
    config_path = out / "model" / "config.json"
    config = json.loads(config_path.read_text())
    config["max_position_embeddings"] = positions
    config_path.write_text(json.dumps(config, indent=2))
    (out / "data").symlink_to((tiny / "data").resolve(), target_is_directory=True)
    shutil.copy(tiny / "tiny_assets.json", out / "tiny_assets.json")  # cpu_smoke_arise.sh: built already
    return out


def paper_setup(args, work: Path, tiny: Path) -> tuple[dict, list[str], dict]:
    """Build the padded dataset and the 10-skill library; return (env, overrides, facts)."""
    import pandas as pd
    from transformers import AutoTokenizer

    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.prompts import format_skill_injection
    from recipe.arise.core.skill import SkillDoc

    tokenizer = AutoTokenizer.from_pretrained(tiny / "model")
    docs = [
        SkillDoc.from_dict(dict(skill_name=n, problem_type=t, key_insight=k, method=m, check=c))
        for n, t, k, m, c in PAPER_SKILLS
    ]
    skill_tokens = [len(tokenizer.encode(format_skill_injection(d) + "\n", add_special_tokens=False)) for d in docs]
    library = SkillLibrary(
        cache_capacity=10,
        reservoir_capacity=100,
        ema_beta=0.9,
        seed_skills=docs,
        new_skill_policy="fair_trial",
        trial_uses=8,
        trial_steps=20,
        seed_trial_uses=8,
    )
    assert len(library.cache) == 10, "the 10 skills must all be in the cache"
    data_dir = work / "paper_data"
    data_dir.mkdir(parents=True, exist_ok=True)
    library_path = data_dir / "library.parquet"
    library.save(library_path)

    rng = random.Random(0)
    frame = pd.read_parquet(tiny / "data" / "train.parquet")
    rows, lengths = [], []
    for row in frame.to_dict("records"):
        messages = [dict(m) for m in row["prompt"]]
        content = pad_question(tokenizer, messages[-1]["content"], args.prompt_tokens, rng)
        messages[-1]["content"] = content
        lengths.append(chat_len(tokenizer, content))
        rows.append({**row, "prompt": messages, "extra_info": {**row["extra_info"], "question": content}})
    train = data_dir / "train.parquet"
    pd.DataFrame(rows).to_parquet(train)

    # the injected prompt must fit rollout.prompt_length (data.max_prompt_length); the response gets
    # the rest of max_model_len, so every trajectory's prompt + response fits
    max_prompt = max(lengths) + max(skill_tokens) + 2
    max_response = args.positions - max_prompt
    env = {
        "GROUP": str(args.group),
        "BATCH": str(args.batch),
        "MAX_PROMPT": str(max_prompt),
        "MAX_RESPONSE": str(max_response),
        "MAX_MODEL_LEN": str(args.positions),
    }
    overrides = [
        f"data.train_files={train}",
        "actor_rollout_ref.rollout.ignore_eos=True",
        "algorithm.filter_groups.enable=False",
        f"arise.library.load_from={library_path}",
        # the tiny model scores 10 look-alike skills almost flat, so the gate (delta 0.35) would reject
        # every selection; without it a skill goes to every trajectory outside the control arm (75%),
        # the paper's training skill-use rate (~73%, App. E.1): scoring runs exactly as with the gate
        "arise.selection.use_gate=false",
    ]
    facts = {
        "prompt": statistics.fmean(lengths),
        "prompt_range": (min(lengths), max(lengths)),
        "response": max_response,
        "skill_tokens": statistics.fmean(skill_tokens),
        "skill_range": (min(skill_tokens), max(skill_tokens)),
    }
    return env, overrides, facts


def mean_of_runs(runs: list[list[dict]], get) -> float:
    """Mean over runs of each run's mean per step (the ratios' estimator: ratio of means)."""
    return mean([mean([get(m) for m in steps]) for steps in runs])


def paper_mode(args, work: Path, tiny: Path) -> None:
    tiny = with_positions(tiny, args.positions, work)
    env, overrides, facts = paper_setup(args, work, tiny)
    overrides += args.overrides
    arms = [("GRPO", False, []), ("ARISE", True, [])]
    if args.full_prefill_arm:  # the paper's scoring cost: every request prefills query + skill
        arms.append(("ARISE full prefills", True, ["arise.selection.scoring_prefix_cache=false"]))
    if args.stream_arm:  # O_{G+1} overlapped with the other groups' rollouts
        arms.append(("ARISE streamed", True, ["arise.summary.stream=true", "arise.summary.choose=first"]))
    if args.score_top_m:
        arms.append((f"ARISE top-{args.score_top_m}", True, [f"arise.selection.score_top_m={args.score_top_m}"]))
    print(
        f"paper proportions: chat prompt {facts['prompt']:.1f} tokens ({facts['prompt_range'][0]}-"
        f"{facts['prompt_range'][1]}), response {facts['response']} (forced, ignore_eos), "
        f"{facts['response'] / facts['prompt']:.1f}x the prompt; injected skill {facts['skill_tokens']:.1f} tokens "
        f"({facts['skill_range'][0]}-{facts['skill_range'][1]}, {facts['skill_tokens'] / facts['prompt']:.0%} of the "
        f"prompt); G={args.group}, batch {args.batch}, 10 cache skills, max_model_len {args.positions}; "
        f"{args.reps}-{args.max_reps} run(s) per arm of {args.steps} steps, interleaved, until every ratio's 95% "
        f"interval is within +-{args.target:.0%}",
        flush=True,
    )
    spec = {name: (arise, extra) for name, arise, extra in arms}

    def run(name, rep):
        folder = work / f"{name.lower().replace(' ', '_')}_{rep}"
        return run_once(name, spec[name][0], args, tiny, folder, env, overrides + spec[name][1])

    names = [name for name, _, _ in arms]
    runs, intervals, reached = interleaved(names, run, run_step_time, args.reps, args.max_reps, args.target)
    grpo = runs["GRPO"]
    reps = len(grpo)
    print(
        f"\nCPU end-to-end setup (tiny model) at the paper's proportions: mean over {reps} run(s) per arm of "
        f"each run's mean over steps 2..{args.steps}, ARISE in Phase II from step 1; machine: {os.cpu_count()} cores"
    )
    header = f"{'per step (s)':38s} {'GRPO':>9s}"
    for name in names[1:]:
        header += f" {name:>13s} {'ratio':>6s}"
    print("\n" + header)
    for label, get in PHASES:
        g = mean_of_runs(grpo, get)
        line = f"{label:38s} {g:9.3f}"
        for name in names[1:]:
            a = mean_of_runs(runs[name], get)
            line += f" {a:13.3f} {(f'{a / g:.3f}' if g > 0 else '—'):>6s}"
        print(line)
    step = PHASES[-1][1]
    for name in names:
        per_run = ", ".join(f"{mean([step(m) for m in steps]):.2f}" for steps in runs[name])
        print(f"  {name} step total per run (s): {per_run}")

    # ---- the paper's token table (App. E): per trajectory, prompt + response
    def arise_per(steps_runs, key, per="arise/trajectories"):
        return statistics.median(
            [sum(m.get(key, 0.0) for m in s) / (sum(m.get(per, 0.0) for m in s) or 1.0) for s in steps_runs]
        )

    g_prompt = mean_of_runs(grpo, lambda m: m.get("prompt_length/mean", 0.0))
    g_response = mean_of_runs(grpo, lambda m: m.get("response_length/mean", 0.0))
    g_total = g_prompt + g_response
    print("\ntokens per trajectory (App. E layout)  prompt  response     total  overhead")
    print(f"{'GRPO':36s} {g_prompt:8.1f} {g_response:9.1f} {g_total:9.1f} {'—':>9s}")
    table = {}
    for name in names[1:]:
        prompt = arise_per(runs[name], "arise/prompt_tokens")
        response = arise_per(runs[name], "arise/response_tokens")
        table[name] = (prompt, response)
        total = prompt + response
        print(f"{name:36s} {prompt:8.1f} {response:9.1f} {total:9.1f} {(total - g_total) / g_total:+9.1%}")

    # ---- ARISE's own requests and the token floor (all tokens processed per query)
    for name in names[1:]:
        s = runs[name]
        use_rate = statistics.median([mean([m.get("arise/skill_use_rate", 0.0) for m in r]) for r in s])
        injected = statistics.median([mean([m.get("arise/prompt_overhead_tokens", 0.0) for m in r]) for r in s])
        scoring = arise_per(s, "arise/scoring_tokens", per="arise/queries")
        scoring_cached = arise_per(s, "arise/scoring_cached_tokens", per="arise/queries")
        rescored = arise_per(s, "arise/scoring_rescored", per="arise/queries")
        sum_prompt = arise_per(s, "arise/summary_prompt_tokens", per="arise/queries")
        sum_response = arise_per(s, "arise/summary_response_tokens", per="arise/queries")
        summaries = statistics.median([mean([m.get("arise/summary_attempts", 0.0) for m in r]) for r in s])
        prompt, response = table[name]
        grpo_query = args.group * g_total
        arise_query = args.group * (prompt + response) + scoring + sum_prompt + sum_response
        decode = (args.group * response + sum_response) / (args.group * g_response) - 1.0
        print(f"\n{name}: ARISE's extra work per query (G={args.group} trajectories)")
        print(
            f"  skill use rate {use_rate:.2f}; injected tokens per trajectory {injected:.1f} "
            f"({injected / use_rate if use_rate else 0.0:.1f} per injected trajectory)"
        )
        print(
            f"  scoring (prefill only)               {scoring:9.1f} tokens prefilled, {scoring_cached:.1f} read from "
            f"the prefix cache ({rescored:.2f} requests scored again)"
        )
        print(
            f"  summary O_G+1 prompt / response      {sum_prompt:9.1f} / {sum_response:.1f} tokens "
            f"({summaries:.2f} summaries per step)"
        )
        print(
            f"  token floor: all tokens per query    {grpo_query:9.1f} GRPO, {arise_query:.1f} ARISE: "
            f"{arise_query / grpo_query - 1.0:+.1%} (decoded tokens {decode:+.1%})"
        )

    print(f"\nruns and logs: {work}")
    say_precision(reached, reps, args)
    for name in names[2:]:
        print(f"{name}/GRPO step-time ratio: {describe(intervals[name])}")
    print(f"ARISE/GRPO step-time ratio: {describe(intervals['ARISE'])}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 5; 3 with --paper-proportions)")
    parser.add_argument("--reps", type=int, default=3, help="at least this many runs per arm (interleaved)")
    parser.add_argument(
        "--max-reps", type=int, default=8, help="at most this many runs per arm, if the ratio's interval stays wide"
    )
    parser.add_argument(
        "--target", type=float, default=TARGET, help="stop when every ratio's 95%% interval is within +-target"
    )
    parser.add_argument("--phase1-steps", type=int, default=0)
    parser.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    parser.add_argument("--paper-proportions", action="store_true", help="the paper's token proportions (see above)")
    parser.add_argument("--prompt-tokens", type=int, default=147, help="--paper-proportions: chat prompt length")
    parser.add_argument(
        "--positions", type=int, default=1536, help="--paper-proportions: max_model_len (prompt + forced response)"
    )
    parser.add_argument("--group", type=int, default=8, help="--paper-proportions: G")
    parser.add_argument("--batch", type=int, default=2, help="--paper-proportions: queries per step")
    parser.add_argument(
        "--score-top-m", type=int, default=0, help="--paper-proportions: add an ARISE arm with selection.score_top_m=M"
    )
    parser.add_argument(
        "--full-prefill-arm",
        action="store_true",
        help="--paper-proportions: add an ARISE arm with selection.scoring_prefix_cache=false (the paper's cost)",
    )
    parser.add_argument(
        "--stream-arm",
        action="store_true",
        help="--paper-proportions: add an ARISE arm with summary.stream=true (O_G+1 during the wave)",
    )
    parser.add_argument("overrides", nargs="*", help="hydra overrides for every run (after --)")
    args = parser.parse_args(argv)
    paper = args.paper_proportions
    if args.steps is None:
        args.steps = 3 if paper else 5
    if args.reps < 1 or args.max_reps < args.reps:
        parser.error("need 1 <= --reps <= --max-reps")
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step of every run is dropped)")
    if args.score_top_m < 0:
        parser.error("--score-top-m must be >= 0")
    if (args.score_top_m or args.full_prefill_arm or args.stream_arm) and not paper:
        parser.error("--score-top-m, --full-prefill-arm and --stream-arm need --paper-proportions")
    if paper and args.phase1_steps:
        parser.error("--paper-proportions measures Phase II from step 1 (--phase1-steps 0)")
    work = Path(args.work or tempfile.mkdtemp(prefix="arise_overhead_"))
    work.mkdir(parents=True, exist_ok=True)
    tiny = tiny_assets()
    if paper:
        paper_mode(args, work, tiny)
    else:
        default_mode(args, work, tiny)


if __name__ == "__main__":
    main()
