"""The private verl trainer methods recipe/arise/adapters/trainer.py overrides exist, with the signatures
the overrides assume (``ARISEHooks`` before each verl v1 trainer ARISE registers a trainer on,
recipe/arise/adapters/trainers.py: ``PPOTrainerSync``, ``PPOTrainerColocateAsync``,
``PPOTrainerSeparateAsync``):

- every method ``ARISEHooks`` defines that verl's trainer also defines (``__init__``,
  ``_build_replay_buffer``, ``_load_checkpoint``, ``_save_checkpoint``, ``_compute_metrics``,
  ``_reissue_inflight_prompts``, the ``on_*`` hooks) takes the base's parameters (verl calls the
  override the way it calls its own), and each ``super().name(...)`` call binds to the base's signature;
- ``trainer_resume.inflight_groups`` picks the groups to re-issue with verl's own condition;
- the mixins ``ARISEHooks`` takes parts of its body from (``trainer_gate.GateMixin``,
  ``trainer_upload.UploadMixin``) define no method verl's trainer defines, so every override is in
  trainer.py's class body, where the checks above read it;
- verl's separate_async ``_setup`` still hands ``logger.info`` print's ``flush`` keyword, which
  ``trainers.DropFlush`` drops (when verl stops, the adapter can go);
- the replay buffer the override wraps (``replay_sampler.RecordingSampler``; the mode's: ``ReplayBuffer`` for sync,
  ``ReplayBufferAsync`` otherwise) has ``sample(global_steps,
  partition_id, batch_size)`` and a ``poll_interval`` constructor parameter (default 2.0 s) that
  ``arise.replay_poll_s`` replaces on the instance.

Signatures come from the stack's verl source (AST, following the class bases through the
modules' imports); on ``[cpu]`` they are also compared with ``inspect.signature`` of the
installed classes, so the source reading itself is checked.
"""

import ast
import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest
from verl_source import class_node as _class  # tests/helpers (tests/conftest.py)
from verl_source import find_method
from verl_source import methods as _methods

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "recipe" / "arise" / "adapters" / "trainer.py"
# per trainer mode ARISE runs under: verl's trainer, and the replay buffer it builds
BASES = {
    "sync": (
        ("verl.trainer.ppo.v1.trainer_sync", "PPOTrainerSync"),
        ("verl.trainer.ppo.v1.replay_buffer", "ReplayBuffer"),
    ),
    "colocate_async": (
        ("verl.trainer.ppo.v1.trainer_colocate_async", "PPOTrainerColocateAsync"),
        ("verl.trainer.ppo.v1.replay_buffer", "ReplayBufferAsync"),
    ),
    "separate_async": (
        ("verl.trainer.ppo.v1.trainer_separate_async", "PPOTrainerSeparateAsync"),
        ("verl.trainer.ppo.v1.replay_buffer", "ReplayBufferAsync"),
    ),
}
REQUIRED = {
    "__init__",
    "_build_replay_buffer",
    "_load_checkpoint",
    "_save_checkpoint",
    "_compute_metrics",
    "_reissue_inflight_prompts",
}
MIXINS = {"GateMixin": "trainer_gate.py", "UploadMixin": "trainer_upload.py"}


_HAS_DEFAULT = object()


def signature(fn: ast.FunctionDef) -> inspect.Signature:
    a = fn.args
    P = inspect.Parameter
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [
        P(
            arg.arg,
            P.POSITIONAL_ONLY if arg in a.posonlyargs else P.POSITIONAL_OR_KEYWORD,
            default=P.empty if d is None else _HAS_DEFAULT,
        )
        for arg, d in zip(positional, defaults, strict=True)
    ]
    if a.vararg:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    params += [
        P(arg.arg, P.KEYWORD_ONLY, default=P.empty if d is None else _HAS_DEFAULT)
        for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)
    ]
    if a.kwarg:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def shape(sig: inspect.Signature) -> list[tuple[str, object, bool]]:
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty) for p in sig.parameters.values()]


