"""The ARISE mechanism is alive under the default config (issue: mechanism live by default).

Pure pieces: score normalisation, the control arm, tau+ and summary choice, within-group
contrasts and uplift, the hierarchical-vs-binary advantage difference, seeds reaching Phase II.
verl's own GRPO advantage function is the reference where advantages are compared.
"""

import dataclasses
import math

import numpy as np
import pytest

from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.groups import (
    choose_summary_groups,
    exact_information_gain,
    group_contrasts,
    grpo_advantages,
    mechanism_metrics,
    positive_advantage_sessions,
)
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import Contrast, Provenance
from recipe.arise.core.observation import Observation
from recipe.arise.core.reward import hierarchical_reward
from recipe.arise.core.scoring import skill_score
from recipe.arise.core.selection import (
    control_arm_size,
    finite_scores,
    is_control_session,
    select_skill_detailed,
    selection_probs,
)
from recipe.arise.core.skill import SkillDoc, load_seed_skills
from recipe.arise.core.trajectory import TrajectoryInfo


def verl_grpo(rewards, norm_by_std=True):
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    r = torch.tensor(rewards, dtype=torch.float32)
    scores = torch.zeros(len(rewards), 3)
    scores[:, -1] = r
    adv, _ = compute_grpo_outcome_advantage(
        scores, torch.ones(len(rewards), 3), np.array(["g"] * len(rewards)), norm_adv_by_std_in_grpo=norm_by_std
    )
    return adv[:, 0].numpy()


# ------------------------------------------------------------------ scores and the gate


def test_score_norm_mean_is_the_default_and_divides_by_skill_tokens():
    assert ARISEConfig().selection.score_norm == "mean"
    lp = [[-1.0], [-2.0], [-3.0], [-4.0], [0.0]]  # verl layout: entry j = token j+1
    assert skill_score(lp, 3, 5, "sum") == pytest.approx(-7.0)
    assert skill_score(lp, 3, 5, "mean") == pytest.approx(-3.5)
    assert math.isnan(skill_score(None, 3, 5, "mean"))  # unusable engine output -> NaN, not a raise
    with pytest.raises(ValueError):
        skill_score(lp, 3, 5, "median")


def test_summed_scores_make_the_gate_inert_and_mean_scores_do_not():
    """~60-token skills whose per-token log-probs differ by a few tenths: the sums differ by tens
    of nats (softmax one-hot, the gate always passes); the means leave the gate something to do."""
    rng = np.random.default_rng(0)
    per_token = -1.5 + 0.3 * rng.standard_normal(10)  # mean log-prob per token of 10 skills
    sums, means = per_token * 60, per_token
    gate = ARISEConfig().selection.gate
    assert selection_probs(sums).max() > 0.99
    assert selection_probs(means).max() < gate  # this query: abstain
    means_relevant = means.copy()
    means_relevant[3] += 2.0  # one skill clearly more likely per token
    assert selection_probs(means_relevant).max() >= gate


def test_non_finite_scores_cannot_be_chosen():
    s, bad = finite_scores([0.1, float("nan"), float("inf"), -np.inf, -0.5])
    assert bad == 2 and np.isneginf(s[1]) and np.isneginf(s[2]) and s[0] == 0.1
    choice = select_skill_detailed(s, temperature=1.0, epsilon=0.0, gate=0.35, rng=np.random.default_rng(0))
    assert choice.index == 0


# ------------------------------------------------------------------ the control arm


def test_control_arm_sizes():
    share = ARISEConfig().selection.control_share
    assert share == 0.25
    assert [control_arm_size(share, g) for g in (1, 4, 8, 16)] == [0, 1, 2, 4]
    assert [is_control_session(s, 8, share) for s in range(8)] == [True, True] + [False] * 6
    assert control_arm_size(0.0, 8) == 0 and control_arm_size(1.0, 8) == 8
    with pytest.raises(ValueError):
        control_arm_size(1.5, 8)


def test_default_group_mixes_r1_and_r2_and_gets_different_advantages_than_binary():
    """With the default config, a Phase II group whose gate passes holds skill-conditioned and
    unaided trajectories; verl's GRPO then gives R=2 and R=1 different advantages, i.e. the
    hierarchical reward changes the gradient (with the per-query gate alone it never did)."""
    cfg = ARISEConfig()
    g = 8
    sel = cfg.selection
    scores = np.array([-0.4, -2.0, -2.1, -1.9, -2.2])  # mean log-probs: one skill stands out
    used = []
    for session in range(g):
        if is_control_session(session, g, sel.control_share):
            used.append(False)
            continue
        choice = select_skill_detailed(
            scores,
            temperature=sel.initial_temperature,
            epsilon=sel.epsilon,
            gate=sel.gate,
            rng=np.random.default_rng(session),
        )
        used.append(choice.index is not None)
    assert any(used) and not all(used)
    correct = [True, False, True, True, False, True, False, True]
    hier = [
        hierarchical_reward(c, u, phase=2, skill_bonus=cfg.reward.skill_bonus)
        for c, u in zip(correct, used, strict=False)
    ]
    binary = [hierarchical_reward(c, u, phase=1) for c, u in zip(correct, used, strict=False)]
    assert {1.0, 2.0} <= set(hier)
    a_hier, a_bin = verl_grpo(hier), verl_grpo(binary)
    assert not np.allclose(a_hier, a_bin)
    r1 = [a for a, r in zip(a_hier, hier, strict=False) if r == 1.0]
    r2 = [a for a, r in zip(a_hier, hier, strict=False) if r == 2.0]
    assert min(r2) > max(r1)  # App. B: correct-with-skill strictly above correct-unaided


