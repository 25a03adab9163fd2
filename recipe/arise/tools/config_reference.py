"""docs/config.md, generated: every ``arise:`` key and every environment variable of the run scripts.

    python -m recipe.arise.tools.config_reference > docs/config.md
    python -m recipe.arise.tools.config_reference --check docs/config.md   # exit 1 when stale

The ``arise:`` keys come from the dataclasses of :mod:`recipe.arise.core.arise_config` (each key's
default, type, group and one line of help); the environment variables from
``run_scripts/common.sh``: every ``${VAR:-default}`` it reads, with the trailing ``# comment`` of the
line that defines it and the hydra override(s) it feeds. ``tests/tools/test_config_reference.py``
fails when docs/config.md is not this module's output.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe.arise.core.arise_config import config_keys

ROOT = Path(__file__).resolve().parents[3]
COMMON_SH = ROOT / "run_scripts" / "common.sh"

_GROUP_TITLES = {
    "paper": (
        "The paper's hyperparameters (App. A.1)",
        "The values of the paper's Table 7, except where the literal value would leave a mechanism inert "
        "(README: defaults that differ from the paper; `PRESET=paper` sets the literal ones).",
    ),
    "ablation": (
        "Ablations (paper Table 2)",
        "One switch each; `ABLATION=<name> bash run_scripts/qwen3_4b_arise.sh` sets it (`run_scripts/arise.sh`).",
    ),
    "advanced": ("Advanced", "The method's remaining decisions, costs and bounds (docs/design.md explains each)."),
}


@dataclass
class EnvVar:
    name: str
    default: str
    help: str = ""
    sets: list[str] = field(default_factory=list)


def _yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _cell(text: str) -> str:
    """A markdown table cell: pipes escaped, so `a | b` alternatives stay in one cell."""
    return text.replace("|", "\\|")


def _expansions(line: str) -> list[tuple[str, str]]:
    """``(NAME, default)`` of each ``${NAME:-default}`` / ``${NAME:=default}`` in a shell line, nested
    expansions included (``${A:-${B:-1}}`` gives A and B)."""
    out = []
    for match in re.finditer(r"\$\{(\w+):[-=]", line):
        depth, i = 1, match.end()
        while i < len(line) and depth:
            depth += {"{": 1, "}": -1}.get(line[i], 0)
            i += 1
        out.append((match.group(1), line[match.end() : i - 1]))
    return out


def _comment(line: str) -> str:
    """The trailing ``# comment`` of a shell line (two spaces or more before the ``#``, as common.sh
    writes them; a ``#`` inside ``${VAR#pattern}`` is not one)."""
    match = re.search(r"\s{2,}#\s?(.*)$|^\S.*?;\s*then\s+#\s?(.*)$", line)
    if not match:
        return ""
    return (match.group(1) or match.group(2) or "").strip()


def env_vars(path: Path = COMMON_SH) -> list[EnvVar]:
    """The environment variables ``path`` reads, in order of first use."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    found: dict[str, EnvVar] = {}
    own: set[str] = set()  # variables with a definition line, NAME=${NAME:-default}
    defaults: dict[str, list[str]] = {}  # the others: every default they are read with
    for line in lines:
        for name, default in _expansions(line):
            var = found.setdefault(name, EnvVar(name, default))
            # the variable's own definition (NAME=${NAME:-...}) gives its default and help
            if re.match(rf"^\s*{name}=(\$\(abspath \"|\$|\")", line):
                var.default = default
                var.help = _comment(line) or var.help
                own.add(name)
                continue
            if default not in defaults.setdefault(name, []):
                defaults[name].append(default)
            if not var.help and len(_expansions(line)) == 1:
                var.help = _comment(line)
    for name, values in defaults.items():
        if name not in own and len(values) > 1:
            found[name].default = " or ".join(values)
    # no trailing comment: the first comment that says what a value does, "# ... (NAME=1: every line)"
    comments = [line for line in path.read_text().splitlines() if line.lstrip().startswith("#")]
    for var in found.values():
        for line in comments if not var.help else ():
            said = re.search(rf"\b{var.name}=\S+?:? [^.;()]+", line)
            if said:
                var.help = said.group(0).strip()
                break
    # the hydra overrides each variable feeds: `key.path=...$VAR...` anywhere in a line
    for line in lines:
        for key, value in re.findall(r"(?:^|[\s(\"])\+*([A-Za-z_]\w*(?:\.\w+)+)=(\$\([^)]*\)|\"[^\"]*\"|\S+)", line):
            for name in re.findall(r"\$\{?(\w+)", value):
                if name in found and key not in found[name].sets:
                    found[name].sets.append(key)
    return list(found.values())


def reference() -> str:
    keys = config_keys()
    out = [
        "# Configuration reference",
        "",
        "<!-- generated by `python -m recipe.arise.tools.config_reference > docs/config.md`; do not edit: "
        "tests/tools/test_config_reference.py fails when this file is stale -->",
        "",
        "Two places configure a run: the `arise:` section of the trainer config (below: its "
        f"{len(keys)} keys, {sum(k.group != 'advanced' for k in keys)} of them the paper's hyperparameters "
        "and ablation switches), and the environment variables of the run scripts (last section), which "
        "set verl's own settings and the paths.",
        "",
        "## `arise:` keys",
        "",
        "The source of truth is the dataclasses of `recipe/arise/core/arise_config.py`; "
        "`recipe/arise/config/arise_trainer.yaml` holds the same keys and defaults "
        "(`tests/core/test_config_reference.py` checks it). Set any key on the command line, "
        "e.g. `bash run_scripts/qwen3_4b_arise.sh arise.selection.gate=0.25`; every value is checked, "
        "its type too, before a run starts (`recipe.arise.tools.preflight`).",
    ]
    for group, (title, blurb) in _GROUP_TITLES.items():
        out += ["", f"### {title}", "", blurb, "", "| key | default | type | help |", "|---|---|---|---|"]
        for k in keys:
            if k.group == group:
                out.append(f"| `{k.key}` | `{_yaml_value(k.default)}` | {k.type} | {_cell(k.help)} |")
    out += [
        "",
        "## Environment variables of the run scripts",
        "",
        "Read by `run_scripts/common.sh`, which every training, ablation, baseline and evaluation script "
        "sources (`ABLATION` and `METHOD` are read by `run_scripts/arise.sh` and `baseline.sh`: see their headers). "
        "*sets* is the hydra override a variable feeds; any override can also be appended to a script's "
        "command line.",
        "",
        "| variable | default | sets | help |",
        "|---|---|---|---|",
    ]
    for var in env_vars():
        sets = ", ".join(f"`{s}`" for s in var.sets)
        default = f"`{_cell(var.default)}`" if var.default else "(unset)"
        out.append(f"| `{var.name}` | {default} | {sets} | {_cell(var.help)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="FILE", help="exit 1 when FILE is not the current reference")
    args = parser.parse_args(argv)
    text = reference()
    if args.check:
        current = Path(args.check).read_text() if Path(args.check).exists() else ""
        if current != text:
            print(
                f"{args.check} is stale: regenerate it with "
                f"`python -m recipe.arise.tools.config_reference > {args.check}`",
                file=sys.stderr,
            )
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
