"""Every ``arise/*`` metric is declared once (recipe/arise/core/metrics.py) and read from there: the
trainer refuses an undeclared key, the code and the docs name only declared ones, and docs/metrics.md
is the declaration's own page."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

from recipe.arise.core import metrics
from recipe.arise.core.metrics import METRICS, UndeclaredMetric, check_declared, markdown, metric, undeclared

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "python -c \"from recipe.arise.core.metrics import markdown; print(markdown(), end='')\" > docs/metrics.md"
# a metric-like name: arise/ then path segments of lower-case words (no file name, no space)
KEY = re.compile(r"arise/[a-z0-9_]+(?:/[a-z0-9_<>]+)?")


def _declared_or_glob(name: str) -> bool:
    """A documented name is a declared one, a family member, or a glob over them (`arise/*_tokens`)."""
    if "*" in name:
        return any(fnmatch.fnmatchcase(m.name, name) for m in METRICS)
    return name in {m.name for m in METRICS} or not undeclared([name])


def test_each_name_is_declared_once():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names)) and all(n.startswith("arise/") for n in names)
    assert all(m.help and m.source for m in METRICS)


def test_an_undeclared_key_is_an_error_naming_it():
    check_declared({"arise/acc": 1.0, "actor/loss": 0.1, "arise/env_success/pick": 1.0}, "step 1")
    with pytest.raises(UndeclaredMetric, match=r"step 3: .*'arise/acc_typo'"):
        check_declared({"arise/acc_typo": 1.0}, "step 3")
    assert undeclared(["arise/env_success/a/b", "arise/library_staleness/mean"]) == ["arise/env_success/a/b"]
    with pytest.raises(UndeclaredMetric, match="arise/nothing"):
        metric("arise/nothing")


def test_docs_metrics_md_is_the_declarations_page():
    assert (ROOT / "docs" / "metrics.md").read_text() == markdown(), f"docs/metrics.md is stale: {REGENERATE}"


def _documented() -> dict[str, list[str]]:
    """Every backquoted `arise/...` metric name (globs included) in the README and docs/, by file."""
    found = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        names = re.findall(r"`(arise/[a-z0-9_*<>]+(?:/[a-z0-9_*<>]+)?)`", path.read_text())
        if names:
            found[path.name] = names
    return found


def test_the_docs_name_only_declared_metrics():
    documented = _documented()
    assert "README.md" in documented and "trainer_modes.md" in documented
    bad = {f: sorted({n for n in names if not _declared_or_glob(n)}) for f, names in documented.items()}
    assert not {f: n for f, n in bad.items() if n}


def test_the_docs_check_can_fail():
    assert not _declared_or_glob("arise/skill_use") and not _declared_or_glob("arise/*_typo")
    assert _declared_or_glob("arise/*_tokens") and _declared_or_glob("arise/env_success/<task_type>")


def _literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_code_reads_and_writes_only_declared_metrics():
    """Every metric-like string in recipe/ (the trainer's, the verdict's, the report's) is declared."""
    bad = {}
    for path in sorted((ROOT / "recipe" / "arise").rglob("*.py")):
        if path == Path(metrics.__file__):
            continue
        keys = [s for s in _literals(path) if KEY.fullmatch(s)]
        missing = undeclared(keys)
        if missing:
            bad[str(path.relative_to(ROOT))] = missing
    assert not bad


def test_the_verdict_reads_its_names_through_the_declaration(monkeypatch):
    from recipe.arise.tools import verdict

    assert set(verdict.ACTIVITY_KEYS) <= {m.name for m in METRICS}
    rows = [{"arise/acc": 1.0}]
    assert verdict._sum(rows, "arise/acc") == 1.0 and verdict._sum(rows, "critic/score/mean") == 0.0
    with pytest.raises(UndeclaredMetric):
        verdict._sum(rows, "arise/accuracy")
