"""The trainer's mixins declare what they read of their host (issue 34).

``GateMixin`` and ``UploadMixin`` are mixed into :class:`~recipe.arise.adapters.trainer.ARISEHooks`.
Every ``self.X`` a mixin touches must be its own (a method, or state annotated on the mixin) or
declared in its host protocol (``GateHost``, ``UploadHost``), never another mixin's; the trainer
must provide everything those declare; a read of a mixin's state before its set-up call names that call.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

ADAPTERS = Path(__file__).resolve().parents[2] / "recipe" / "arise" / "adapters"
# module -> (mixin, the protocol of what it reads of its host)
MIXINS = {"trainer_gate": ("GateMixin", "GateHost"), "trainer_upload": ("UploadMixin", "UploadHost")}


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return node


def _declared(cls: ast.ClassDef) -> set[str]:
    """The names a class body defines: methods, annotated or assigned attributes."""
    names = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _self_attributes(node: ast.AST) -> tuple[set[str], set[str]]:
    """The ``self.X`` read and those assigned anywhere under ``node`` (nested functions included)."""
    read, assigned = set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            (assigned if isinstance(n.ctx, (ast.Store, ast.Del)) else read).add(n.attr)
    return read, assigned


def undeclared(tree: ast.Module, mixin: str, host: str) -> list[str]:
    """What ``mixin`` touches of ``self`` without declaring it (empty: its interface is complete)."""
    mixin_node, host_node = _class(tree, mixin), _class(tree, host)
    own, interface = _declared(mixin_node), _declared(host_node)
    read, assigned = _self_attributes(mixin_node)
    problems = [f"{mixin} reads self.{x}: declare it in {host} or on {mixin}" for x in sorted(read - own - interface)]
    problems += [f"{mixin} assigns self.{x}: annotate it on {mixin}" for x in sorted(assigned - own)]
    problems += [f"{mixin} and {host} both declare {x}" for x in sorted(own & interface)]
    return problems


def _tree(module: str) -> ast.Module:
    return ast.parse((ADAPTERS / f"{module}.py").read_text())


def _declarations(tree: ast.Module, mixin: str, host: str) -> list[tuple[str, str]]:
    """(class, name) of every declaration the check relies on: the host protocol's, and the state
    annotated on the mixin (its methods declare themselves)."""
    out = [(host, name) for name in sorted(_declared(_class(tree, host)))]
    out += [(mixin, n.target.id) for n in _class(tree, mixin).body if isinstance(n, ast.AnnAssign)]
    return out


@pytest.mark.parametrize("module", list(MIXINS))
def test_every_attribute_a_mixin_touches_is_declared(module):
    assert undeclared(_tree(module), *MIXINS[module]) == []


@pytest.mark.parametrize(
    ("module", "owner", "name"),
    [(module, *d) for module, names in MIXINS.items() for d in _declarations(_tree(module), *names)],
)
def test_removing_any_declaration_fails_the_check(module, owner, name):
    """Every declaration is needed (none is stale), and the check catches its loss."""
    tree = _tree(module)
    cls = _class(tree, owner)
    before = len(cls.body)
    cls.body = [n for n in cls.body if name not in _declared(ast.Module(body=[n], type_ignores=[]))]
    assert len(cls.body) == before - 1
    assert any(f"self.{name}:" in p for p in undeclared(tree, *MIXINS[module]))


def _provided(cls: type) -> set[str]:
    """What instances of ``cls`` have: class attributes along its MRO and every ``self.X`` its
    classes' methods assign (verl's included)."""
    names = set(dir(cls))
    for klass in cls.__mro__:
        if klass.__module__ in ("builtins", "abc", "typing"):
            continue
        names |= _self_attributes(ast.parse(textwrap.dedent(inspect.getsource(klass))))[1]
    return names


def _missing(cls: type, module: str) -> list[str]:
    """What the host protocol of ``module``'s mixin declares and ``cls`` does not provide."""
    tree = _tree(module)
    host = _class(tree, MIXINS[module][1])
    methods = {n.name for n in host.body if isinstance(n, ast.FunctionDef)}
    provided = _provided(cls)
    missing = [name for name in sorted(_declared(host) - methods) if name not in provided]
    return missing + [name for name in sorted(methods) if not callable(getattr(cls, name, None))]


@pytest.mark.parametrize("trainer", ["ARISETrainer", "ARISEColocateAsyncTrainer"])
@pytest.mark.parametrize("module", list(MIXINS))
def test_the_trainer_provides_what_its_mixins_declare(module, trainer):
    import importlib

    from recipe.arise.adapters import trainers

    cls = getattr(trainers, trainer)
    protocol = getattr(importlib.import_module(f"recipe.arise.adapters.{module}"), MIXINS[module][1])
    assert protocol not in cls.__mro__  # provided for real, not by inheriting the declarations
    assert _missing(cls, module) == []


