"""What ARISE's tool loop (recipe/arise/adapters/tool_agent.py) relies on in verl's ``ToolAgentLoop``
to count malformed tool calls (``arise/tool_calls_malformed``):

- ``ToolAgentLoop._call_tool(tool_call, tools_kwargs, agent_data)`` is awaited for each parsed call,
  and it answers a call naming no tool of the sample's ``agent_data._active_tools`` (verl's
  per-sample tool selection, which wins over ``self.tools``) and a call whose arguments are not
  JSON with a message to the model, calling no tool and raising nothing: ARISE's override counts
  exactly those two cases, then hands the call to verl.

It also pins where ARISE chooses the skill (``_handle_pending_state``, last test below).

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


# ARISE's tool loop picks the skill in _handle_pending_state (recipe/arise/adapters/tool_agent.py): verl's run
# must have chosen the sample's tools by then (agent_data._active_tool_schemas, its per-sample selection), call
# it first, and render the agent data's messages there, with those tools
PENDING_PROBE = r"""
import asyncio, json, types
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

class Tool:
    def __init__(self, name):
        self.name = name
        self.tool_schema = types.SimpleNamespace(model_dump=lambda **kw: {"name": name})

class Stop(Exception):
    pass

seen = {}
class Loop(ToolAgentLoop):
    async def _handle_pending_state(self, agent_data, sampling_params):
        seen["first"] = seen.get("first", "pending")
        seen["tools_at_pending"] = agent_data._active_tool_schemas
        agent_data.messages = agent_data.messages + [{"role": "user", "content": "injected"}]
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def _handle_generating_state(self, *args, **kwargs):
        seen["first"] = seen.get("first", "generating")
        raise Stop

    async def ct_build_initial_tokens(self, messages, tools=None, **kwargs):
        seen["rendered"] = {"messages": messages, "tools": tools}
        return [1, 2, 3]

loop = object.__new__(Loop)
loop.tools = {n: Tool(n) for n in ("a", "b")}
loop.tool_schemas = [{"name": "a"}, {"name": "b"}]
loop.rollout_config = types.SimpleNamespace(full_determinism=False)
loop.processor, loop.mm_processor_kwargs = None, {}
loop.build_sglang_video_payload = lambda videos, mm_inputs: None
try:
    asyncio.run(loop.run({}, raw_prompt=[{"role": "user", "content": "q"}], extra_info={"tool_selection": ["b", "x"]}))
except Stop:
    pass
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def pending(stack):
    return json.loads(stack.run(PENDING_PROBE).strip().splitlines()[-1])


def test_verl_chooses_the_samples_tools_before_its_first_state_which_renders_the_messages(pending):
    assert pending["first"] == "pending"
    assert pending["tools_at_pending"] == [{"name": "b"}]  # verl's per-sample selection, already applied
    assert pending["rendered"]["tools"] == [{"name": "b"}]
    assert pending["rendered"]["messages"][-1] == {"role": "user", "content": "injected"}  # what ARISE put there
