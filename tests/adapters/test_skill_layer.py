"""The skill layer (recipe/arise/adapters/skill_layer.py): ARISE in any agent loop (docs/agent_loops.md).

A third, toy loop (docs/agent_loops.md's example, run as written) gains ARISE in one step; the
tool loop ``arise_tool_agent`` scores the skills in the context verl's ``ToolAgentLoop`` renders
(its tools' schemas in the chat template) and injects the skill there; train_manager with the tool
loop is refused, naming the option; a programming error inside scoring propagates while an engine
error sends the group unaided, counted.
"""

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf  # noqa: E402
from ray.exceptions import RayTaskError  # noqa: E402
from skill_layer_host import build_loop, skill_layer
from verl.experimental.agent_loop.agent_loop import ToolListWrap  # noqa: E402
from verl.tools.function_tool import FunctionTool  # noqa: E402
from verl.tools.schemas import OpenAIFunctionToolSchema  # noqa: E402

import recipe.arise.adapters.skill_layer as skill_layer_module  # noqa: E402
from recipe.arise.adapters.skill_layer import arise_config, check_agent_loop  # noqa: E402
from recipe.arise.adapters.tool_agent import ARISEToolAgentLoop  # noqa: E402
from recipe.arise.core.arise_config import ARISEConfig  # noqa: E402
from recipe.arise.core.prompts import inject_skill  # noqa: E402
from recipe.arise.core.scoring import SCORING_SUFFIX  # noqa: E402
from recipe.arise.core.skill import load_seed_skills  # noqa: E402
from recipe.arise.core.trajectory import TrajectoryInfo  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "agent_loops.md"
SEEDS = load_seed_skills()
CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(SEEDS, start=1)]
FAVOURITE = CACHE[2]
MESSAGES = [{"role": "user", "content": "What is 1 plus 2? Put the final answer within \\boxed{}."}]
SCHEMA = {
    "type": "function",
    "function": {
        "name": "run_python",
        "description": "Run Python code and return what it prints",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the code"}},
            "required": ["code"],
        },
    },
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The tiny Qwen3-style tokenizer (recipe.arise.cpu.tiny): its chat template lists tools."""
    from recipe.arise.cpu.tiny import build_tokenizer

    corpus = [MESSAGES[0]["content"], *(text for _, text in CACHE), "run_python code tools function"]
    return build_tokenizer(tmp_path_factory.mktemp("tok"), corpus)


class Server:
    """verl's server manager: a scoring request (``prompt_logprobs``) gets -1 per token, -0.1 on the
    favourite skill's prompts; a generation request gets ``reply``. Records every request."""

    def __init__(self, reply):
        self.reply, self.scoring, self.generation = list(reply), [], []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        if sampling_params.get("prompt_logprobs") is not None:
            self.scoring.append(list(prompt_ids))
            lp = -0.1 if _ends_with(prompt_ids, self.favourite_ids) else -1.0
            rows = [[lp] for _ in range(len(prompt_ids) - 1)] + [[0.0]]
            return SimpleNamespace(token_ids=[0], log_probs=None, extra_fields={"prompt_logprobs": rows})
        self.generation.append(list(prompt_ids))
        return SimpleNamespace(
            token_ids=self.reply, log_probs=None, num_preempted=0, routed_experts=None, extra_fields={}
        )


def _ends_with(ids, tail):
    return list(ids[-len(tail) :]) == list(tail)


class Pool:
    def __init__(self, cache=CACHE):
        self.snapshot = SimpleNamespace(remote=lambda: _ready({"version": 1, "cache": cache, "mode": "train"}))


async def _ready(value):
    return value


