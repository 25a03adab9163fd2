import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recipe.arise.core.library_store as libstore
import recipe.arise.core.store as store
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_jsonl import load_library_file
from recipe.arise.core.library_store import LibraryFormatError
from recipe.arise.core.reward import hierarchical_reward
from recipe.arise.core.selection import select_skill
from recipe.arise.core.skill import SkillDoc, load_seed_skills


def doc(i, name=None):
    return SkillDoc(name or f"skill_{i}", "general", f"insight number {i}", (f"step a {i}", f"step b {i}"), "check it")


def lit(cache=3, reservoir=5, seeds=(), **kw):
    return SkillLibrary(cache, reservoir, 0.9, seeds, new_skill_policy="literal", **kw)


# --------------------------------------------------------------- construction


def test_seed_skills_enter_cache_with_stable_ids():
    lib = SkillLibrary(seed_skills=load_seed_skills())
    assert [e.skill_id for e in lib.cache] == ["s000001", "s000002", "s000003", "s000004", "s000005"]
    assert all(e.utility == 0.0 and e.usage_count == 0 for e in lib.cache)
    assert lib.reservoir == [] and lib.cache_docs() == load_seed_skills()


def test_more_seeds_than_cache_go_to_reservoir():
    lib = lit(cache=3, reservoir=5, seeds=[doc(i) for i in range(6)])
    assert len(lib.cache) == 3 and len(lib.reservoir) == 3


def test_bad_policy_rejected():
    with pytest.raises(ValueError):
        SkillLibrary(new_skill_policy="nope")


# --------------------------------------------------------------------- UPDATE


def test_update_ema_each_observation_in_order():
    lib = lit(seeds=[doc(0), doc(1)])
    ev = lib.step([("s000001", 2.0), ("s000001", 0.0), ("s000002", 1.0)], [], 7)
    e = lib.get("s000001")
    assert e.utility == pytest.approx(0.9 * (0.1 * 2.0) + 0.1 * 0.0)
    assert e.usage_count == 2 and e.updated_step == 7 and e.reward_sum == 2.0 and e.success_count == 1
    assert lib.get("s000002").utility == pytest.approx(0.1)
    assert ev.updated == ["s000001", "s000002"] and ev.n_observations == 3


def test_unknown_observation_skipped_and_reported():
    lib = lit(seeds=[doc(0)])
    ev = lib.step([("nope", 1.0), ("s000001", 1.0), ("s000001", float("nan")), None], [], 1)
    assert ev.orphaned == ["nope"]  # an id the library does not hold
    assert ev.unknown_observations == ["s000001", "None"]  # a non-finite reward, a malformed tuple
    assert lib.get("s000001").usage_count == 1


def test_observations_of_a_skill_dropped_since_its_selection_are_counted():
    """Async trainers: a trajectory selected a skill that a later maintenance dropped (DELETE or
    OVERFLOW) before its observation arrives; one evicted to the reservoir is still updated."""
    lib = lit(cache=1, reservoir=1, seeds=[doc(0)])
    ev = lib.step([], [doc(1), doc(2)], 1)
    assert ev.overflow == ["s000001"] and [e.skill_id for e in lib.reservoir] == ["s000002"]
    ev = lib.step([("s000001", 1.0), ("s000001", 0.0), ("s000002", 1.0)], [], 2)
    assert ev.orphaned == ["s000001", "s000001"] and ev.unknown_observations == []
    assert ev.n_observations == 1 and lib.get("s000002").usage_count == 1  # the reservoir entry


def test_ig_proxy():
    lib = lit(seeds=[doc(0), doc(1)])
    assert lib.ig_proxy("s000001") is None
    lib.step([("s000001", 2.0), ("s000001", 2.0)], [], 1, global_rewards=[2.0, 2.0, 0.0, 0.0])
    # r̄_k = 2, SR_k = 1, r̄_g = 1, SR_g = 0.5
    assert lib.ig_proxy("s000001") == pytest.approx(0.5 * 1 + 0.5 * 0.5)
    assert lib.ig_proxy("s000002") is None
    assert lib.global_count == 4 and lib.global_success_count == 2


