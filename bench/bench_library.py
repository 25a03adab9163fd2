"""Benchmark the skill library's per-step maintenance and its parquet save.

Realistic regime of the paper's defaults: C_c = 10, C_r = 100, the reservoir full from the start,
every step 64 observations (skill id, reward in {0, 1, 2}) on cache skills (plus a few on reservoir
skills and unknown ids), up to 64 new skills (a quarter of them duplicates of existing entries, as
``trace_abstract`` fallbacks often are), 512 trajectory rewards for the global IG statistics.
Times ``SkillLibrary.step()`` alone, ``save()`` alone (atomic parquet: temp file + fsync + rename +
dir fsync) and both, over ``--steps`` steps, and says whether the goal of <= 5 ms per step is met.

Run from the repo root:  python bench/bench_library.py [--steps 200] [--new 64] [--obs 64] [--profile]
(``--dir`` chooses where the library file is written; the default is a temp folder, i.e. /tmp.)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from recipe.arise.core.library import SkillLibrary  # noqa: E402
from recipe.arise.core.skill import PROBLEM_TYPES, SkillDoc  # noqa: E402

GOAL_MS = 5.0
WORDS = (
    "reduce modulo prime factor bound extremal symmetry invariant substitute telescoping sum product "
    "parity induction case split complementary count pigeonhole angle chase similar triangles area "
    "ratio vieta roots polynomial discriminant inequality am gm cauchy recursion generating function"
).split()


def make_doc(rng: random.Random, k: int) -> SkillDoc:
    """A schema-valid document of realistic length (~170-220 chars of JSON)."""
    name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{k}"[:40].strip("_")
    insight = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize()
    method = [" ".join(rng.choice(WORDS) for _ in range(2)).capitalize() for _ in range(rng.randint(2, 3))]
    check = "Substitute back"
    while True:
        doc = SkillDoc(name, rng.choice(PROBLEM_TYPES), insight[:160].strip(), tuple(method), check)
        if len(doc.to_json()) <= 220:
            return doc.validate()
        if len(method) > 2:
            method.pop()
        elif len(insight) > 30:
            insight = insight[: insight.rfind(" ")]
        else:
            name = name[: max(4, len(name) - 8)].strip("_")


def full_library(rng: random.Random, cache: int, reservoir: int, cls=SkillLibrary, **kw) -> tuple[SkillLibrary, int]:
    """A library whose cache and reservoir are full, filled the way training fills it."""
    lib = cls(cache_capacity=cache, reservoir_capacity=reservoir, **kw)
    k = 0
    step = 0
    while len(lib.reservoir) < reservoir:
        step += 1
        new = []
        for _ in range(32):
            k += 1
            new.append(make_doc(rng, k))
        obs = [(rng.choice(lib.cache).skill_id, float(rng.choice((0, 1, 2)))) for _ in range(16)] if lib.cache else []
        lib.step(obs, new, step=step)
    return lib, k


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(q / 100.0 * (len(xs) - 1)))))
    return xs[i]


def summarize(name: str, xs_s: list[float], cpu_s: list[float] | None = None) -> str:
    ms = [x * 1000 for x in xs_s]
    line = (
        f"{name:<14} wall mean {statistics.fmean(ms):7.3f} ms  p50 {percentile(ms, 50):7.3f}  "
        f"p99 {percentile(ms, 99):7.3f}  max {max(ms):7.3f}"
    )
    if cpu_s:
        c = [x * 1000 for x in cpu_s]
        line += (
            f"  | cpu mean {statistics.fmean(c):7.3f} ms  p50 {percentile(c, 50):7.3f}  p99 {percentile(c, 99):7.3f}"
        )
    return line


def step_inputs(rng: random.Random, lib: SkillLibrary, k: int, args, *, odd: bool = False):
    """One step's (observations, new skills, global rewards); ``odd`` adds malformed inputs."""
    cache_ids = [e.skill_id for e in lib.cache]
    res_ids = [e.skill_id for e in lib.reservoir]
    obs: list = []
    for j in range(args.obs):
        r = rng.random()
        if not cache_ids:
            sid = f"s9{j:05d}"
        elif r < 0.9 or not res_ids:
            sid = rng.choice(cache_ids)
        else:
            sid = rng.choice(res_ids) if r < 0.98 else f"s9{j:05d}"
        obs.append((sid, float(rng.choice((0, 1, 2)))))
    if odd:
        obs += [("s000001", float("nan")), (None, 1.0), ("x",), (cache_ids[0] if cache_ids else "s1", "2")]
    new = []
    existing = lib.entries()
    n_new = args.new if not odd else rng.randint(0, args.new)
    for _ in range(n_new):
        if existing and rng.random() < args.dup_frac:
            d = rng.choice(existing).doc
            if odd and rng.random() < 0.5:  # same name and insight up to case / whitespace: still a duplicate
                d = SkillDoc(
                    d.skill_name.upper(), d.problem_type, "  " + d.key_insight.lower() + " ", d.method[::-1], "other"
                )
            new.append(d)
        else:
            k += 1
            new.append(make_doc(rng, k))
    if odd and new:
        new.append(new[0])  # duplicate inside the batch
    rewards = [float(rng.choice((0, 1, 2))) for _ in range(args.trajectories)]
    return obs, new, rewards, k