def trainer_config(**selection):
    selection = {"epsilon": 0.0, "use_gate": False, "control_share": 0.0, "max_skill_tokens": 1000, **selection}
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "n": 2,
                    "val_kwargs": {"n": 1},
                    "prompt_length": 1024,
                    "response_length": 64,
                    "full_determinism": False,
                    "multi_turn": {
                        "max_user_turns": 2,
                        "max_assistant_turns": 2,
                        "max_parallel_calls": 1,
                        "max_tool_response_length": 256,
                        "tool_response_truncate_side": "middle",
                        "format": "hermes",
                    },
                }
            },
            "arise": {"phase1_steps": 0, "selection": selection},
        }
    )


build = build_loop  # an agent loop as verl's worker builds it (tests/helpers/skill_layer_host.py)


def python_tool():
    return FunctionTool(
        name="run_python", fn=lambda code: "3", tool_schema=OpenAIFunctionToolSchema.model_validate(SCHEMA)
    )


def run(loop, session=1, uid="q", **kwargs):
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}
    return loop.run(params, raw_prompt=MESSAGES, uid=uid, session_id=session, global_steps=3, **kwargs)


def docs_example() -> dict:
    """docs/agent_loops.md's example, executed as written."""
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


# --------------------------------------------------------------------------- a third loop, one step


def test_a_users_loop_gains_arise_in_one_step(tokenizer, monkeypatch):
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: Pool())
    example = docs_example()
    server = Server(tokenizer.encode(" 3", add_special_tokens=False))
    server.favourite_ids = tokenizer.encode(FAVOURITE[1], add_special_tokens=False)

    async def go():
        loop = build(example["ARISEEchoLoop"], tokenizer, server, trainer_config())
        plain = build(example["EchoLoop"], tokenizer, server, trainer_config())
        return await run(loop, uid="echo"), await run(plain, uid="echo-plain"), loop

    output, plain, loop = asyncio.run(go())
    info = TrajectoryInfo.from_extra_fields(output.extra_fields)
    assert info.skill_id == FAVOURITE[0] and info.selected and info.phase == 2 and info.scorer
    # the loop built its prompt from the injected messages, and scored in its own context
    injected = loop.continuous_token_builder.build_initial_tokens(inject_skill(MESSAGES, SEEDS[2]))
    assert output.prompt_ids == server.generation[0] == injected
    context = loop.continuous_token_builder.build_initial_tokens(MESSAGES)
    suffix = tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False)
    assert len(server.scoring) == len(CACHE) and all(
        ids[: len(context) + len(suffix)] == context + suffix for ids in server.scoring
    )
    # the user's loop alone: no record
    assert "arise_skill_id" not in plain.extra_fields


class Publishing:
    """A library replica a publish reaches between any two reads: each read returns the next version."""

    def __init__(self):
        self.reads = 0
        self.snapshot = SimpleNamespace(remote=self.read)

    async def read(self):
        self.reads += 1
        return {"version": self.reads, "cache": CACHE}


def test_every_session_of_a_query_group_selects_from_one_library_version(monkeypatch):
    """The async trainers publish while groups generate: a group's sessions share one snapshot."""
    replica, seen = Publishing(), []
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: replica)

    async def select(self, cfg, snapshot, messages, kwargs, validate, info):
        seen.append((kwargs["uid"], kwargs["session_id"], snapshot["version"]))

    monkeypatch.setattr(skill_layer_module.SkillLayer, "select", select)
    layer = skill_layer(server=None)
    layer.host.config = trainer_config()

    async def sessions():
        for uid, session in (("one-version", 0), ("one-version", 1), ("next-group", 0)):
            await layer.prepare({"raw_prompt": MESSAGES, "uid": uid, "session_id": session, "global_steps": 3})

    asyncio.run(sessions())
    # the group's second session came after a publish, and still selects from the group's version
    assert seen == [("one-version", 0, 1), ("one-version", 1, 1), ("next-group", 0, 2)]
    assert replica.reads == 2


# --------------------------------------------------------------------------- arise_tool_agent


