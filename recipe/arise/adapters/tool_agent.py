"""``arise_tool_agent``: verl's multi-turn ``ToolAgentLoop`` carrying the ARISE skill layer.

The tools are verl's (``actor_rollout_ref.rollout.multi_turn.tool_config_path`` /
``function_tool_path``, loaded once per agent-loop worker); ``run_scripts/presets/tool_agent.sh``
sets them to ARISE's Python tool. The skill is chosen where verl builds the first prompt
(``_handle_pending_state``, the state machine's first state): ``ToolAgentLoop.run`` has by then
applied the sample's ``extra_info.tool_selection`` (verl's own per-sample selection,
``agent_data._active_tool_schemas``), so the skill is scored in exactly the prompt verl renders, and
injected into the user turn of ``agent_data.messages`` before verl renders it; the tool turns then
run as in verl (tests/contracts/test_tool_call_contract.py pins both points).
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
from recipe.arise.adapters.rollout_failures import recorded
from recipe.arise.adapters.skill_layer import SkillLayer, arise_config, check_agent_loop

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
        self._run_kwargs, self._plan = kwargs, None  # the plan is made in _handle_pending_state

        async def session():
            output = await super(ARISEToolAgentLoop, self).run(sampling_params, **kwargs)
            return output if self._plan is None else SkillLayer.finish(output, self._plan)

        output = await recorded(session(), kwargs)  # an exception is told to the trainer (rollout_failures)
        output.extra_fields[EXTRA_MALFORMED] = self.malformed_calls + self.tool_parser.unparsed
        return output

    async def _handle_pending_state(self, agent_data, sampling_params: dict[str, Any]):
        """The skill for this trajectory, scored with the tools verl chose for the sample, goes into
        the messages verl renders next (its first prompt)."""
        layer = SkillLayer(self, agent_data._active_tool_schemas)
        self._plan = await layer.prepare({**self._run_kwargs, "raw_prompt": agent_data.messages})
        agent_data.messages = list(self._plan.kwargs["raw_prompt"])
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def _call_tool(self, tool_call, tools_kwargs: dict[str, Any], agent_data) -> tuple:
        """verl's call, counted as malformed where verl refuses it (unknown tool, arguments not JSON)."""
        if tool_call.name not in getattr(agent_data, "_active_tools", self.tools) or not _is_json(tool_call.arguments):
            self.malformed_calls += 1
        return await super()._call_tool(tool_call, tools_kwargs, agent_data)


def _is_json(arguments) -> bool:
    """What verl's ``ToolAgentLoop._call_tool`` accepts as arguments (``json.loads``)."""
    try:
        json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return False
    return True


__all__ = ["AGENT_NAME", "ARISEToolAgentLoop", "CountingParser"]
