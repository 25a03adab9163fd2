"""What ARISE's tool loop (recipe/arise/adapters/tool_agent.py) relies on in verl's ``ToolAgentLoop``
to count malformed tool calls (``arise/tool_calls_malformed``):

- ``ToolAgentLoop._call_tool(tool_call, tools_kwargs, agent_data)`` is awaited for each parsed call,
  and it answers a call naming no tool of the sample's ``agent_data._active_tools`` (verl's
  per-sample tool selection, which wins over ``self.tools``) and a call whose arguments are not
  JSON with a message to the model, calling no tool and raising nothing: ARISE's override counts
  exactly those two cases, then hands the call to verl.

Run on the stack's own code with a bare loop object (no server, no tokenizer).
"""

import json

import pytest

PROBE = r"""
import asyncio, inspect, json, types
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall

called = []
class Tool:  # never reached in these cases
    tool_schema = None
    async def create(self, **kwargs):
        called.append("create")
        return "i", None

loop = object.__new__(ToolAgentLoop)
loop.tools = {"everywhere": Tool()}
data = types.SimpleNamespace(_active_tools={"selected": Tool()})

def answer(name, arguments):
    response, reward, extra = asyncio.run(loop._call_tool(FunctionCall(name=name, arguments=arguments), {}, data))
    return {"text": response.text, "reward": reward, "extra": extra}

print(json.dumps({
    "params": list(inspect.signature(ToolAgentLoop._call_tool).parameters),
    "unselected": answer("everywhere", "{}"),
    "bad_json": answer("selected", "{'code'"),
    "called": called,
}))
"""


@pytest.fixture(scope="module")
def probe(stack):
    return json.loads(stack.run(PROBE).strip().splitlines()[-1])


def test_call_tool_takes_the_call_its_kwargs_and_the_agent_data(probe):
    assert probe["params"] == ["self", "tool_call", "tools_kwargs", "agent_data"]


def test_a_call_outside_the_samples_active_tools_is_answered_not_run(probe):
    assert probe["unselected"]["text"].startswith("Unknown function 'everywhere'"), probe["unselected"]
    assert probe["unselected"]["reward"] == 0.0 and probe["called"] == []


def test_arguments_that_are_not_json_are_answered_not_run(probe):
    assert probe["bad_json"]["text"].startswith("Invalid JSON in arguments for 'selected'"), probe["bad_json"]
    assert probe["called"] == []
