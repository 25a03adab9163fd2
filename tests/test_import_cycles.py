"""No import cycles inside ``recipe/arise``: the modules form a layered graph (issue 34).

The graph is built from the source (AST), so it counts every import a module can make: the
module-level ones, the lazy ones inside functions and those under ``TYPE_CHECKING`` — a cycle
hidden in a function body or a type hint is still a cycle a reader has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "recipe" / "arise"


def module_name(path: Path, repo: Path) -> str:
    parts = path.relative_to(repo).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(pkg: Path, repo: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (``from m import name`` counts ``m.name`` when that
    is a module of the package, else ``m``)."""
    files = {module_name(p, repo): p for p in pkg.rglob("*.py") if "__pycache__" not in p.parts}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against the file's package
                    base = mod.split(".")[: len(mod.split(".")) - node.level + (1 if is_pkg else 0)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in files else src for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in files and t != mod)
        graph[mod] = deps
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def test_recipe_has_no_import_cycles():
    graph = import_graph(PKG, REPO)
    assert "recipe.arise.core.library" in graph and graph["recipe.arise.core.library"], "the graph is empty"
    assert not find_cycles(graph), find_cycles(graph)


def test_the_cycle_check_finds_lazy_and_type_checking_cycles(tmp_path):
    core = tmp_path / "recipe" / "arise" / "core"
    core.mkdir(parents=True)
    for d in (tmp_path / "recipe", tmp_path / "recipe" / "arise", core):
        (d / "__init__.py").write_text("")
    (core / "a.py").write_text("from .b import f\n")
    (core / "b.py").write_text("def f():\n    from recipe.arise.core import c\n")
    (core / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n")
    (core / "d.py").write_text("from . import a\n")  # imports into the cycle, not part of it
    graph = import_graph(tmp_path / "recipe" / "arise", tmp_path)
    assert find_cycles(graph) == [["recipe.arise.core.a", "recipe.arise.core.b", "recipe.arise.core.c"]]