# ------------------------------------------------------------------------ ADD


def test_add_literal_zero_utility_and_usage():
    lib = lit(seeds=[doc(0)])
    lib.step([("s000001", 2.0)], [doc(1)], 3)
    e = lib.get("s000002")
    assert e.utility == 0.0 and e.usage_count == 0 and e.created_step == 3 and lib.tier_of("s000002") == "cache"


def test_add_fair_trial_prior_is_mean_cache_utility():
    lib = SkillLibrary(3, 5, 0.9, [doc(0), doc(1)])
    lib.step([("s000001", 2.0)], [doc(2)], 1)  # u1=0.2, u2=0
    assert lib.get("s000003").utility == pytest.approx(0.1)


def test_no_new_skill_add_skipped_rest_runs():
    lib = lit(cache=2, reservoir=5, seeds=[doc(0), doc(1), doc(2)])  # s3 in reservoir
    ev = lib.step([("s000003", 2.0)], [], 1)  # reservoir skill used? still an update
    assert ev.added == [] and ev.loaded == [{"loaded": "s000003", "demoted": "s000001"}]


def test_duplicates_dropped_and_reported():
    lib = lit(seeds=[doc(0)])
    same_name_insight = SkillDoc("skill_0", "algebra", "Insight  number 0", ("x", "y"), "z")
    ev = lib.step([], [doc(0), same_name_insight, doc(1), doc(1)], 1)
    assert ev.added == ["s000002"]
    assert [d["duplicate_of"] for d in ev.dropped_duplicates] == ["s000001", "s000001", "s000002"]


def test_dedupe_off_adds_duplicates_as_the_paper_does(tmp_path):
    """App. C.2's ADD has no duplicate check: arise.library.dedupe=false (PRESET=paper) adds every new skill."""
    lib = SkillLibrary(cache_capacity=10, seed_skills=[doc(0)], dedupe=False)
    ev = lib.step([], [doc(0), doc(1), doc(1)], 1)
    assert len(ev.added) == 3 and ev.dropped_duplicates == []
    assert [e.doc.skill_name for e in lib.cache] == ["skill_0", "skill_0", "skill_1", "skill_1"]
    lib.save(tmp_path / "lib.parquet")
    assert SkillLibrary.load(tmp_path / "lib.parquet").dedupe is False  # the setting is saved
    from recipe.arise.core.arise_config import ARISEConfig

    assert ARISEConfig.from_dict({"library": {"dedupe": False}}).library_settings()["dedupe"] is False
    with pytest.raises((TypeError, ValueError), match="dedupe"):
        ARISEConfig.from_dict({"library": {"dedupe": "maybe"}})


# ---------------------------------------------------------------------- EVICT


def test_evict_lowest_to_reservoir_keeps_metadata():
    lib = lit(cache=2, seeds=[doc(0), doc(1)])
    lib.step([("s000001", 2.0), ("s000002", 1.0)], [], 1)
    ev = lib.step([], [doc(2)], 2)  # new skill u=0 is lowest
    assert ev.evicted == ["s000003"] and lib.tier_of("s000003") == "reservoir"
    lib2 = lit(cache=2, seeds=[doc(0), doc(1)])
    lib2.step([("s000001", 2.0), ("s000001", 2.0)], [], 1)
    assert lib2.get("s000003") is None
    ev = lib2.step([], [], 2)
    assert ev.evicted == []
    e = lib2.get("s000001")
    assert e.usage_count == 2


def test_evict_tie_break_utility_then_uses_then_oldest():
    lib = lit(cache=3, seeds=[doc(0), doc(1), doc(2)])
    lib.step([("s000002", 0.0)], [], 1)  # s2: u=0 but 1 use
    ev = lib.step([], [doc(3)], 2)  # s1, s3, s4 at u=0 & 0 uses; oldest is s1
    assert ev.evicted == ["s000001"]
    ev = lib.step([], [doc(4)], 3)
    assert ev.evicted == ["s000003"]


# ----------------------------------------------------------------------- LOAD