def test_without_a_control_arm_gated_groups_are_equivalent_under_grpo():
    """The failure the control arm fixes: an all-skill group's rewards {0, 2} give GRPO the same
    advantages as the binary {0, 1}."""
    assert np.allclose(verl_grpo([0, 2, 2, 0, 2, 0, 0, 2]), verl_grpo([0, 1, 1, 0, 1, 0, 0, 1]))


def test_grpo_advantages_match_verl():
    for rewards in ([0, 1, 2, 2, 1, 0, 2, 1], [1, 1, 1, 1], [2, 0], [0, 0, 1, 2, 2, 2, 2, 2]):
        for norm in (True, False):
            assert np.allclose(grpo_advantages(rewards, norm), verl_grpo(rewards, norm), atol=1e-5)


# ------------------------------------------------------------------ tau+ and the summary cadence


def test_positive_advantage_sessions():
    assert positive_advantage_sessions([0, 1, 2, 2]) == [2, 3]
    assert positive_advantage_sessions([1, 1, 1]) == []
    assert positive_advantage_sessions([0, 0, 1]) == [2]


def test_choose_summary_groups_hardest_first_with_cap():
    groups = [{"uid": str(i), "success_rate": r} for i, r in enumerate([0.5, 0.125, 0.875, 0.125, 0.25])]
    chosen = choose_summary_groups(groups, 3, "hardest", np.random.default_rng(0))
    assert sorted(g["uid"] for g in chosen[:2]) == ["1", "3"] and chosen[2]["uid"] == "4"
    assert len(choose_summary_groups(groups, -1, "hardest", np.random.default_rng(0))) == 5  # Alg. 1
    picks = {
        tuple(g["uid"] for g in choose_summary_groups(groups, 2, "random", np.random.default_rng(s))) for s in range(20)
    }
    assert len(picks) > 3
    assert ARISEConfig().summary.max_per_step > 0  # the default caps the per-step churn


# ------------------------------------------------------------------ contrasts, uplift, metrics


def _obs(uid, skill, correct, control=False, phase=2, bonus=1.0):
    reward = hierarchical_reward(correct, bool(skill), phase, skill_bonus=bonus)
    return Observation(uid, reward, correct, TrajectoryInfo(phase=phase, skill_id=skill, control=control))


def test_group_contrasts_and_library_uplift():
    obs = [
        _obs("q1", "", True, control=True),
        _obs("q1", "", False, control=True),
        _obs("q1", "s1", True),
        _obs("q1", "s1", True),
        _obs("q1", "s2", False),
        _obs("q2", "s1", False),  # no control arm in q2: no contrast
        _obs("q2", "s1", True),
        _obs("q3", "", True, control=True, phase=1),  # Phase I: nothing
    ]
    contrasts = group_contrasts(obs)
    assert contrasts == [Contrast("s1", 2, 2, 2, 1), Contrast("s2", 1, 0, 2, 1)]
    lib = SkillLibrary(seed_skills=[SkillDoc("a_skill", "general", "insight a", ("x", "y"), "c")])
    sid = lib.cache[0].skill_id
    ev = lib.step([], [], 1, contrasts=[Contrast(sid, 2, 2, 2, 1), Contrast("nope", 1, 1, 1, 1)])
    assert ev.contrasts == 1 and lib.get(sid).uplift == pytest.approx(1.0 - 0.5)


