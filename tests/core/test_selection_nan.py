"""epsilon-exploration never picks a skill whose score is -inf (a NaN/+inf finite_scores replaced,
a failed scoring request): uniform over the candidates with a finite score only."""

import numpy as np
import pytest

from recipe.arise.core.selection import finite_scores, select_skill_detailed


def _explore(scores, seeds=200, **kw):
    picks = []
    for seed in range(seeds):
        sel = select_skill_detailed(
            scores, temperature=1.0, epsilon=1.0, gate=0.0, rng=np.random.default_rng(seed), **kw
        )
        assert sel.explored and sel.gate_passed
        picks.append(sel.index)
    return picks


def test_epsilon_one_never_picks_a_minus_inf_score():
    scores = [-1.0, -np.inf, -2.0, -np.inf, -0.5]
    picks = _explore(scores)
    assert set(picks) == {0, 2, 4}  # every finite candidate, none of the -inf ones
    counts = np.bincount(picks, minlength=5)
    assert min(counts[[0, 2, 4]]) > 40  # uniform over the three (200 draws)


def test_nan_and_pos_inf_scores_cleaned_by_finite_scores_are_never_explored():
    cleaned, bad = finite_scores([np.nan, -1.0, np.inf, -3.0])
    assert bad == 2 and np.isneginf(cleaned[[0, 2]]).all()
    assert set(_explore(cleaned)) == {1, 3}


def test_all_finite_draw_is_unchanged():
    """With every score finite the explored index is the same draw as uniform over all n."""
    scores = [-1.0, -1.5, -2.0, -0.7]
    for seed in range(50):
        rng = np.random.default_rng(seed)
        rng.random()
        expected = int(rng.integers(4))
        sel = select_skill_detailed(scores, temperature=1.0, epsilon=1.0, gate=0.0, rng=np.random.default_rng(seed))
        assert sel.index == expected


def test_no_finite_score_keeps_the_greedy_choice():
    sel = select_skill_detailed([np.inf, -np.inf], temperature=1.0, epsilon=1.0, gate=0.0, rng=np.random.default_rng(0))
    assert sel.index == 0 and not sel.explored


def test_nan_scores_still_raise():
    with pytest.raises(ValueError, match="NaN"):
        select_skill_detailed([np.nan, 1.0], epsilon=1.0, rng=np.random.default_rng(0))
