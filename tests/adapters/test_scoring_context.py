"""One scoring context for selection, the gate's calibration and the exact IG
(recipe/arise/adapters/scoring_context.py): for a tool run's config, the three build the same tokens
for the same query, the tool's schema included (the trainer once rendered its two without it, ~190
tokens fewer than selection scored with)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from skill_layer_host import build_loop, verl_tool_schemas
from verl.experimental.agent_loop.agent_loop import ToolListWrap
from verl.tools.function_tool import FunctionTool
from verl.tools.schemas import OpenAIFunctionToolSchema
from verl.tools.tool_registry import load_all_tools

import recipe.arise.adapters.scoring_context as scoring_context_module
from recipe.arise.adapters.scoring_context import active_tool_schemas, tool_schema, trainer_scoring_parts
from recipe.arise.adapters.skill_layer import SkillLayer
from recipe.arise.adapters.tool_agent import ARISEToolAgentLoop
from recipe.arise.adapters.trainer_gate import observed_queries, observed_tool_selections
from recipe.arise.adapters.trainers import ARISETrainer
from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.observation import Observation
from recipe.arise.core.prompts import inject_skill
from recipe.arise.core.scoring import SCORING_SUFFIX
from recipe.arise.core.selection import truncate_skill_for_scoring
from recipe.arise.core.skill import load_seed_skills

ROOT = Path(__file__).resolve().parents[2]
TOOLS = str(ROOT / "recipe" / "arise" / "config" / "python_tool.yaml")  # what TOOL=python sets
MESSAGES = [{"role": "user", "content": "What is 1 plus 2? Put the final answer within \\boxed{}."}]
SEEDS = load_seed_skills()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The tiny Qwen3-style tokenizer (recipe.arise.cpu.tiny): its chat template lists tools."""
    from recipe.arise.cpu.tiny import build_tokenizer

    corpus = [MESSAGES[0]["content"], *(doc.to_json() for doc in SEEDS), "python code tools function program"]
    return build_tokenizer(tmp_path_factory.mktemp("tok"), corpus)


def tool_run_config():
    """The parts of a tool run's trainer config (run_scripts/common.sh, TOOL=python) the contexts read."""
    rollout = {
        "n": 2,
        "val_kwargs": {"n": 1},
        "prompt_length": 2048,
        "response_length": 64,
        "full_determinism": False,
        "agent": {"default_agent_loop": "arise_tool_agent"},
        "multi_turn": {
            "enable": True,
            "tool_config_path": TOOLS,
            "function_tool_path": None,
            "max_user_turns": 2,
            "max_assistant_turns": 2,
            "max_parallel_calls": 1,
            "max_tool_response_length": 256,
            "tool_response_truncate_side": "middle",
            "format": "hermes",
        },
    }
    selection = {"max_skill_tokens": 1000, "score_top_m": 0}
    return OmegaConf.create(
        {"actor_rollout_ref": {"rollout": rollout}, "data": {}, "arise": {"phase1_steps": 0, "selection": selection}}
    )


def tool_loop(tokenizer, config, tools=None):
    """The tool loop as verl's worker builds it (text-only Qwen3), with the python tool by default."""

    async def go():
        listed = tools if tools is not None else load_all_tools(tool_config_path=TOOLS, function_tool_path=None)
        return build_loop(ARISEToolAgentLoop, tokenizer, None, config, tools=ToolListWrap(listed))

    return asyncio.run(go())


def selection_prefix(tokenizer, config, messages=MESSAGES, loop=None, extra_info=None) -> list[int]:
    """The scoring context the tool loop's skill layer scores ``messages`` in (for a sample's
    ``extra_info``)."""
    loop = loop or tool_loop(tokenizer, config)
    tools = verl_tool_schemas(loop, extra_info)  # what verl's ToolAgentLoop.run chooses for the sample
    return SkillLayer(loop, tools).scoring_prefix(messages, SCORING_SUFFIX)


def trainer_of(tokenizer, config, monkeypatch):
    """The ARISE trainer's parts the calibration and the exact IG use (no verl set-up); the engine
    records every prompt."""
    monkeypatch.setattr(scoring_context_module, "model_type", lambda config: "qwen3")  # the tiny Qwen3
    trainer = object.__new__(ARISETrainer)
    trainer.config, trainer.tokenizer, trainer._scoring_parts = config, tokenizer, None
    trainer.arise = ARISEConfig.from_trainer_config(config)
    trainer.library = SkillLibrary(seed_skills=SEEDS)
    trainer.global_steps, trainer.prompts = 1, []
    trainer._init_gate()

    def generate_all(prompts, params, timeout_s):
        trainer.prompts += prompts
        rows = [[[-1.0]] * len(p) for p in prompts]
        return [SimpleNamespace(extra_fields={"prompt_logprobs": r}) for r in rows]

    trainer._generate_all = generate_all
    return trainer