def test_load_swaps_while_strictly_greater():
    lib = lit(cache=2, reservoir=5, seeds=[doc(0), doc(1), doc(2), doc(3)])  # s3, s4 in reservoir
    ev = lib.step([("s000003", 2.0), ("s000004", 1.0), ("s000001", 0.5)], [], 1)
    # cache utils: s1=.05, s2=0 ; reservoir: s3=.2, s4=.1
    assert ev.loaded == [{"loaded": "s000003", "demoted": "s000002"}, {"loaded": "s000004", "demoted": "s000001"}]
    assert lib.cache_ids() == ["s000004", "s000003"]
    ev = lib.step([], [], 2)
    assert ev.loaded == []  # equal utilities never swap


def test_just_evicted_does_not_reenter():
    lib = lit(cache=1, reservoir=5, seeds=[doc(0)])
    lib.step([("s000001", 2.0)], [], 1)
    # new skill evicted immediately (u=0 < 0.2); nothing to load
    ev = lib.step([], [doc(1)], 2)
    assert ev.evicted == ["s000002"] and ev.loaded == []


def test_just_evicted_higher_than_loaded_one_is_blocked():
    lib = lit(cache=2, reservoir=5, seeds=[doc(0), doc(1), doc(2)])  # s3 in reservoir
    lib.step([("s000001", 2.0), ("s000002", 2.0), ("s000002", 2.0), ("s000003", 0.5)], [], 1)
    # cache s1=.2, s2=.38 ; reservoir s3=.05
    ev = lib.step([], [doc(3), doc(4)], 2)  # two new at 0: both evicted; s3 (.05) > min cache? min=.2 no
    assert sorted(ev.evicted) == ["s000004", "s000005"] and ev.loaded == []


def test_empty_reservoir_load_delete_noop():
    lib = lit(cache=3, seeds=[doc(0)])
    ev = lib.step([("s000001", 1.0)], [], 1)
    assert ev.loaded == [] and ev.deleted == [] and lib.reservoir == []


# --------------------------------------------------------------------- DELETE


def test_delete_below_p10_and_unused_only():
    lib = lit(cache=1, reservoir=50, seeds=[doc(i) for i in range(12)])
    res = lib.reservoir
    for i, e in enumerate(res):
        e.utility = float(i)  # 0..10
    res[0].usage_count = 0  # u=0 < P10 (=1.0) and unused -> deleted
    res[1].utility = 0.5
    res[1].usage_count = 3  # below P10 but used -> kept
    lib.cache[0].utility = 100.0  # no loads
    ids = [e.skill_id for e in res]
    ev = lib.step([], [], 1)
    assert ev.deleted == [ids[0]]
    assert ids[1] in [e.skill_id for e in lib.reservoir]


def test_delete_all_equal_keeps_everything():
    lib = lit(cache=1, reservoir=50, seeds=[doc(i) for i in range(10)])
    lib.cache[0].utility = 1.0
    ev = lib.step([], [], 1)
    assert ev.deleted == [] and len(lib.reservoir) == 9


# ------------------------------------------------------------------- OVERFLOW


def test_reservoir_overflow_drops_unused_lowest_oldest_first():
    lib = lit(cache=1, reservoir=2, seeds=[doc(0)])
    lib.step([("s000001", 2.0)], [], 1)
    lib.step([], [doc(1)], 2)
    lib.get("s000002").usage_count = 1  # used -> protected from overflow before unused ones
    lib.step([], [doc(2)], 3)
    ev = lib.step([], [doc(3)], 4)
    assert len(lib.reservoir) == 2
    assert ev.overflow == ["s000003"]
    assert "s000002" in lib


# ------------------------------------------------------------ burst of new skills


def test_burst_of_64_new_skills_fair_trial_bounded():
    lib = SkillLibrary(seed_skills=load_seed_skills())
    ev = lib.step([], [doc(i) for i in range(64)], 1)
    assert len(lib.cache) == 10 and len(lib.reservoir) <= 100
    assert len(ev.protected) <= 5
    assert len(ev.added) == 64 and len(ev.evicted) == 64 + 5 - 10


# ------------------------------------------------------------- freeze and fix


