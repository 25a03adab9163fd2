"""verl's classes read from the stack's source (AST), following a class's bases through its module's
imports (importable as ``verl_source``: tests/conftest.py puts this folder on ``sys.path``); the
trainer contracts (tests/contracts/test_trainer_overrides_contract.py, test_trainer_hooks_contract.py)
read verl's trainers this way, so a stack's source is checked without importing it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def class_node(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def module_tree(verl_parent: Path, module: str) -> ast.Module:
    return ast.parse((verl_parent / (module.replace(".", "/") + ".py")).read_text())


def bases(tree: ast.Module, module: str, node: ast.ClassDef) -> Iterator[tuple[str, str]]:
    """(module, class) of each base of ``node`` (in ``module``, parsed as ``tree``) defined in that
    module or imported from verl; others (ABC, object, Generic[...]) are not followed."""
    imported = {
        alias.asname or alias.name: stmt.module
        for stmt in tree.body
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("verl.")
        for alias in stmt.names
    }
    for base in node.bases:
        name = ast.unparse(base)
        if class_node(tree, name) is not None:
            yield module, name
        elif name in imported:
            yield imported[name], name


def resolve(verl_parent: Path, module: str, cls: str, method: str) -> tuple[str, str, ast.FunctionDef] | None:
    """(module, class, node) of ``method`` as the class ``module.cls`` resolves it (bases in MRO
    order); None where no class on the way defines it."""
    tree = module_tree(verl_parent, module)
    node = class_node(tree, cls)
    assert node is not None, f"{module} no longer defines {cls}"
    if method in methods(node):
        return module, cls, methods(node)[method]
    for base_module, base in bases(tree, module, node):
        found = resolve(verl_parent, base_module, base, method)
        if found is not None:
            return found
    return None


def find_method(verl_parent: Path, module: str, cls: str, method: str) -> ast.FunctionDef | None:
    """``method`` as the class ``module.cls`` resolves it (:func:`resolve`'s node)."""
    found = resolve(verl_parent, module, cls, method)
    return None if found is None else found[2]
