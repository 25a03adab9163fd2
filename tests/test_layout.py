"""The package layout states the architecture, and these tests hold it.

- ``recipe/arise/core``: the paper's method, framework free. It imports neither verl, Ray, torch,
  vLLM nor transformers, and nothing of the adapters, tools or CPU support.
- ``recipe/arise/adapters``: verl around the core (and the CPU support); they never import the user tools.
- ``recipe/arise/tools``: command-line tools on top of both.
- No module shadows a standard-library module; no module is longer than ~500 lines.
- The README's module map names every module, under its folder.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "recipe" / "arise"
FRAMEWORKS = {"verl", "ray", "torch", "vllm", "transformers", "transfer_queue", "tensordict", "hydra"}
MAX_LINES = 500


def modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def imports(path: Path) -> set[str]:
    """Every module the file imports, lazily inside functions included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = ".".join(path.relative_to(REPO).with_suffix("").parts[: -node.level])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)
    return names


def layer_violations(path: Path) -> list[str]:
    layer = path.relative_to(PKG).parts[0]
    bad = []
    for name in sorted(imports(path)):
        top = name.split(".")[0]
        if layer == "core" and top in FRAMEWORKS:
            bad.append(f"{name} (the core is framework free)")
        rules = (("adapters", {"adapters", "tools"}), ("tools", {"tools"}), ("cpu", {"adapters", "tools"}))
        for other, allowed_from in rules:
            if name.startswith(f"recipe.arise.{other}") and layer in {"core", "adapters", "tools"} - allowed_from:
                bad.append(f"{name} ({layer} must not import {other})")
    return bad


@pytest.mark.parametrize("layer", ["core", "adapters", "tools"])
def test_dependency_rule(layer):
    files = sorted((PKG / layer).glob("*.py"))
    assert files, f"recipe/arise/{layer} is empty"
    bad = {str(p.relative_to(REPO)): v for p in files if (v := layer_violations(p))}
    assert not bad, bad


def test_the_dependency_check_can_fail(tmp_path, monkeypatch):
    core = tmp_path / "recipe" / "arise" / "core"
    core.mkdir(parents=True)
    (core / "leaky.py").write_text("def f():\n    import torch\n    from recipe.arise.tools import report\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path / "recipe" / "arise")
    bad = layer_violations(core / "leaky.py")
    assert any(b.startswith("torch") for b in bad) and any("tools" in b for b in bad), bad


def test_no_module_shadows_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    shadows = [str(p.relative_to(REPO)) for p in modules() if p.stem in stdlib]
    assert not shadows, shadows


def test_modules_stay_small():
    long = {str(p.relative_to(REPO)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by responsibility): {long}"


def test_the_readme_module_map_names_every_module():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## What is where", 1)[1].split("\n## ", 1)[0]
    missing = []
    for p in modules():
        if p.stem == "__init__":
            continue
        folder = p.parent.relative_to(REPO).as_posix()
        # a row names the folder, then the module's name in backquotes on that row
        rows = [line for line in section.splitlines() if f"`{folder}/`" in line]
        if not any(re.search(rf"`{re.escape(p.stem)}`", row) for row in rows):
            missing.append(f"{folder}/{p.name}")
    assert not missing, f"README 'What is where' does not name: {missing}"
