"""How the confidence gate behaves for a model, a dataset and a library, before training.

``python -m recipe.arise.tools.calibrate --model MODEL --data train.parquet [--library library.parquet] \
    [--queries 64] [--sigma S] [--delta 0.35] [--target T]``

Scores ``--queries`` prompts of the dataset (verl's parquet format: a ``prompt`` column of chat
messages) against every skill of the library (the seed skills by default, or a saved
``library.parquet``, e.g. a checkpoint's ``arise/library.parquet``) with the training's scoring
code (``recipe.arise.core.scoring``: the same prefix, truncation and normalisation) on a vLLM engine
with ``prompt_logprobs``; then prints the distribution of max_k softmax(s / sigma)_k, the gate's
pass rate at sigma and delta, and the sigma that gives the target pass rate
(``recipe.arise.core.calibration``), also at the paper's other deltas. sigma defaults to the one saved
beside the library (``gate.json``, a checkpoint's calibrated sigma), else 1.0.

On a machine without a GPU it applies the project's CPU layer itself (``run_scripts/cpu_env.sh``'s
variables, as ``CPU=1`` runs do; ``--device cpu|gpu`` forces one). The console shows what it does
and vLLM's progress bar; vLLM's log lines are kept to warnings unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipe.arise.core.calibration import (
    GATE_FILE,
    PAPER_SKILL_USE,
    calibrate,
    critical_temperatures,
    max_prob_quantiles,
    paper_target_use,
    pass_rate,
)
from recipe.arise.core.scoring import SCORE_NORMS, score_queries

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
PROG = "python -m recipe.arise.tools.calibrate"
CPU_ENV = Path(__file__).resolve().parents[3] / "run_scripts" / "cpu_env.sh"


def cpu_layer_env(script: Path = CPU_ENV) -> dict[str, str]:
    """The variables ``run_scripts/cpu_env.sh`` exports (sourced in bash, so the CPU runs and this
    tool share one definition); values already set in the environment are kept, as the script does."""
    if not script.is_file():
        raise FileNotFoundError(f"{script}: the CPU layer is not there (set ARISE_CPU=1 and its variables yourself)")
    proc = subprocess.run(
        ["bash", "-c", 'source "$1" >/dev/null && env -0', "cpu_env", str(script)],
        capture_output=True,
        env=dict(os.environ),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace').strip()}")
    after = dict(item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)
    return {k: v for k, v in after.items() if os.environ.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD")}


def has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def say(text: str) -> None:
    """The tool's own progress lines (stderr, so the table on stdout can be piped alone)."""
    print(f"[calibrate] {text}", file=sys.stderr, flush=True)


def load_queries(path: str | os.PathLike, n: int, seed: int = 0) -> list[list[dict]]:
    """``n`` prompts (chat messages) of a verl-format parquet, a seeded sample of its rows."""
    import pandas as pd

    frame = pd.read_parquet(path)
    if "prompt" not in frame.columns:
        raise ValueError(f"{path}: no 'prompt' column (verl's format: a list of chat messages per row)")
    rows = np.random.default_rng(seed).permutation(len(frame))[: int(n)] if n > 0 else np.arange(len(frame))
    queries = []
    for i in sorted(int(r) for r in rows):
        messages = frame["prompt"].iloc[i]
        messages = [dict(m) for m in (messages.tolist() if hasattr(messages, "tolist") else messages)]
        if not messages or not all("role" in m and "content" in m for m in messages):
            raise ValueError(f"{path}: row {i}: 'prompt' is not a list of chat messages with role and content")
        queries.append(messages)
    return queries


