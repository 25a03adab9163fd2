"""The transfer world of bench/bench_learning_effect.py (recipe/arise/cpu/world.py), without a model.

What must hold for the bench to measure a learning effect and nothing planted: a family's rule is
not in its queries but in a correct trace and in the skill a summary writes; the warm start sees no
bench family and gives no name a rule; every family has held-out queries.
"""

import json
import random
from collections import Counter

import pytest

from recipe.arise.core.grader import grade
from recipe.arise.core.skill import SkillDoc, parse_skill
from recipe.arise.cpu import world


@pytest.fixture(scope="module")
def families():
    return world.bench_families(6)


def test_bench_families_are_fixed_balanced_and_unlike_each_other(families):
    assert families == world.bench_families(6)  # every arm and seed sees the same world
    assert len(families) == 6 and Counter(families.values()) == Counter({1: 2, 2: 2, 3: 2})
    for name in families:  # no pair of names made of the same two syllables in either order
        assert name[2:] + name[:2] not in families


def test_warm_start_names_are_disjoint_from_the_bench(families):
    names = world.warm_start_names(families)
    assert not set(names) & set(families) and len(names) == len(world.all_names()) - len(families)


def test_the_query_does_not_reveal_the_rule_but_a_correct_trace_does(families):
    fam = next(iter(families))
    k = families[fam]
    q = world.question(fam, 2, 3)
    assert fam in q and str(2 + 3 + k) not in q.replace("2 plus 3", "")
    solved = world.trace(fam, 2, 3, k)
    assert f"add {k} more" in solved and grade(solved, str(2 + 3 + k))
    assert not grade(world.trace(fam, 2, 3, k % 3 + 1), str(2 + 3 + k))  # another k is wrong


def test_rows_hold_out_queries_of_every_family_with_the_hidden_answer(families):
    train, held = world.split(families)
    assert not set(train) & set(held)
    assert Counter(f for f, _, _ in held) == Counter({f: world.HELD_OUT_PER_FAMILY for f in families})
    assert len(train) + len(held) == len(families) * len(world.pairs())
    rows = world.make_rows(held, families, "test")
    for row, (fam, a, b) in zip(rows, held, strict=True):
        assert row["data_source"] == world.DATA_SOURCE_PREFIX + fam
        assert row["reward_model"]["ground_truth"] == str(a + b + families[fam])
        assert int(row["reward_model"]["ground_truth"]) <= 9


def test_the_skill_carries_the_rule_and_passes_the_library_schema(families):
    for fam, k in families.items():
        text = json.dumps(world.skill(fam, k), separators=(",", ":"))
        doc = parse_skill(text)
        assert isinstance(doc, SkillDoc) and len(doc.to_json()) <= 220
        assert f"add {k} " in doc.key_insight and doc.skill_name == f"{fam}_rule"


def test_warm_start_examples_plant_no_bench_family_and_no_rule(families):
    names = world.warm_start_names(families)
    ex = world.warm_start_examples(names, random.Random(0), per_stage=600)
    texts = [user + " " + target for stage in ex.values() for _, user, target in stage]
    for fam in families:
        assert not any(fam in t for t in texts)
    # no warm-start name has a rule: per name, the k its answers use is spread over 1, 2, 3
    used: dict[str, Counter] = {}
    for _, user, target in ex["answer"]:
        fam = user.split(" ")[1]
        used.setdefault(fam, Counter())[int(target.split("add ")[1][0])] += 1
    assert all(len(c) >= 2 for c in used.values() if sum(c.values()) >= 10)
    total = sum(used.values(), Counter())
    assert max(total.values()) / min(total.values()) < 1.3  # about uniform over k
    # a summary copies the trace's k and family, the kind of knowledge that transfers
    for _, user, target in ex["summary"][:50]:
        k = int(user.split("we add ")[1][0])
        assert f"add {k} " in json.loads(target)["key_insight"]


def test_the_tokenizer_splits_names_into_syllables_the_warm_start_trains(families, tmp_path):
    names = world.warm_start_names(families)
    tok = world.build_tokenizer(tmp_path, world.tokenizer_corpus(names))
    seen = {t for n in names for t in tok.tokenize(world.question(n, 1, 2))}
    for fam in families:
        pieces = tok.tokenize(world.question(fam, 1, 2))[1:3]
        assert "".join(pieces).lstrip("Ġ") == fam  # two syllable tokens, no whole-name token
        assert set(pieces) <= seen


def test_a_warm_start_of_unknown_stages_is_refused_before_anything_is_built(tmp_path):
    with pytest.raises(ValueError, match=r"stages \['scoring'\]"):
        world.build_world_assets(tmp_path / "w", stages=("scoring",))
    with pytest.raises(ValueError, match="at least one"):
        world.build_world_assets(tmp_path / "w", stages=())
    assert not (tmp_path / "w").exists()