def simulate(policy, steps=150, queries=16, G=8, new_per_step=1, seed=0):
    """Phase-II style loop: cache scored with noisy relevance, epsilon-greedy + gate,
    per-trajectory rewards in {0,1,2}, one new validated skill per step."""
    rng = np.random.default_rng(seed)
    lib = SkillLibrary(seed_skills=load_seed_skills(), new_skill_policy=policy)
    quality = {e.skill_id: 0.5 for e in lib.cache}
    new_ids, new_used = set(), set()
    cache_changes = 0
    prev_cache = set(lib.cache_ids())
    k = 0
    for t in range(1, steps + 1):
        ids = lib.cache_ids()
        obs, glob = [], []
        for _ in range(queries):
            scores = rng.normal(0.0, 2.0, size=len(ids))
            idx = select_skill(scores, temperature=1.0, epsilon=0.1, gate=0.35, rng=rng)
            for _ in range(G):
                if idx is None:
                    glob.append(hierarchical_reward(rng.random() < 0.5, False, 2))
                else:
                    sid = ids[idx]
                    r = hierarchical_reward(rng.random() < quality[sid], True, 2)
                    obs.append((sid, r))
                    glob.append(r)
        new = []
        for _ in range(new_per_step):
            k += 1
            new.append(doc(1000 + k))
        ev = lib.step(obs, new, t, global_rewards=glob)
        for sid in ev.added:
            quality[sid] = float(rng.uniform(0.3, 0.9))
            new_ids.add(sid)
        new_used |= {s for s in ev.updated if s in new_ids}
        cur = set(lib.cache_ids())
        cache_changes += len(cur - prev_cache)
        prev_cache = cur
    return {
        "new_added": len(new_ids),
        "new_ever_used": len(new_used),
        "new_in_cache_at_end": len(set(lib.cache_ids()) & new_ids),
        "cache_changes": cache_changes,
        "lib": lib,
    }


def test_literal_policy_freezes():
    res = simulate("literal")
    lib = res["lib"]
    # once the cache is full of used skills, every new skill is evicted in its own step
    ev = lib.step([], [doc(99_999)], 10_000)
    assert ev.evicted == ev.added and ev.loaded == []
    assert all(e.utility > 0 for e in lib.cache)
    assert all(e.utility == 0 for e in lib.reservoir if e.usage_count == 0)
    assert res["new_ever_used"] <= 10
    assert res["new_in_cache_at_end"] <= 5
    # frozen: the cache composition stops changing after the first steps
    later = simulate("literal", steps=40, seed=1)
    assert later["cache_changes"] <= 10


def test_fair_trial_new_skills_enter_and_get_used():
    res = simulate("fair_trial")
    assert res["new_ever_used"] >= 0.5 * res["new_added"]
    assert res["cache_changes"] >= 0.5 * res["new_added"]
    lib = res["lib"]
    assert len(lib.cache) == 10 and len(lib.reservoir) <= 100


# --------------------------------------------------------- persistence & state


def _busy_library(seed=0, policy="fair_trial"):
    rng = np.random.default_rng(seed)
    lib = SkillLibrary(4, 6, 0.9, load_seed_skills(), new_skill_policy=policy)
    for t in range(1, 30):
        ids = [e.skill_id for e in lib.entries()]
        obs = [(ids[int(rng.integers(len(ids)))], float(rng.integers(0, 3))) for _ in range(5)]
        lib.step(obs, [doc(t * 10 + j) for j in range(int(rng.integers(0, 3)))], t, global_rewards=[1.0, 0.0])
    return lib


def test_save_load_roundtrip_exact(tmp_path):
    lib = _busy_library()
    p = tmp_path / "lib.parquet"
    lib.save(p)
    back = SkillLibrary.load(p)
    assert back == lib and back.state_dict() == lib.state_dict()
    assert back.next_id == lib.next_id
    # the restored library continues identically
    ev1 = lib.step([(lib.cache_ids()[0], 2.0)], [doc(5000)], 100)
    ev2 = back.step([(back.cache_ids()[0], 2.0)], [doc(5000)], 100)
    assert ev1 == ev2 and back == lib
    t = pq.read_table(p)
    assert t.schema.field("method").type == pa.list_(pa.string())
    assert b"arise_skill_library" in t.schema.metadata


