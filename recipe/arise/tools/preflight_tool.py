"""The preflight's checks of a tool-using run (``TOOL=python``: verl's multi-turn loop): the tools load
from their yaml, which isolation the python sandbox gets on this machine, and the multi-turn budget
(turns, tool-result length, prompt + response). Nothing for a single-turn run."""

from __future__ import annotations

import json

from recipe.arise.tools.preflight_common import CHARS_PER_TOKEN, Finding

# the share of the response the tool results may fill before the model has no room left to answer
TOOL_RESULT_SHARE = 0.5


def tool_schema_tokens(schemas: list[dict]) -> int:
    """A bound on what the tools' schemas add to the prompt (the chat template lists them as JSON)."""
    return sum(len(json.dumps(s)) for s in schemas) // CHARS_PER_TOKEN + 64  # + the template's tool preamble


def _load_tools(path: str) -> tuple[list[dict], list[str]]:
    """The tools' OpenAI schemas and the isolation line of each python tool, built by verl's own loader."""
    from verl.tools.tool_registry import initialize_tools_from_config

    from recipe.arise.core.sandbox import describe_isolation

    tools = initialize_tools_from_config(path)
    schemas = [tool.tool_schema.model_dump(exclude_none=True) for tool in tools]
    isolation = [describe_isolation(tool.isolation) for tool in tools if hasattr(tool, "isolation")]
    return schemas, isolation


def check_tool(cfg, check_paths: bool = True) -> list[Finding]:
    rollout = cfg.actor_rollout_ref.rollout
    multi_turn = rollout.get("multi_turn", {}) or {}
    if not multi_turn.get("enable", False):
        return []
    from recipe.arise.adapters.python_tool import TOOL_AGENT_LOOPS  # the loops that call tools (the trainer's list)

    findings: list[Finding] = []
    loop = rollout.get("agent", {}).get("default_agent_loop")
    if loop not in TOOL_AGENT_LOOPS:
        findings.append(
            Finding(
                "ERROR",
                f"rollout.multi_turn.enable=True with agent loop {loop!r}: it never calls a tool; "
                f"set actor_rollout_ref.rollout.agent.default_agent_loop=arise_tool_agent (TOOL=python does)",
            )
        )
    path = multi_turn.get("tool_config_path")
    schemas: list[dict] = []
    if not path:
        findings.append(Finding("ERROR", "rollout.multi_turn.enable=True but no multi_turn.tool_config_path"))
    elif check_paths:
        try:
            schemas, isolation = _load_tools(str(path))
        except Exception as error:  # the loader's own message names the bad key or class
            findings.append(Finding("ERROR", f"tools from {path}: {type(error).__name__}: {error}"))
        else:
            names = ", ".join(s["function"]["name"] for s in schemas)
            findings.append(Finding("OK", f"tools from {path}: {names}"))
            for line in isolation:  # loud where the sandbox has no namespaces (docs/sandbox.md)
                findings.append(Finding("WARNING" if "NONE" in line or "ERROR" in line else "OK", line))

    turns = multi_turn.get("max_assistant_turns")
    result_tokens = int(multi_turn.get("max_tool_response_length") or 0)
    response = int(cfg.data.max_response_length)
    if turns is not None and int(turns) < 2:
        findings.append(
            Finding(
                "ERROR",
                f"multi_turn.max_assistant_turns={turns}: the model cannot read a tool's result and then "
                "answer (a tool call and the answer take 2 turns); TOOL_TURNS >= 2",
            )
        )
    calls = (int(turns) - 1) if turns else 1
    results = calls * result_tokens
    budget = f"{calls} tool results x {result_tokens} tokens = {results} of the response's {response} tokens"
    if results > TOOL_RESULT_SHARE * response:
        findings.append(
            Finding(
                "WARNING",
                f"multi-turn budget: {budget}; the tool results can crowd out the answer: lower "
                "TOOL_TURNS or TOOL_RESPONSE, or raise MAX_RESPONSE",
            )
        )
    else:
        findings.append(Finding("OK", f"multi-turn budget: {budget}"))
    if schemas:
        extra = tool_schema_tokens(schemas)
        need = int(cfg.data.max_prompt_length) + extra + response
        max_model_len = rollout.get("max_model_len")
        level = "ERROR" if max_model_len is not None and int(max_model_len) < need else "OK"
        findings.append(
            Finding(
                level,
                f"prompt + tool schemas (~{extra} tokens) + response = {need} tokens; rollout.max_model_len "
                f"{max_model_len}" + (": raise MAX_MODEL_LEN" if level == "ERROR" else ""),
            )
        )
    return findings
