"""The private verl / vLLM surface the project uses is the one docs/design.md lists ("The verl surface
we depend on"), and each listed name has a contract test.

- the table: every ``tests/contracts/<file>.py::<test>`` it names exists (the file and a test
  function of that name);
- the source: an AST scan of ``recipe/arise/**/*.py`` finds every private name the project
  overrides, calls or reads on verl / vLLM, and each must be a row of the table; a row of kind
  override / call / read / patch must still be found (no stale rows). The scan finds:
  - imports of a private name or module from verl / vLLM (``from verl.x import _y``);
  - attribute chains through an imported verl / vLLM module with a private part, and assignments
    to an attribute of such a module (monkeypatches, public names included);
  - in a class that derives from a verl / vLLM class (directly, or through project classes and
    mixins): methods named ``_x`` that a verl / vLLM base also defines (overrides), and
    ``self._x`` / ``super()._x`` where a base defines ``_x`` (in its body or as ``self._x = ...``;
    the bases are read from the stack's source, conftest.py ``[cpu]`` / ``[gpu]``); attributes set
    on what a ``super()`` call returned, typed by the base method's return annotation;
  - ``obj._x`` on any other object when the project defines no ``_x`` itself (so the project's
    own private helpers, methods and attributes are never reported).
  A name is reported as ``Owner.name``: the verl / vLLM class that defines it, or the dotted
  module path; ``*.name`` when the owner is unknown (any row ending in ``.name`` matches).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "recipe" / "arise"
DESIGN = REPO / "docs" / "design.md"
SECTION = "## The verl surface we depend on"
EXTERNAL = ("verl", "vllm")
SCANNED_KINDS = {"override", "call", "read", "patch"}  # a row of another kind (relied on) is not in our source
TEST_REF = re.compile(r"(test_\w+\.py)::(test_\w+)")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _external(dotted: str | None) -> bool:
    return bool(dotted) and dotted.split(".")[0] in EXTERNAL


# ------------------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Row:
    names: tuple[str, ...]
    kind: str
    tests: tuple[tuple[str, str], ...]


def table_rows(markdown: str) -> list[Row]:
    """The rows of the section's table: column 1 the names (in backticks), 2 the kind, last the tests."""
    start = markdown.index(SECTION)
    end = markdown.find("\n## ", start + len(SECTION))
    lines = markdown[start : end if end >= 0 else None].splitlines()
    rows = []
    for line in lines:
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].lower().startswith("name"):
            continue  # header
        names = tuple(re.findall(r"`([^`]+)`", cells[0]))
        rows.append(Row(names, cells[1].strip("` ").lower(), tuple(TEST_REF.findall(cells[-1]))))
    return rows


@cache
def _rows() -> list[Row]:
    return table_rows(DESIGN.read_text())


def listed(key: str, rows: list[Row]) -> bool:
    """``key`` (``Owner.name`` or ``*.name``) is a row's name."""
    names = [n for row in rows for n in row.names]
    if key.startswith("*."):
        return any(n == key[2:] or n.endswith(key[1:]) for n in names)
    return key in names