def test_records_roundtrip():
    lib = _busy_library(3, "literal")
    assert SkillLibrary.from_state_dict(lib.state_dict()) == lib
    assert SkillLibrary.from_records(lib.to_records(), lib.state_dict()["config"]) == lib


def test_load_missing_truncated_garbage(tmp_path):
    p = tmp_path / "lib.parquet"
    with pytest.raises(LibraryFormatError, match="lib.parquet"):
        SkillLibrary.load(p)
    _busy_library().save(p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(LibraryFormatError, match="lib.parquet"):
        SkillLibrary.load(p)
    p.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(LibraryFormatError, match="lib.parquet"):
        SkillLibrary.load(p)
    p.write_bytes(b"")
    with pytest.raises(LibraryFormatError, match="lib.parquet"):
        SkillLibrary.load(p)


def test_load_wrong_columns_types_metadata(tmp_path):
    lib = _busy_library()
    good = tmp_path / "good.parquet"
    lib.save(good)
    t = pq.read_table(good)
    bad = tmp_path / "bad.parquet"
    pq.write_table(t.drop(["utility"]), bad)
    with pytest.raises(LibraryFormatError, match="bad.parquet.*columns"):
        SkillLibrary.load(bad)
    t2 = t.set_column(
        t.schema.get_field_index("usage_count"), "usage_count", t.column("usage_count").cast(pa.float64())
    )
    pq.write_table(t2, bad)
    with pytest.raises(LibraryFormatError, match="usage_count"):
        SkillLibrary.load(bad)
    pq.write_table(t.replace_schema_metadata({}), bad)
    with pytest.raises(LibraryFormatError, match="metadata"):
        SkillLibrary.load(bad)
    rows = t.to_pylist()
    rows[1]["tier"] = "attic"
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), bad)
    with pytest.raises(LibraryFormatError, match=r"bad.parquet: row 1: field 'tier'"):
        SkillLibrary.load(bad)
    rows = t.to_pylist()
    rows[2]["skill_id"] = rows[0]["skill_id"]
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), bad)
    with pytest.raises(LibraryFormatError, match="row 2.*duplicate"):
        SkillLibrary.load(bad)
    rows = t.to_pylist()
    rows[0]["utility"] = float("nan")
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), bad)
    with pytest.raises(LibraryFormatError, match="row 0: field 'utility'"):
        SkillLibrary.load(bad)
    assert issubclass(LibraryFormatError, ValueError)


@pytest.mark.parametrize("partial", [False, True])
def test_failed_save_leaves_previous_file(tmp_path, monkeypatch, partial):
    p = tmp_path / "lib.parquet"
    lib = _busy_library()
    lib.save(p)
    before = p.read_bytes()

    def boom(table, f):
        if partial:
            f.write(b"PAR1 partial garbage")
        raise OSError("disk full")

    monkeypatch.setattr(store, "write_parquet", boom)
    lib.step([], [doc(777)], 99)
    with pytest.raises(OSError, match="disk full"):
        lib.save(p)
    assert p.read_bytes() == before
    assert SkillLibrary.load(p) != lib
    assert sorted(os.listdir(tmp_path)) == ["lib.parquet"]  # no temp file left behind


# ------------------------------------------------------- property-based invariants

op = st.tuples(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from([0.0, 1.0, 2.0])), max_size=12),
    st.lists(st.integers(0, 60), max_size=8),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(op, min_size=1, max_size=25),
    st.integers(1, 5),
    st.integers(0, 8),
    st.sampled_from(["fair_trial", "literal"]),
)
def test_library_invariants(tmp_path, ops, cc, cr, policy):
    lib = SkillLibrary(cc, cr, 0.9, [doc(i) for i in range(3)], new_skill_policy=policy)
    for t, (obs_raw, new_raw) in enumerate(ops, start=1):
        before = {e.skill_id for e in lib.entries()}
        obs = [(f"s{n:06d}", r) for n, r in obs_raw]
        ev = lib.step(obs, [doc(n) for n in new_raw], t)
        after_c, after_r = [e.skill_id for e in lib.cache], [e.skill_id for e in lib.reservoir]
        after = set(after_c) | set(after_r)
        assert len(lib.cache) <= cc and len(lib.reservoir) <= cr
        assert len(after_c) + len(after_r) == len(after)  # ids unique across tiers
        assert after == (before | set(ev.added)) - set(ev.deleted) - set(ev.overflow)
        assert not (set(ev.deleted) & set(ev.overflow))
        assert ev.cache_size == len(lib.cache) and ev.reservoir_size == len(lib.reservoir)
        assert all(e.usage_count >= 0 for e in lib.entries())
        assert len(ev.protected) <= lib.max_protected
    p = tmp_path / "prop.parquet"
    lib.save(p)
    assert SkillLibrary.load(p) == lib