def load_skills(library: str | None, seeds: str | None) -> tuple[list[str], float | None]:
    """The cache's skill texts (JSON, in cache order) and the sigma saved beside the library."""
    from recipe.arise.core.library import SkillLibrary
    from recipe.arise.core.skill import load_seed_skills

    if library:
        lib = SkillLibrary.load(library)
        gate = Path(library).resolve().parent / GATE_FILE
        sigma = float(json.loads(gate.read_text())["sigma"]) if gate.exists() else None
    else:
        lib, sigma = SkillLibrary(seed_skills=load_seed_skills(seeds)), None
    texts = [entry.doc.to_json() for entry in lib.cache]
    if not texts:
        raise ValueError(f"{library or 'the seed skills'}: the cache is empty, nothing to select from")
    return texts, sigma


def gate_report(vectors: Sequence[Sequence[float]], sigma: float, delta: float, target: float) -> dict[str, Any]:
    """What the tool prints, as data: max-p quantiles at sigma, the pass rate at (sigma, delta),
    the calibrated sigma for ``target``, and the same at the paper's deltas."""
    stars = critical_temperatures(vectors, delta)
    found = calibrate(stars, target)
    rows = []
    for d, use in PAPER_SKILL_USE:
        s = critical_temperatures(vectors, d)
        c = calibrate(s, use)
        rows.append(
            {"delta": d, "paper_use": use, "pass_at_sigma": pass_rate(sigma, s), "sigma": c.sigma, "pass": c.rate}
        )
    return {
        "queries": len(vectors),
        "scorable": int(np.sum(~np.isnan(stars))),
        "candidates": max((len(v) for v in vectors), default=0),
        "sigma": float(sigma),
        "delta": float(delta),
        "target": float(target),
        "max_p_quantiles": max_prob_quantiles(vectors, sigma, QUANTILES),
        "pass_rate": pass_rate(sigma, stars),
        "calibrated_sigma": found.sigma,
        "calibrated_pass_rate": found.rate,
        "paper_deltas": rows,
    }


