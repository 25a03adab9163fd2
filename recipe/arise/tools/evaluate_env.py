"""The environment part of ``recipe.arise.tools.evaluate``: success per task type, Table-1-like.

An environment's rows have the data source ``env/<env>/<task type>`` (recipe/arise/data_prep/schema.py:
``make_env_row``), so verl's validation logs ``val-core/env/<env>/<task type>/acc/mean@k``, the
episodes won (``acc`` = won) averaged over the k episodes of each game and over the type's games.
The table has one column per task type and ``All``: every game's success, each type weighted by its
number of games (the test files' rows; the peers' "All" over ALFWorld's 134 games), next to the
mean turns, invalid actions and failed episodes per type.
"""

from __future__ import annotations

from pathlib import Path

PREFIX = "env/"
# ALFWorld's six task types in the order the peers' tables give them (SkillRL, Skill1, verl-agent)
ALFWORLD_ORDER = ["pick", "look", "clean", "heat", "cool", "pick2"]


def is_env_source(source: str) -> bool:
    return str(source).startswith(PREFIX)


def split_source(source: str) -> tuple[str, str]:
    """``env/<env>/<task type>`` -> (env, task type)."""
    parts = str(source).split("/", 2)
    if len(parts) != 3 or parts[0] + "/" != PREFIX or not parts[1] or not parts[2]:
        raise ValueError(f"not an environment data source (env/<env>/<task type>): {source!r}")
    return parts[1], parts[2]


def game_counts(files) -> dict[str, int]:
    """Rows (games) per environment data source in the evaluation files."""
    import pandas as pd

    counts: dict[str, int] = {}
    for f in files:
        for source, n in pd.read_parquet(f, columns=["data_source"])["data_source"].value_counts().items():
            if is_env_source(source):
                counts[source] = counts.get(source, 0) + int(n)
    return counts


def _task_types(env: str, types: set[str]) -> list[str]:
    known = [t for t in ALFWORLD_ORDER if t in types] if env == "alfworld" else []
    return known + sorted(types - set(known))


def overall(results: dict[str, dict], env: str) -> float | None:
    """Success over all of ``env``'s games: the types weighted by their games (``n``), or the mean
    over types where a count is missing."""
    rows = [r for s, r in results.items() if is_env_source(s) and split_source(s)[0] == env]
    if not rows:
        return None
    if all(r.get("n") for r in rows):
        return sum(r["pass@1"] * r["n"] for r in rows) / sum(r["n"] for r in rows)
    return sum(r["pass@1"] for r in rows) / len(rows)


def env_tables(runs: list[tuple[str, dict[str, dict]]]) -> list[str]:
    """Per environment any run evaluated: success (%) per task type and All, one row per run."""
    envs: dict[str, set[str]] = {}
    for _, results in runs:
        for source in results:
            if is_env_source(source):
                env, task_type = split_source(source)
                envs.setdefault(env, set()).add(task_type)
    lines: list[str] = []
    for env in sorted(envs):
        types = _task_types(env, envs[env])
        k = max((r["k"] for _, res in runs for s, r in res.items() if s.startswith(f"{PREFIX}{env}/")), default=0)
        weighted = all(r.get("n") for _, res in runs for s, r in res.items() if s.startswith(f"{PREFIX}{env}/"))
        lines += [
            f"{env}: success (%) per task type, averaged over k={k} episodes per game"
            + ("" if weighted else " (All: the mean over task types; the games per type are unknown)"),
            "",
            "| Method | " + " | ".join(types) + " | All |",
            "|---|" + "---|" * (len(types) + 1),
        ]
        for label, results in runs:
            cells = []
            for t in types:
                r = results.get(f"{PREFIX}{env}/{t}")
                cells.append(f"{100 * r['pass@1']:.1f}" if r else "—")
            total = overall(results, env)
            cells.append("—" if total is None else f"{100 * total:.1f}")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines[:-1] if lines else lines


def detail_lines(results: dict[str, dict]) -> list[str]:
    """The episodes per task type: games, turns, invalid actions, failed episodes (means per episode)."""
    sources = sorted(s for s in results if is_env_source(s))
    if not sources:
        return []
    lines = [
        "",
        "Episodes per task type: success = episodes won; turns, invalid actions and failed (the environment"
        " crashed or hung) are means per episode.",
        "",
        "| data source | games | success | turns | invalid | failed | skill use | k |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for source in sources:
        r = results[source]
        cells = [f"{r[c]:.2f}" if c in r else "—" for c in ("turns", "invalid", "failed", "skill_use")]
        head = f"| {source} | {r.get('n', '—')} | {100 * r['pass@1']:.1f} | "
        lines.append(head + " | ".join(cells) + f" | {r['k']} |")
    return lines


def add_game_counts(results: dict[str, dict], files) -> None:
    """``n`` (games) on each environment source of ``results``, from the evaluation files (read only
    where an environment was evaluated)."""
    if not any(is_env_source(s) for s in results):
        return
    for source, n in game_counts([f for f in files if Path(f).is_file()]).items():
        if source in results:
            results[source]["n"] = n
