"""recipe/arise/core/trajectory.py: the one conversion of a trajectory's ARISE record to and from
verl's ``extra_fields`` (keys, missing keys, unknown keys, the values verl hands back)."""

import dataclasses

import numpy as np
import pytest

from recipe.arise.core.skill import load_seed_skills
from recipe.arise.core.trajectory import ScoredSkill, SelectedSkill, TrajectoryInfo, as_list, plain

FULL = TrajectoryInfo(
    phase=2,
    validate=True,
    skill_id="s000007",
    selected=True,
    control=False,
    gate_passed=True,
    explored=True,
    max_prob=0.625,
    scores=[-1.5, -0.25, float("-inf")],
    scoring_failed=True,
    scores_nonfinite=1,
    skill_overlong=True,
    skill_tokens=42,
    skill_in_response=True,
    scorer=True,
    scoring_s=0.125,
    scoring_tokens=900,
    scoring_cached_tokens=300,
    scoring_rescored=2,
    library_version=4,
)


def test_every_field_differs_from_its_default_in_the_full_record():
    """Guards the round trip below: a field left at its default would pass it untested."""
    default = TrajectoryInfo()
    same = [f.name for f in dataclasses.fields(TrajectoryInfo) if getattr(FULL, f.name) == getattr(default, f.name)]
    assert same == ["control"]  # control=True and selected=True never go together
    assert TrajectoryInfo.from_extra_fields(dataclasses.replace(FULL, control=True).to_extra_fields()).control


def test_round_trip_through_extra_fields():
    fields = FULL.to_extra_fields()
    assert list(fields) == TrajectoryInfo.keys()
    assert all(k.startswith("arise_") for k in fields) and len(fields) == 20
    assert fields["arise_skill_id"] == "s000007" and fields["arise_skill_tokens"] == 42
    assert TrajectoryInfo.from_extra_fields(fields) == FULL


def test_to_extra_fields_copies_the_scores():
    record = TrajectoryInfo(scores=[1.0, 2.0])
    fields = record.to_extra_fields()
    fields["arise_scores"].append(3.0)
    assert record.scores == [1.0, 2.0]


def test_missing_keys_take_the_defaults():
    assert TrajectoryInfo.from_extra_fields(None) == TrajectoryInfo()
    assert TrajectoryInfo.from_extra_fields({}) == TrajectoryInfo()
    record = TrajectoryInfo.from_extra_fields({"arise_skill_id": "s1", "arise_phase": 2})
    assert record == TrajectoryInfo(phase=2, skill_id="s1")
    assert record.phase == 2 and record.gate_passed is None and record.max_prob is None and record.scores == []


def test_none_values_take_the_default_unless_the_field_may_be_none():
    fields = {k: None for k in TrajectoryInfo.keys()}
    assert TrajectoryInfo.from_extra_fields(fields) == TrajectoryInfo()
    record = TrajectoryInfo.from_extra_fields({"arise_gate_passed": False, "arise_max_prob": 0.0})
    assert record.gate_passed is False and record.max_prob == 0.0  # falsy, yet not None


def test_verl_keys_are_ignored_and_unknown_arise_keys_raise():
    fields = {**FULL.to_extra_fields(), "turn_scores": [], "tool_rewards": [], "prompt_logprobs": [[0.0]]}
    assert TrajectoryInfo.from_extra_fields(fields) == FULL
    with pytest.raises(ValueError, match="arise_skill_idd"):
        TrajectoryInfo.from_extra_fields({"arise_skill_idd": "s1"})


class NonTensorData:
    """What tensordict hands back for a non-tensor value (read through ``.data``)."""

    def __init__(self, data):
        self.data = data


def test_numpy_and_wrapped_values_become_plain_python_values_of_the_field_type():
    fields = {
        "arise_phase": np.int64(2),
        "arise_selected": np.bool_(True),
        "arise_gate_passed": np.array(False),
        "arise_max_prob": np.float32(0.5),
        "arise_scores": np.array([-1.0, -2.0], dtype=np.float32),
        "arise_skill_id": NonTensorData("s000003"),
        "arise_skill_tokens": NonTensorData(np.int32(7)),
        "arise_scoring_s": np.float64(1.25),
    }
    record = TrajectoryInfo.from_extra_fields(NonTensorData(fields))
    assert record == TrajectoryInfo(
        phase=2, selected=True, gate_passed=False, max_prob=0.5, scores=[-1.0, -2.0], skill_id="s000003",
        skill_tokens=7, scoring_s=1.25,
    )  # fmt: skip
    for name, kind in [("phase", int), ("selected", bool), ("gate_passed", bool), ("max_prob", float),
                       ("skill_id", str), ("skill_tokens", int), ("scoring_s", float)]:  # fmt: skip
        assert type(getattr(record, name)) is kind, name
    assert all(type(s) is float for s in record.scores)


def test_plain_and_as_list():
    assert plain(np.int64(3)) == 3 and type(plain(np.int64(3))) is int
    assert plain(NonTensorData([1, 2])) == [1, 2] and plain("x") == "x" and plain(None) is None
    assert as_list(np.array([1, 2])) == [1, 2] and as_list(({"a": 1},)) == [{"a": 1}]


def test_the_selected_skill_names_its_parts():
    doc = load_seed_skills()[0]
    plain_choice = SelectedSkill("s1", doc)
    assert plain_choice.skill_id == "s1" and plain_choice.doc is doc and plain_choice.scored is None
    scored = ScoredSkill([1, 2], [3], [-0.5])
    assert SelectedSkill("s2", doc, scored).scored.skill_ids == [3]
