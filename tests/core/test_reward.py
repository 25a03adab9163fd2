"""The hierarchical reward R = r_task + r_skill (App. D.2) and the grader names re-exported by
``recipe.arise.core.reward`` (the reward manager, verl_score and the benchmarks import them from there)."""

import pytest

from recipe.arise.core import grader, reward
from recipe.arise.core.reward import hierarchical_reward


def test_reward_reexports_the_grader():
    for name in ("grade", "grade_many", "extract_boxed", "normalize_answer", "is_pathological", "grader_stats"):
        assert getattr(reward, name) is getattr(grader, name), name
    for name in ("warmup", "configure_grader", "shutdown_grader", "DEFAULT_TIMEOUT_S"):
        assert getattr(reward, name) is getattr(grader, name), name


def test_hierarchical_reward_table():
    assert [hierarchical_reward(c, s, 1) for c in (False, True) for s in (False, True)] == [0.0, 0.0, 1.0, 1.0]
    assert [hierarchical_reward(c, s, 2) for c in (False, True) for s in (False, True)] == [0.0, 0.0, 1.0, 2.0]
    assert hierarchical_reward(True, True, 2, skill_bonus=0.5) == 1.5


@pytest.mark.parametrize("phase", [0, 3, "2", None, True, 1.5])
def test_hierarchical_reward_bad_phase(phase):
    with pytest.raises(ValueError):
        hierarchical_reward(True, True, phase)


def test_hierarchical_reward_bad_bonus():
    with pytest.raises(ValueError):
        hierarchical_reward(True, True, 2, skill_bonus=-1)
    with pytest.raises(ValueError):
        hierarchical_reward(True, True, 2, skill_bonus=float("nan"))
