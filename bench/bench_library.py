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
import json
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

import math  # noqa: E402

import numpy as np  # noqa: E402

from recipe.arise import library as _library_mod  # noqa: E402
from recipe.arise.library import SkillEntry, SkillLibrary, StepEvents, _dup_key, _neg_id  # noqa: E402
from recipe.arise.skill import PROBLEM_TYPES, SkillDoc  # noqa: E402

GOAL_MS = 5.0
WORDS = (
    "reduce modulo prime factor bound extremal symmetry invariant substitute telescoping sum product "
    "parity induction case split complementary count pigeonhole angle chase similar triangles area "
    "ratio vieta roots polynomial discriminant inequality am gm cauchy recursion generating function"
).split()


def _write_table_buffered(table, f) -> None:
    """Recommended body of ``recipe.arise.library._write_table`` (same signature, so tests that
    patch it to simulate a crash keep working)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    f.write(buf.getvalue())


class OptimizedSkillLibrary(SkillLibrary):
    """Prototype of the recommended ``SkillLibrary.step`` (same results, see ``--check``).

    The shipped ``step`` spends almost all its time in ADD: ``_find_duplicate`` scans every entry
    and re-serialises its document (``to_json`` + ``_dup_key``) for each new skill, i.e.
    O(new x entries) JSON encodings (~11k per step here).  Two entries' ``to_json`` texts can
    only be equal if their fields are, so "same text or same (name, insight) key" is just "same
    key": one dict of keys built once per step gives the same answer (first entry in cache-then-
    reservoir order).  Smaller costs fixed the same way: an id -> entry dict for UPDATE, and
    EVICT / DELETE / OVERFLOW select their victims in one sort instead of repeated
    ``min`` + ``list.remove`` (``list.remove`` / ``index`` call the dataclass ``__eq__``).

    ``save`` is the shipped one except that the parquet bytes are produced in memory and written
    with one ``f.write`` (``_write_table_buffered``) instead of many small writes through
    pyarrow's Python-file wrapper: ~0.35 ms less CPU per save, byte-identical file.
    """

    def save(self, path) -> None:
        import os
        import tempfile

        import pyarrow as pa

        path = Path(path)
        schema = _library_mod._arrow_schema()
        table = pa.Table.from_pylist(self.to_records(), schema=schema)
        table = table.replace_schema_metadata({_library_mod._META_KEY: json.dumps(self._config()).encode()})
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
        try:
            with os.fdopen(fd, "wb") as f:
                _write_table_buffered(table, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:
            dfd = os.open(str(path.parent), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass

    def step(self, observations=(), new_skills=(), step=0, *, global_rewards=None) -> StepEvents:
        step = int(step)
        ev = StepEvents(step=step)
        self.last_step = step

        # ---- UPDATE
        by_id: dict[str, SkillEntry] = {}
        for e in self.cache:
            by_id.setdefault(e.skill_id, e)
        for e in self.reservoir:
            by_id.setdefault(e.skill_id, e)
        updated: set[str] = set()
        b = self.ema_beta
        for obs in observations:
            try:
                sid, reward = obs
                reward = float(reward)
            except (TypeError, ValueError):
                ev.unknown_observations.append(repr(obs)[:80])
                continue
            e = by_id.get(sid) if isinstance(sid, str) else None
            if e is None or not math.isfinite(reward):
                ev.unknown_observations.append(str(sid)[:80])
                continue
            e.utility = b * e.utility + (1.0 - b) * reward
            e.usage_count += 1
            e.reward_sum += reward
            e.success_count += int(self._is_success(reward))
            e.updated_step = step
            ev.n_observations += 1
            if e.skill_id not in updated:
                updated.add(e.skill_id)
                ev.updated.append(e.skill_id)
        if global_rewards is not None:
            for r in global_rewards:
                r = float(r)
                if math.isfinite(r):
                    self.global_reward_sum += r
                    self.global_success_count += int(self._is_success(r))
                    self.global_count += 1

        # ---- ADD (duplicate check against a key index built once)
        prior = 0.0
        if self.new_skill_policy == "fair_trial" and self.cache:
            prior = float(np.mean([e.utility for e in self.cache]))
        keys: dict[tuple[str, str], str] = {}
        for e in (*self.cache, *self.reservoir):
            keys.setdefault(_dup_key(e.doc), e.skill_id)
        for doc in new_skills:
            if not isinstance(doc, SkillDoc):
                raise TypeError(f"new_skills must contain SkillDoc, got {type(doc).__name__}")
            key = _dup_key(doc)
            dup = keys.get(key)
            if dup is not None:
                ev.dropped_duplicates.append({"skill_name": doc.skill_name, "duplicate_of": dup})
                continue
            entry = self._new_entry(doc, step=step, utility=prior)
            self.cache.append(entry)
            keys[key] = entry.skill_id
            ev.added.append(entry.skill_id)

        # ---- EVICT: the `excess` lowest unprotected entries (then protected ones), in one sort
        protected = self._protected_ids(step)
        ev.protected = [e.skill_id for e in self.cache if e.skill_id in protected]
        excess = len(self.cache) - self.cache_capacity
        if excess > 0:
            victims = sorted((e for e in self.cache if e.skill_id not in protected), key=SkillEntry._sort_key_low)[:excess]
            if len(victims) < excess:
                rest = sorted((e for e in self.cache if e.skill_id in protected), key=SkillEntry._sort_key_low)
                victims += rest[: excess - len(victims)]
            gone = {id(e) for e in victims}
            self.cache[:] = [e for e in self.cache if id(e) not in gone]
            self.reservoir.extend(victims)
            ev.evicted.extend(e.skill_id for e in victims)

        # ---- LOAD (as shipped; positions found by identity instead of dataclass __eq__)
        blocked = set(ev.evicted)
        while True:
            pool = [e for e in self.reservoir if e.skill_id not in blocked]
            low_cands = [e for e in self.cache if e.skill_id not in protected]
            if not pool or not low_cands:
                break
            best = max(pool, key=lambda e: (e.utility, e.usage_count, -e.created_step, _neg_id(e.skill_id)))
            low = min(low_cands, key=SkillEntry._sort_key_low)
            if not best.utility > low.utility:
                break
            ci = next(i for i, e in enumerate(self.cache) if e is low)
            ri = next(i for i, e in enumerate(self.reservoir) if e is best)
            self.cache[ci] = best
            del self.reservoir[ri]
            self.reservoir.append(low)
            blocked.add(low.skill_id)
            ev.loaded.append({"loaded": best.skill_id, "demoted": low.skill_id})

        # ---- DELETE
        if self.reservoir:
            utils = np.array([e.utility for e in self.reservoir], dtype=np.float64)
            threshold = float(np.percentile(utils, self.delete_percentile))
            keep = []
            for e in self.reservoir:
                if e.utility < threshold and e.usage_count == 0:
                    ev.deleted.append(e.skill_id)
                else:
                    keep.append(e)
            self.reservoir[:] = keep

        # ---- OVERFLOW
        excess = len(self.reservoir) - self.reservoir_capacity
        if excess > 0:
            victims = sorted(self.reservoir, key=lambda e: (e.usage_count > 0, e.utility, e.usage_count, e.created_step, e.skill_id))[:excess]
            gone = {id(e) for e in victims}
            self.reservoir[:] = [e for e in self.reservoir if id(e) not in gone]
            ev.overflow.extend(e.skill_id for e in victims)

        ev.cache_size, ev.reservoir_size = len(self.cache), len(self.reservoir)
        return ev


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
    line = f"{name:<14} wall mean {statistics.fmean(ms):7.3f} ms  p50 {percentile(ms, 50):7.3f}  p99 {percentile(ms, 99):7.3f}  max {max(ms):7.3f}"
    if cpu_s:
        c = [x * 1000 for x in cpu_s]
        line += f"  | cpu mean {statistics.fmean(c):7.3f} ms  p50 {percentile(c, 50):7.3f}  p99 {percentile(c, 99):7.3f}"
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
                d = SkillDoc(d.skill_name.upper(), d.problem_type, "  " + d.key_insight.lower() + " ", d.method[::-1], "other")
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
    return {"step": t_step, "save": t_save, "both": t_both, "cpu_step": c_step, "cpu_save": c_save, "cpu_both": c_both, "lib": lib, "path": path, "prof": prof}


def check_equivalence(args, n_steps: int = 300) -> int:
    """Run the shipped and the optimized ``step`` in lockstep on identical inputs (regular and
    malformed ones, both policies, several capacities) and compare events and state each step."""
    import copy

    compared = 0
    tmp = Path(tempfile.mkdtemp(prefix="bench_library_check_"))
    configs = [
        dict(cache=10, reservoir=100, kw={}),
        dict(cache=10, reservoir=100, kw={"new_skill_policy": "literal"}),
        dict(cache=4, reservoir=12, kw={"max_protected": 4, "trial_uses": 2, "trial_steps": 3}),
        dict(cache=3, reservoir=0, kw={}),
    ]
    for ci, cfg in enumerate(configs):
        rng = random.Random(1000 + ci)
        if cfg["reservoir"]:
            base, k = full_library(rng, cfg["cache"], cfg["reservoir"], SkillLibrary, **cfg["kw"])
        else:
            base, k = SkillLibrary(cfg["cache"], 0, **cfg["kw"]), 0
        state = base.state_dict()
        a = SkillLibrary.from_state_dict(copy.deepcopy(state))
        b = OptimizedSkillLibrary.from_state_dict(copy.deepcopy(state))
        step0 = a.last_step or 0
        for i in range(n_steps // len(configs)):
            obs, new, rewards, k = step_inputs(rng, a, k, args, odd=(i % 3 == 0))
            ea = a.step(obs, new, step=step0 + 1 + i, global_rewards=rewards)
            eb = b.step(obs, new, step=step0 + 1 + i, global_rewards=rewards)
            if ea.to_dict() != eb.to_dict() or a.state_dict() != b.state_dict():
                raise AssertionError(f"config {ci} step {i}: optimized step() differs from the shipped one")
            if i % 10 == 0:
                pa_, pb_ = tmp / "a.parquet", tmp / "b.parquet"
                a.save(pa_)
                b.save(pb_)
                if pa_.read_bytes() != pb_.read_bytes() or OptimizedSkillLibrary.load(pb_) != a:
                    raise AssertionError(f"config {ci} step {i}: optimized save() writes a different file")
            compared += 1
    return compared


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
    p.add_argument("--impl", choices=("shipped", "optimized", "both"), default="both", help="which step() to time (default both)")
    p.add_argument("--check", action="store_true", help="first verify that the optimized step() gives identical events and state")
    p.add_argument("--profile", action="store_true", help="cProfile step()+save() and print the top functions")
    args = p.parse_args(argv)

    print(
        f"library: C_c={args.cache} C_r={args.reservoir} (reservoir full) | per step: {args.obs} observations, "
        f"{args.new} new skills ({args.dup_frac:.0%} duplicates), {args.trajectories} global rewards | "
        f"{args.steps} steps after {args.warmup} warm-up"
    )
    if args.check:
        n = check_equivalence(args)
        print(f"check: optimized step() == shipped step() (events and full state) on {n} steps, optimized save() byte-identical: OK")
    impls = {"shipped": SkillLibrary, "optimized": OptimizedSkillLibrary}
    chosen = list(impls) if args.impl == "both" else [args.impl]
    verdicts = {}
    for name in chosen:
        res = run(args, impls[name])
        lib = res["lib"]
        print(f"\n[{name} SkillLibrary.step] final: cache {len(lib.cache)}, reservoir {len(lib.reservoir)}, {res['path'].stat().st_size} bytes")
        print(summarize("step()", res["step"], res["cpu_step"]))
        print(summarize("save()", res["save"], res["cpu_save"]))
        print(summarize("step()+save()", res["both"], res["cpu_both"]))
        mean_both = statistics.fmean(res["both"]) * 1000
        p99_both = percentile([x * 1000 for x in res["both"]], 99)
        verdicts[name] = mean_both <= GOAL_MS
        print(f"goal <= {GOAL_MS:g} ms per step (mean step()+save()): {'MET' if verdicts[name] else 'NOT MET'} (mean {mean_both:.3f} ms, p99 {p99_both:.3f} ms)")
        if res["prof"] is not None:
            s = io.StringIO()
            pstats.Stats(res["prof"], stream=s).sort_stats("cumulative").print_stats(20)
            print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
