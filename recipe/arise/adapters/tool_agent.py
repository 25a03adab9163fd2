"""``arise_tool_agent``: verl's multi-turn ``ToolAgentLoop`` carrying the ARISE skill layer.

The tools are verl's (``actor_rollout_ref.rollout.multi_turn.tool_config_path`` /
``function_tool_path``, loaded once per agent-loop worker); ``run_scripts/presets/tool_agent.sh``
sets them to ARISE's Python tool. The skill is scored in the context this loop renders (its tool
schemas in the chat template, after verl's per-sample ``extra_info.tool_selection``) and injected
into the user turn before verl builds the first prompt; the tool turns then run as in verl.
``arise.selection.train_manager`` is refused when the loop is built (docs/agent_loops.md).

Malformed calls: verl answers a call that names an unknown tool, or whose arguments are not JSON,
with an error message to the model, and drops a hermes ``<tool_call>`` block that does not parse;
it logs a warning and counts neither. This loop counts both, per trajectory, in ``extra_fields``
(``tool_calls_malformed``), which the trainer logs as ``arise/tool_calls_malformed``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

from recipe.arise.adapters.python_tool import EXTRA_MALFORMED
from recipe.arise.adapters.scoring_context import active_tool_schemas, tool_schema
from recipe.arise.adapters.skill_layer import arise_config, check_agent_loop, with_skills

AGENT_NAME = "arise_tool_agent"


class CountingParser:
    """verl's tool parser, counting the calls it drops: a parser with ``tool_call_regex`` (hermes)
    reads every ``<tool_call>…</tool_call>`` block and logs and skips one whose JSON does not parse."""

    def __init__(self, parser):
        self.parser = parser
        self.unparsed = 0
        start = getattr(parser, "tool_call_start_token", None)
        ids = parser.tokenizer.encode(start, add_special_tokens=False) if start else []
        self._start_id = ids[0] if len(ids) == 1 else None  # no block opened: nothing to decode again

    def __getattr__(self, name):
        return getattr(self.parser, name)

    @property
    def stop_token_ids(self) -> list[int]:
        return self.parser.stop_token_ids

    async def extract_tool_calls(self, responses_ids, tools=None):
        content, calls = await self.parser.extract_tool_calls(responses_ids, tools)
        pattern = getattr(self.parser, "tool_call_regex", None)
        if pattern is not None and (self._start_id is None or self._start_id in responses_ids):
            text = await asyncio.get_running_loop().run_in_executor(None, self.parser.tokenizer.decode, responses_ids)
            self.unparsed += max(0, len(pattern.findall(text)) - len(calls))
        return content, calls


@register(AGENT_NAME)
class ARISEToolAgentLoop(ToolAgentLoop):
    # verl builds one loop per trajectory (AgentLoopWorker._run_agent_loop): the counts are the trajectory's
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_agent_loop(AGENT_NAME, arise_config(self.config))
        self.tool_parser = CountingParser(self.tool_parser)
        self.malformed_calls = 0

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        output = await with_skills(self, super().run, sampling_params, kwargs, tools=self.active_tool_schemas(kwargs))
        output.extra_fields[EXTRA_MALFORMED] = self.malformed_calls + self.tool_parser.unparsed
        return output

    async def _call_tool(self, tool_call, tools_kwargs: dict[str, Any], agent_data) -> tuple:
        """verl's call, counted as malformed where verl refuses it (unknown tool, arguments not JSON)."""
        if tool_call.name not in getattr(agent_data, "_active_tools", self.tools) or not _is_json(tool_call.arguments):
            self.malformed_calls += 1
        return await super()._call_tool(tool_call, tools_kwargs, agent_data)

    def active_tool_schemas(self, kwargs: dict) -> list[dict]:
        """The tool schemas ``ToolAgentLoop.run`` renders this sample's prompt with: all of them, or
        those named by ``extra_info.tool_selection`` (verl's per-sample selection, same order)."""
        if not self.tools:
            return self.tool_schemas
        named = {name: tool_schema(tool) for name, tool in self.tools.items()}
        return active_tool_schemas(named, kwargs.get("extra_info"))


def _is_json(arguments) -> bool:
    """What verl's ``ToolAgentLoop._call_tool`` accepts as arguments (``json.loads``)."""
    try:
        json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return False
    return True


__all__ = ["AGENT_NAME", "ARISEToolAgentLoop", "CountingParser"]
