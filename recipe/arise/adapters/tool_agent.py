"""``arise_tool_agent``: verl's multi-turn ``ToolAgentLoop`` carrying the ARISE skill layer.

The tools are verl's (``actor_rollout_ref.rollout.multi_turn.tool_config_path`` /
``function_tool_path``, loaded once per agent-loop worker); ``run_scripts/presets/tool_agent.sh``
sets them to ARISE's Python tool. The skill is scored in the context this loop renders (its tool
schemas in the chat template, after verl's per-sample ``extra_info.tool_selection``) and injected
into the user turn before verl builds the first prompt; the tool turns then run as in verl.
``arise.selection.train_manager`` is refused when the loop is built (docs/agent_loops.md).
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

from recipe.arise.adapters.scoring_context import active_tool_schemas, tool_schema
from recipe.arise.adapters.skill_layer import arise_config, check_agent_loop, with_skills

AGENT_NAME = "arise_tool_agent"


@register(AGENT_NAME)
class ARISEToolAgentLoop(ToolAgentLoop):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_agent_loop(AGENT_NAME, arise_config(self.config))

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        return await with_skills(self, super().run, sampling_params, kwargs, tools=self.active_tool_schemas(kwargs))

    def active_tool_schemas(self, kwargs: dict) -> list[dict]:
        """The tool schemas ``ToolAgentLoop.run`` renders this sample's prompt with: all of them, or
        those named by ``extra_info.tool_selection`` (verl's per-sample selection, same order)."""
        if not self.tools:
            return self.tool_schemas
        named = {name: tool_schema(tool) for name, tool in self.tools.items()}
        return active_tool_schemas(named, kwargs.get("extra_info"))


__all__ = ["AGENT_NAME", "ARISEToolAgentLoop"]
