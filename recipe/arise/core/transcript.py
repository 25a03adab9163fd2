"""A multi-turn trace as a readable transcript for the summary prompt O_{G+1}.  Framework free.

A tool-using trajectory's response interleaves the policy's turns (``response_mask`` 1) with the
tool results the agent loop appended (mask 0, rendered by the chat template: Qwen3's
``<tool_response>`` blocks in a user turn). Decoded as one text, the calls and results blur into
the prose; here each run is decoded on its own and labelled (``ASSISTANT:``, ``TOOL CALL <name>:``,
``TOOL RESULT:``), so the summary can say which computation solved the problem. A response with
no mask-0 run is decoded as one text, exactly as before.

An environment episode (``arise_env_agent``) keeps its own transcript, ``OBSERVATION:`` /
``ACTION:`` lines (:func:`env_transcript` compacts it to the summary's budget).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = ["ENV_LABELS", "Transcript", "env_transcript", "trace_transcript", "mask_runs"]

# Qwen-style (hermes) tool calls and results; other formats stay in the ASSISTANT / TOOL RESULT text
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>(.*?)(?:</tool_response>|$)", re.DOTALL)
# role headers left of a templated turn once its special tokens are skipped ("user\n...", "assistant\n")
_ROLE_LINE = re.compile(r"^\s*(user|tool|ipython|assistant|system)\s*$")
ENV_LABELS = ("OBSERVATION", "ACTION")  # an episode's transcript: one "<label>: <text>" line per part


class Transcript(NamedTuple):
    text: str
    tool_turns: int  # mask-0 runs (tool results returned); 0 = a single-turn trace


def mask_runs(ids: Sequence[int], mask: Sequence[int]) -> list[tuple[bool, list[int]]]:
    """Consecutive runs of equal mask: (is_policy_turn, token ids)."""
    runs: list[tuple[bool, list[int]]] = []
    for token, m in zip(ids, mask, strict=True):
        policy = bool(m)
        if runs and runs[-1][0] == policy:
            runs[-1][1].append(int(token))
        else:
            runs.append((policy, [int(token)]))
    return runs


def trace_transcript(
    ids: Sequence[int],
    mask: Sequence[int] | None,
    decode: Callable[[list[int]], str],
    clip_chars: int = 400,
    tool_result_chars: int = 200,
    max_chars: int = 1600,
) -> Transcript:
    """The trace of response ``ids`` with its ``response_mask``; ``decode`` turns token ids into text
    (the adapter's ``tokenizer.decode(ids, skip_special_tokens=True)``).

    Without a mask-0 run after the first policy token (``mask`` None or all 1): ``decode(ids)``,
    unchanged. Otherwise one line
    per part: assistant prose and tool-call code each clipped to ``clip_chars``, each tool result to
    ``tool_result_chars``; past ``max_chars`` in all the first part and the last ones that fit are
    kept (the computation that settled the answer comes last), the middle replaced by a marker.

    Raises ValueError when the mask and the ids differ in length or a limit is below 1."""
    ids = [int(t) for t in ids]
    if mask is not None and len(mask) != len(ids):
        raise ValueError(f"response_mask has {len(mask)} entries for {len(ids)} response tokens")
    if min(int(clip_chars), int(tool_result_chars), int(max_chars)) < 1:
        raise ValueError("clip_chars, tool_result_chars and max_chars must be >= 1")
    runs = mask_runs(ids, mask) if mask is not None else []
    if runs and not runs[0][0]:  # mask-0 tokens before the policy's first (a format lead): not a tool turn
        runs = [(True, runs[0][1] + runs[1][1]), *runs[2:]] if len(runs) > 1 else []
    if all(policy for policy, _ in runs):
        return Transcript(decode(ids), 0)
    parts: list[str] = []
    tool_turns = 0
    for policy, run in runs:
        text = decode(run)
        if policy:
            parts += _assistant_parts(text, int(clip_chars))
        else:
            tool_turns += 1
            parts += [f"TOOL RESULT: {_clip(r, int(tool_result_chars))}" for r in _tool_results(text)]
    return Transcript(_fit(parts, int(max_chars)), tool_turns)


def _clip(text: str, limit: int) -> str:
    return str(text).strip()[:limit]


def _assistant_parts(text: str, limit: int) -> list[str]:
    parts, pos = [], 0
    for match in _TOOL_CALL.finditer(text):
        prose = _strip_roles(text[pos : match.start()])
        if prose:
            parts.append(f"ASSISTANT: {_clip(prose, limit)}")
        parts.append(_tool_call(match.group(1), limit))
        pos = match.end()
    prose = _strip_roles(text[pos:])
    if prose:
        parts.append(f"ASSISTANT: {_clip(prose, limit)}")
    return parts


def _tool_call(body: str, limit: int) -> str:
    """``TOOL CALL <name>: <code>`` (the ``code`` argument, else the arguments' JSON); an
    unparsable call is shown as written."""
    try:
        call = json.loads(body.strip())
        name, args = str(call["name"]), call.get("arguments", {})
        if isinstance(args, str):
            args = json.loads(args)
    except (ValueError, TypeError, KeyError, AttributeError):
        return f"TOOL CALL: {_clip(body, limit)}"
    code = args.get("code") if isinstance(args, dict) else None
    shown = code if isinstance(code, str) else json.dumps(args, ensure_ascii=False)
    return f"TOOL CALL {name}: {_clip(shown, limit)}"


def _tool_results(text: str) -> list[str]:
    found = _TOOL_RESPONSE.findall(text)
    return found if found else [_strip_roles(text)]


def _strip_roles(text: str) -> str:
    """A decoded run without the bare role lines its chat-template headers leave."""
    lines = text.strip().split("\n")
    while lines and _ROLE_LINE.match(lines[0]):
        lines.pop(0)
    while lines and _ROLE_LINE.match(lines[-1]):
        lines.pop()
    return "\n".join(lines).strip()


def _fit(parts: list[str], limit: int) -> str:
    text = "\n".join(parts)
    if len(text) <= limit or len(parts) < 2:
        return text[:limit]
    budget = limit - len(parts[0]) - len("\n[... 9999 parts omitted ...]")
    tail: list[str] = []
    for part in reversed(parts[1:]):
        if len(part) + 1 > budget:
            break
        tail.insert(0, part)
        budget -= len(part) + 1
    omitted = len(parts) - 1 - len(tail)
    return "\n".join([parts[0], f"[... {omitted} parts omitted ...]", *tail])[:limit]


def env_transcript(
    transcript: str, action_chars: int = 400, observation_chars: int = 200, max_chars: int = 1600
) -> Transcript:
    """An environment episode's transcript (``extra_fields["env"]["transcript"]``: one
    ``OBSERVATION: ...`` / ``ACTION: ...`` line per part) for the summary prompt: each action clipped
    to ``action_chars``, each observation to ``observation_chars``; past ``max_chars`` in all the
    first part (the start of the game) and the last ones that fit (the moves that won) are kept, the
    middle replaced by a marker. ``tool_turns``: the episode's actions. ValueError on a line without
    a label or a limit below 1."""
    if min(int(action_chars), int(observation_chars), int(max_chars)) < 1:
        raise ValueError("action_chars, observation_chars and max_chars must be >= 1")
    parts, actions = [], 0
    for line in str(transcript).split("\n") if str(transcript) else []:
        label, sep, text = line.partition(": ")
        if not sep or label not in ENV_LABELS:
            raise ValueError(
                f"an episode transcript line must start with {' or '.join(ENV_LABELS)}: , got {line!r:.80}"
            )
        actions += label == "ACTION"
        limit = int(action_chars) if label == "ACTION" else int(observation_chars)
        parts.append(f"{label}: {_clip(text, limit)}")
    return Transcript(_fit(parts, int(max_chars)), actions)