def run(args, cls=SkillLibrary) -> dict:
    rng = random.Random(args.seed)
    lib, k = full_library(rng, args.cache, args.reservoir, cls)
    start_step = lib.last_step or 0
    out_dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_library_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"library_{cls.__name__}.parquet"
    t_step, t_save, t_both = [], [], []
    c_step, c_save, c_both = [], [], []
    prof = cProfile.Profile() if args.profile else None
    for i in range(args.steps + args.warmup):
        obs, new, rewards, k = step_inputs(rng, lib, k, args)
        if prof is not None and i >= args.warmup:
            prof.enable()
        c0, t0 = time.thread_time(), time.perf_counter()
        lib.step(obs, new, step=start_step + 1 + i, global_rewards=rewards)
        c1, t1 = time.thread_time(), time.perf_counter()
        lib.save(path)
        c2, t2 = time.thread_time(), time.perf_counter()
        if prof is not None and i >= args.warmup:
            prof.disable()
        if i >= args.warmup:
            t_step.append(t1 - t0)
            t_save.append(t2 - t1)
            t_both.append(t2 - t0)
            c_step.append(c1 - c0)
            c_save.append(c2 - c1)
            c_both.append(c2 - c0)
    assert len(lib.cache) == args.cache and len(lib.reservoir) <= args.reservoir
    assert SkillLibrary.load(path) == lib
    return {
        "step": t_step,
        "save": t_save,
        "both": t_both,
        "cpu_step": c_step,
        "cpu_save": c_save,
        "cpu_both": c_both,
        "lib": lib,
        "path": path,
        "prof": prof,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cache", type=int, default=10)
    p.add_argument("--reservoir", type=int, default=100)
    p.add_argument("--obs", type=int, default=64, help="observations (skill id, reward) per step")
    p.add_argument("--new", type=int, default=64, help="new skills per step (before duplicate removal)")
    p.add_argument("--dup-frac", type=float, default=0.25, help="fraction of new skills that duplicate an entry")
    p.add_argument("--trajectories", type=int, default=512, help="global rewards per step (64 queries x G=8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", default=None, help="folder for the library files (default: a fresh temp folder)")
    p.add_argument("--profile", action="store_true", help="cProfile step()+save() and print the top functions")
    args = p.parse_args(argv)

    print(
        f"library: C_c={args.cache} C_r={args.reservoir} (reservoir full) | per step: {args.obs} observations, "
        f"{args.new} new skills ({args.dup_frac:.0%} duplicates), {args.trajectories} global rewards | "
        f"{args.steps} steps after {args.warmup} warm-up"
    )
    verdicts = {}
    for name in ("shipped",):
        res = run(args, SkillLibrary)
        lib = res["lib"]
        print(
            f"\n[{name} SkillLibrary.step] final: cache {len(lib.cache)}, reservoir {len(lib.reservoir)}, "
            f"{res['path'].stat().st_size} bytes"
        )
        print(summarize("step()", res["step"], res["cpu_step"]))
        print(summarize("save()", res["save"], res["cpu_save"]))
        print(summarize("step()+save()", res["both"], res["cpu_both"]))
        mean_both = statistics.fmean(res["both"]) * 1000
        p99_both = percentile([x * 1000 for x in res["both"]], 99)
        verdicts[name] = mean_both <= GOAL_MS
        print(
            f"goal <= {GOAL_MS:g} ms per step (mean step()+save()): {'MET' if verdicts[name] else 'NOT MET'} "
            f"(mean {mean_both:.3f} ms, p99 {p99_both:.3f} ms)"
        )
        if res["prof"] is not None:
            s = io.StringIO()
            pstats.Stats(res["prof"], stream=s).sort_stats("cumulative").print_stats(20)
            print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
