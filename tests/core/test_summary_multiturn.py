"""Summary rollouts read multi-turn (tool) traces as transcripts: the assistant turns, the tool calls'
code and the clipped tool results (recipe.arise.core.transcript); a single-turn trace and its
summary prompt stay exactly as before."""

import json

import pytest

from recipe.arise.core.arise_config import ARISEConfig, SummaryConfig
from recipe.arise.core.prompts import SUMMARY_TOOL_RULE, build_summary_prompt
from recipe.arise.core.summary import summary_prompt_ids
from recipe.arise.core.transcript import trace_transcript

# the tool-loop responses (char ids and response_mask) come from tests/conftest.py's tool_trace


def _decode(ids):
    return "".join(chr(i) for i in ids)


def test_a_tool_trace_reads_as_a_transcript(tool_trace):
    out = trace_transcript(
        tool_trace.ids, tool_trace.mask, _decode, clip_chars=400, tool_result_chars=20, max_chars=1600
    )
    assert out.tool_turns == 1
    assert out.text == "\n".join(
        [
            "ASSISTANT: I will add them with Python.",
            f"TOOL CALL python: {tool_trace.code}",
            "TOOL RESULT: 5050\n" + "r" * 15,
            "ASSISTANT: The sum is \\boxed{5050}.",
        ]
    )
    assert "r" * 16 not in out.text  # the tool result is clipped to tool_result_chars


def test_a_single_turn_trace_is_decoded_as_before():
    text = "Adding: 2 plus 3 is 5. <tool_call>not a call</tool_call> \\boxed{5}"
    ids = [ord(c) for c in text]
    # mask 0 before the first policy token is a format lead (train_manager's "SKILL:"), not a tool turn
    for mask in (None, [1] * len(ids), [0] * 3 + [1] * (len(ids) - 3)):
        out = trace_transcript(ids, mask, _decode, clip_chars=5, tool_result_chars=5, max_chars=5)
        assert out.text == text and out.tool_turns == 0  # no limit applies: the summary prompt clips


def test_mask_of_another_length_is_an_error():
    with pytest.raises(ValueError, match="response_mask has 2 entries for 3 response tokens"):
        trace_transcript([1, 2, 3], [1, 0], _decode)


def test_call_arguments_as_a_string_other_tools_and_unparsable_calls(tool_trace):
    as_string = '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"x = 1\\"}"}</tool_call>'
    other = '<tool_call>{"name": "search", "arguments": {"q": "primes"}}</tool_call>'
    broken = "<tool_call>{not json</tool_call>"
    ids, mask = tool_trace.segments((as_string + other + broken, 1), ("<tool_response>ok</tool_response>", 0))
    lines = trace_transcript(ids, mask, _decode).text.split("\n")
    assert lines == [
        "TOOL CALL python: x = 1",
        'TOOL CALL search: {"q": "primes"}',
        "TOOL CALL: {not json",
        "TOOL RESULT: ok",
    ]


def test_a_long_transcript_keeps_its_start_and_its_last_turns(tool_trace):
    turns = [(f"step {k}\n" + tool_trace.call.replace(tool_trace.code, f"print({k})"), 1) for k in range(30)]
    segments = [s for k, turn in enumerate(turns) for s in (turn, (f"<tool_response>{k}</tool_response>", 0))]
    ids, mask = tool_trace.segments(*segments, (tool_trace.turn2, 1))
    out = trace_transcript(ids, mask, _decode, max_chars=300)
    assert len(out.text) <= 300 and out.tool_turns == 30
    lines = out.text.split("\n")
    assert lines[0] == "ASSISTANT: step 0" and lines[-1] == "ASSISTANT: The sum is \\boxed{5050}."
    assert lines[-3:-1] == ["TOOL CALL python: print(29)", "TOOL RESULT: 29"]
    assert any(line.startswith("[... ") and line.endswith(" parts omitted ...]") for line in lines)


# --------------------------------------------------------------------------- the summary prompt

# the single-turn prompt, pinned to the byte by tests/core/test_prompts.py (its EXPECTED)
SINGLE_TURN_PROMPT = build_summary_prompt("What is 2+2?", ["AAAA", "BBBB"], tool_use=False)


class _PromptTokenizer:
    """apply_chat_template returns the user turn's characters as ids."""

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return [ord(c) for c in messages[-1]["content"]]


