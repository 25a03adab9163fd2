"""The preflight's check of an environment run (docs/environments.md): the data's games name
environments this machine can start — the adapter's package is installed (the ``envs`` extra), Java
runs for the Java ones, and every row's ``extra_info.env`` is well formed. Nothing for data without
environment rows. ALFWorld (installed by the user) also needs its data folder (``ALFWORLD_DATA``) complete,
and every game the data names in it.

``python -m recipe.arise.tools.preflight_env twx scienceworld`` checks the named environments alone
(no name: the ``envs`` extra's; the install scripts' Java check points here)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable

from recipe.arise.envs.alfworld_data import FETCH, JSON_DIR, data_root, scan, shown
from recipe.arise.envs.alfworld_data import INSTALL as ALFWORLD_INSTALL
from recipe.arise.tools.preflight_common import Finding, listed_files, select

PACKAGES = {"twx": "textworld_express", "scienceworld": "scienceworld", "alfworld": "alfworld"}
EXTRA = ("scienceworld", "twx")  # the envs extra's: the default of main
JAVA = {"twx", "scienceworld"}
INSTALL = "pip install -e '.[envs]' (scripts/install_cpu.sh and install_gpu.sh do)"
INSTALLS = {"alfworld": ALFWORLD_INSTALL}  # not in the extra: its planner compiles at install


def env_specs(path: str, games: dict[str, list[dict]] | None = None) -> tuple[Counter, list[str]]:
    """How many rows of the parquet file name each environment, and its malformed rows' faults
    (``games``: each environment's games are appended to its list there)."""
    import pyarrow.parquet as pq

    if "extra_info" not in pq.read_schema(path).names:
        return Counter(), []
    names, faults = Counter(), []
    games = {} if games is None else games
    for i, info in enumerate(pq.read_table(path, columns=["extra_info"]).column("extra_info").to_pylist()):
        text = (info or {}).get("env")
        if text is None:
            continue
        try:
            spec = json.loads(text)
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise ValueError("no 'name'")
            if not isinstance(spec.get("game"), dict) or not isinstance(spec.get("options", {}), dict):
                raise ValueError("'game' and 'options' must be objects")
        except ValueError as error:
            faults.append(f"{path} row {i}: extra_info.env: {error}")
            continue
        names[spec["name"]] += 1
        games.setdefault(spec["name"], []).append(spec["game"])
    return names, faults


def check_alfworld_data(games: list[dict] | None = None) -> list[Finding]:
    """ALFWorld's data folder: json_2.1.1/ with games in each split, every game folder complete, and
    each of ``games`` (the run's rows) there."""
    root = data_root()
    found = scan(root)
    if found.faults:
        what = f"ALFWorld data folder {root} (ALFWORLD_DATA) is missing or incomplete: {shown(found.faults)}"
        return [Finding("ERROR", what, f"fetch it: {FETCH} (or export ALFWORLD_DATA=<the folder>)")]
    have = {path for paths in found.games.values() for path in paths}
    absent = [str(game.get("path")) for game in games or [] if game.get("path") not in have]
    if absent:
        what = f"{len(absent)} ALFWorld game(s) of the data are not in {root / JSON_DIR}: {shown(absent, 3)}"
        fix = "rebuild the files with recipe.arise.data_prep.env --env alfworld from this folder"
        return [Finding("ERROR", what, fix)]
    counts = ", ".join(f"{len(paths)} {split}" for split, paths in found.games.items())
    return [Finding("OK", f"ALFWorld data folder {root}: {counts} games")]


def check_names(names: Iterable[str], games: dict[str, list[dict]] | None = None) -> list[Finding]:
    """Each environment's package imports and, for the Java ones, ``java -version`` runs."""
    from recipe.arise.envs.base import ENVS
    from recipe.arise.envs.jvm import java_missing

    findings = []
    java = None
    for name in sorted(set(names)):
        if name not in ENVS:
            findings.append(
                Finding("WARNING", f"environment {name!r} is not registered here", "register_env it before the run")
            )
            continue
        if name == "alfworld":  # its data folder, with or without the package
            findings += check_alfworld_data((games or {}).get(name))
        package = PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            what = f"environment {name!r} needs the package {package}"
            findings.append(Finding("ERROR", what, INSTALLS.get(name, INSTALL)))
            continue
        if name in JAVA:
            java = java_missing() if java is None else java
            if java:
                findings.append(Finding("ERROR", f"environment {name!r} needs Java: {java}"))
                continue
        findings.append(Finding("OK", f"environment {name!r}: package{' and Java' if name in JAVA else ''} present"))
    return findings


def check_envs(cfg, check_paths: bool = True) -> list[Finding]:
    if not check_paths:
        return []
    files = [f for key in ("data.train_files", "data.val_files") for f in listed_files(select(cfg, key))]
    files = [f for f in dict.fromkeys(files) if f.endswith(".parquet") and os.path.isfile(f)]
    names, faults, games = Counter(), [], {}
    for path in files:
        found, bad = env_specs(path, games)
        names, faults = names + found, faults + bad
    findings = []
    if faults:
        shown = "; ".join(faults[:5]) + (f"; ... and {len(faults) - 5} more" if len(faults) > 5 else "")
        what = f"{len(faults)} malformed environment row(s): {shown}"
        findings.append(Finding("ERROR", what, "rebuild the files with recipe.arise.data_prep.env"))
    return findings + (check_names(names, games) if names else [])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recipe.arise.tools.preflight_env",
        description="Check that the named environments can start here (package, Java, ALFWorld's data folder).",
    )
    parser.add_argument("names", nargs="*", help=f"environments (default: the envs extra's, {' '.join(EXTRA)})")
    names = parser.parse_args(argv).names or list(EXTRA)
    findings = check_names(names)
    for finding in findings:
        print(finding.line())
    return 1 if any(f.level == "ERROR" for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
