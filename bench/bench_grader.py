"""Benchmark recipe.arise.core.grader.grade against verl's built-in MATH scorer.

Builds N realistic responses (default 512 = one step of batch 64 x G 8) from the raw
evaluation data (MATH-500 solutions/answers, AMC23, AIME24): multi-paragraph responses,
about half correct, some wrong, some without a box, some echoing a ``SKILL:{...}`` line,
a few pathological ones.  Grades all of them with both scorers in one run and prints
throughput, latency percentiles and agreement.

math-verify runs in the grader's worker processes (pebble, forkserver), which import this script
as ``__main__`` in every worker -- hence the ``if __name__ == "__main__"`` guard below.

Run from the repo root:  python bench/bench_grader.py --n 512 --shared ../shared
(``--shared`` defaults to $ARISE_SHARED_DIR, else ../shared; the few rows of tests/fixtures work
too, for a quick check: ``--raw tests/fixtures/raw``.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SKILL_ECHO = (
    'SKILL:{"skill_name":"equation_setup","problem_type":"algebra","key_insight":"Translate word-problem '
    'quantities into variables and equations before solving","method":["Name unknowns","Write equations, solve"],'
    '"check":"Plug in"}\n'
)
PATHOLOGICAL = [
    "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    "\\boxed{" + "9" * 5000 + "}",
    "\\boxed{100000!}",
    "\\boxed{" + "{" * 2000 + "1" + "}" * 2000 + "}",
    "\\boxed{\x00\x01\xff binary \ufffd}",
]


def _load(raw: Path, name: str) -> list[dict]:
    p = raw / name / "test.jsonl"
    if not p.is_file():
        raise SystemExit(f"bench_grader: {p} not found (--shared DIR holds data/raw; or --raw DIR)")
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def _fmt(x) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def _equivalent(gold, rnd) -> str:
    """An equivalent but differently written form of the gold answer."""
    import re

    g = _fmt(gold)
    if re.fullmatch(r"-?\d+", g):
        return rnd.choice(
            [f"{g}.0", f"x = {g}", f"{g} \\text{{ units}}", f"{int(g):,}", f"\\frac{{{2 * int(g)}}}{{2}}"]
        )
    m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", g)
    if m:
        return rnd.choice(
            [f"{m.group(1)}{m.group(2)}/{m.group(3)}", f"{m.group(1)}\\dfrac{{{m.group(2)}}}{{{m.group(3)}}}"]
        )
    return g.replace("\\left", "").replace("\\right", "").replace(" ", "")


def build_cases(raw: Path, n: int, seed: int = 0) -> list[tuple[str, object, str]]:
    """(response, ground_truth, kind) triples from the raw data folder ``raw``."""
    rnd = random.Random(seed)
    pools = {
        "math500": [(r["problem"], r["answer"], r.get("solution")) for r in _load(raw, "math500")],
        "amc23": [(r["problem"], r["answer"], None) for r in _load(raw, "amc23_qwen25math")],
        "aime24": [(r["problem"], r["answer"], r.get("solution")) for r in _load(raw, "aime24_qwen25math")],
    }
    all_answers = [a for _, a, _ in pools["math500"]]
    cases = []
    n_path = max(1, n // 100)
    for i in range(n - n_path):
        src = rnd.choices(["math500", "amc23", "aime24"], weights=[6, 2, 2])[0]
        problem, gold, solution = rnd.choice(pools[src])
        roll = rnd.random()
        intro = f"We need to solve: {problem[:300]}\n\nLet me think about the structure first. "
        middle = (
            "Setting up the key relation and simplifying, a first guess would be "
            f"$\\boxed{{{rnd.choice(all_answers)}}}$, but checking the boundary case shows it is off.\n\n"
            "Re-deriving carefully, each step is verified by substitution.\n\n"
        )
        if roll < 0.1:
            kind = "equivalent_form"
            body = intro + middle + f"Therefore, the final answer is $\\boxed{{{_equivalent(gold, rnd)}}}$."
        elif roll < 0.5:
            kind = "correct"
            if src == "math500" and solution and rnd.random() < 0.5:
                body = intro + solution
            else:
                body = intro + middle + f"Therefore, the final answer is $\\boxed{{{_fmt(gold)}}}$."
        elif roll < 0.8:
            kind = "wrong"
            if isinstance(gold, float) or str(gold).isdigit():
                wrong = str(int(float(gold)) + rnd.choice([-2, -1, 1, 3]))
            else:
                wrong = rnd.choice(all_answers)
            body = intro + middle + f"Therefore, the final answer is $\\boxed{{{wrong}}}$."
        elif roll < 0.9:
            kind = "no_box"
            body = intro + middle.split("$\\boxed")[0] + f" the answer is {_fmt(gold)}."
        else:
            kind = "skill_echo"
            body = SKILL_ECHO + intro + middle + f"So the answer is $\\boxed{{{_fmt(gold)}}}$."
        cases.append((body, gold, kind))
    for j in range(n_path):
        cases.append(("Pathological output:\n" + PATHOLOGICAL[j % len(PATHOLOGICAL)], "5", "pathological"))
    rnd.shuffle(cases)
    return cases


def _time_all(fn, cases):
    lat, out = [], []
    t0 = time.perf_counter()
    for resp, gold, _ in cases:
        t = time.perf_counter()
        out.append(fn(resp, gold))
        lat.append(time.perf_counter() - t)
    return out, lat, time.perf_counter() - t0


def _report(name, lat, total, n):
    lat_sorted = sorted(lat)
    p = lambda q: lat_sorted[min(len(lat_sorted) - 1, int(q * len(lat_sorted)))] * 1e3  # noqa: E731
    print(
        f"{name:<28} {n / total:10.1f} resp/s   p50 {p(0.50):8.3f} ms   p99 {p(0.99):8.3f} ms   "
        f"max {max(lat) * 1e3:9.3f} ms   total {total:6.2f} s"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--shared", type=Path, default=Path(os.environ.get("ARISE_SHARED_DIR") or "../shared"))
    ap.add_argument("--raw", type=Path, default=None, help="raw data folder (default: SHARED/data/raw)")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from recipe.arise.core import grader

    cases = build_cases(args.raw or args.shared / "data" / "raw", args.n, args.seed)
    kinds = {}
    for _, _, k in cases:
        kinds[k] = kinds.get(k, 0) + 1
    print(f"{len(cases)} responses: {kinds}")

    t = time.perf_counter()
    grader.warmup()
    st = grader.grader_stats()
    print(
        f"grader warmup ({st.get('alive')} worker processes, {st.get('pool')} pool, "
        f"{st.get('start_method')} start): {time.perf_counter() - t:.2f} s"
    )

    ours, lat, total = _time_all(lambda r, g: grader.grade(r, g, timeout_s=args.timeout), cases)
    _report("arise.grader.grade", lat, total, len(cases))

    # concurrent batch API
    t = time.perf_counter()
    batch = grader.grade_many([c[0] for c in cases], [c[1] for c in cases], timeout_s=args.timeout)
    bt = time.perf_counter() - t
    print(
        f"{'arise.grader.grade_many':<28} {len(cases) / bt:10.1f} resp/s   (threads -> worker pool)   "
        f"same results: {batch == ours}"
    )

    try:
        from verl.utils.reward_score import math_reward  # noqa: F401
    except Exception as e:  # pragma: no cover
        print(f"{'verl math_reward':<28} verl not installed ({type(e).__name__})")
        theirs = None
    else:

        def verl_score(resp, gold):
            try:
                return bool(math_reward.compute_score(resp, str(_fmt(gold))) > 0)
            except Exception:
                return False

        theirs, vlat, vtotal = _time_all(verl_score, cases)
        _report("verl math_reward", vlat, vtotal, len(cases))

    by_kind = {}
    for (resp, gold, k), a in zip(cases, ours, strict=False):
        s = by_kind.setdefault(k, [0, 0])
        s[0] += int(a)
        s[1] += 1
    print("arise correct by kind: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(by_kind.items())))
    if theirs is not None:
        agree = sum(a == b for a, b in zip(ours, theirs, strict=False))
        print(f"agreement arise vs verl: {agree}/{len(cases)} = {agree / len(cases):.1%}")
        diffs = [(c, a, b) for c, a, b in zip(cases, ours, theirs, strict=False) if a != b]
        for (resp, gold, k), a, b in diffs[:8]:
            box = grader.extract_boxed(grader._strip_skill_echo(resp))
            print(f"  differs [{k}] gold={str(gold)[:40]!r} boxed={str(box)[:40]!r} arise={a} verl={b}")
    print("grader stats:", grader.grader_stats())
    return 0


if __name__ == "__main__":
    sys.exit(main())