def _prompt(traces):
    group = {"question": "What is 2+2?", "traces": traces}
    return _decode(summary_prompt_ids(_PromptTokenizer(), group, SummaryConfig()))


def test_the_single_turn_prompt_is_byte_identical():
    assert build_summary_prompt("What is 2+2?", ["AAAA", "BBBB"]) == SINGLE_TURN_PROMPT  # tool_use off by default
    assert _prompt([{"text": "AAAA", "tool_turns": 0}, {"text": "BBBB"}]) == SINGLE_TURN_PROMPT


def test_a_tool_trace_adds_one_rule_and_keeps_its_transcript():
    transcript = "ASSISTANT: plan\nTOOL CALL python: " + "c" * 600 + "\nTOOL RESULT: 5050"
    prompt = _prompt([{"text": transcript, "tool_turns": 1}, {"text": "x" * 1000}])
    rules = prompt.split("Rules:\n")[1].split("\n")
    assert rules[3:5] == ["- method must contain 2-3 concise steps.", SUMMARY_TOOL_RULE]
    assert prompt.replace(SUMMARY_TOOL_RULE + "\n", "").count("\n") == SINGLE_TURN_PROMPT.count("\n") + 2
    assert "[SUCCESS #1] " + transcript + "\n" in prompt  # bounded by transcript_chars, not 400
    assert "[SUCCESS #2] " + "x" * 400 + "\n" in prompt and "x" * 401 not in prompt
    # a tool trace past max_traces does not change the prompt
    third = _prompt([{"text": "AAAA"}, {"text": "BBBB"}, {"text": transcript, "tool_turns": 1}])
    assert third == SINGLE_TURN_PROMPT


def test_the_clip_limits_are_configured_and_checked():
    cfg = ARISEConfig.from_dict({"summary": {"tool_result_chars": 50, "transcript_chars": 900}}).summary
    assert (cfg.tool_result_chars, cfg.transcript_chars) == (50, 900)
    with pytest.raises(ValueError, match="arise.summary.tool_result_chars must be >= 1"):
        SummaryConfig(tool_result_chars=0)


# --------------------------------------------------------------------------- a real Qwen3-style tokenizer


@pytest.fixture(scope="module")
def qwen3_tokenizer(tmp_path_factory):
    from recipe.arise.cpu import tiny

    corpus = [tiny.question(a, b, s) + " " + tiny.solution(a, b) for a, b, s in tiny.all_problems()]
    return tiny.build_tokenizer(tmp_path_factory.mktemp("tok"), corpus)


def test_a_chat_templated_tool_trace(qwen3_tokenizer, tool_trace):
    """The tool turn as the tiny Qwen3 chat template renders it, between two generated turns."""
    tok = qwen3_tokenizer
    user = {"role": "user", "content": "What is 1 + 2 + ... + 100?"}
    call = {"name": "python", "arguments": {"code": tool_trace.code}}
    assistant = {"role": "assistant", "content": "I will add them.", "tool_calls": [{"function": call}]}
    before = tok.apply_chat_template([user, assistant], tokenize=False)
    after = tok.apply_chat_template([user, assistant, {"role": "tool", "content": tool_trace.result}], tokenize=False)
    after += "<|im_start|>assistant\n"
    generated1 = "I will add them.\n<tool_call>\n" + json.dumps(call) + "\n</tool_call>"
    assert before.endswith(generated1 + "<|im_end|>\n")
    turn1 = tok.encode(generated1, add_special_tokens=False) + [tok.eos_token_id]
    tool_turn = tok.encode("\n" + after[len(before) :], add_special_tokens=False)
    turn2 = tok.encode(tool_trace.turn2, add_special_tokens=False) + [tok.eos_token_id]
    ids = turn1 + tool_turn + turn2
    mask = [1] * len(turn1) + [0] * len(tool_turn) + [1] * len(turn2)

    def decode(x):
        return tok.decode(x, skip_special_tokens=True)

    out = trace_transcript(ids, mask, decode, tool_result_chars=10)
    assert out.tool_turns == 1
    assert out.text == "\n".join(
        [
            "ASSISTANT: I will add them.",
            f"TOOL CALL python: {tool_trace.code}",
            "TOOL RESULT: 5050\nrrrrr",
            "ASSISTANT: The sum is \\boxed{5050}.",
        ]
    )
    # the same tokens generated in one turn (all mask 1): today's decode, unchanged
    assert trace_transcript(ids, [1] * len(ids), decode).text == decode(ids)
