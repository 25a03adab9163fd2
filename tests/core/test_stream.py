"""The summary stream: which groups a batch claims as their rewards come in, and what reaches the trainer."""

import pytest

from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.groups import choose_summary_groups
from recipe.arise.core.stream import SummaryStream


def feed(stream, uid, rewards):
    """Add a group's trajectories one by one; the claims returned along the way."""
    claims = [
        stream.add(uid, r, f"{uid}-trace-{i}", f"question {uid}", [{"role": "user", "content": uid}])
        for i, r in enumerate(rewards)
    ]
    return [c for c in claims if c is not None]


def test_a_group_is_claimed_by_its_last_reward_and_only_with_tau_plus():
    stream = SummaryStream()
    stream.begin("k", budget=-1, group_size=4)
    assert feed(stream, "flat", [1.0, 1.0, 1.0, 1.0]) == []  # no tau+: every advantage is 0
    assert feed(stream, "zero", [0.0, 0.0, 0.0, 0.0]) == []
    (group,) = feed(stream, "mixed", [0.0, 1.0, 2.0, 0.0])
    assert group["uid"] == "mixed" and group["key"] == "k" and group["question"] == "question mixed"
    assert group["success_rate"] == 0.5
    # tau+ = rewards above the mean (0.75), best first: the R=2 trace, then the R=1 one
    assert [(t["text"], t["reward"]) for t in group["traces"]] == [("mixed-trace-2", 2.0), ("mixed-trace-1", 1.0)]
    assert stream.claimed == 1


def test_the_budget_goes_to_the_first_groups_to_complete():
    stream = SummaryStream()
    stream.begin("k", budget=1, group_size=2)
    # interleaved arrivals: group b completes first, so b takes the batch's only summary
    assert stream.add("a", 1.0, "a0", "qa") is None
    assert stream.add("b", 0.0, "b0", "qb") is None
    claimed = stream.add("b", 1.0, "b1", "qb")
    assert claimed is not None and claimed["uid"] == "b"
    assert stream.add("a", 0.0, "a1", "qa") is None  # complete with tau+, but the budget is spent
    assert stream.claimed == 1
    stream.begin("k2", budget=0, group_size=2)
    assert feed(stream, "c", [0.0, 1.0]) == []


def test_collect_hands_over_and_a_closed_batch_drops_late_deliveries():
    stream = SummaryStream()
    assert stream.add("a", 1.0, "t", "q") is None  # not open: nothing is buffered
    stream.begin("k1", budget=-1, group_size=2)
    (g1,) = feed(stream, "a", [0.0, 1.0])
    (g2,) = feed(stream, "b", [1.0, 0.0])
    assert stream.deliver({"group": g1, "token_ids": [1, 2]})
    assert stream.collect() == (2, [{"group": g1, "token_ids": [1, 2]}])
    assert stream.collect() == (2, [])  # handed over once
    stream.end()
    assert not stream.deliver({"group": g2, "token_ids": [3]})  # its batch is closed
    stream.begin("k2", budget=-1, group_size=2)
    assert not stream.deliver({"group": g2, "token_ids": [3]})  # another batch's group
    assert stream.collect() == (0, [])


def test_begin_checks_its_arguments():
    with pytest.raises(ValueError, match="group_size"):
        SummaryStream().begin("k", budget=1, group_size=0)
    with pytest.raises(ValueError, match="budget"):
        SummaryStream().begin("k", budget=-2, group_size=8)


def test_streaming_needs_the_first_choice_and_first_keeps_the_given_order():
    with pytest.raises(ValueError, match="choose=first"):
        ARISEConfig.from_dict({"summary": {"stream": True}})
    assert ARISEConfig.from_dict({"summary": {"stream": True, "choose": "first"}}).summary.stream
    groups = [{"uid": u, "success_rate": s} for u, s in [("a", 0.9), ("b", 0.1), ("c", 0.5)]]
    import numpy as np

    assert [g["uid"] for g in choose_summary_groups(groups, 2, "first", np.random.default_rng(0))] == ["a", "b"]
    assert [g["uid"] for g in choose_summary_groups(groups, 1, "hardest", np.random.default_rng(0))] == ["b"]
