"""The tiny tool assets (recipe/arise/cpu/tiny_tool.py) and the smoke script's ``TOOL=python`` branch,
without the warm start (seconds): what the warm start teaches is the format verl parses and renders,
every taught answer is what the tool printed, and the assets are a cache entry of their own."""

import asyncio
import json
import re
from pathlib import Path

import pytest
from smoke_run import print_overrides, printed_overrides  # tests/helpers (tests/conftest.py)

from recipe.arise.cpu import tiny
from recipe.arise.cpu import tiny_tool as tt

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("tiny_tool")
    corpus = [tt.question(a, b, s) + " " + tt.call_text(tt.code_for(a, b)) for a, b, s in tiny.all_problems()]
    tiny.build_model(tiny.build_tokenizer(out, corpus), seed=0).config.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


def test_the_taught_call_is_what_verls_hermes_parser_reads(tokenizer):
    from verl.experimental.agent_loop.tool_parser import ToolParser

    parser = ToolParser.get_tool_parser("hermes", tokenizer)
    ids = tokenizer.encode(tt.call_text("print(3 + 4)"), add_special_tokens=False) + [tokenizer.eos_token_id]
    _, calls = asyncio.run(parser.extract_tool_calls(ids))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("python", {"code": "print(3 + 4)"})]
    # the chat template renders the parsed call back exactly as taught (verl re-renders the history)
    rendered = tokenizer.apply_chat_template(tt.conversation("q", "print(3 + 4)", "7"), tokenize=False)
    assert f"<|im_start|>assistant\n{tt.call_text('print(3 + 4)')}<|im_end|>\n" in rendered
    assert "<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n" in rendered


def test_the_prompt_carries_the_python_tools_schema(tokenizer):
    prompt = tt._render(tokenizer, [{"role": "user", "content": tt.question(2, 3, 1)}], tt.tool_schemas(), True)
    text = tokenizer.decode(prompt)
    assert text.startswith("<|im_start|>system\n# Tools\n") and '"name": "python"' in text and '"code"' in text
    assert text.endswith(f"<|im_start|>user\n{tt.question(2, 3, 1)}<|im_end|>\n<|im_start|>assistant\n")


def test_every_taught_answer_is_what_the_tool_printed():
    import random

    rng = random.Random(0)
    draws = [(a, b, *tt.noisy_call(a, b, 0.55, rng)) for a, b in tiny.all_pairs() for _ in range(8)]
    for a, b, code, printed in draws:
        x, y = map(int, re.fullmatch(r"print\((\d+) \+ (\d+)\)", code).groups())
        assert x == a and str(x + y) == printed  # the first number copied; the printed value is the code's
        assert re.search(r"\\boxed\{(\d+)\}", tt.answer_text(printed)).group(1) == printed
    right = sum(code == tt.code_for(a, b) for a, b, code, _ in draws) / len(draws)
    assert 0.45 < right < 0.65  # slips copying the question: reward variance, not a wrong rule


def test_the_summary_is_taught_on_the_trainers_transcript(tokenizer):
    assert tt.transcript(tokenizer, "print(3 + 4)", "7") == (
        "TOOL CALL python: print(3 + 4)\nTOOL RESULT: 7\nASSISTANT: The tool printed 7. The answer is \\boxed{7}."
    )
    skill = tt.distilled_skill(3, 4, 0)
    assert "print(3 + 4)" in skill["method"][0] and len(json.dumps(skill, separators=(",", ":"))) <= 220


def test_rows_name_the_tool():
    rows = tt.make_rows([(3, 4, 0), (1, 2, 2)], "train")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["7", "3"]
    for row in rows:
        (turn,) = row["prompt"]
        assert "python tool" in turn["content"] and turn["content"].endswith("\\boxed{}.")
        assert row["extra_info"]["question"] == turn["content"]


def test_a_cache_entry_of_its_own(tmp_path, monkeypatch):
    built = []

    def fake(out):
        built.append(out)
        (out / "tiny_assets.json").write_text("{}")
        return {"model": str(out / "model")}

    monkeypatch.setattr(tt, "build_tool_assets", fake)
    target = tt.cached_assets(tmp_path)
    assert target.name == f"tiny-qwen3-tool-python-{tt.assets_key()}" and tt.assets_key() != tiny.assets_key()
    assert tt.cached_assets(tmp_path) == target and len(built) == 1


@pytest.mark.parametrize("arise,folder", [("true", "cpu_smoke_tool"), ("false", "cpu_smoke_tool_grpo")])
def test_the_smoke_scripts_tool_branch(arise, folder):
    args = printed_overrides(TOOL="python", ARISE=arise)
    assert args["actor_rollout_ref.rollout.agent.default_agent_loop"] == "arise_tool_agent"
    assert args["actor_rollout_ref.rollout.multi_turn.tool_config_path"].endswith("python_tool.yaml")
    assert args["data.max_prompt_length"] == "288" and args["actor_rollout_ref.rollout.max_model_len"] == "1024"
    assert args["trainer.default_local_dir"] == str(REPO / "outputs" / folder / "checkpoints")
    assert print_overrides(TOOL="ruby").returncode == 2
