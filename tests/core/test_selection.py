import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.arise.core.selection import (
    Selection,
    select_skill,
    select_skill_detailed,
    selection_probs,
    top_m_candidates,
    truncate_skill_for_scoring,
)


def test_softmax_matches_reference_and_is_stable():
    s = np.array([1.0, 2.0, 3.0])
    ref = np.exp(s / 0.5) / np.exp(s / 0.5).sum()
    assert np.allclose(selection_probs(s, 0.5), ref)
    big = selection_probs([-1e6, -1e6 + 1.0, -1e6 + 2.0], 1.0)
    assert np.allclose(big, selection_probs([0.0, 1.0, 2.0], 1.0))
    assert np.isfinite(selection_probs([1e308, -1e308], 1e-300)).all()


def test_softmax_inf_handling():
    assert np.allclose(selection_probs([-np.inf, 0.0, 0.0], 1.0), [0, 0.5, 0.5])
    assert np.allclose(selection_probs([-np.inf, -np.inf], 1.0), [0.5, 0.5])
    assert np.allclose(selection_probs([np.inf, 0.0, np.inf], 1.0), [0.5, 0, 0.5])
    assert selection_probs([], 1.0).shape == (0,)


@pytest.mark.parametrize("t", [0.0, -1.0, float("nan"), float("inf"), "x"])
def test_bad_temperature(t):
    with pytest.raises(ValueError):
        selection_probs([1.0, 2.0], t)


def test_nan_scores_raise():
    with pytest.raises(ValueError, match="NaN"):
        selection_probs([1.0, float("nan")], 1.0)


def test_empty_returns_none():
    assert select_skill([], temperature=1.0, epsilon=0.1, gate=0.35, rng=np.random.default_rng(0)) is None


def test_gate_rejects_flat_distribution():
    sel = select_skill_detailed([0.0] * 10, temperature=1.0, epsilon=0.1, gate=0.35, rng=np.random.default_rng(0))
    assert sel.index is None and not sel.gate_passed and not sel.explored and sel.max_prob == pytest.approx(0.1)


def test_gate_boundary_inclusive():
    # two candidates with p = 0.5 each: gate 0.5 passes (max p >= delta)
    sel = select_skill_detailed([0.0, 0.0], temperature=1.0, epsilon=0.0, gate=0.5, rng=np.random.default_rng(0))
    assert sel.gate_passed and sel.index == 0


def test_greedy_without_epsilon():
    rng = np.random.default_rng(0)
    for _ in range(50):
        assert select_skill([0.0, 5.0, 1.0], temperature=1.0, epsilon=0.0, gate=0.35, rng=rng) == 1


def test_epsilon_one_is_uniform_over_all():
    rng = np.random.default_rng(1)
    counts = np.bincount(
        [select_skill([0.0, 9.0, 1.0, 2.0], temperature=1.0, epsilon=1.0, gate=0.0, rng=rng) for _ in range(4000)],
        minlength=4,
    )
    assert np.all(np.abs(counts / 4000 - 0.25) < 0.03)


def test_epsilon_rate_and_detail():
    rng = np.random.default_rng(2)
    sels = [
        select_skill_detailed([0.0, 9.0, 1.0], temperature=1.0, epsilon=0.1, gate=0.35, rng=rng) for _ in range(5000)
    ]
    explored = np.mean([s.explored for s in sels])
    assert 0.08 < explored < 0.12
    picked1 = np.mean([s.index == 1 for s in sels])
    assert picked1 == pytest.approx(0.9 + 0.1 / 3, abs=0.015)
    assert all(isinstance(s, Selection) and s.greedy_index == 1 for s in sels)


def test_rng_reproducible():
    a = [
        select_skill([0.0, 3.0, 2.9], temperature=1.0, epsilon=0.5, gate=0.0, rng=r)
        for r in [np.random.default_rng(7)]
        for _ in range(100)
    ]
    b = [
        select_skill([0.0, 3.0, 2.9], temperature=1.0, epsilon=0.5, gate=0.0, rng=r)
        for r in [np.random.default_rng(7)]
        for _ in range(100)
    ]
    assert a == b


def test_bad_epsilon():
    with pytest.raises(ValueError):
        select_skill([1.0], temperature=1.0, epsilon=1.5, gate=0.0, rng=np.random.default_rng(0))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(allow_nan=False, min_value=-1e6, max_value=1e6), max_size=12),
    st.floats(0.01, 100),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_probs_property(scores, t, eps, gate):
    p = selection_probs(scores, t)
    assert p.shape == (len(scores),)
    if scores:
        assert np.all(p >= 0) and p.sum() == pytest.approx(1.0)
    idx = select_skill(scores, temperature=t, epsilon=eps, gate=gate, rng=np.random.default_rng(0))
    assert idx is None or 0 <= idx < len(scores)


class FakeTok:
    def __init__(self):
        self.calls = []

    def encode(self, text, add_special_tokens=True):
        self.calls.append(add_special_tokens)
        return ([0] if add_special_tokens else []) + [ord(c) for c in text]


def test_truncate_skill_for_scoring():
    tok = FakeTok()
    assert truncate_skill_for_scoring("abc", tok) == [97, 98, 99]
    assert tok.calls == [False]
    assert len(truncate_skill_for_scoring("x" * 500, tok)) == 128
    assert truncate_skill_for_scoring("x" * 500, tok, max_tokens=5) == [120] * 5
    with pytest.raises(ValueError):
        truncate_skill_for_scoring("x", tok, max_tokens=0)


def test_top_m_candidates():
    u = [0.2, 0.9, float("nan"), 0.9, -1.0]
    assert top_m_candidates(5, 0, u) == [0, 1, 2, 3, 4]  # 0: every skill (the paper)
    assert top_m_candidates(5, 5, u) == top_m_candidates(5, 9, u) == [0, 1, 2, 3, 4]
    assert top_m_candidates(5, 2, u) == [1, 3]  # highest utilities, in cache order
    assert top_m_candidates(5, 1, u) == [1]  # a tie goes to the earlier cache entry
    assert top_m_candidates(5, 3, u) == [0, 1, 3]  # NaN ranks last
    assert top_m_candidates(5, 4, u) == [0, 1, 3, 4]
    assert top_m_candidates(5, 2, None) == [0, 1]  # no utilities: cache order
    assert top_m_candidates(5, 2, [1.0, 2.0]) == [0, 1]  # a list that does not match the cache
    assert top_m_candidates(0, 3, []) == []


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=12), st.integers(1, 14))
@settings(max_examples=200, deadline=None)
def test_top_m_candidates_properties(u, m):
    picked = top_m_candidates(len(u), m, u)
    assert picked == sorted(set(picked)) and len(picked) == min(m, len(u))
    rank = [float("-inf") if x != x else x for x in u]
    rest = [rank[i] for i in range(len(u)) if i not in picked]
    assert not rest or min(rank[i] for i in picked) >= max(rest)