def test_the_provided_check_can_fail():
    from recipe.arise.adapters.trainer_gate import GateMixin
    from recipe.arise.adapters.trainer_upload import UploadMixin

    class Bare(GateMixin, UploadMixin):  # no host: only what the mixins bring
        def __init__(self):
            self.arise = None

    assert _missing(Bare, "trainer_gate") == [
        "global_steps",
        "library",
        "tokenizer",
        "_gate_file",
        "_generate_all",
        "_scoring_context",
    ]
    assert "_generate_all" in _missing(Bare, "trainer_upload") and "arise" not in _missing(Bare, "trainer_upload")


def crossed(tree_of=None) -> list[str]:
    """What a mixin reads that another mixin defines: the parts talk through their host only."""
    tree_of = tree_of or _tree
    own = {m: _declared(_class(tree_of(m), MIXINS[m][0])) for m in MIXINS}
    out = []
    for module in MIXINS:
        read = _self_attributes(_class(tree_of(module), MIXINS[module][0]))[0]
        for other in MIXINS:
            if other != module:
                out += [f"{MIXINS[module][0]} reads {MIXINS[other][0]}.{x}" for x in sorted(read & own[other])]
    return out


def test_no_mixin_calls_another_mixins_methods():
    assert crossed() == []


def test_the_crossing_check_can_fail():
    trees = {m: _tree(m) for m in MIXINS}
    gate = _class(trees["trainer_gate"], "GateMixin")
    gate.body.append(ast.parse("def f(self):\n    return self._tau_plus_groups(None)").body[0])
    assert crossed(trees.__getitem__) == ["GateMixin reads UploadMixin._tau_plus_groups"]


# --------------------------------------------------------------------------- set-up order


def test_the_gates_state_read_before_its_set_up_names_the_call(tmp_path):
    from recipe.arise.adapters.trainer_gate import GateMixin
    from recipe.arise.adapters.trainer_setup import SetUpError
    from recipe.arise.core.arise_config import ARISEConfig

    class Host(GateMixin):
        arise = ARISEConfig()
        library = None

    host = Host()
    with pytest.raises(SetUpError, match=r"GateMixin\._gate_queries read before GateMixin\._init_gate\(\)"):
        host._remember_queries([[{"role": "user", "content": "q"}]])
    with pytest.raises(RuntimeError, match=r"GateMixin\._gate read before GateMixin\._init_gate\(\)"):
        host._save_gate(str(tmp_path))
    assert not hasattr(host, "_gate")  # an unset attribute still reads as absent
    host._init_gate()
    host._remember_queries([[{"role": "user", "content": "q"}]])
    assert len(host._gate_queries) == 1 and host._save_gate(str(tmp_path))
    # the library comes with _load_checkpoint: rescoring before it says so
    with pytest.raises(SetUpError, match=r"library is None: ARISETrainer\._load_checkpoint\(\) has not run"):
        host._calibrate_gate_on_queries(3)


def test_the_trainer_runs_every_set_up_call_its_mixins_declare():
    """Each ``set_by`` state of a mixin is assigned by the set-up method it names, and
    ARISETrainer.__init__ calls that method."""
    from recipe.arise.adapters import trainer_gate, trainer_upload
    from recipe.arise.adapters.trainer_setup import _SetBy
    from recipe.arise.adapters.trainers import ARISETrainer

    init = ast.parse(textwrap.dedent(inspect.getsource(ARISETrainer.__init__)))
    called = {n.func.attr for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    checked = 0
    for mixin in (trainer_gate.GateMixin, trainer_upload.UploadMixin):
        for name, value in vars(mixin).items():
            if not isinstance(value, _SetBy):
                continue
            owner, method = value.setup.removesuffix("()").split(".")
            assert owner == mixin.__name__ and method in called, f"{mixin.__name__}.{name}: {value.setup}"
            source = textwrap.dedent(inspect.getsource(getattr(mixin, method)))
            assert name in _self_attributes(ast.parse(source))[1], f"{value.setup} does not set {name}"
            checked += 1
    assert checked == 2  # GateMixin._gate, GateMixin._gate_queries


def test_the_upload_channel_before_the_library_exists_names_the_call():
    from recipe.arise.adapters.trainer_setup import SetUpError
    from recipe.arise.adapters.trainer_upload import UploadMixin
    from recipe.arise.core.arise_config import ARISEConfig

    host = SimpleNamespace(arise=ARISEConfig(), library=None, library_replica=None)
    group = {"uid": "g", "messages": [], "traces": [], "unaided": [{"reward": 1.0, "ids": [1, 2]}]}
    with pytest.raises(SetUpError, match=r"library is None: ARISETrainer\._load_checkpoint\(\)"):
        UploadMixin._exact_ig(host, [group], step=100)
    with pytest.raises(SetUpError, match=r"library_replica is None: ARISETrainer\._load_checkpoint\(\)"):
        UploadMixin._streamed_summaries(host, 1)
