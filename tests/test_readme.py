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


def deviation_rows() -> dict[int, list[str]]:
    """The README's "Defaults that differ from the paper" table: row number -> its six cells."""
    readme = (REPO / "README.md").read_text()
    section = re.search(r"^### Defaults that differ from the paper\n(.*?)(?=^##)", readme, re.S | re.M)
    assert section, 'README.md has no "### Defaults that differ from the paper" section'
    rows = {}
    for line in section.group(1).splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells and cells[0].isdigit():
            assert len(cells) == 6, f"row {cells[0]}: {len(cells)} cells, the table has 6"
            rows[int(cells[0])] = cells
    return rows


def test_the_deviation_table_covers_the_preset_and_design_decisions():
    """Every key PRESET=paper sets and each paper ambiguity whose default a user would miss (O_{G+1}'s
    length, the groups dynamic sampling drops) has a row; row 3 says what the control arm does to the
    skill use the paper reports (0.73 -> about 0.55)."""
    rows = deviation_rows()
    assert sorted(rows) == list(range(1, len(rows) + 1)), sorted(rows)
    text = "\n".join(" | ".join(cells) for cells in rows.values())
    preset = (REPO / "run_scripts" / "presets" / "paper.sh").read_text()
    keys = set(re.findall(r"^\s+arise\.(\w+\.\w+)=", preset, re.M))
    keys -= {"selection.granularity", "selection.score_top_m", "summary.stream", "library.rank_by"}  # the defaults
    missing = [k for k in sorted(keys) if k.split(".")[1] not in text]
    assert not missing, f"PRESET=paper sets keys the table has no row for: {missing}"
    assert "arise.summary.max_tokens" in text and "192" in text
    assert "filter_groups" in text and "τ+" in text
    assert "0.75 × 0.73 ≈ 0.55" in rows[3][5]
