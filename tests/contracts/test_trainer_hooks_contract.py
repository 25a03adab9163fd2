"""ARISE's trainer component against its declaration (recipe/arise/adapters/trainer_hooks.py) and
verl's v1 trainers:

- every hook of ``HOOKS`` exists on each of verl's three trainers, and verl calls them in the
  declared order: the calls of ``__init__``, ``init`` and ``fit`` (how verl's TaskRunner drives a
  trainer), followed through verl's own methods in source order, ``super()`` calls included;
- ``ARISEHooks`` overrides exactly the declared hooks of verl's trainer, no more, no fewer;
- every attribute of verl's trainer ``ARISEHooks`` reads is declared in ``TrainerHost``, and each of
  verl's trainers provides everything ``TrainerHost`` declares;
- every registered trainer mode composes the same component: ``ARISEHooks`` right before its verl
  base, and a base that lacks a hook is refused when the class is made.

Read from the stack's verl source (AST: tests/helpers/verl_source.py), as test_trainer_overrides_contract.py is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from file_module import load_file
from verl_source import bases, find_method, module_tree, resolve  # tests/helpers (tests/conftest.py)
from verl_source import class_node as _class
from verl_source import methods as _methods

from recipe.arise.adapters.trainer_hooks import HOOKS, TrainerHost, check_composition

HERE = Path(__file__).resolve().parent
ADAPTERS = HERE.parents[1] / "recipe" / "arise" / "adapters"


overrides = load_file(HERE / "test_trainer_overrides_contract.py", "arise_overrides_contract")
interfaces = load_file(HERE.parent / "adapters" / "test_trainer_interfaces.py", "arise_trainer_interfaces")
BASES = overrides.BASES
NAMES = [h.name for h in HOOKS]


def _super_resolve(parent: Path, module: str, cls: str, method: str):
    """``super().method`` in ``module.cls``: (module, class, node) as its bases resolve it."""
    tree = module_tree(parent, module)
    for base_module, base in bases(tree, module, _class(tree, cls)):
        found = resolve(parent, base_module, base, method)
        if found is not None:
            return found
    return None


def _calls(fn: ast.FunctionDef) -> list[tuple[str, str]]:
    """("self" | "super", name) of each method call in ``fn``, in source order."""
    out = []

    class Visitor(ast.NodeVisitor):
        def visit_Call(self, node):
            func = node.func
            if isinstance(func, ast.Attribute):
                if isinstance(func.value, ast.Name) and func.value.id == "self":
                    out.append(("self", func.attr))
                elif isinstance(func.value, ast.Call) and ast.unparse(func.value.func) == "super":
                    out.append(("super", func.attr))
            self.generic_visit(node)

    for stmt in fn.body:
        Visitor().visit(stmt)
    return out


def hook_order(parent: Path, module: str, cls: str, depth: int = 4) -> list[str]:
    """The hooks of HOOKS in the order verl's trainer ``module.cls`` first calls them."""
    trace: list[str] = ["__init__"]

    def follow(found, level, stack):
        if found is None or level > depth or found[:2] + (found[2].name,) in stack:
            return
        here = found[:2] + (found[2].name,)
        for kind, name in _calls(found[2]):
            if name in NAMES:
                trace.append(name)
            target = (
                resolve(parent, module, cls, name)
                if kind == "self"
                else _super_resolve(parent, found[0], found[1], name)
            )
            follow(target, level + 1, stack | {here})

    for entry in ("__init__", "init", "fit"):  # verl's TaskRunner: cls(config), init(), fit(manager)
        follow(resolve(parent, module, cls, entry), 1, frozenset())
    return list(dict.fromkeys(trace))


@pytest.fixture(params=list(BASES))
def mode(request):
    return request.param


def test_every_hook_exists_on_verls_trainer(stack, mode):
    parent = stack.root("verl").parent
    missing = [name for name in NAMES if find_method(parent, *BASES[mode][0], name) is None]
    assert not missing, f"verl's {BASES[mode][0][1]} no longer defines {missing}"