def test_the_tool_loop_scores_in_the_context_verls_tool_loop_builds(tokenizer, monkeypatch):
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: Pool())
    server = Server(tokenizer.encode(" 3", add_special_tokens=False) + [tokenizer.eos_token_id])
    server.favourite_ids = tokenizer.encode(FAVOURITE[1], add_special_tokens=False)

    async def go():
        loop = build(ARISEToolAgentLoop, tokenizer, server, trainer_config(), tools=ToolListWrap([python_tool()]))
        return loop, await run(loop, uid="tool")

    loop, output = asyncio.run(go())
    assert loop.tool_schemas and loop.tool_schemas[0]["function"]["name"] == "run_python"
    # the scoring context is the prompt verl's ToolAgentLoop renders: the tools' schemas in the template
    context = loop.continuous_token_builder.build_initial_tokens(MESSAGES, tools=loop.tool_schemas)
    suffix = tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False)
    assert "run_python" in tokenizer.decode(context)
    assert server.scoring and all(ids[: len(context) + len(suffix)] == context + suffix for ids in server.scoring)
    # the skill is in the prompt verl built (tools included), and recorded
    injected = loop.continuous_token_builder.build_initial_tokens(
        inject_skill(MESSAGES, SEEDS[2]), tools=loop.tool_schemas
    )
    assert server.generation[0] == injected and output.prompt_ids == injected
    assert output.extra_fields["arise_skill_id"] == FAVOURITE[0]
    assert output.extra_fields["turn_scores"] == [] and output.num_turns >= 2  # verl's tool loop output


def test_the_tool_loop_counts_the_calls_that_reach_no_tool(tokenizer, monkeypatch):
    """verl answers an unknown tool or arguments that are not JSON with a message, and drops a
    <tool_call> block that does not parse, counting neither: the loop counts them per trajectory."""
    from verl.experimental.agent_loop.tool_parser import FunctionCall

    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: Pool())

    def reply(text):
        return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]

    good = '<tool_call>{"name": "run_python", "arguments": {"code": "print(3)"}}</tool_call>'
    replies = {
        "good": (good, 0),
        "unknown tool": ('<tool_call>{"name": "calculator", "arguments": {"x": 1}}</tool_call>', 1),
        "no JSON": ("<tool_call>run_python(code='print(3)')</tool_call>", 1),
        "none": (" 3", 0),
    }

    async def go(text):
        server = Server(reply(text))
        server.favourite_ids = tokenizer.encode(FAVOURITE[1], add_special_tokens=False)
        loop = build(ARISEToolAgentLoop, tokenizer, server, trainer_config(), tools=ToolListWrap([python_tool()]))
        output = await run(loop, uid="tool")
        # a call whose arguments are not JSON (hermes re-encodes them; other formats pass them through)
        before = loop.malformed_calls
        refused = await loop._call_tool(FunctionCall(name="run_python", arguments="{'code'"), {}, SimpleNamespace())
        assert refused[0].text.startswith("Invalid JSON in arguments for 'run_python'")
        return output.extra_fields["tool_calls_malformed"], loop.malformed_calls - before

    for case, (text, expected) in replies.items():
        assert asyncio.run(go(text)) == (expected, 1), case


