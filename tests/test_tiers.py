"""The tiers (docs/testing.md): the ``launch`` marker is on exactly the tests that start launches of
their own, anywhere under tests/, and every such test is ``e2e`` too (the fast tier, ``-m "not
e2e"``, is the development loop and starts no launch).

A launch is found in the code's syntax tree, not its text (a comment or a docstring naming a script
starts nothing), following the names a test uses (its fixtures, the module's functions, classes and
constants) through the module:

- ``smoke_run.launch`` (the CPU smoke script), except inside ``smoke_run.reuse_or_run(...)``: the
  README's runs, which CI runs first and hands over (started by a test only without CI's);
- ``smoke_run.launch_command``: a command line that starts a launch, e.g. read from a page of docs/;
- a ``subprocess`` call whose command names a launching script of the repository's ``run_scripts``
  (``cpu_smoke_arise.sh``, ``eval_arise.sh``) without ``PRINT_OVERRIDES`` in its environment (with it
  a script prints its overrides and starts nothing);
- vLLM's ``LLM`` engine: imported in the test's process, or in code the test runs (a string).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

TESTS = Path(__file__).resolve().parent
LAUNCHING_SCRIPTS = ("cpu_smoke_arise.sh", "eval_arise.sh")
SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output"}
VLLM_ENGINE = "from vllm import LLM"


def _is(node: ast.AST, owner: str, attr: str) -> bool:
    """``node`` is ``owner.attr``."""
    return isinstance(node, ast.Attribute) and node.attr == attr and getattr(node.value, "id", None) == owner


def _marked(decorators, tree: ast.Module) -> tuple[bool, bool]:
    """(launch, e2e): the markers on a test, its own decorators or the module's ``pytestmark``."""
    marks = set()
    nodes = list(decorators)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            nodes += node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
    for node in nodes:
        node = node.func if isinstance(node, ast.Call) else node
        if isinstance(node, ast.Attribute) and _is(node.value, "pytest", "mark"):
            marks.add(node.attr)
    return "launch" in marks, "e2e" in marks