def test_mechanism_metrics_see_the_mixed_group():
    obs = [
        _obs("q1", "", True, control=True),
        _obs("q1", "", False, control=True),
        _obs("q1", "s1", True),
        _obs("q1", "s1", False),
        _obs("q2", "", True, phase=2),
        _obs("q2", "", False, phase=2),
    ]
    m = mechanism_metrics(obs)
    assert m["frac_reward_2"] == pytest.approx(1 / 6) and m["frac_reward_1"] == pytest.approx(2 / 6)
    assert m["mixed_group_rate"] == pytest.approx(0.5) and m["phase2_groups"] == 2
    assert m["adv_gap_2v1"] > 0 and m["adv_shift"] > 0
    assert m["step_uplift"] == pytest.approx(0.5 - 0.5)
    binary_only = [dataclasses.replace(o, reward=float(o.correct)) for o in obs]
    assert mechanism_metrics(binary_only)["adv_shift"] == 0.0  # ablation (a): the gradient is binary
    # Observation records only (simulations build them too): a plain dict is a TypeError naming the type
    plain = {"uid": "q1", "reward": 1.0, "correct": True, "phase": 2}
    for read in (mechanism_metrics, group_contrasts):
        with pytest.raises(
            TypeError, match=r"^\w+: expected recipe\.arise\.core\.observation\.Observation .* got dict"
        ):
            read([*obs, plain])


def test_exact_information_gain():
    assert exact_information_gain([[-1.0, -2.0], [-5.0, -5.0]], [-2.0, -2.0]) == [pytest.approx(0.5), -3.0]


# ------------------------------------------------------------------ seeds reach Phase II


def _phase1(lib, steps, per_step=8):
    n = 0
    for step in range(1, steps + 1):
        new = []
        for _ in range(per_step):
            n += 1
            new.append((SkillDoc(f"gen_{n}", "general", f"insight {n}", ("a", "b"), "c"), Provenance("json", step)))
        lib.step([], new, step)


def test_seeds_survive_phase1_by_default_and_are_flushed_without_protection():
    cfg = ARISEConfig().library
    kept = SkillLibrary(seed_skills=load_seed_skills(), seed_trial_uses=cfg.seed_trial_uses)
    flushed = SkillLibrary(seed_skills=load_seed_skills(), seed_trial_uses=0)
    for lib in (kept, flushed):
        _phase1(lib, 60)
    assert sum(e.origin == "seed" for e in kept.cache) == 5
    assert sum(e.origin == "seed" for e in flushed.entries()) == 0
    # once tried in Phase II (trial_uses uses), a seed competes on utility like any other skill
    seed = kept.cache[0].skill_id
    kept.step([(seed, 0.0)] * cfg.seed_trial_uses, [], 61)
    others = [e for e in kept.cache if e.origin != "seed"]
    for e in others:
        e.utility = 1.0
    kept.step([], [(SkillDoc("late", "general", "late insight", ("a", "b"), "c"), Provenance("json", 62))], 62)
    assert kept.tier_of(seed) == "reservoir"


def test_provenance_and_uplift_survive_save_and_load(tmp_path):
    lib = SkillLibrary(seed_skills=load_seed_skills(), seed_trial_uses=8, rank_by="uplift")
    doc = SkillDoc("from_json", "algebra", "an insight", ("a", "b"), "c")
    lib.step([], [(doc, Provenance("json", 3, "uid-1", "What is 1+1?", (2.0, 1.0)))], 3)
    entry = next(e for e in lib.entries() if e.doc == doc)
    lib.step([], [], 4, contrasts=[Contrast(entry.skill_id, 4, 3, 2, 1)])
    entry.ig_exact, entry.ig_step = 1.25, 4
    lib.save(tmp_path / "lib.parquet")
    back = SkillLibrary.load(tmp_path / "lib.parquet")
    assert back == lib
    e = back.get(entry.skill_id)
    assert e.provenance == Provenance("json", 3, "uid-1", "What is 1+1?", (2.0, 1.0))
    assert e.uplift == pytest.approx(0.75 - 0.5) and e.ig_exact == 1.25 and e.ig_step == 4
    assert back.rank_by == "uplift" and back.seed_trial_uses == 8
    assert {x.origin for x in back.entries()} == {"seed", "json"}


def test_rank_by_uplift_changes_load():
    def run(rank_by):
        lib = SkillLibrary(cache_capacity=1, seed_skills=[], rank_by=rank_by, new_skill_policy="literal")
        a = SkillDoc("skill_a", "general", "insight a", ("x", "y"), "c")
        b = SkillDoc("skill_b", "general", "insight b", ("x", "y"), "c")
        lib.step([], [a, b], 1)
        ia = next(e.skill_id for e in lib.entries() if e.doc == a)
        ib = next(e.skill_id for e in lib.entries() if e.doc == b)
        assert lib.tier_of(ib) == "cache"
        # a: high utility but no causal effect (easy queries); b: lower utility, real uplift
        contrasts = [Contrast(ia, 4, 2, 4, 2), Contrast(ib, 4, 4, 4, 1)]
        lib.step([(ia, 2.0)] * 5 + [(ib, 1.0)] * 5, [], 2, contrasts=contrasts)
        return lib.cache[0].skill_id, ia, ib

    cached, ia, _ = run("utility")
    assert cached == ia  # the paper's LOAD promotes the high-utility skill
    cached, _, ib = run("uplift")
    assert cached == ib