def test_the_tool_loop_scores_with_verls_own_tool_selection(tokenizer, monkeypatch):
    """The skill layer scores with the very schemas verl's ``ToolAgentLoop.run`` chose for the sample
    (``extra_info.tool_selection``), not a copy of verl's selection; the skill goes into the prompt
    verl then renders with them."""
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    from recipe.arise.adapters.skill_layer import SkillLayer

    other = dict(SCHEMA, function={**SCHEMA["function"], "name": "other_tool"})
    tools = [
        python_tool(),
        FunctionTool(name="other_tool", fn=lambda code: "", tool_schema=OpenAIFunctionToolSchema.model_validate(other)),
    ]
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: Pool())
    given, chosen = [], []
    init, pending = SkillLayer.__init__, ToolAgentLoop._handle_pending_state

    def layer(self, host, tools=None, skill_in_response=False):
        given.append(tools)
        init(self, host, tools, skill_in_response)

    async def verls(self, agent_data, sampling_params):
        chosen.append(agent_data._active_tool_schemas)
        return await pending(self, agent_data, sampling_params)

    monkeypatch.setattr(SkillLayer, "__init__", layer)
    monkeypatch.setattr(ToolAgentLoop, "_handle_pending_state", verls)
    server = Server(tokenizer.encode(" 3", add_special_tokens=False) + [tokenizer.eos_token_id])
    server.favourite_ids = tokenizer.encode(FAVOURITE[1], add_special_tokens=False)

    async def go():
        loop = build(ARISEToolAgentLoop, tokenizer, server, trainer_config(), tools=ToolListWrap(tools))
        return loop, await run(loop, uid="sel", extra_info={"tool_selection": ["other_tool", "missing"]})

    loop, output = asyncio.run(go())
    assert given and given[0] is chosen[0]  # verl's own list
    assert [s["function"]["name"] for s in chosen[0]] == ["other_tool"]
    context = loop.continuous_token_builder.build_initial_tokens(MESSAGES, tools=chosen[0])
    assert server.scoring and all(ids[: len(context)] == context for ids in server.scoring)
    assert "run_python" not in tokenizer.decode(server.scoring[0])
    injected = loop.continuous_token_builder.build_initial_tokens(inject_skill(MESSAGES, SEEDS[2]), tools=chosen[0])
    assert server.generation[0] == injected and output.extra_fields["arise_skill_id"] == FAVOURITE[0]


def test_train_manager_with_the_tool_loop_is_refused_naming_the_option(tokenizer):
    config = trainer_config(train_manager=True)
    with pytest.raises(ValueError, match=r"arise\.selection\.train_manager.*arise_tool_agent"):
        check_agent_loop("arise_tool_agent", arise_config(config))
    check_agent_loop("arise_agent", arise_config(config))  # the single-turn loop implements it

    async def go():
        return build(ARISEToolAgentLoop, tokenizer, Server([]), config, tools=ToolListWrap([python_tool()]))

    with pytest.raises(ValueError, match="train_manager"):
        asyncio.run(go())


def test_train_manager_in_a_loop_without_it_is_refused(tokenizer, monkeypatch):
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: Pool())
    example = docs_example()

    async def go():
        loop = build(example["ARISEEchoLoop"], tokenizer, Server([]), trainer_config(train_manager=True))
        return await run(loop)

    with pytest.raises(ValueError, match="train_manager.*ARISEEchoLoop"):
        asyncio.run(go())


# --------------------------------------------------------------------------- scoring failures


class Raising:
    def __init__(self, error):
        self.error = error

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        raise self.error


def score(error):
    return asyncio.run(skill_layer(Raising(error)).score_group(ARISEConfig(), CACHE, MESSAGES))


@pytest.mark.parametrize("error", [TypeError("bad call"), KeyError("prompt_logprobs"), AttributeError("x")])
def test_a_programming_error_inside_scoring_propagates(error):
    with pytest.raises(type(error)):
        score(error)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("engine died"),
        ValueError("prompt too long for the engine"),
        RayTaskError("generate", "traceback", TypeError("inside the engine")).as_instanceof_cause(),
    ],
)
def test_an_engine_error_sends_the_group_unaided_counted(error):
    scores, _, _, failure, _ = score(error)
    assert scores == [] and failure is not None


def test_the_parsed_config_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(skill_layer_module, "_CONFIGS", {})
    configs = [{"arise": {"seed": i}} for i in range(3 * skill_layer_module._MAX_CONFIGS)]
    assert [arise_config(c).seed for c in configs] == list(range(len(configs)))
    assert len(skill_layer_module._CONFIGS) == skill_layer_module._MAX_CONFIGS
