"""The causal uplift is the mean of each query group's own difference (not pooled counts), and the
exact IG is measured on unaided traces in the context the skill is injected in."""

import logging
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipe.arise.core.groups import group_contrasts, mechanism_metrics
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import Contrast
from recipe.arise.core.library_store import _arrow_schema
from recipe.arise.core.observation import Observation
from recipe.arise.core.reward import hierarchical_reward
from recipe.arise.core.skill import SkillDoc
from recipe.arise.core.trajectory import TrajectoryInfo


def _obs(uid, skill, correct, control=False):
    reward = hierarchical_reward(correct, bool(skill), 2)
    return Observation(uid, reward, correct, TrajectoryInfo(phase=2, skill_id=skill, control=control))


def _simpson_observations(easy="s000001", hard_greedy="s000002"):
    """Skill ``easy`` is the greedy pick on an easy query (everything right, with or without it) and
    an epsilon pick on a hard one (everything wrong): in each group its uplift is exactly 0."""
    obs = [_obs("easy", "", True, control=True) for _ in range(2)]
    obs += [_obs("easy", easy, True) for _ in range(6)]
    obs += [_obs("hard", "", False, control=True) for _ in range(2)]
    obs += [_obs("hard", hard_greedy, False) for _ in range(5)]
    obs += [_obs("hard", easy, False)]  # the epsilon-explored trajectory
    return obs


def _library(*names):
    return SkillLibrary(seed_skills=[SkillDoc(n, "general", f"insight {n}", ("a", "b"), "c") for n in names])


def test_simpsons_paradox_gives_no_uplift():
    lib = _library("easy_skill", "hard_skill")
    easy, hard = lib.cache_ids()
    lib.step([], [], 1, contrasts=group_contrasts(_simpson_observations(easy, hard)))
    e = lib.get(easy)
    # pooled counts would say 6/7 - 2/4 = +0.357; every group's own uplift is 0
    assert e.pooled_uplift == pytest.approx(6 / 7 - 2 / 4)
    assert e.uplift == pytest.approx(0.0) and e.uplift_groups == 2
    assert lib.get(hard).uplift == pytest.approx(0.0)


def test_step_uplift_metric_is_stratified_too():
    obs = [_obs("easy", "", True, control=True) for _ in range(2)] + [_obs("easy", "s1", True) for _ in range(6)]
    obs += [_obs("hard", "", False, control=True) for _ in range(2)] + [_obs("hard", "s1", False)]
    obs += [_obs("hard", "", False) for _ in range(5)]  # unaided but not control (e.g. skill_overlong)
    assert mechanism_metrics(obs)["step_uplift"] == pytest.approx(0.0)  # pooled: 6/7 - 2/4


def test_estimator_weights_and_standard_error():
    lib = _library("a_skill")
    sid = lib.cache_ids()[0]
    contrasts = [Contrast(sid, 6, 6, 2, 1), Contrast(sid, 1, 0, 2, 1)]  # d = +0.5 (w 1.5), -0.5 (w 2/3)
    ev = lib.step([], [], 1, contrasts=[*contrasts, Contrast(sid, 0, 0, 2, 1), Contrast("nope", 1, 1, 1, 1)])
    assert ev.contrasts == 2  # an empty arm measures nothing; unknown skills are skipped
    e = lib.get(sid)
    w = [6 * 2 / 8, 1 * 2 / 3]
    assert e.uplift == pytest.approx((w[0] * 0.5 - w[1] * 0.5) / sum(w))
    var = [0.25 / 2, 0.25 / 2]  # p1 = 1 or 0 contributes 0; the control arm p0 = 0.5 of 2
    assert e.uplift_wvar == pytest.approx(w[0] ** 2 * var[0] + w[1] ** 2 * var[1])  # plug-in, for the record
    assert (e.uplift_n, e.uplift_successes, e.uplift_base_n, e.uplift_base_successes) == (7, 6, 4, 2)
    # one group alone: the plain difference of its rates
    one = _library("b_skill")
    one.step([], [], 1, contrasts=[Contrast(one.cache_ids()[0], 4, 3, 2, 1)])
    assert one.get(one.cache_ids()[0]).uplift == pytest.approx(0.25)


def test_the_sums_survive_save_and_load(tmp_path):
    lib = _library("easy_skill", "hard_skill")
    lib.step([], [], 1, contrasts=[Contrast(lib.cache_ids()[0], 6, 5, 2, 1), Contrast(lib.cache_ids()[0], 2, 1, 2, 0)])
    lib.save(tmp_path / "lib.parquet")
    back = SkillLibrary.load(tmp_path / "lib.parquet")
    assert back == lib
    a, b = back.get(lib.cache_ids()[0]), lib.get(lib.cache_ids()[0])
    assert (a.uplift, a.uplift_se, a.uplift_groups) == (b.uplift, b.uplift_se, 2)


def _write_old_version(lib, path, version, columns):
    table = pa.Table.from_pylist(lib.to_records(), schema=_arrow_schema())
    table = table.select(list(range(columns)))
    config = {**lib.state_dict()["config"], "format_version": version}
    if version == 1:
        config.pop("seed_trial_uses")
        config.pop("rank_by")
    import json

    pq.write_table(table.replace_schema_metadata({b"arise_skill_library": json.dumps(config).encode()}), path)


