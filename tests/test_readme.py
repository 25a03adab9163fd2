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


def test_ci_runs_command_2_once_before_the_tests_that_read_it():
    """One run per configuration: CI runs README command 2 (the 6-step default run) once, before
    command 1, and hands its outputs to the e2e tier (ARISE_SMOKE_OUT), whose assertions about the
    default run read that run instead of starting the same Ray/vLLM/FSDP run again (~3 min of
    start-up and steps on 2 cores). Command 2 needs the environment, so CI installs it first;
    command 1's install then finds it in place."""
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    tests, smoke = setup_commands()
    assert ci_lines.count(smoke.strip()) == 1  # the default run once
    install = tests.split("&&")[0].strip()  # command 1's install on a line of its own (a comment after it)
    installs = [i for i, line in enumerate(ci_lines) if line.split(" #")[0].strip() == install]
    assert installs and installs[0] < ci_lines.index(smoke.strip()) < ci_lines.index(tests.strip())
    handoff = [i for i, line in enumerate(ci_lines) if re.match(r"export ARISE_SMOKE_OUT=\S*outputs/cpu_smoke\b", line)]
    assert handoff and ci_lines.index(smoke.strip()) < handoff[0] < ci_lines.index(tests.strip())
