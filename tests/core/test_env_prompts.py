import pytest

from recipe.arise.core.env_prompts import (
    MAX_LISTED_ACTIONS,
    first_turn,
    observation_turn,
    parse_action,
    task_prompt,
)


def test_parse_action_takes_the_last_action_line():
    assert parse_action("I should look.\nAction: look around") == "look around"
    assert parse_action("Action: go north\nthinking\naction:  open door  ") == "open door"
    assert parse_action("go north") is None
    assert parse_action("") is None


def test_turns_list_admissible_actions_capped():
    actions = [f"a{i}" for i in range(MAX_LISTED_ACTIONS + 5)]
    text = observation_turn(" You see a door. ", actions)
    assert text.startswith("You see a door.\n\nAdmissible actions: a0, a1")
    assert "(and 5 more)" in text and f"a{MAX_LISTED_ACTIONS}," not in text
    assert observation_turn("x", None) == "x"
    assert first_turn("Task: t", "obs", ["look"]) == "Task: t\n\nobs\n\nAdmissible actions: look"


def test_task_prompt_refuses_an_empty_task():
    assert task_prompt(" find the coin ").endswith("Task: find the coin")
    with pytest.raises(ValueError, match="empty"):
        task_prompt("  ")