def _f(x, spec=".3f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def format_report(r: dict[str, Any]) -> str:
    q = r["max_p_quantiles"]
    lines = [
        f"{r['scorable']}/{r['queries']} queries scored against {r['candidates']} skills",
        f"max p at sigma={r['sigma']:g}: " + "  ".join(f"q{int(100 * k):02d} {_f(v)}" for k, v in q.items()),
        f"gate pass rate at sigma={r['sigma']:g}, delta={r['delta']:g}: {_f(r['pass_rate'])}",
        f"target pass rate {r['target']:.3f}: sigma={_f(r['calibrated_sigma'], '.4g')} "
        f"(pass rate {_f(r['calibrated_pass_rate'])} on these queries)",
        "",
        "| delta | paper skill use | pass at sigma | sigma for it | its pass rate |",
        "|---|---|---|---|---|",
    ]
    for row in r["paper_deltas"]:
        lines.append(
            f"| {row['delta']:.2f} | {row['paper_use']:.3f} | {_f(row['pass_at_sigma'])} | "
            f"{_f(row['sigma'], '.4g')} | {_f(row['pass'])} |"
        )
    if r["calibrated_sigma"] is None and r["scorable"]:
        lines.append("no sigma changes the pass rate here (every query passes at any sigma, or none does)")
    return "\n".join(lines)


def vllm_engine(model: str, args) -> Callable[[list[list[int]]], list[Any]]:
    """An offline vLLM engine whose prompt log-probs come back in verl's layout."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kwargs = {"model": model, "dtype": args.dtype, "enforce_eager": True, "seed": args.seed}
    if args.max_model_len:
        kwargs["max_model_len"] = args.max_model_len
    if args.gpu_memory_utilization:
        kwargs["gpu_memory_utilization"] = args.gpu_memory_utilization
    say(f"starting the vLLM engine on {model} (loading the weights; ~30-60 s on CPU)")
    started = time.time()
    llm = LLM(**kwargs)
    say(f"vLLM engine ready in {time.time() - started:.0f} s")
    params = SamplingParams(max_tokens=1, temperature=1.0, top_p=1.0, top_k=-1, prompt_logprobs=0, detokenize=False)

    def run(prompts: list[list[int]]) -> list[list[list[float]]]:
        say(f"scoring: {len(prompts)} requests (query x skill), vLLM's progress bar below")
        # vLLM's own progress bar (tqdm on stderr): requests done, rate, time left
        outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=True)
        rows = []
        for out, ids in zip(outputs, prompts, strict=True):
            entries = out.prompt_logprobs or []
            # vLLM: entry j is a {token: Logprob} dict for prompt token j (None for the first);
            # verl's layout: entry j is the log-prob of token j + 1
            row = []
            for j in range(1, len(ids)):
                d = entries[j] if j < len(entries) else None
                lp = d.get(ids[j]) if d else None
                row.append([float(lp.logprob) if lp is not None else math.nan])
            rows.append(row + [[0.0]])
        return rows

    return run


def prepare_device(args) -> None:
    """Before vLLM is imported: the CPU layer where there is no GPU, and vLLM's log level."""
    if not args.verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if os.environ.get("ARISE_CPU") == "1" or args.device == "gpu":
        return
    if args.device == "cpu" or not has_gpu():
        layer = cpu_layer_env()
        os.environ.update(layer)
        say(f"no GPU: the CPU layer ({CPU_ENV.relative_to(CPU_ENV.parents[1])}: {', '.join(sorted(layer))})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="HF model path (the policy whose scores the gate sees)")
    parser.add_argument("--data", required=True, help="a verl-format parquet (prompt column of chat messages)")
    parser.add_argument("--library", help="a library.parquet (e.g. CKPT/global_step_N/arise/library.parquet)")
    parser.add_argument("--seeds", help="seed skills JSON when no --library (default: the paper's 5 seeds)")
    parser.add_argument("--queries", type=int, default=64, help="prompts to score (0: all)")
    parser.add_argument("--sigma", type=float, help="sigma to evaluate (default: gate.json beside --library, else 1.0)")
    parser.add_argument("--delta", type=float, default=0.35, help="the gate delta")
    parser.add_argument("--target", type=float, help="target pass rate (default: the paper's skill use at delta)")
    parser.add_argument("--score-norm", choices=SCORE_NORMS, default="mean")
    parser.add_argument("--max-skill-tokens", type=int, default=128)
    parser.add_argument("--train-manager", action="store_true", help="score as arise.selection.train_manager does")
    parser.add_argument("--chat-template-kwargs", default="{}", help="JSON, e.g. '{\"enable_thinking\": false}'")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0, help="which rows are sampled")
    parser.add_argument("--json", help="also write the report as JSON here")
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "gpu"],
        default="auto",
        help="auto: the CPU layer (run_scripts/cpu_env.sh) where torch sees no GPU; cpu: always; gpu: never",
    )
    parser.add_argument("--verbose", action="store_true", help="show vLLM's log lines (default: warnings only)")
    args = parser.parse_args(argv)

    try:
        texts, saved_sigma = load_skills(args.library, args.seeds)
        queries = load_queries(args.data, args.queries, args.seed)
        if not Path(args.model).is_dir() and args.model.startswith((".", "/", "~")):
            raise FileNotFoundError(f"--model {args.model}: no such folder")
        say(f"{len(queries)} queries of {args.data} x {len(texts)} skills ({args.library or 'the seed skills'})")
        prepare_device(args)
    except (OSError, ValueError, RuntimeError) as error:  # bad input: one line naming it, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 2
    sigma = args.sigma if args.sigma is not None else (saved_sigma if saved_sigma is not None else 1.0)
    target = args.target if args.target is not None else paper_target_use(args.delta)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    vectors = score_queries(
        vllm_engine(args.model, args),
        tokenizer,
        queries,
        texts,
        max_skill_tokens=args.max_skill_tokens,
        score_norm=args.score_norm,
        train_manager=args.train_manager,
        chat_kwargs=json.loads(args.chat_template_kwargs),
    )
    report = gate_report(vectors, sigma, args.delta, target)
    print(format_report(report), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "scores": vectors}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
