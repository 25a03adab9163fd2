"""The one builder of the token contexts ARISE scores in, for selection, the gate's calibration and
the exact IG alike.

A skill is scored in the prompt the agent loop builds: verl's Continuous Token builder renders the
messages with the loop's tool schemas (the tools' list in the chat template), then the scoring
suffix (``SKILL:``), tokenized on its own. The skill layer (selection) builds it with its host
loop's builder and tools; the trainer (the gate's rescoring, ``trainer_gate``; the exact IG,
``trainer_upload``) with the same builder verl creates for the model and the tool schemas verl's
agent-loop workers load (:func:`trainer_scoring_parts`), so a tool run scores in the same tokens in
all three (tests/adapters/test_scoring_context.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# the agent loops that render no tool schemas (verl's single-turn loop under arise_agent; the text-environment
# loop); every other loop is taken to render the tools verl loads for the agent-loop workers, as its tool loop does
TOOLLESS_LOOPS = ("arise_agent", "single_turn_agent", "arise_env_agent")


class ScoringContext:
    """``builder``: a verl Continuous Token builder (``build_initial_tokens``); ``tools``: the tool
    schemas the loop renders its prompt with (None: none)."""

    def __init__(self, builder: Any, tokenizer: Any, tools: Sequence[dict] | None = None):
        self.builder, self.tokenizer = builder, tokenizer
        self.tools = list(tools) if tools is not None else None

    def chat_ids(self, messages: Sequence[dict]) -> list[int]:
        """The prompt the loop builds for ``messages`` (up to the assistant turn)."""
        return list(self.builder.build_initial_tokens(list(messages), tools=self.tools))

    def prefix(self, messages: Sequence[dict], suffix: str) -> list[int]:
        """The scoring context: :meth:`chat_ids`, then ``suffix`` tokenized on its own (as the
        injected skill line is)."""
        return self.chat_ids(messages) + list(self.tokenizer.encode(suffix, add_special_tokens=False))


def tool_schema(tool: Any) -> dict:
    """A verl tool's schema as its ``ToolAgentLoop`` renders it."""
    return tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)


def active_tool_schemas(tools: Mapping[str, dict], extra_info: Mapping | None) -> list[dict]:
    """The trainer's rendering of a sample's recorded tools (the gate's rescoring, the exact IG; the
    tool loop itself reads verl's choice off its agent data): all of ``tools`` (name -> schema), or
    those named by ``extra_info.tool_selection`` (in its order, each once, unknown names skipped), as
    verl's ``ToolAgentLoop.run`` chooses them (tests/adapters/test_scoring_context.py holds the two equal)."""
    selection = (extra_info or {}).get("tool_selection")
    if not (selection and tools):
        return list(tools.values())
    return [tools[name] for name in dict.fromkeys(selection) if name in tools]


def trainer_scoring_parts(config: Any, tokenizer: Any, hf_model_type: str | None = None):
    """(builder, tools by name or None) of the run's agent loop, built on the trainer as verl's
    agent-loop worker builds them: the Continuous Token builder for the model type with
    ``data.apply_chat_template_kwargs``, and the tools of ``multi_turn.tool_config_path`` /
    ``function_tool_path`` unless the default agent loop renders none (:data:`TOOLLESS_LOOPS`).
    ``hf_model_type``: the model's ``model_type`` (None: read from ``actor_rollout_ref.model``)."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    if hf_model_type is None:
        hf_model_type = model_type(config)
    builder = create_continuous_token_builder(
        tokenizer,
        hf_model_type=hf_model_type,
        chat_template_kwargs=config.data.get("apply_chat_template_kwargs", None) or {},
    )
    rollout = config.actor_rollout_ref.rollout
    multi_turn = rollout.get("multi_turn", None) or {}
    paths = multi_turn.get("tool_config_path", None), multi_turn.get("function_tool_path", None)
    if rollout.agent.default_agent_loop in TOOLLESS_LOOPS or not any(paths):
        return builder, None
    from verl.tools.tool_registry import load_all_tools
    from verl.utils.import_utils import resolve_config_path

    tools = load_all_tools(*(resolve_config_path(p) if p else None for p in paths))
    return builder, {tool.name: tool_schema(tool) for tool in tools}


def model_type(config: Any) -> str | None:
    """The root Hugging Face ``model_type`` of ``actor_rollout_ref.model``, read as verl's agent-loop
    worker reads it to pick its Continuous Token builder."""
    from verl.utils.config import omega_conf_to_dataclass

    value = getattr(omega_conf_to_dataclass(config.actor_rollout_ref.model).hf_config, "model_type", None)
    return value if isinstance(value, str) else None


__all__ = [
    "TOOLLESS_LOOPS",
    "ScoringContext",
    "active_tool_schemas",
    "model_type",
    "tool_schema",
    "trainer_scoring_parts",
]