def test_verl_calls_the_hooks_in_the_declared_order(stack, mode):
    order = hook_order(stack.root("verl").parent, *BASES[mode][0])
    assert order == NAMES, f"verl calls {order}; trainer_hooks.HOOKS declares {NAMES}"


def test_the_order_check_can_fail(stack):
    """Read on verl's sync trainer, the trace holds the hooks in verl's order, not another."""
    order = hook_order(stack.root("verl").parent, *BASES["sync"][0])
    assert order.index("on_sample_begin") < order.index("on_sample_end") < order.index("_compute_metrics")
    assert order != [NAMES[0], *reversed(NAMES[1:])]


def test_the_component_overrides_exactly_the_declared_hooks(stack, mode):
    trainer = _class(ast.parse((ADAPTERS / "trainer.py").read_text()), "ARISEHooks")
    parent = stack.root("verl").parent
    verls = {
        name
        for name, fn in _methods(trainer).items()
        if not any(ast.unparse(d) == "property" for d in fn.decorator_list)
        and find_method(parent, *BASES[mode][0], name) is not None
    }
    assert verls == set(NAMES), f"undeclared: {sorted(verls - set(NAMES))}, not overridden: {set(NAMES) - verls}"


def _host_declared() -> set[str]:
    return interfaces._declared(_class(ast.parse((ADAPTERS / "trainer_hooks.py").read_text()), "TrainerHost"))


def test_what_the_component_reads_of_verls_trainer_is_declared():
    tree = ast.parse((ADAPTERS / "trainer.py").read_text())
    hooks = _class(tree, "ARISEHooks")
    read, assigned = interfaces._self_attributes(hooks)
    own = interfaces._declared(hooks) | assigned
    for module, (mixin, host) in interfaces.MIXINS.items():
        own |= interfaces._declared(_class(interfaces._tree(module), mixin))
    undeclared = sorted(read - own - _host_declared())
    assert not undeclared, f"ARISEHooks reads self.{undeclared} of verl's trainer: declare them in TrainerHost"
    stale = sorted(_host_declared() - read)
    assert not stale, f"TrainerHost declares {stale}, which ARISEHooks never reads"


def test_verls_trainers_provide_what_the_host_declares(mode):
    import importlib

    verl = getattr(importlib.import_module(BASES[mode][0][0]), BASES[mode][0][1])
    provided = interfaces._provided(verl)
    methods = {n for n in dir(TrainerHost) if callable(getattr(TrainerHost, n, None)) and not n.startswith("__")}
    missing = sorted(n for n in _host_declared() - methods if n not in provided)
    missing += sorted(n for n in methods if not callable(getattr(verl, n, None)))
    assert not missing, f"verl's {BASES[mode][0][1]} provides no {missing}"


def test_every_trainer_mode_composes_the_same_component(mode):
    import importlib

    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    from recipe.arise.adapters import trainers  # registers them
    from recipe.arise.adapters.trainer import ARISEHooks
    from recipe.arise.adapters.trainer_modes import TRAINER_MODES

    cls = get_trainer_cls(TRAINER_MODES[mode])
    verl = getattr(importlib.import_module(BASES[mode][0][0]), BASES[mode][0][1])
    assert cls.__bases__ == (ARISEHooks, verl) and cls.__module__ == trainers.__name__, cls.__bases__
    assert cls.trainer_mode.fget(None) == mode  # pinned to its base's mode
    assert not [name for name in NAMES if name in vars(cls)], "a hook overridden outside the component"


def test_a_base_without_a_hook_is_refused():
    from recipe.arise.adapters.trainer import ARISEHooks

    methods = {name: (lambda self, *a, **kw: None) for name in NAMES}
    whole = type("Whole", (), methods)
    type("Composed", (ARISEHooks, whole), {})  # every hook: composed
    lacking = type("Lacking", (), {k: v for k, v in methods.items() if k != "on_sample_begin"})
    with pytest.raises(TypeError, match=r"defines no \['on_sample_begin'\]"):
        type("Broken", (ARISEHooks, lacking), {})
    with pytest.raises(TypeError, match="defines no"):
        check_composition(type("Bare", (ARISEHooks,), {}), ARISEHooks)
