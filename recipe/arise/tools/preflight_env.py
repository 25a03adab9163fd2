"""The preflight's check of an environment run (docs/environments.md): the data's games name
environments this machine can start — the adapter's package is installed (the ``envs`` extra), Java
runs for the Java ones, and every row's ``extra_info.env`` is well formed. Nothing for data without
environment rows.

``python -m recipe.arise.tools.preflight_env twx scienceworld`` checks the named environments alone
(the install scripts' Java check points here)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable

from recipe.arise.tools.preflight_common import Finding, listed_files, select

PACKAGES = {"twx": "textworld_express", "scienceworld": "scienceworld"}  # ours: the envs extra
JAVA = {"twx", "scienceworld"}
INSTALL = "pip install -e '.[envs]' (scripts/install_cpu.sh and install_gpu.sh do)"


def env_specs(path: str) -> tuple[Counter, list[str]]:
    """How many rows of the parquet file name each environment, and its malformed rows' faults."""
    import pyarrow.parquet as pq

    if "extra_info" not in pq.read_schema(path).names:
        return Counter(), []
    names, faults = Counter(), []
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
    return names, faults


def check_names(names: Iterable[str]) -> list[Finding]:
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
        package = PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            findings.append(Finding("ERROR", f"environment {name!r} needs the package {package}", INSTALL))
            continue
        if name in JAVA:
            java = java_missing() if java is None else java
            if java:
                findings.append(Finding("ERROR", f"environment {name!r} needs Java: {java}"))
                continue
        findings.append(Finding("OK", f"environment {name!r}: package and Java present"))
    return findings


def check_envs(cfg, check_paths: bool = True) -> list[Finding]:
    if not check_paths:
        return []
    files = [f for key in ("data.train_files", "data.val_files") for f in listed_files(select(cfg, key))]
    files = [f for f in dict.fromkeys(files) if f.endswith(".parquet") and os.path.isfile(f)]
    names, faults = Counter(), []
    for path in files:
        found, bad = env_specs(path)
        names, faults = names + found, faults + bad
    findings = []
    if faults:
        shown = "; ".join(faults[:5]) + (f"; ... and {len(faults) - 5} more" if len(faults) > 5 else "")
        what = f"{len(faults)} malformed environment row(s): {shown}"
        findings.append(Finding("ERROR", what, "rebuild the files with recipe.arise.data_prep.env"))
    return findings + (check_names(names) if names else [])


def main(argv=None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or sorted(PACKAGES)
    findings = check_names(names)
    for finding in findings:
        print(finding.line())
    return 1 if any(f.level == "ERROR" for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