def test_a_tool_run_scores_in_one_context_for_selection_calibration_and_ig(tokenizer, monkeypatch):
    config = tool_run_config()
    selection = selection_prefix(tokenizer, config)
    suffix = tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False)
    chat = selection[: len(selection) - len(suffix)]
    assert '"name": "python"' in tokenizer.decode(chat)  # the tool's schema is in the context

    trainer = trainer_of(tokenizer, config, monkeypatch)
    # calibration: the gate rescores the remembered queries against the cache
    trainer._remember_queries([MESSAGES])
    trainer._calibrate_gate_on_queries(1)
    skill_ids = [truncate_skill_for_scoring(e.doc.to_json(), tokenizer, 1000) for e in trainer.library.cache]
    assert trainer.prompts == [selection + ids for ids in skill_ids]  # token for token
    # the exact IG: the trace follows the loop's prompt, unaided and with each skill injected
    assert trainer._ig_context(MESSAGES, None) == chat
    doc = trainer.library.cache[0].doc
    injected = trainer._ig_context(MESSAGES, doc)
    assert injected == selection_chat(tokenizer, config, inject_skill(MESSAGES, doc))


def selection_chat(tokenizer, config, messages):
    """The prompt the tool loop builds for ``messages`` (its generation prompt)."""
    prefix = selection_prefix(tokenizer, config, messages)
    return prefix[: len(prefix) - len(tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False))]


def test_the_trainer_renders_no_tools_for_the_single_turn_loop(tokenizer):
    config = tool_run_config()
    config.actor_rollout_ref.rollout.agent.default_agent_loop = "arise_agent"
    assert trainer_scoring_parts(config, tokenizer, hf_model_type="qwen3")[1] is None
    config.actor_rollout_ref.rollout.agent.default_agent_loop = "arise_env_agent"  # renders none either
    assert trainer_scoring_parts(config, tokenizer, hf_model_type="qwen3")[1] is None
    config.actor_rollout_ref.rollout.agent.default_agent_loop = "arise_tool_agent"
    assert list(trainer_scoring_parts(config, tokenizer, hf_model_type="qwen3")[1]) == ["python"]


def test_the_trainers_tool_lookup_gives_what_verls_loop_chooses(tokenizer):
    """The trainer renders a recorded ``tool_selection`` (the gate's rescoring, the exact IG) with
    ``active_tool_schemas``; verl's ``ToolAgentLoop.run`` chooses the same schemas for the sample."""
    function = {"name": "other_tool", "description": "another", "parameters": {"type": "object", "properties": {}}}
    schema = {"type": "function", "function": function}
    other = FunctionTool(name="other_tool", fn=lambda: "", tool_schema=OpenAIFunctionToolSchema.model_validate(schema))
    tools = [*load_all_tools(tool_config_path=TOOLS, function_tool_path=None), other]
    loop = tool_loop(tokenizer, tool_run_config(), tools)
    named = {tool.name: tool_schema(tool) for tool in tools}
    for selection in (None, [], ["other_tool"], ["other_tool", "missing", "python", "other_tool"], ["missing"]):
        info = None if selection is None else {"tool_selection": selection}
        assert active_tool_schemas(named, info) == verl_tool_schemas(loop, info), selection


def test_a_samples_tool_selection_is_rescored_and_measured_in_its_own_context(tokenizer, monkeypatch):
    """verl renders a sample with ``extra_info.tool_selection`` with those tools only: selection,
    the gate's rescoring (the selection travels on the observation) and the exact IG alike."""
    import verl.tools.tool_registry as tool_registry

    function = {"name": "other_tool", "description": "another", "parameters": {"type": "object", "properties": {}}}
    schema = {"type": "function", "function": function}
    other = FunctionTool(name="other_tool", fn=lambda: "", tool_schema=OpenAIFunctionToolSchema.model_validate(schema))
    tools = [*load_all_tools(tool_config_path=TOOLS, function_tool_path=None), other]
    monkeypatch.setattr(tool_registry, "load_all_tools", lambda *args, **kwargs: tools)
    config = tool_run_config()
    loop, only_python = tool_loop(tokenizer, config, tools), {"tool_selection": ["python"]}
    selected = selection_prefix(tokenizer, config, loop=loop, extra_info=only_python)
    every = selection_prefix(tokenizer, config, loop=loop)
    assert "other_tool" in tokenizer.decode(every) and "other_tool" not in tokenizer.decode(selected)

    trainer = trainer_of(tokenizer, config, monkeypatch)
    observations = [
        Observation(uid="a", reward=1.0, correct=True, messages=MESSAGES, tool_selection=["python"]),
        Observation(uid="b", reward=1.0, correct=True, messages=MESSAGES),
    ]
    trainer._remember_queries(observed_queries(observations), observed_tool_selections(observations))
    trainer._calibrate_gate_on_queries(1)
    skill_ids = [truncate_skill_for_scoring(e.doc.to_json(), tokenizer, 1000) for e in trainer.library.cache]
    assert trainer.prompts == [selected + ids for ids in skill_ids] + [every + ids for ids in skill_ids]
    suffix = len(tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False))
    assert trainer._ig_context(MESSAGES, None, only_python) == selected[:-suffix]
    assert trainer._ig_context(MESSAGES, None, {}) == every[:-suffix]
