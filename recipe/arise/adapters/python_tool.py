"""`python`: a verl tool that runs the model's code in the sandbox (recipe/arise/core/sandbox.py).

Registered the verl way: `actor_rollout_ref.rollout.multi_turn.tool_config_path=
recipe/arise/config/python_tool.yaml` makes verl's ToolAgentLoop build `PythonTool` through
`verl.tools.tool_registry.initialize_tools_from_config`. Each call runs in a thread of the tool's
own pool of `config.max_concurrent` threads per process (the sandbox blocks on a child process; the
rollout's event loop must not): calls waiting for a sandbox queue there, never in the event loop's
default executor, where verl tokenizes. The model is shown
`sandbox.format_for_model`: the clipped output and one clear `Error: ...` line when a limit hit.

Per trajectory the tool counts its calls, errors and seconds in `agent_data.extra_fields`
(`python_tool_calls`, `python_tool_errors`, `python_tool_s`), which verl carries into the batch's
non-tensor fields; `tool_step_metrics` (called by the trainer) turns them into `arise/tool_calls`
(per trajectory), `arise/tool_error_rate` and `arise/tool_s`, with the tool agent's
`arise/tool_calls_malformed`: in a tool run every step, 0 when no trajectory called the tool. The
metrics dict `execute` returns holds the same for one call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from recipe.arise.core import sandbox

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

# not "arise_*": that prefix is TrajectoryInfo's, whose reader refuses a key it does not define
EXTRA_CALLS, EXTRA_ERRORS, EXTRA_SECONDS = "python_tool_calls", "python_tool_errors", "python_tool_s"
# the tool agent's count of calls that reached no tool (recipe.arise.adapters.tool_agent)
EXTRA_MALFORMED = "tool_calls_malformed"
# the agent loops that call tools: a run with one of them is a tool run, whose metrics are logged every step
TOOL_AGENT_LOOPS = ("arise_tool_agent", "tool_agent")

DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run a Python 3 program (numpy and sympy available) and return what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the program; print the results you need"}},
            "required": ["code"],
        },
    },
}

# one pool per process across every PythonTool instance (verl builds one per agent-loop worker): its
# threads are the sandbox slots, and its queue holds the calls waiting for one
_pools_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}


def _pool_for(n: int) -> ThreadPoolExecutor:
    with _pools_lock:
        if n not in _pools:
            _pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="arise-python-tool")
        return _pools[n]


class PythonTool(BaseTool):
    """config keys (tool yaml `config:`): `type: native`, `isolation` (auto | bwrap | none),
    `max_concurrent`, and `limits` (any `SandboxLimits` field: wall_s, cpu_s, memory_mb, ...)."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        if tool_schema is None:
            tool_schema = OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
        super().__init__(config, tool_schema)
        known = {"type", "isolation", "max_concurrent", "limits"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"python tool config: unknown key(s) {unknown}; known: {sorted(known)}")
        try:
            self.limits = sandbox.SandboxLimits.from_dict(dict(config.get("limits") or {}))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"python tool config, limits: {exc}") from exc
        self.isolation = sandbox.resolve_isolation(config.get("isolation", "auto"))
        max_concurrent = int(config.get("max_concurrent", 4))
        if max_concurrent < 1:
            raise ValueError(f"python tool config: max_concurrent must be >= 1, got {max_concurrent}")
        self._pool = _pool_for(max_concurrent)
        logger.warning(sandbox.describe_isolation(self.isolation))

    def _run_blocking(self, code: str) -> tuple[str, bool, float, str]:
        result = sandbox.run_python(code, self.limits, isolation=self.isolation)
        return sandbox.format_for_model(result), result.failed, result.duration_s, result.reason

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        code = parameters.get("code") if isinstance(parameters, dict) else None
        start = time.monotonic()
        if not isinstance(code, str) or not code.strip():
            text, failed, reason = "Error: the python tool needs a non-empty string argument 'code'.", True, "arguments"
        else:
            loop = asyncio.get_running_loop()
            text, failed, _, reason = await loop.run_in_executor(self._pool, self._run_blocking, code)
        seconds = time.monotonic() - start
        agent_data = kwargs.get("agent_data")
        if agent_data is not None:
            extra = agent_data.extra_fields
            extra[EXTRA_CALLS] = int(extra.get(EXTRA_CALLS, 0)) + 1
            extra[EXTRA_ERRORS] = int(extra.get(EXTRA_ERRORS, 0)) + int(failed)
            extra[EXTRA_SECONDS] = float(extra.get(EXTRA_SECONDS, 0.0)) + seconds
        metrics = {"tool_s": seconds, "tool_error": float(failed), "reason": reason, "isolation": self.isolation}
        return ToolResponse(text=text), 0.0, metrics


def tool_step_metrics(extras, tool_run: bool = False) -> dict[str, float]:
    """`arise/tool_calls` (mean calls per trajectory that reached the tool), `arise/tool_error_rate`
    (failed calls / calls), `arise/tool_s` (mean tool seconds per trajectory) and
    `arise/tool_calls_malformed` (mean calls per trajectory that reached no tool: an unknown tool name,
    a call or arguments that do not parse) from the trajectories' extra fields (one dict per
    trajectory, as the trainer reads them from the batch). A trajectory without counters made no
    call. `tool_run` (the agent loop is a tool agent): the metrics every step, 0 when no trajectory
    called the tool; otherwise {} unless some trajectory carries a counter (a single-turn run has none)."""
    extras = [e if isinstance(e, dict) else {} for e in extras]
    if not extras or not (tool_run or any(EXTRA_CALLS in e or EXTRA_MALFORMED in e for e in extras)):
        return {}
    calls = [int(e.get(EXTRA_CALLS) or 0) for e in extras]
    errors = [int(e.get(EXTRA_ERRORS) or 0) for e in extras]
    seconds = [float(e.get(EXTRA_SECONDS) or 0.0) for e in extras]
    malformed = [int(e.get(EXTRA_MALFORMED) or 0) for e in extras]
    total = sum(calls)
    return {
        "arise/tool_calls": total / len(calls),
        "arise/tool_error_rate": sum(errors) / total if total else 0.0,
        "arise/tool_s": sum(seconds) / len(calls),
        "arise/tool_calls_malformed": sum(malformed) / len(calls),
    }
