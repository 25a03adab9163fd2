"""The skill layer's host, declared (recipe/arise/adapters/skill_host.py ``SkillLayerHost``): the layer
reads nothing of its agent loop but what the protocol declares, the protocol declares nothing the layer
does not read, and verl's ``AgentLoopBase`` (so every verl loop, ARISE's three included) provides it."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

ADAPTERS = Path(__file__).resolve().parents[2] / "recipe" / "arise" / "adapters"


def _protocol(tree: ast.Module) -> set[str]:
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SkillLayerHost"]
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)} | {
        n.name for n in cls.body if isinstance(n, ast.FunctionDef)
    }


def host_reads(tree: ast.Module) -> set[str]:
    """Every ``<x>.host.NAME`` the layer's module reads (``self.host.tokenizer``, ``layer.host.loop``)."""
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "host"
    }


def problems(layer: ast.Module, protocol: ast.Module) -> list[str]:
    declared, read = _protocol(protocol), host_reads(layer)
    return [f"reads host.{x}: declare it in SkillLayerHost" for x in sorted(read - declared)] + [
        f"SkillLayerHost declares {x}, never read" for x in sorted(declared - read)
    ]


def _trees():
    return ast.parse((ADAPTERS / "skill_layer.py").read_text()), ast.parse((ADAPTERS / "skill_host.py").read_text())


def test_the_layer_reads_exactly_what_the_protocol_declares():
    layer, protocol = _trees()
    assert host_reads(layer) >= {"config", "tokenizer", "loop"}
    assert problems(layer, protocol) == []


@pytest.mark.parametrize("name", sorted(_protocol(_trees()[1])))
def test_removing_a_declaration_fails_the_check(name):
    layer, protocol = _trees()
    (cls,) = [n for n in protocol.body if isinstance(n, ast.ClassDef) and n.name == "SkillLayerHost"]
    cls.body = [n for n in cls.body if not (isinstance(n, ast.AnnAssign) and n.target.id == name)]
    assert f"reads host.{name}: declare it in SkillLayerHost" in problems(layer, protocol)


def _assigned(cls: type) -> set[str]:
    names = set()
    for klass in cls.__mro__:
        if klass.__module__ in ("builtins", "abc", "typing"):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        names |= {
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            and isinstance(n.ctx, ast.Store)
        }
    return names | set(dir(cls))


def test_verls_agent_loops_and_arises_provide_the_host():
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    from recipe.arise.adapters.agent_loop import ARISEAgentLoop
    from recipe.arise.adapters.env_agent import ARISEEnvAgentLoop
    from recipe.arise.adapters.skill_host import SkillLayerHost
    from recipe.arise.adapters.tool_agent import ARISEToolAgentLoop

    declared = _protocol(_trees()[1])
    assert declared == set(SkillLayerHost.__annotations__)
    for cls in (
        AgentLoopBase,
        SingleTurnAgentLoop,
        ToolAgentLoop,
        ARISEAgentLoop,
        ARISEToolAgentLoop,
        ARISEEnvAgentLoop,
    ):
        assert declared <= _assigned(cls), f"{cls.__name__} lacks {sorted(declared - _assigned(cls))}"
    assert not declared <= _assigned(object)  # the check can fail
