"""What an agent loop must provide to host ARISE's skill layer, and which loops may host it.

:class:`SkillLayerHost` is what :class:`~recipe.arise.adapters.skill_layer.SkillLayer` reads of the
loop it serves: verl's ``AgentLoopBase`` sets all of it in ``__init__``, so any verl agent loop
qualifies (tests/adapters/test_skill_host.py checks the layer reads nothing else, and that verl's
loops and ARISE's provide it). :func:`check_agent_loop` refuses, at start-up, a loop that cannot
honour the run's ``arise.*`` options (docs/agent_loops.md).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from recipe.arise.core.arise_config import ARISEConfig

__all__ = ["AGENT_LOOPS", "VERL_LOOPS", "SkillLayerHost", "check_agent_loop"]


class SkillLayerHost(Protocol):
    """What the skill layer reads of its agent loop; each set by verl's ``AgentLoopBase.__init__``."""

    config: Any  # the trainer config: its arise: section
    rollout_config: Any  # actor_rollout_ref.rollout: n, val_kwargs.n, prompt_length, name, enable_prefix_caching
    tokenizer: Any  # the policy's tokenizer (skill tokens, the scoring suffix)
    server_manager: Any  # the rollout servers: ``generate(request_id=, prompt_ids=, sampling_params=)``
    continuous_token_builder: Any  # the loop's prompt renderer: ``build_initial_tokens(messages, tools=)``
    loop: asyncio.AbstractEventLoop  # the worker's event loop (prompt rendering off the loop's thread)


# The agent loops registered here and the arise.* options each cannot honour; any other loop (one
# of your own through with_skills) cannot honour train_manager either: only arise_agent puts the
# skill into the response. Checked at start-up by the trainer and the preflight, and again when an
# ARISE loop is built (docs/agent_loops.md).
AGENT_LOOPS = {
    "arise_agent": (),
    "arise_tool_agent": ("selection.train_manager",),
    "arise_env_agent": ("selection.train_manager",),
}
# verl's own loops carry no skill layer: with ARISE on, nothing would ever be selected
VERL_LOOPS = ("single_turn_agent", "tool_agent")


def check_agent_loop(agent_name: str, cfg: ARISEConfig) -> None:
    """Refuse the agent loop ``agent_name`` (``rollout.agent.default_agent_loop``) when it cannot
    honour the run's ``arise.*`` options (ValueError naming both): with ARISE on, one of verl's own
    loops, and an option :data:`AGENT_LOOPS` lists for it (train_manager for every loop but
    ``arise_agent``, a loop of your own wrapped with ``skill_layer.with_skills`` included)."""
    if not cfg.enable:
        return
    if agent_name in VERL_LOOPS:
        raise ValueError(
            "arise.enable=true needs actor_rollout_ref.rollout.agent.default_agent_loop=arise_agent, "
            f"arise_tool_agent or a loop of your own carrying ARISE (docs/agent_loops.md), not {agent_name!r}"
        )
    for option in AGENT_LOOPS.get(agent_name, ("selection.train_manager",)):
        section, key = option.split(".")
        if getattr(getattr(cfg, section), key):
            raise ValueError(
                f"arise.{option}=true is not supported by the agent loop {agent_name!r} (the skill goes into the "
                f"user turn, never into the response); set arise.{option}=false or use "
                "actor_rollout_ref.rollout.agent.default_agent_loop=arise_agent (docs/agent_loops.md)"
            )
