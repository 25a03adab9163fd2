"""CI runs the README's two set-up commands as written (.ci/run), so a README edit CI does not run fails here."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = re.search(r"^## Set-up: two commands\n(.*?)(?=^## )", readme, re.S | re.M)
    assert section, 'README.md has no "## Set-up: two commands" section'
    block = re.search(r"^```(?:bash|sh)?\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, "the set-up section has no code block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_readme_has_two_commands():
    commands = setup_commands()
    assert len(commands) == 2, commands
    assert "pytest" in commands[0] and "cpu_smoke_arise.sh" in commands[1]


def test_ci_runs_both_commands_verbatim():
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    for command in setup_commands():
        assert command.strip() in ci_lines, f".ci/run does not run the README command verbatim: {command}"


def test_ci_runs_command_2_after_the_tests():
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    tests, smoke = setup_commands()
    assert ci_lines.index(tests.strip()) < ci_lines.index(smoke.strip())