def test_load_equal_utility_never_swaps():
    lib = lit(cache=1, reservoir=5, seeds=[doc(0), doc(1)])  # s2 in reservoir, both u=0
    ev = lib.step([], [], 1)
    assert ev.loaded == [] and lib.cache_ids() == ["s000001"]
    lib.get("s000002").utility = 0.5
    lib.get("s000001").utility = 0.5
    assert lib.step([], [], 2).loaded == []


# ------------------------------------------------------------- resume with other settings


def _used_library():
    lib = SkillLibrary(4, 6, 0.9, [doc(i) for i in range(4)], new_skill_policy="literal", seed_trial_uses=0)
    ids = lib.cache_ids()
    lib.step([(ids[0], 2.0), (ids[1], 1.0), (ids[2], 0.0), (ids[3], 2.0), (ids[3], 2.0)], [], 1)
    return lib


def test_reconfigure_the_runs_settings_win_and_the_changes_are_returned():
    lib = _used_library()
    changes, ev = lib.reconfigure(ema_beta=0.5, rank_by="uplift", trial_uses=8)
    assert changes == {"ema_beta": (0.9, 0.5), "rank_by": ("utility", "uplift")}  # trial_uses unchanged
    assert (lib.ema_beta, lib.rank_by) == (0.5, "uplift") and ev.evicted == [] and ev.overflow == []
    assert lib.settings_diff(ema_beta=0.5) == {}
    with pytest.raises(ValueError, match="unknown library setting"):
        lib.reconfigure(cache_size=3)
    with pytest.raises(ValueError, match="rank_by"):
        lib.reconfigure(rank_by="vibes")
    assert lib.rank_by == "uplift"  # a rejected reconfigure changes nothing


def test_a_smaller_cache_evicts_by_the_configured_ranking_and_the_next_step_logs_it():
    lib = _used_library()
    before = {e.skill_id: e.utility for e in lib.cache}
    changes, ev = lib.reconfigure(cache_capacity=2, reservoir_capacity=1, max_protected=None)
    assert changes["cache_capacity"] == (4, 2) and changes["max_protected"] == (2, 1)
    lowest = sorted(before, key=lambda s: before[s])[:2]
    assert sorted(ev.evicted) == sorted(lowest) and len(lib.cache) == 2
    assert len(ev.overflow) == 1 and len(lib.reservoir) == 1  # C_r 1: the overflow rule drops one
    nxt = lib.step([], [], 2)
    assert nxt.evicted[:2] == ev.evicted and nxt.overflow[:1] == ev.overflow  # in the step's log
    assert lib.step([], [], 3).evicted == []  # reported once


def test_a_smaller_cache_under_rank_by_uplift_keeps_the_measured_skills():
    from recipe.arise.core.library_entry import Contrast

    lib = _used_library()
    low = min(lib.cache, key=lambda e: e.utility).skill_id  # lowest utility, but it helps
    lib.step([], [], 2, contrasts=[Contrast(low, 4, 4, 4, 1)])
    _, ev = lib.reconfigure(cache_capacity=1, rank_by="uplift")
    assert lib.cache_ids() == [low] and low not in ev.evicted