def test_version_2_files_load_with_the_uplift_restarted(tmp_path, caplog):
    lib = _library("easy_skill", "hard_skill")
    easy, hard = lib.cache_ids()
    lib.step([(easy, 2.0)], [], 1, contrasts=group_contrasts(_simpson_observations(easy, hard)))
    _write_old_version(lib, tmp_path / "v2.parquet", 2, 25)
    with caplog.at_level(logging.WARNING, logger="recipe.arise.core.library_store"):
        back = SkillLibrary.load(tmp_path / "v2.parquet")
    e = back.get(easy)
    assert e.uplift is None and e.uplift_groups == 0  # unmeasured: pooled counts cannot be split by group
    assert (e.uplift_n, e.uplift_successes) == (7, 6) and e.utility == lib.get(easy).utility
    assert "version-2" in caplog.text and "restarts unmeasured" in caplog.text
    # it keeps measuring from there, and saves as the current version
    back.step([], [], 2, contrasts=[Contrast(easy, 2, 2, 2, 1)])
    assert back.get(easy).uplift == pytest.approx(0.5)
    back.save(tmp_path / "v3.parquet")
    assert SkillLibrary.load(tmp_path / "v3.parquet") == back


def test_version_1_files_still_load(tmp_path):
    lib = _library("a_skill", "b_skill")
    lib.step([(lib.cache_ids()[0], 1.0)], [], 1)
    _write_old_version(lib, tmp_path / "v1.parquet", 1, 14)
    back = SkillLibrary.load(tmp_path / "v1.parquet")
    assert [e.skill_id for e in back.cache] == lib.cache_ids() and back.get(lib.cache_ids()[0]).usage_count == 1
    assert all(e.origin == "seed" for e in back.cache)


def test_bad_uplift_sums_are_rejected(tmp_path):
    from recipe.arise.core.library_store import LibraryFormatError

    lib = _library("a_skill")
    rows = lib.to_records()
    rows[0]["uplift_groups"] = 2  # groups without weight
    with pytest.raises(LibraryFormatError, match="row 0: fields 'uplift_groups'"):
        SkillLibrary.from_records(rows, lib.state_dict()["config"])
    rows[0].update(uplift_groups=1, uplift_weight=1.0, uplift_wvar=float("nan"))
    with pytest.raises(LibraryFormatError, match="row 0: field 'uplift_wvar'"):
        SkillLibrary.from_records(rows, lib.state_dict()["config"])


def _coverage(n1, n0, groups=40, reps=2000, seed=0):
    """Share of simulated skills whose 95% interval (uplift +- 1.96 se) covers the true uplift, Sato's
    standard error and the plug-in binomial one: each skill used in ``groups`` query groups of n1 aided
    and n0 control trajectories, each query with its own success rate (Beta(2, 2)) and the skill
    adding -0.15, 0 or +0.15 to it."""
    import numpy as np

    rng = np.random.default_rng(seed)
    hits = {"sato": 0, "plugin": 0}
    for rep in range(reps):
        p0 = rng.beta(2.0, 2.0, size=groups)
        p1 = np.clip(p0 + (-0.15, 0.0, 0.15)[rep % 3], 0.0, 1.0)
        aided, control = rng.binomial(n1, p1), rng.binomial(n0, p0)
        e = _library("a_skill").cache[0]
        for a, c in zip(aided.tolist(), control.tolist(), strict=True):
            assert e.add_contrast(Contrast(e.skill_id, n1, a, n0, c))
        truth = float(np.mean(p1 - p0))  # equal arm sizes: equal Mantel-Haenszel weights
        hits["sato"] += abs(e.uplift - truth) <= 1.96 * e.uplift_se
        hits["plugin"] += abs(e.uplift - truth) <= 1.96 * math.sqrt(e.uplift_wvar) / e.uplift_weight
    return {k: v / reps for k, v in hits.items()}


@pytest.mark.parametrize("n1,n0", [(6, 2), (3, 1)])  # G=8 and the CPU run's G=4 with control_share 0.25
def test_uplift_interval_coverage_is_honest(n1, n0):
    cov = _coverage(n1, n0)
    assert 0.93 <= cov["sato"] <= 0.97, cov
    assert not 0.93 <= cov["plugin"] <= 0.97, cov  # the plug-in variance p(1-p)/n per arm undercovers


def test_sato_variance_of_one_group_and_the_sums_survive_export(tmp_path):
    lib = _library("a_skill")
    sid = lib.cache_ids()[0]
    lib.step([], [], 1, contrasts=[Contrast(sid, 6, 4, 2, 1)])
    e = lib.get(sid)
    # Sato's terms for a = 4 of 6, c = 1 of 2: P = (36 - 16 + 12 * -4 / 2) / 64, Q = (4 + 2) / 16
    p, q = (36 * 1 - 4 * 4 + 12 * (2 - 6) / 2) / 64, (4 * 1 + 1 * 2) / 16
    assert (e.uplift_sato_p, e.uplift_sato_q) == (pytest.approx(p), pytest.approx(q))
    assert e.uplift_se == pytest.approx(math.sqrt(e.uplift * p + q) / 1.5)
    from recipe.arise.core.library_jsonl import export_jsonl, library_from_jsonl

    out = tmp_path / "lib.jsonl"
    export_jsonl(lib, out)
    back, _ = library_from_jsonl(out)
    assert back.get(sid).uplift_se == pytest.approx(e.uplift_se)


def test_version_4_files_load_with_the_uplift_restarted(tmp_path, caplog):
    lib = _library("a_skill")
    sid = lib.cache_ids()[0]
    lib.step([], [], 1, contrasts=[Contrast(sid, 6, 4, 2, 1)])
    _write_old_version(lib, tmp_path / "v4.parquet", 4, 29)
    with caplog.at_level(logging.WARNING, logger="recipe.arise.core.library_store"):
        back = SkillLibrary.load(tmp_path / "v4.parquet")
    e = back.get(sid)
    assert e.uplift is None and e.uplift_se is None and (e.uplift_n, e.uplift_successes) == (6, 4)
    assert "version-4" in caplog.text
