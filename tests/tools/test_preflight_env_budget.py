"""The preflight's length budget of the summary rollout for ``arise_env_agent`` runs: an episode's
trace is its transcript (up to ``arise.summary.transcript_chars``), not a 400-character clip."""

from omegaconf import OmegaConf

from recipe.arise.tools import preflight_config


def config(loop: str, multi_turn: bool = False):
    return OmegaConf.create(
        {
            "data": {"max_prompt_length": 512, "max_response_length": 1024},
            "actor_rollout_ref": {
                "rollout": {"agent": {"default_agent_loop": loop}, "multi_turn": {"enable": multi_turn}}
            },
            "arise": {
                "summary": {"trace_clip_chars": 400, "transcript_chars": 1600, "max_traces": 2, "max_tokens": 192},
                "selection": {"max_skill_tokens": 128},
            },
        }
    )


def test_an_environment_runs_summary_budget_holds_two_transcripts():
    math = preflight_config.length_budget(config("arise_agent"))["summary"]
    env = preflight_config.length_budget(config("arise_env_agent"))["summary"]
    tool = preflight_config.length_budget(config("arise_tool_agent", multi_turn=True))["summary"]
    assert env == tool > math
    assert env - math == 2 * (1600 - 400) // preflight_config.CHARS_PER_TOKEN
