"""The launch tier (docs/testing.md) holds exactly the e2e tests that start launches of their own.

Per-stop CI runs README command 1, which leaves the ``launch`` marker out: an e2e test that starts
its own trainer or engine launch without the marker would push CI over ten minutes, and one with
the marker that starts nothing would leave per-stop CI for no reason. The README's two runs are
not launches of a test's own: CI runs them first and hands them over (``smoke_run.reuse_or_run``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

E2E = Path(__file__).resolve().parent / "e2e"
# what starts a trainer launch (the CPU smoke script, the faults scenario's Launch, the evaluation
# script) or a vLLM engine in a test's own process tree
STARTS = ("smoke_run.launch(", "Launch(", "eval_arise.sh", "from vllm import LLM")
HANDOVER = "reuse_or_run("  # the README runs: CI's, handed over; started here only without CI's


def _marked_launch(node: ast.AST) -> bool:
    return any("launch" in ast.unparse(d) for d in getattr(node, "decorator_list", []))


def _module_marked(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            return "mark.launch" in ast.unparse(node.value)
    return False


def _launching_tests(path: Path) -> dict[str, tuple[bool, bool]]:
    """test name -> (starts a launch of its own, carries the launch marker)."""
    source = path.read_text()
    tree = ast.parse(source)
    defs = {}  # module-level name -> its source
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = ast.get_source_segment(source, node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defs[target.id] = ast.get_source_segment(source, node)

    def starts(name: str, seen: set[str]) -> bool:
        if name in seen or name not in defs:
            return False
        seen.add(name)
        text = defs[name]
        if HANDOVER in text:
            return False
        if any(marker in text for marker in STARTS):
            return True
        nodes = list(ast.walk(ast.parse(text)))
        used = {n.id for n in nodes if isinstance(n, ast.Name)}
        used |= {a.arg for n in nodes if isinstance(n, ast.FunctionDef) for a in n.args.args}  # fixtures
        return any(starts(other, seen) for other in used - {name})

    module_marked = _module_marked(tree)
    return {
        node.name: (starts(node.name, set()), module_marked or _marked_launch(node))
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


@pytest.mark.parametrize("path", sorted(E2E.glob("test_*.py")), ids=lambda p: p.name)
def test_the_launch_marker_is_on_exactly_the_tests_that_launch(path):
    tests = _launching_tests(path)
    assert tests, f"no tests found in {path}"
    unmarked = [name for name, (launches, marked) in tests.items() if launches and not marked]
    idle = [name for name, (launches, marked) in tests.items() if marked and not launches]
    assert not unmarked, f"start launches of their own but would run in per-stop CI (mark them launch): {unmarked}"
    assert not idle, f"marked launch but start nothing (per-stop CI would leave them out for no reason): {idle}"


def test_the_detector_sees_each_kind_of_launch():
    found = {p.name: _launching_tests(p) for p in E2E.glob("test_*.py")}
    launching = {f"{module}::{name}" for module, tests in found.items() for name, (yes, _) in tests.items() if yes}
    # the evaluation script, the smoke script, the faults scenario's Launch (through a fixture), the engine probe
    for expected in (
        "test_cpu_e2e.py::test_eval_on_validation_machinery",
        "test_cpu_e2e.py::test_plain_grpo_through_the_same_path",
        "test_faults_e2e.py::test_kill_landed_inside_the_save_of_step_4",
        "test_scoring_prefix_cache.py::test_scores_read_through_the_prefix_cache_equal_the_full_prefills",
    ):
        assert expected in launching, sorted(launching)
    # the tests on the README's runs read CI's runs (handed over), they start none of their own
    assert "test_cpu_e2e.py::test_both_phases_ran" not in launching
    assert not [t for t in launching if t.startswith("test_cpu_tool_e2e.py")]


def test_command_1_leaves_the_launch_tier_out_and_says_so(pytester):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    launch: x\n    e2e: x\n    shared_data: x\n")
    pytester.makepyfile("import pytest\n@pytest.mark.launch\ndef test_launches(): pass\ndef test_reads(): pass\n")
    default = pytester.runpytest("-p", "no:xdist")
    default.assert_outcomes(passed=1, deselected=1)
    default.stdout.fnmatch_lines(["*1 launch-tier tests deselected*pytest -q -m launch tests*"])
    tier = pytester.runpytest("-p", "no:xdist", "-m", "launch")
    tier.assert_outcomes(passed=1, deselected=1)
    # as CI runs it: the workers deselect, the controller says so
    workers = pytester.runpytest_subprocess("-n", "2")
    workers.assert_outcomes(passed=1)
    workers.stdout.fnmatch_lines(["*1 launch-tier tests deselected*pytest -q -m launch tests*"])