def _arise() -> tuple[dict[str, ast.FunctionDef], list[ast.Call], dict[str, ast.FunctionDef]]:
    tree = ast.parse(TRAINER.read_text())
    trainer = _class(tree, "ARISEHooks")
    super_calls = [
        n
        for n in ast.walk(trainer)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Call)
        and ast.unparse(n.func.value.func) == "super"
        and n.func.attr != "__init_subclass__"  # type's class-creation hook (the composition check), not verl's
    ]
    sampler = _class(ast.parse((TRAINER.parent / "replay_sampler.py").read_text()), "RecordingSampler")
    return _methods(trainer), super_calls, _methods(sampler)


def _verl_parent(stack) -> Path:
    return stack.root("verl").parent


@pytest.fixture(params=list(BASES))
def base(request):
    """(verl trainer, its replay buffer) of one trainer mode ARISE runs under."""
    return BASES[request.param]


def test_the_overridden_methods_exist_with_the_same_parameters(stack, base):
    BASE = base[0]
    methods, _, _ = _arise()
    overridden = {}
    for name, fn in methods.items():
        if any(ast.unparse(d) == "property" or ast.unparse(d).endswith(".setter") for d in fn.decorator_list):
            continue
        base = find_method(_verl_parent(stack), *BASE, name)
        if base is not None:
            overridden[name] = (fn, base)
    assert REQUIRED <= set(overridden), f"verl's trainer no longer defines {sorted(REQUIRED - set(overridden))}"
    for name, (fn, base) in overridden.items():
        mine, theirs = shape(signature(fn)), shape(signature(base))
        assert [p[:2] for p in mine] == [p[:2] for p in theirs], f"{name}: ARISE {mine}, verl {theirs}"
        assert all(m[2] or not t[2] for m, t in zip(mine, theirs, strict=True)), f"{name}: verl's defaults {theirs}"


def test_the_mixins_override_nothing_of_verls_trainer(stack, base):
    BASE = base[0]
    trainer = _class(ast.parse(TRAINER.read_text()), "ARISEHooks")
    bases = [ast.unparse(b) for b in trainer.bases]
    assert set(MIXINS) <= set(bases), f"ARISEHooks' bases changed: {bases} (update MIXINS)"
    for cls, filename in MIXINS.items():
        node = _class(ast.parse((TRAINER.parent / filename).read_text()), cls)
        assert node is not None, f"{filename} no longer defines {cls}"
        methods = _methods(node)
        assert methods, f"{cls} defines no methods"
        shadowed = sorted(name for name in methods if find_method(_verl_parent(stack), *BASE, name) is not None)
        assert not shadowed, f"{cls} overrides verl's {shadowed}: overrides belong in trainer.py's ARISEHooks"


def test_every_super_call_binds_to_the_base_signature(stack, base):
    BASE = base[0]
    _, calls, _ = _arise()
    assert {c.func.attr for c in calls} >= REQUIRED
    for call in calls:
        base = find_method(_verl_parent(stack), *BASE, call.func.attr)
        assert base is not None, f"super().{call.func.attr}: verl's trainer no longer defines it"
        assert not any(isinstance(a, ast.Starred) for a in call.args) and all(k.arg for k in call.keywords)
        try:
            signature(base).bind(object(), *call.args, **{k.arg: k.value for k in call.keywords})
        except TypeError as exc:
            pytest.fail(f"line {call.lineno}: {ast.unparse(call)} does not fit verl's {signature(base)}: {exc}")


