"""The task grader (``recipe.arise.core.grader``): box extraction, normalisation, integer and
math-verify matching, the pre-guards, the time bound.  Dataset-based tests run on the fixture rows
in tests/fixtures/raw and, marked ``shared_data``, on the full local copies (``raw_root``, see
tests/conftest.py).  Worker faults: tests/reliability/test_grader_faults.py."""

import ast
import json
import random
import threading
import time
from pathlib import Path

import pytest

from recipe.arise.core import grader as gr
from recipe.arise.core.grader import extract_boxed, grade, is_pathological, normalize_answer

BOUND = 2.0  # timeout used in these tests
SLACK = 2.0  # scheduling slack on a loaded 2-core box


def _rows(raw_root: Path, name: str) -> list[dict]:
    p = raw_root / name / "test.jsonl"
    assert p.is_file(), f"dataset not available: {p}"
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module", autouse=True)
def _warm():
    gr.warmup(2)
    yield


# ----------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a \\boxed{1} b \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\fbox{7} then \\boxed{8} then \\fbox{9}.", "9"),
        ("answer: \\boxed 5$ done", "5"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\boxed{\\left\\{ x \\right.}", "\\left\\{ x \\right."),
        ("no box here", None),
        ("\\boxed{1} and \\boxed{unterminated", None),
        ("\\boxedfoo{3}", None),
        ("\\boxed {42}", "42"),
        (None, None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_normalize_answer():
    assert normalize_answer("$x = 1{,}000$.") == "1000"
    assert normalize_answer("10,\\!080") == "10080"
    assert normalize_answer("27 \\text{ miles}") == "27"
    assert normalize_answer("\\dfrac{1}{2}") == "\\frac{1}{2}"
    assert normalize_answer("90^\\circ") == "90"


# -------------------------------------------------------------- basic grading


@pytest.mark.parametrize(
    "resp,gt,ok",
    [
        ("\\boxed{27}", 27.0, True),
        ("\\boxed{27}", "27.0", True),
        ("\\boxed{27.0}", 27, True),
        ("\\boxed{27.5}", 27.0, False),
        ("\\boxed{28}", 27.0, False),
        ("\\boxed{025}", "025", True),
        ("\\boxed{25}", "025", True),
        ("\\boxed{-3}", "-3", True),
        ("\\boxed{3}", "-3", False),
        ("\\boxed{1,000}", "1000", True),
        ("\\boxed{$x = 204$}", "204", True),
        ("\\boxed{204 \\text{ minutes}}", "204", True),
        ("\\boxed{3^3}", 27.0, True),
        ("\\boxed{\\frac{54}{2}}", 27.0, True),
        ("The answer is 27.", 27.0, False),
        ("\\boxed{}", 27.0, False),
        ("\\boxed{0.5}", "\\frac{1}{2}", True),
        ("\\boxed{\\frac{2}{4}}", "\\frac12", True),
        ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", True),
        ("\\boxed{x \\in (2, \\infty)}", "(2,\\infty)", True),
        ("\\boxed{[2, \\infty)}", "(2,\\infty)", False),
        ("\\boxed{2\\pi}", "2\\pi", True),
        ("\\boxed{6.28}", "2\\pi", False),
    ],
)
def test_grade_basic(resp, gt, ok):
    assert grade(resp, gt, timeout_s=BOUND) is ok


@pytest.mark.parametrize(
    "resp,gt",
    [
        (None, "1"),
        (5, "5"),
        (b"\\boxed{5}", "5"),
        ("\\boxed{5}", None),
        ("\\boxed{5}", float("nan")),
        ("\\boxed{5}", {"a": 1}),
        ("\\boxed{5}", ""),
        ("\\boxed{5}", True),
    ],
)
def test_grade_never_raises_on_odd_types(resp, gt):
    assert grade(resp, gt, timeout_s=BOUND) in (True, False)
    assert grade(b"\\boxed{5}", "5") is True


def test_grade_gold_list_any_match():
    assert grade("\\boxed{\\frac{1}{2}}", ["0.3", "1/2"], timeout_s=BOUND)


# ------------------------------------------------------- realistic responses

SKILL_ECHO = (
    'SKILL:{"skill_name":"equation_setup","problem_type":"algebra",'
    '"key_insight":"Use {x} } and \\\\boxed{9} {","method":["Name unknowns","Solve"],"check":"Plug in"}\n'
)


def make_response(problem, answer, *, final=True, echo=False, wrong_first="17"):
    body = (
        f"Let me restate the problem: {problem[:200]}\n\n"
        f"First attempt: I get $\\boxed{{{wrong_first}}}$, but that ignores a constraint {{oops}}.\n\n"
        "Let's redo it carefully. We set up the relation and simplify step by step, checking each case.\n\n"
    )
    if final:
        body += f"Therefore the final answer is $\\boxed{{{answer}}}$."
    return (SKILL_ECHO if echo else "") + body


def test_last_box_counts_and_skill_echo():
    assert grade(make_response("p", "27"), 27.0)
    assert not grade(make_response("p", "26"), 27.0)
    assert grade(make_response("p", "27", echo=True), 27.0)
    assert grade(make_response("p", "27", final=False), 17.0) is True  # the earlier box is then the last one
    assert not grade(SKILL_ECHO + "I think it is 9.", "9")  # the box inside the echoed skill never counts


def test_amc_float_gold(raw_root):
    rows = _rows(raw_root, "amc23_qwen25math")
    for r in rows:
        gold = r["answer"]
        assert isinstance(gold, float)
        ans = str(int(gold)) if float(gold).is_integer() else repr(gold)
        assert grade(make_response(r["problem"], ans, echo=r["id"] % 2 == 0), gold, timeout_s=BOUND), r["id"]
        assert not grade(make_response(r["problem"], ans + "1"), gold, timeout_s=BOUND), r["id"]


def test_aime_integer_gold(raw_root):
    rows = _rows(raw_root, "aime24_qwen25math")
    for r in rows:
        gold = r["answer"]
        assert grade(make_response(r["problem"], str(int(gold))), gold, timeout_s=BOUND), gold
        assert grade(r["solution"] + "\n\nSo the answer is $\\boxed{" + str(int(gold)) + "}$.", gold, timeout_s=BOUND)
        assert not grade(make_response(r["problem"], str(int(gold) + 1)), gold, timeout_s=BOUND)


def test_math500_reference_solutions_pass(raw_root):
    rows = _rows(raw_root, "math500")
    for r in rows:
        assert grade(r["solution"], r["answer"], timeout_s=BOUND), r["unique_id"]


def test_math500_wrong_answers_fail(raw_root):
    rows = _rows(raw_root, "math500")
    rnd = random.Random(0)
    sample = rnd.sample(rows, min(60, len(rows)))
    for r in sample:
        other = rnd.choice([x for x in rows if normalize_answer(x["answer"]) != normalize_answer(r["answer"])])
        assert not grade(make_response(r["problem"], other["answer"]), r["answer"], timeout_s=BOUND), (
            other["answer"],
            r["answer"],
        )


MATH500_EQUIVALENT_FORMS = [
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"),
    ("\\frac{14}{3}", "14/3"),
    ("\\frac{14}{3}", "\\dfrac{14}{3}"),
    ("11\\sqrt2", "11\\sqrt{2}"),
    ("\\frac{3\\sqrt{3}}{4}", "\\frac{3}{4}\\sqrt{3}"),
    ("-\\frac{\\pi}{6}", "-\\pi/6"),
    ("(-\\infty, 0]", "(-\\infty,0]"),
    ("(-\\infty, 2) \\cup (3, \\infty)", "(-\\infty,2)\\cup(3,\\infty)"),
    (
        "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}",
        "\\begin{pmatrix} -\\frac{1}{3} \\\\ \\frac{2}{3} \\\\ \\frac{5}{3} \\end{pmatrix}",
    ),
    ("18+2\\pi", "2\\pi + 18"),
    ("10,\\!080", "10080"),
    ("\\frac{243}{625}", "0.3888"),
]


@pytest.mark.parametrize("gold,pred", MATH500_EQUIVALENT_FORMS)
def test_math500_equivalent_forms(gold, pred):
    assert grade(make_response("q", pred), gold, timeout_s=BOUND)
    assert not grade(make_response("q", pred + "+1"), gold, timeout_s=BOUND)


@pytest.mark.shared_data
def test_math500_equivalent_forms_are_real_answers(shared_dir):
    answers = {r["answer"] for r in _rows(shared_dir / "data" / "raw", "math500")}
    assert not [gold for gold, _pred in MATH500_EQUIVALENT_FORMS if gold not in answers]


# ---------------------------------------------------------- pathological inputs

PATHOLOGICAL = [
    "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    "\\boxed{" + "7" * 5000 + "}",
    "\\boxed{100000!}",
    "\\boxed{(10^{5})!}",
    "\\boxed{9^{9^{9}}}",
    "\\boxed{10^{100000}}",
    "\\boxed{2**2**2**2**2}",
    "\\boxed{\\binom{100000}{50000}}",
    "\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}",
    "\\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}",
    "\\boxed{\x00\x01\x02\xff\ufffd}",
    "".join(chr(i) for i in range(1, 2000)) + "\\boxed{1}",
    "\\boxed{" * 5000,
    "x" * 2_000_000 + "\\boxed{5}",
]


@pytest.mark.parametrize("resp", PATHOLOGICAL)
@pytest.mark.parametrize("gold", ["5", "\\frac{1}{2}"])
def test_pathological_bounded_main_thread(resp, gold):
    t = time.perf_counter()
    out = grade(resp, gold, timeout_s=BOUND)
    assert time.perf_counter() - t < BOUND + SLACK
    assert out is (resp.endswith("\\boxed{5}") and gold == "5")


def test_pathological_bounded_from_threads():
    results = {}

    def run(i, resp):
        t = time.perf_counter()
        results[i] = (grade(resp, "\\frac{1}{2}", timeout_s=BOUND), time.perf_counter() - t)

    threads = [threading.Thread(target=run, args=(i, r)) for i, r in enumerate(PATHOLOGICAL)]
    threads.append(threading.Thread(target=run, args=(len(PATHOLOGICAL), "\\boxed{\\dfrac{2}{4}}")))
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert time.perf_counter() - start < 3 * (BOUND + SLACK)
    assert all(not results[i][0] for i in range(len(PATHOLOGICAL)))
    assert results[len(PATHOLOGICAL)][0] is True  # real math-verify work also succeeds off the main thread


def test_hard_kill_on_runaway_worker_from_thread():
    """A task that never returns (time.sleep stands for a C loop in sympy) is cut at its deadline
    from a non-main thread; pebble kills its worker and a replacement serves the next call.
    More worker faults: tests/reliability/test_grader_faults.py."""
    pool = gr._get_pool()
    assert pool is not None
    out = {}

    def run():
        t = time.perf_counter()
        out["res"] = pool.call(time.sleep, (30,), 1.0)
        out["dt"] = time.perf_counter() - t

    th = threading.Thread(target=run)
    th.start()
    th.join(10)
    assert out["res"] == (False, "timeout") and out["dt"] < 1.0 + SLACK
    # the pool recovers: a replacement worker serves the next math-verify call
    assert grade("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", timeout_s=5.0)


@pytest.mark.parametrize("resp", PATHOLOGICAL)
def test_pathological_rejected_cheaply_without_worker(resp):
    before = gr.grader_stats().get("calls")
    t = time.perf_counter()
    assert grade(resp, "\\frac{1}{2}", timeout_s=BOUND) is False
    assert time.perf_counter() - t < 0.5
    assert gr.grader_stats().get("calls") == before  # the pre-guards decided, no math-verify call


def test_guards():
    assert is_pathological("2^{2^{2}}") and is_pathological("1000!") and is_pathological("3^{12345}")
    assert not is_pathological("x^8 + x^7 + x^6 + x^5 + x^4 + x^3 + x^2 + x + 1")
    assert not is_pathological("5!") and not is_pathological("\\binom{10}{3}") and not is_pathological("2^{10}")


@pytest.mark.parametrize("answer", ["(99!)!", "9^{99}!", "\\sum_{k=1}^{999} k^k", "\\prod_{k=1}^{5000} k"])
def test_more_sympy_bombs_are_rejected_cheaply(answer):
    assert is_pathological(answer)


@pytest.mark.parametrize("answer", ["5!", "(3)!", "\\sum_{k=1}^{10} k", "\\frac{3}{4}", "2^{10}"])
def test_ordinary_answers_are_not_pathological(answer):
    assert not is_pathological(answer)


GRADER_MODULES = ("grader", "grader_answer", "grader_workers")


def _grader_sources() -> dict[str, str]:
    core = Path(gr.__file__).parent
    return {name: (core / f"{name}.py").read_text() for name in GRADER_MODULES}


def _private_accesses(src: str) -> list[str]:
    """``obj._name`` where obj is not ``self``: another object's (or library's) private attribute."""
    found = []
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue  # dunders (__name__, __file__) are public protocol
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            continue
        found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_private_access_scan_can_fail():
    assert _private_accesses("pool._pool_manager.worker_manager.x = 1\nself._ok = 2") == ["line 1: pool._pool_manager"]
    assert _private_accesses("ctx = multiprocessing.forkserver._forkserver") == [
        "line 1: multiprocessing.forkserver._forkserver"
    ]


@pytest.mark.parametrize("module", GRADER_MODULES)
def test_grader_uses_only_public_library_api(module):
    """The grader modules read no private attribute of any object but their own (pebble's and
    multiprocessing's internals included) and never swallow BaseException (KeyboardInterrupt must
    reach the caller): a regression guard on the modules' source."""
    src = _grader_sources()[module]
    assert _private_accesses(src) == []
    assert "except BaseException" not in src
    assert "_preload_modules" not in src and "_pool_manager" not in src


# ---------------------------------------------------------------- failures: counted or raised (issue 34)


class _FailingPool:
    broken = None

    def __init__(self, reason):
        self.reason = reason

    def call(self, fn, args, timeout_s):
        return False, self.reason


@pytest.mark.parametrize("reason", ["timeout", "worker_died", "error"])
def test_a_check_that_cannot_decide_is_wrong_and_says_why(monkeypatch, reason):
    monkeypatch.setattr(gr, "_get_pool", lambda: _FailingPool(reason))
    assert gr.grade_checked("so \\boxed{x^2+1}", "y+1", timeout_s=BOUND) == (False, reason)
    assert grade("so \\boxed{x^2+1}", "y+1", timeout_s=BOUND) is False
    # a decided answer is not a failure, and a later gold answer may still match
    assert gr.grade_checked("so \\boxed{7}", "7", timeout_s=BOUND) == (True, None)
    assert gr.grade_checked("so \\boxed{7}", ["y+1", "7"], timeout_s=BOUND) == (True, None)
    assert gr.grade_checked("no box here", "7", timeout_s=BOUND) == (False, None)


def test_an_error_on_the_models_text_is_counted_a_programming_error_raised(monkeypatch):
    def boom(exc):
        def normalize(text):
            raise exc

        return normalize

    monkeypatch.setattr(gr, "normalize_answer", boom(RecursionError("deep")))
    assert gr.grade_checked("\\boxed{5}", "5", timeout_s=BOUND) == (False, "error")
    for exc in (TypeError("bug"), AttributeError("bug"), KeyError("bug"), NameError("bug"), AssertionError("bug")):
        monkeypatch.setattr(gr, "normalize_answer", boom(exc))
        with pytest.raises(type(exc)):
            grade("\\boxed{5}", "5", timeout_s=BOUND)
