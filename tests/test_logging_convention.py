"""One logging convention in ``recipe/arise`` (docs/design.md, "Logging"), as verl's own modules do:

    logger = logging.getLogger(__name__)
    logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

at module level, right after each other; nothing logs to the root logger (``logging.warning(...)``)
or under another module's name. ``verl_register`` is the one module that handles loggers it does not
own: it gives the ``recipe.arise`` logger its console handler (``show_warnings``).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "recipe" / "arise"
EXEMPT = {"adapters/verl_register.py"}
GET = "logger = logging.getLogger(__name__)"
LEVEL = 'logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))'
_LEVEL = ast.unparse(ast.parse(LEVEL))  # as ast.unparse writes it (its own quotes)
ROOT_CALLS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}


def convention_faults(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    body = tree.body
    top = {id(n) for n in body}
    faults = []
    for i, node in enumerate(body):
        if ast.unparse(node) == GET:
            nxt = ast.unparse(body[i + 1]) if i + 1 < len(body) else ""
            if nxt != _LEVEL:
                faults.append(f"line {node.lineno}: the logger's level is not set next: {LEVEL}")
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Name) and owner.id == "logging"):
            continue
        if node.func.attr == "getLogger":
            parent = next((s for s in body if any(c is node for c in ast.walk(s))), None)
            if parent is None or id(parent) not in top or ast.unparse(parent) != GET:
                faults.append(f"line {node.lineno}: {ast.unparse(node)} (only `{GET}` at module level)")
        elif node.func.attr in ROOT_CALLS:
            faults.append(f"line {node.lineno}: {ast.unparse(node)} logs to the root logger")
    return faults


def test_every_module_follows_the_logging_convention():
    files = [p for p in sorted(PKG.rglob("*.py")) if "__pycache__" not in p.parts]
    checked = [p for p in files if str(p.relative_to(PKG)) not in EXEMPT]
    assert any("logging.getLogger" in p.read_text() for p in checked)
    bad = {str(p.relative_to(REPO)): f for p in checked if (f := convention_faults(p))}
    assert not bad, bad


def test_the_convention_check_can_fail(tmp_path):
    head = "import logging, os\nlogger = logging.getLogger(__name__)\n"
    cases = {
        "import logging\nlogger = logging.getLogger(__name__)\n": "level is not set",
        head + 'logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "INFO"))\n': "level is not set",
        "import logging\ndef f():\n    logging.getLogger('recipe.arise.x').warning('w')\n": "only `logger",
        "import logging\nlogging.warning('w')\n": "root logger",
        head + LEVEL + "\n": None,
    }
    for i, (src, fault) in enumerate(cases.items()):
        path = tmp_path / f"m{i}.py"
        path.write_text(src)
        faults = convention_faults(path)
        assert (fault is None and not faults) or (fault and any(fault in f for f in faults)), (src, faults)