def test_the_replay_buffer_wrapper_matches_sample_and_poll_interval(stack, base):
    REPLAY = base[1]
    _, _, wrapper = _arise()
    sample = find_method(_verl_parent(stack), *REPLAY, "sample")
    assert shape(signature(wrapper["sample"])) == shape(signature(sample))
    init = signature(find_method(_verl_parent(stack), *REPLAY, "__init__"))
    assert "poll_interval" in init.parameters
    init_src = find_method(_verl_parent(stack), *REPLAY, "__init__")
    named = [a.arg for a in init_src.args.args][-len(init_src.args.defaults) :]
    defaults = dict(zip(named, init_src.args.defaults, strict=True))
    assert ast.literal_eval(defaults["poll_interval"]) == 2.0


def test_the_source_reading_agrees_with_inspect_on_the_installed_verl(base):
    """Checks the reader above (one stack suffices: the same code reads the [gpu] wheel)."""
    BASE, REPLAY = base
    parent = Path(importlib.util.find_spec("verl").submodule_search_locations[0]).parent
    trainer = getattr(importlib.import_module(BASE[0]), BASE[1])
    buffer = getattr(importlib.import_module(REPLAY[0]), REPLAY[1])
    for name in sorted(REQUIRED):
        assert shape(signature(find_method(parent, *BASE, name))) == shape(inspect.signature(getattr(trainer, name)))
    for name in ("__init__", "sample"):
        assert shape(signature(find_method(parent, *REPLAY, name))) == shape(inspect.signature(getattr(buffer, name)))
    assert inspect.signature(buffer.__init__).parameters["poll_interval"].default == 2.0


def _condition(fn: ast.FunctionDef, target: str) -> list[str]:
    """The ``if`` conditions of the comprehensions in ``fn`` that collect ``target``."""
    return [
        ast.unparse(cond)
        for node in ast.walk(fn)
        if isinstance(node, ast.ListComp) and ast.unparse(node.elt) == target
        for gen in node.generators
        for cond in gen.ifs
    ]


def test_the_reissued_groups_are_read_as_verl_reads_them(stack, base):
    """On resume ARISE names the groups verl re-issues before verl re-tags them (their restored
    observations are dropped, recipe/arise/adapters/trainer_resume.py): the same TransferQueue
    tags, the same condition, and nothing under sync."""
    verl = find_method(_verl_parent(stack), *base[0], "_reissue_inflight_prompts")
    ours = next(
        n
        for n in ast.parse((TRAINER.parent / "trainer_resume.py").read_text()).body
        if isinstance(n, ast.FunctionDef) and n.name == "inflight_groups"
    )
    theirs = _condition(verl, "key")[0]  # the in-flight prompts (the next: their old trajectories)
    assert theirs == "tag.get('is_prompt', False) and tag.get('status') in ('pending', 'running')", theirs
    assert _condition(ours, "key") == [theirs]
    assert "if self.trainer_mode == 'sync':\n        return 0" in ast.unparse(verl)


def test_verls_separate_async_setup_still_logs_with_flush_which_arise_drops(stack, caplog):
    """``trainers.DropFlush`` exists for one line of verl's separate_async ``_setup`` (hybrid_engine=False)."""
    import logging

    module, cls = BASES["separate_async"][0]
    setup = find_method(_verl_parent(stack), module, cls, "_setup")
    logs = [c for c in ast.walk(setup) if isinstance(c, ast.Call) and ast.unparse(c.func).startswith("logger.")]
    flushed = [c for c in logs if any(k.arg == "flush" for k in c.keywords)]
    assert flushed, "verl's separate_async _setup no longer logs with flush=: drop trainers.DropFlush"
    from recipe.arise.adapters.trainers import DropFlush

    logger = logging.getLogger("arise.test_drop_flush")
    logger.setLevel(logging.INFO)  # verl sets its loggers to INFO (VERL_LOGGING_LEVEL)
    with pytest.raises(TypeError, match="flush"):
        logger.info("x", flush=True)
    with caplog.at_level(logging.INFO, logger=logger.name):
        DropFlush(logger, {}).info("hybrid replicas disabled", flush=True)
    assert "hybrid replicas disabled" in caplog.text
