"""The tool world of bench/bench_learning_effect.py --tool (recipe/arise/cpu/tool_world.py), without a model.

What must hold for the bench to measure a learning effect through the tool and nothing planted:
the answer needs the family's expression run (not guessable from the query, and the pool's
expressions never agree on a data pair), a solved trace names the code, and the warm start sees no
bench family and never pairs a name with one expression.
"""

import json
import random
from collections import Counter

import pytest

from recipe.arise.core.grader import grade
from recipe.arise.core.sandbox import SandboxLimits, run_python
from recipe.arise.core.skill import parse_skill
from recipe.arise.cpu import tool_world, world


@pytest.fixture(scope="module")
def families():
    return tool_world.bench_families(6)


def test_bench_families_use_every_pool_expression_twice(families):
    assert families == tool_world.bench_families(6)  # every arm and seed sees the same world
    assert set(families) == set(world.bench_families(6))
    assert Counter(families.values()) == Counter({e: 2 for e in tool_world.POOL})


def test_an_answer_needs_the_familys_expression_run(families):
    ps = tool_world.pairs()
    assert len(ps) >= 60
    for a, b in ps:  # a correct answer identifies the expression: a random one is right 1/3 of the time
        assert len({tool_world.answer(e, a, b) for e in tool_world.POOL}) == len(tool_world.POOL)
    values = {int(tool_world.answer(e, a, b)) for e in tool_world.POOL for a, b in ps}
    assert max(values) >= 50 and len(values) > 40  # multi-digit, far from the query's one-digit numbers
    fam = next(iter(families))
    q = tool_world.question(fam, 7, 5)
    assert families[fam] not in q and "python" in q  # the query names its family, never the expression


@pytest.mark.filterwarnings("ignore:ARISE python sandbox")  # no isolation needed for our own code
def test_the_code_prints_the_answer_and_the_skill_names_the_code(families):
    for fam, expr in families.items():
        a, b = tool_world.pairs()[7]
        result = run_python(tool_world.code(expr, a, b), SandboxLimits(), isolation="none")
        printed = result.stdout.strip()
        assert printed == tool_world.answer(expr, a, b)
        assert tool_world.call_prints(tool_world.code(expr, a, b), printed)
        assert grade(f"The tool printed {printed}. The answer is \\boxed{{{printed}}}.", printed)
        doc = parse_skill(tool_world.skill_json(fam, expr))
        assert doc is not None and len(doc.to_json()) <= 220
        assert f"print({expr})" in " ".join(doc.method) and f"In {fam} math" in doc.key_insight


def test_rows_hold_out_queries_of_every_family_with_the_expressions_value(families):
    train, held = tool_world.split(families)
    assert not set(train) & set(held)
    assert Counter(f for f, _, _ in held) == Counter({f: tool_world.HELD_OUT_PER_FAMILY for f in families})
    for row, (fam, a, b) in zip(tool_world.make_rows(held, families, "test"), held, strict=True):
        assert row["data_source"] == tool_world.DATA_SOURCE_PREFIX + fam
        assert row["reward_model"]["ground_truth"] == tool_world.answer(families[fam], a, b)


def test_warm_start_plants_no_bench_family_and_no_rule(families):
    names = world.warm_start_names(families)
    ex = tool_world.warm_start_examples(names, random.Random(0), per_stage=600)
    texts = [json.dumps(msgs) + " " + target for stage in ex.values() for _, msgs, target in stage]
    for fam, expr in families.items():
        assert not any(fam in t for t in texts)  # no bench name, so no bench family's rule
        assert not any(tool_world.skill_json(fam, expr) in t for t in texts)
    # no warm-start name has an expression: per name, the calls run several, and all about equally
    used: dict[str, Counter] = {}
    for _, msgs, target in ex["call"]:
        fam = msgs[0]["content"].split(" ")[1]
        used.setdefault(fam, Counter())[tool_world.CALL.search(target.replace("\\n", "\n")).group(3)] += 1
    assert all(len(c) >= 2 for c in used.values() if sum(c.values()) >= 10)
    total = sum(used.values(), Counter())
    assert set(total) == set(tool_world.POOL) and max(total.values()) / min(total.values()) < 1.3
    # a skill-aided call runs the skill's expression (what the skill carries), a summary copies the
    # transcript's code into the method
    aided = [(m[-1]["content"], tool_world.CALL.search(t.replace("\\n", "\n")).group(3)) for _, m, t in ex["skill"]]
    followed = [f"print({expr})" in user for user, expr in aided if "star_code" in user]
    assert len(followed) > 400 and sum(followed) / len(followed) > 0.9
    # the answer after the tool's result is taught under an injected skill too (as ARISE's aided
    # trajectories meet it) and always copies the printed number
    reads = [(msgs[0]["content"], msgs[-1]["content"], target) for _, msgs, target in ex["read"]]
    assert 0.3 < sum(user.startswith("SKILL:") for user, _, _ in reads) / len(reads) < 0.7
    assert all(f"\\boxed{{{printed}}}" in target for _, printed, target in reads)
    for _, msgs, target in ex["summary"]:
        expr = json.loads(target)["method"][0].removeprefix("Run print(").removesuffix(") in python")
        assert f"print({expr})" in msgs[0]["content"]