class _Module:
    """One test module's syntax tree: which of its tests start a launch of their own."""

    def __init__(self, source: str):
        self.tree = ast.parse(source)
        self.defs: dict[str, ast.AST] = {}  # module-level name -> its definition
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.defs[target.id] = node.value

    def _resolve(self, node: ast.AST, local: dict[str, ast.AST], seen: frozenset[str] = frozenset()) -> list:
        """The nodes of an expression, with the definitions of the names it uses (the function's
        own assignments, then the module's) followed."""
        found = []
        for sub in ast.walk(node):
            found.append(sub)
            if isinstance(sub, ast.Name) and sub.id not in seen:
                target = local.get(sub.id, self.defs.get(sub.id))
                if target is not None and not isinstance(target, (ast.FunctionDef, ast.ClassDef)):
                    found += self._resolve(target, local, seen | {sub.id})
        return found

    def _strings(self, node: ast.AST, local: dict[str, ast.AST]) -> list[str]:
        return [n.value for n in self._resolve(node, local) if isinstance(n, ast.Constant) and isinstance(n.value, str)]

    def _names(self, node: ast.AST) -> set[str]:
        return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}

    def _starts_here(self, node: ast.AST) -> bool:
        """A launch primitive inside ``node`` itself (module-level functions and classes not followed)."""
        local = {}  # the function's own assignments: name -> value
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                local.update({t.id: sub.value for t in sub.targets if isinstance(t, ast.Name)})
        handed_over = set()  # the README runs' arguments: started only without CI's
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and _is(sub.func, "smoke_run", "reuse_or_run"):
                handed_over |= {id(n) for arg in sub.args for n in self._resolve(arg, local)}
        for sub in ast.walk(node):
            if id(sub) in handed_over:
                continue
            if _is(sub, "smoke_run", "launch") or _is(sub, "smoke_run", "launch_command"):
                return True
            if isinstance(sub, ast.ImportFrom) and sub.module == "vllm" and any(a.name == "LLM" for a in sub.names):
                return True
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in SUBPROCESS:
                if getattr(sub.func.value, "id", None) != "subprocess" or not sub.args:
                    continue
                command = self._resolve(sub.args[0], local)
                strings = [n.value for n in command if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                in_repo = any(isinstance(n, ast.Name) and n.id == "REPO" for n in command)
                env = next((k.value for k in sub.keywords if k.arg == "env"), None)
                printing = env is not None and "PRINT_OVERRIDES" in self._strings(env, local)
                if in_repo and not printing and any(s in LAUNCHING_SCRIPTS for s in strings):
                    return True
        return False

    def starts(self, node: ast.AST, seen: set[str]) -> bool:
        """``node`` starts a launch, itself or through the module-level names it uses."""
        if self._starts_here(node):
            return True
        for name in self._names(node) | {a.arg for a in getattr(getattr(node, "args", None), "args", [])}:
            if name in self.defs and name not in seen:
                target = self.defs[name]
                if isinstance(target, ast.Constant) and isinstance(target.value, str) and VLLM_ENGINE in target.value:
                    return True  # code that starts the engine, written to a file and run
                if self.starts(target, seen | {name}):
                    return True
        return False

    def tests(self) -> dict[str, tuple[bool, bool, bool]]:
        """test name -> (starts a launch of its own, marked launch, marked e2e)."""
        return {
            node.name: (self.starts(node, {node.name}), *_marked(node.decorator_list, self.tree))
            for node in self.tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
        }


def launching_tests(path: Path) -> dict[str, tuple[bool, bool, bool]]:
    return _Module(path.read_text()).tests()


# every test module but this one, whose snippets below are launches written as data
MODULES = sorted(p for p in TESTS.rglob("test_*.py") if "fixtures" not in p.parts and p.name != "test_tiers.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(TESTS)))
def test_the_launch_marker_is_on_exactly_the_tests_that_launch(path):
    tests = launching_tests(path)
    unmarked = [name for name, (launches, marked, _) in tests.items() if launches and not marked]
    idle = [name for name, (launches, marked, _) in tests.items() if marked and not launches]
    fast = [name for name, (launches, _, e2e) in tests.items() if launches and not e2e]
    assert not unmarked, f"start launches of their own (mark them launch): {unmarked}"
    assert not idle, f"marked launch but start nothing: {idle}"
    assert not fast, f"start launches but are not e2e (the fast tier would run them): {fast}"


def test_the_detector_sees_each_kind_of_launch():
    found = {p.relative_to(TESTS).as_posix(): launching_tests(p) for p in MODULES}
    launching = {f"{module}::{name}" for module, tests in found.items() for name, (yes, _, _) in tests.items() if yes}
    # the evaluation script, the smoke script, the faults scenario's Launch (through a fixture), the engine probe
    for expected in (
        "e2e/test_cpu_e2e.py::test_eval_on_validation_machinery",
        "e2e/test_cpu_e2e.py::test_plain_grpo_through_the_same_path",
        "e2e/test_faults_e2e.py::test_kill_landed_inside_the_save_of_step_4",
        "e2e/test_scoring_prefix_cache.py::test_scores_read_through_the_prefix_cache_equal_the_full_prefills",
    ):
        assert expected in launching, sorted(launching)
    # the tests on the README's runs read CI's runs (handed over); the run scripts printing their
    # overrides, and a copy of a script under tmp with a stand-in python, start nothing
    assert "e2e/test_cpu_e2e.py::test_both_phases_ran" not in launching
    assert not [t for t in launching if not t.startswith("e2e/")], sorted(launching)


SNIPPETS = {
    # (source, {test: starts a launch})
    "a comment or docstring names the script": (
        'def test_a():\n    """runs eval_arise.sh"""  # cpu_smoke_arise.sh\n    assert True\n',
        {"test_a": False},
    ),
    "the smoke script through a helper of the module": (
        "import smoke_run\ndef _go(p):\n    return smoke_run.launch(p)\ndef test_a(tmp_path):\n    _go(tmp_path)\n",
        {"test_a": True},
    ),
    "a fixture of the module that launches": (
        "import pytest, smoke_run\n@pytest.fixture\ndef run(tmp_path):\n    smoke_run.launch(tmp_path)\n"
        "def test_a(run):\n    pass\ndef test_b(tmp_path):\n    pass\n",
        {"test_a": True, "test_b": False},
    ),
    "handed over by CI": (
        "import smoke_run\ndef test_a(tmp_path):\n    smoke_run.reuse_or_run('V', len, smoke_run.launch, tmp_path)\n",
        {"test_a": False},
    ),
    "the evaluation script, printing or not": (
        "import subprocess\nREPO = 0\nS = REPO / 'run_scripts' / 'eval_arise.sh'\n"
        "def test_a():\n    subprocess.run(['bash', str(S)], env={'X': '1'})\n"
        "def test_b():\n    subprocess.run(['bash', str(S)], env={'PRINT_OVERRIDES': '1'})\n"
        "def test_c(tmp_path):\n    subprocess.run(['bash', str(tmp_path / 'eval_arise.sh')])\n",
        {"test_a": True, "test_b": False, "test_c": False},
    ),
    "vLLM's engine in code the test runs": (
        f"import subprocess, sys\nCODE = '{VLLM_ENGINE}, SamplingParams'\n"
        "def test_a(tmp_path):\n    (tmp_path / 'p.py').write_text(CODE)\n"
        "    subprocess.run([sys.executable, str(tmp_path / 'p.py')])\n",
        {"test_a": True},
    ),
}


@pytest.mark.parametrize("case", sorted(SNIPPETS))
def test_the_detector_on_small_modules(case):
    source, expected = SNIPPETS[case]
    assert {name: found[0] for name, found in _Module(source).tests().items()} == expected


def test_markers_read_from_the_syntax_tree():
    source = (
        "import pytest\npytestmark = [pytest.mark.e2e]\n@pytest.mark.launch\ndef test_a():\n    pass\n"
        "@pytest.mark.launched_elsewhere\ndef test_b():\n    pass\n"
    )
    tests = _Module(source).tests()
    assert tests["test_a"][1:] == (True, True)
    assert tests["test_b"][1:] == (False, True)  # a marker whose name merely contains "launch" is not it


def test_command_1_runs_every_tier(pytester):
    """README command 1 (CI) deselects nothing by marker: the launch tier runs in it."""
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    launch: x\n    e2e: x\n    shared_data: x\n")
    pytester.makepyfile("import pytest\n@pytest.mark.launch\ndef test_launches(): pass\ndef test_reads(): pass\n")
    pytester.runpytest("-p", "no:xdist").assert_outcomes(passed=2)
    pytester.runpytest("-p", "no:xdist", "-m", "not launch").assert_outcomes(passed=1, deselected=1)
    pytester.runpytest_subprocess("-n", "2").assert_outcomes(passed=2)