# ------------------------------------------------------------------------------------------ verl / vLLM bases
class Sources:
    """Class members of verl / vLLM read from a stack's source files (AST, no import)."""

    def __init__(self, root_of):
        self.root_of = root_of  # package -> folder of the import package

    @cache  # noqa: B019 (one instance per stack, kept for the session)
    def module(self, dotted: str) -> ast.Module | None:
        parts = dotted.split(".")
        root = self.root_of(parts[0]).joinpath(*parts[1:])
        for path in (root.with_suffix(".py"), root / "__init__.py"):
            if path.is_file():
                return ast.parse(path.read_text())
        return None

    def resolve(self, dotted: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """``(module, class node)`` of the class ``dotted`` (``pkg.mod.Class``), following re-exports."""
        module, _, name = dotted.rpartition(".")
        tree = self.module(module) if module and depth < 8 else None
        if tree is None:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
        imported = _imports(tree, module).get(name)
        return self.resolve(imported, depth + 1) if imported and _external(imported) else None

    def members(self, dotted: str) -> dict[str, tuple[str, ast.AST]]:
        """``{name: (defining class, node)}`` over the MRO of an external class (first definition wins)."""
        found: dict[str, tuple[str, ast.AST]] = {}
        resolved = self.resolve(dotted)
        if resolved is None:
            return found
        module, cls = resolved
        for node in cls.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.setdefault(node.name, (cls.name, node))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, (cls.name, node))
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
                found.setdefault(node.attr, (cls.name, node))
        tree = self.module(module)
        local = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        names = _imports(tree, module)
        for base in cls.bases:
            text = ast.unparse(base.value if isinstance(base, ast.Subscript) else base)
            head, _, rest = text.partition(".")
            target = (
                f"{module}.{text}"
                if text in local
                else (names[head] + (f".{rest}" if rest else ""))
                if head in names
                else None
            )
            if target and _external(target):
                for name, value in self.members(target).items():
                    found.setdefault(name, value)
        return found


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _is_super(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _imports(tree: ast.Module, module: str) -> dict[str, str]:
    """``{local name: dotted target}`` of every import in ``tree`` (relative ones resolved)."""
    names: dict[str, str] = {}
    package = module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


# ------------------------------------------------------------------------------------------ the scan
@dataclass(frozen=True, order=True)
class Use:
    key: str  # Owner.name, a dotted module path, or *.name
    kind: str  # import | read | patch | override | call
    where: str


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]`` when it is a chain of names, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def scan(files: dict[str, str], sources: Sources) -> list[Use]:
    """Every use of private verl / vLLM surface in ``{module name: source}``."""
    trees = {name: _link_parents(ast.parse(text)) for name, text in files.items()}
    imports = {name: _imports(tree, name) for name, tree in trees.items()}
    own_names: set[str] = set()  # every name the project defines: functions, classes, attributes it sets
    classes: dict[str, tuple[str, ast.ClassDef]] = {}
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own_names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own_names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own_names.add(node.id)
            if isinstance(node, ast.ClassDef):
                classes[f"{module}.{node.name}"] = (module, node)

    def base_targets(module: str, cls: ast.ClassDef) -> list[str]:
        out = []
        for base in cls.bases:
            parts = _chain(base.value if isinstance(base, ast.Subscript) else base)
            if not parts:
                continue
            if f"{module}.{parts[0]}" in classes and len(parts) == 1:
                out.append(f"{module}.{parts[0]}")
            elif parts[0] in imports[module]:
                out.append(".".join([imports[module][parts[0]], *parts[1:]]))
        return out

    def external_members(qualified: str, seen=()) -> tuple[dict, list[str]]:
        """Members of the external bases of a project class, and its project ancestors (mixins)."""
        module, cls = classes[qualified]
        members: dict[str, tuple[str, ast.AST]] = {}
        ancestors = [qualified]
        for target in base_targets(module, cls):
            if _external(target):
                for name, value in sources.members(target).items():
                    members.setdefault(name, value)
            elif target in classes and target not in seen:
                more, above = external_members(target, (*seen, qualified))
                for name, value in more.items():
                    members.setdefault(name, value)
                ancestors += above
        return members, ancestors

    uses: set[Use] = set()
    # in classes deriving from verl / vLLM: overrides, self./super() reads, patches of super() results
    for qualified in classes:
        members, ancestors = external_members(qualified)
        if not members:
            continue
        for ancestor in ancestors:
            module, cls = classes[ancestor]
            where = f"{ancestor}"
            for node in cls.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _private(node.name):
                    if node.name in members:
                        uses.add(Use(f"{members[node.name][0]}.{node.name}", "override", where))
            returned: dict[str, str] = {}  # local name -> owner of what a super() call returned
            for node in ast.walk(cls):
                if isinstance(node, ast.Attribute) and (_is_self(node.value) or _is_super(node.value)):
                    if _private(node.attr) and node.attr in members:
                        kind = "call" if _is_super(node.value) else "read"
                        uses.add(Use(f"{members[node.attr][0]}.{node.attr}", kind, where))
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Attribute)
                    and _is_super(node.value.func.value)
                ):
                    method = members.get(node.value.func.attr, (None, None))[1]
                    returns = getattr(method, "returns", None)
                    owner = ast.unparse(returns).strip("'\"").split(".")[-1] if returns is not None else "*"
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            returned[target.id] = owner
            for node in ast.walk(cls):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in returned
                ):
                    uses.add(Use(f"{returned[node.value.id]}.{node.attr}", "patch", where))

    for module, tree in trees.items():
        names = imports[module]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and _external(node.module):
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    if any(_private(p) for p in dotted.split(".")):
                        uses.add(Use(dotted, "import", module))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _external(alias.name) and any(_private(p) for p in alias.name.split(".")):
                        uses.add(Use(alias.name, "import", module))
            elif isinstance(node, ast.Attribute):
                parts = _chain(node)
                if parts and parts[0] in names and _external(names[parts[0]]):
                    if isinstance(node.parent, ast.Attribute):
                        continue  # the whole chain is looked at from its outermost attribute
                    dotted = [*names[parts[0]].split("."), *parts[1:]]
                    private = next((i for i, p in enumerate(dotted) if _private(p)), None)
                    if isinstance(node.ctx, ast.Store):
                        uses.add(Use(".".join(dotted), "patch", module))
                    elif private is not None:
                        uses.add(Use(".".join(dotted[: private + 1]), "read", module))
                elif (
                    _private(node.attr)
                    and node.attr not in own_names
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and not _is_super(node.value)
                ):
                    uses.add(Use(f"*.{node.attr}", "read", module))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("setattr", "getattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                parts = _chain(node.args[0])
                attr = node.args[1].value
                if parts and parts[0] in names and _external(names[parts[0]]):
                    dotted = ".".join([*names[parts[0]].split("."), *parts[1:], attr])
                    if node.func.id != "getattr":
                        uses.add(Use(dotted, "patch", module))
                    elif _private(attr):
                        uses.add(Use(dotted, "read", module))
                elif _private(attr) and attr not in own_names:
                    uses.add(Use(f"*.{attr}", "read", module))
    return sorted(uses)


def _link_parents(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    return tree


def _project_files() -> dict[str, str]:
    return {_module_name(p, REPO): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.fixture
def sources(stack) -> Sources:
    return Sources(stack.root)


# ------------------------------------------------------------------------------------------ tests
def test_every_row_names_existing_contract_tests():
    rows = _rows()
    assert rows, f"docs/design.md has no table under {SECTION!r}"
    for row in rows:
        assert row.names, f"a row without a name in backticks: {row}"
        assert row.tests, f"{row.names}: no contract test (tests/contracts/<file>.py::<test>)"
        for file, test in row.tests:
            path = REPO / "tests" / "contracts" / file
            assert path.is_file(), f"{row.names}: {path} does not exist"
            defined = {
                n.name
                for n in ast.parse(path.read_text()).body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
            }
            assert test in defined, f"{row.names}: {file} has no test function {test}"


def test_every_private_name_the_project_uses_is_listed(sources):
    uses = scan(_project_files(), sources)
    assert uses, "the scan finds nothing: it no longer sees the trainer's overrides"
    unlisted = [u for u in uses if not listed(u.key, _rows())]
    assert not unlisted, (
        "private verl/vLLM surface missing from docs/design.md ("
        + SECTION
        + "):\n"
        + "\n".join(f"  {u.key} ({u.kind}, {u.where})" for u in unlisted)
    )


def test_every_scanned_row_is_still_used(sources):
    keys = {u.key for u in scan(_project_files(), sources)}
    for row in _rows():
        if row.kind in SCANNED_KINDS:
            for name in row.names:
                assert name in keys or any(k.startswith("*.") and name.endswith(k[1:]) for k in keys), (
                    f"docs/design.md lists {name} ({row.kind}) but the project no longer uses it"
                )


SYNTHETIC = {
    "recipe.arise.adapters.fake_trainer": textwrap.dedent(
        """
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
        from verl.utils.checkpoint import checkpoint_manager as cm
        from verl.utils.checkpoint.checkpoint_manager import _private_helper  # a private import
        from recipe.arise.adapters.fake_mixin import Mixin

        class Trainer(Mixin, PPOTrainerSync):
            def _validate(self):  # overrides verl's private method, not in the table
                return super()._validate()

            def _our_own_helper(self):  # ours: must not be reported
                return self._restored_tq_prompt_count  # a private verl attribute read

            def step(self, metrics, timing_raw):
                buffer = super()._build_replay_buffer()
                buffer.max_off_policy_threshold = 0  # patches what verl returned
                return self._our_own_helper()

        def helper(obj):
            cm.find_latest_ckpt_path = None  # a monkeypatch of a verl module
            return obj._engine_core  # a private attribute of some verl object
        """
    ),
    "recipe.arise.adapters.fake_mixin": textwrap.dedent(
        """
        class Mixin:
            def _save_checkpoint(self):  # overrides verl's through the subclass's MRO
                self._mixin_state = 1
                return super()._save_checkpoint()
        """
    ),
}


def test_the_scan_reports_unlisted_overrides_and_reads_and_not_our_own_helpers(sources):
    found = {(u.key, u.kind) for u in scan(SYNTHETIC, sources)}
    expected = {
        ("PPOTrainer._validate", "override"),
        ("PPOTrainer._validate", "call"),
        ("PPOTrainer._restored_tq_prompt_count", "read"),
        ("PPOTrainer._save_checkpoint", "override"),
        ("PPOTrainer._save_checkpoint", "call"),
        ("PPOTrainer._build_replay_buffer", "call"),
        ("ReplayBuffer.max_off_policy_threshold", "patch"),
        ("verl.utils.checkpoint.checkpoint_manager._private_helper", "import"),
        ("verl.utils.checkpoint.checkpoint_manager.find_latest_ckpt_path", "patch"),
        ("*._engine_core", "read"),
    }
    assert expected <= found, f"missed: {sorted(expected - found)}"
    assert not {k for k, _ in found if "_our_own_helper" in k or "_mixin_state" in k}, found
    rows = _rows()
    unlisted = {k for k, _ in found if not listed(k, rows)}
    assert "PPOTrainer._validate" in unlisted and "*._engine_core" in unlisted
    assert not listed("PPOTrainer._validate", rows)


def test_the_table_parser_reads_names_kinds_and_tests():
    markdown = (
        "## A\n| x |\n"
        + SECTION
        + "\n\nText.\n\n| name | kind | where | relied on | contract test |\n|---|---|---|---|---|\n"
        "| `A._x`, `B.y` | override | t | r | `test_a.py::test_one`, `test_b.py::test_two` |\n"
        "\n## Next\n| `C._z` | read | | | |\n"
    )
    (row,) = table_rows(markdown)
    assert row == Row(("A._x", "B.y"), "override", (("test_a.py", "test_one"), ("test_b.py", "test_two")))
    assert listed("*.y", [row]) and listed("A._x", [row]) and not listed("A.y", [row])
