"""An environment episode's summary O_{G+1}: its transcript (``OBSERVATION:`` / ``ACTION:`` lines,
recipe.arise.core.transcript.env_transcript) compacted to the summary's budget, and the summary
prompt naming the episode's domain (arise.env.summary_domain) instead of Figure 4's math reasoning."""

import pytest

from recipe.arise.core.arise_config import ARISEConfig, SummaryConfig
from recipe.arise.core.prompts import SUMMARY_TEMPLATE, SUMMARY_TOOL_RULE, build_summary_prompt
from recipe.arise.core.stream import SummaryStream
from recipe.arise.core.summary import summary_prompt_ids
from recipe.arise.core.transcript import env_transcript

EPISODE = "\n".join(
    ["OBSERVATION: You are in a kitchen. " + "There is a fridge. " * 20]
    + [f"ACTION: look {i}\nOBSERVATION: Nothing new here at step {i}." for i in range(40)]
    + ["ACTION: take key", "OBSERVATION: You take the key. You won!"]
)


class CharTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, **kwargs):
        return [ord(c) for c in "".join(m["content"] for m in messages)]


def text_of(ids):
    return "".join(chr(i) for i in ids)


def test_an_episode_transcript_keeps_its_start_and_the_winning_moves_within_the_budget():
    out = env_transcript(EPISODE, action_chars=50, observation_chars=60, max_chars=600)
    lines = out.text.split("\n")
    assert out.tool_turns == 41 and len(out.text) <= 600
    assert lines[0] == "OBSERVATION: " + ("You are in a kitchen. " + "There is a fridge. " * 20).strip()[:60]
    assert lines[1].startswith("[... ") and lines[1].endswith(" parts omitted ...]")
    assert lines[-2:] == ["ACTION: take key", "OBSERVATION: You take the key. You won!"]


def test_an_episode_transcript_line_without_its_label_is_an_error():
    with pytest.raises(ValueError, match="OBSERVATION or ACTION"):
        env_transcript("OBSERVATION: a room\nthe model said this")
    assert env_transcript("") == ("", 0)


def test_the_summary_prompt_of_episodes_names_their_domain_and_the_paper_text_stays_for_math():
    math = build_summary_prompt("q", ["t"])
    assert math == SUMMARY_TEMPLATE.format(question="q", trajectories="[SUCCESS #1] t")
    assert math.startswith("You are a skill distiller for math reasoning.\n")
    env = build_summary_prompt("q", ["t"], domain="text-based games")
    assert env == math.replace("for math reasoning.", "for text-based games.", 1)
    with pytest.raises(ValueError, match="domain"):
        build_summary_prompt("q", ["t"], domain=" ")


def test_an_episode_group_gets_the_env_domain_its_transcript_budget_and_no_tool_rule():
    cfg = SummaryConfig(trace_clip_chars=20, transcript_chars=1600)
    text = env_transcript(EPISODE, 400, 200, 1600).text
    group = {"question": "Take the key.", "traces": [{"text": text, "reward": 1.0, "env": True}]}
    domain = ARISEConfig().env.summary_domain
    prompt = text_of(summary_prompt_ids(CharTokenizer(), group, cfg, env_domain=domain))
    assert prompt.startswith(f"You are a skill distiller for {domain}.\n")
    assert "ACTION: take key\nOBSERVATION: You take the key. You won!" in prompt  # not clipped to 20 chars
    assert SUMMARY_TOOL_RULE not in prompt
    with pytest.raises(ValueError, match="summary_domain"):
        summary_prompt_ids(CharTokenizer(), group, cfg)


def test_the_stream_carries_the_episode_mark_to_its_group():
    stream = SummaryStream()
    stream.begin("k", budget=-1, group_size=2)
    assert stream.add("g", 1.0, "ACTION: take key", "Take the key.", env=True) is None
    group = stream.add("g", 0.0, "ACTION: look", "Take the key.", env=True)
    assert group["traces"] == [{"text": "ACTION: take key", "reward": 1.0, "env": True}]