def test_a_version_1_file_takes_the_runs_seed_protection(tmp_path):
    import json

    lib = SkillLibrary(seed_skills=load_seed_skills(), seed_trial_uses=8)
    table = pa.Table.from_pylist(lib.to_records(), schema=libstore._arrow_schema()).select(list(range(14)))
    config = {k: v for k, v in lib.state_dict()["config"].items() if k not in ("seed_trial_uses", "rank_by")}
    config["format_version"] = 1
    pq.write_table(
        table.replace_schema_metadata({b"arise_skill_library": json.dumps(config).encode()}), tmp_path / "v1.parquet"
    )
    loaded = SkillLibrary.load(tmp_path / "v1.parquet")
    assert loaded.seed_trial_uses == 0  # what the file says: seed protection off
    back, changes, _ = load_library_file(tmp_path / "v1.parquet", seed_trial_uses=8, rank_by="utility")
    assert changes == {"seed_trial_uses": (0, 8)} and back.seed_trial_uses == 8


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"utilty": 1.0}, "utilty"),
        ({"skill": {**doc(1).to_dict(), "hint": "x"}}, "skill.hint"),
        ({"counts": {"uplift_n": 0, "uplift_m": 1}}, "counts.uplift_m"),
        ({"provenance": {"origin": "json", "stpe": 3}}, "provenance.stpe"),
    ],
)
def test_a_jsonl_line_with_an_unknown_field_at_any_level_names_it(tmp_path, fields, named):
    """A misspelt field would silently fall back to its default: every level rejects it alike."""
    path = tmp_path / "lib.jsonl"
    path.write_text(json.dumps({"skill": doc(1).to_dict(), **fields}) + "\n")
    match = rf"lib\.jsonl: line 1: field '{re.escape(named)}': unknown field \(known: "
    with pytest.raises(LibraryFormatError, match=match):
        load_library_file(path)


def test_step_runs_the_five_operations_in_the_papers_order(monkeypatch):
    """App. C.3: UPDATE -> ADD -> EVICT -> LOAD -> DELETE, then the overflow rule (not in the paper)."""
    calls = []
    for name in ("_op_update", "_op_add", "_op_evict", "_op_load", "_op_delete", "_drop_overflow"):
        real = getattr(SkillLibrary, name)
        monkeypatch.setattr(SkillLibrary, name, lambda self, *a, _n=name, _f=real: (calls.append(_n), _f(self, *a))[1])
    lib = lit(seeds=[doc(0)])
    lib.step([("s000001", 2.0)], [doc(1)], 1)
    assert calls == ["_op_update", "_op_add", "_op_evict", "_op_load", "_op_delete", "_drop_overflow"]


# ------------------------------------------------------------- the seeds' trial ends


def _crowded(seed_trial_steps):
    """C_c 2: one seed nobody uses, then a new skill a step that is used and rewarded."""
    lib = SkillLibrary(
        2, 10, 0.9, [doc(0)], new_skill_policy="literal", seed_trial_uses=8,
        seed_trial_steps=seed_trial_steps, selection_start_step=5,
    )  # fmt: skip
    seed = lib.cache_ids()[0]
    kept = []
    for step in range(1, 12):
        used = [(e.skill_id, 2.0) for e in lib.cache if e.skill_id != seed]
        lib.step(used, [doc(step)], step)
        kept.append(seed in lib.cache_ids())
    return kept


def test_an_unused_seed_leaves_the_cache_once_its_trial_steps_are_over():
    # protected through step 5 + 3 - 1 = 7 (steps 1-4 are Phase I), evicted at step 8 by a used skill
    assert _crowded(3) == [True] * 7 + [False] * 4


def test_without_a_step_limit_an_unused_seed_holds_its_slot_for_ever():
    assert _crowded(None) == [True] * 11


def test_the_seeds_step_limit_is_a_setting_that_round_trips(tmp_path):
    lib = SkillLibrary(seed_skills=load_seed_skills(), seed_trial_steps=20, selection_start_step=501)
    lib.save(tmp_path / "lib.parquet")
    back = SkillLibrary.load(tmp_path / "lib.parquet")
    assert (back.seed_trial_steps, back.selection_start_step) == (20, 501)
    with pytest.raises(ValueError, match="seed_trial_steps"):
        SkillLibrary(seed_trial_steps=-1)
