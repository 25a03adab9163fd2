"""Inspect a stored ARISE skill library: ``python -m recipe.arise.tools.inspect_run PATH [options]``.

PATH may be

* a library parquet (``.../arise/library.parquet``),
* a checkpoint folder ``global_step_N`` (its ``arise/library.parquet`` is used),
* a checkpoints root holding ``global_step_N`` folders (the one verl's
  ``latest_checkpointed_iteration.txt`` names, i.e. the one a resume would load; without that
  file, the latest N that holds a library), or a run folder whose ``checkpoints/`` subfolder is
  such a root.

Prints one table row per entry of the cache and the reservoir: tier, id, name, problem type,
origin (seed, json, fallback), utility, uses, age in steps (the library's last step minus the
entry's creation step), the causal uplift (success rate with the skill minus the control arm's on
the same queries), the IG proxy of App. D.3 and the key insight (truncated unless ``--full``).
``--json`` prints the same rows (plus the whole documents) as one JSON object. ``--skill ID``
prints one skill whole: its document, statistics and provenance (the step and source query it
was distilled from, the rewards of those traces, JSON or fallback). ``--export FILE.jsonl`` writes
the selected skills (all by default; ``--tier``, ``--type``, ``--name``, ``--sort`` and ``--top``
apply), one JSON document per line with utility, uses, uplift and provenance
(``recipe.arise.core.library.export_rows``); ``arise.library.load_from`` reads that file back.
PATH may also be such an exported ``.jsonl``.

The uplift is the skill's causal uplift: the weighted mean over the query groups that used it beside
a control arm of (its success rate minus the control arm's), shown with its standard error.

Errors (missing path, no checkpoint with a library, malformed parquet) print ``error: ...``
naming the path and exit with status 2.

Named ``inspect`` as the task asks; it is only ever imported as ``recipe.arise.tools.inspect_run`` (run it with
``python -m``), so it does not shadow the standard library module.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import utility_uplift_disagreement
from recipe.arise.core.library_jsonl import export_jsonl, library_from_jsonl
from recipe.arise.core.library_store import LibraryFormatError

__all__ = [
    "InspectError",
    "LIBRARY_FILE",
    "SORT_KEYS",
    "resolve_library_path",
    "library_reference_step",
    "library_rows",
    "select_rows",
    "format_table",
    "inspect_library",
    "export_library",
    "main",
]

LIBRARY_FILE = Path("arise") / "library.parquet"
SORT_KEYS = ("position", "utility", "uses", "age", "uplift", "ig", "name")
TIERS = ("cache", "reservoir")
INSIGHT_WIDTH = 60
_STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")


class InspectError(Exception):
    """A user-facing error (bad path, no library, malformed file); the CLI exits with status 2."""


# ----------------------------------------------------------------------------- paths


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    out = []
    for p in root.iterdir():
        m = _STEP_DIR_RE.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def _tracked_step(root: Path) -> int | None:
    """The step in verl's ``latest_checkpointed_iteration.txt`` (written after a complete save)."""
    try:
        text = (root / "latest_checkpointed_iteration.txt").read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def resolve_library_path(path: str | Path) -> Path:
    """The library parquet that ``path`` designates (see the module docstring).

    Only ``arise/library.parquet`` is ever picked inside a folder: the hidden temp files an
    interrupted save can leave next to it (``.library.parquet.*.tmp``) are never considered.
    """
    p = Path(path)
    if not p.exists():
        raise InspectError(f"{p}: no such file or directory")
    if p.is_file():
        return p
    if not p.is_dir():
        raise InspectError(f"{p}: not a file or folder")
    direct = p / LIBRARY_FILE
    if direct.is_file():
        return direct
    if (p / "library.parquet").is_file():  # the arise/ folder itself
        return p / "library.parquet"
    for root in (p, p / "checkpoints"):
        if not root.is_dir():
            continue
        steps = _step_dirs(root)
        tracked = _tracked_step(root)
        if tracked is not None and (root / f"global_step_{tracked}" / LIBRARY_FILE).is_file():
            # the checkpoint verl would resume: a higher folder may be a save a kill interrupted
            return root / f"global_step_{tracked}" / LIBRARY_FILE
        with_lib = [(n, d) for n, d in steps if (d / LIBRARY_FILE).is_file()]
        if with_lib:
            return with_lib[-1][1] / LIBRARY_FILE
        if steps:
            raise InspectError(
                f"{root}: none of its checkpoint folders ({', '.join(d.name for _, d in steps[-3:])}"
                f"{', ...' if len(steps) > 3 else ''}) holds {LIBRARY_FILE}"
            )
    if _STEP_DIR_RE.match(p.name):
        raise InspectError(f"{p}: checkpoint folder holds no {LIBRARY_FILE}")
    raise InspectError(f"{p}: holds no {LIBRARY_FILE} and no global_step_N checkpoint folders")


def load_library(path: str | Path) -> tuple[Path, SkillLibrary]:
    lib_path = resolve_library_path(path)
    try:
        if lib_path.suffix == ".jsonl":  # an exported library (default settings: the file holds none)
            return lib_path, library_from_jsonl(lib_path, cache_capacity=10**6, reservoir_capacity=10**6)[0]
        return lib_path, SkillLibrary.load(lib_path)
    except LibraryFormatError as e:
        msg = str(e)
        raise InspectError(msg if str(lib_path) in msg else f"{lib_path}: {msg}") from e
    except OSError as e:
        raise InspectError(f"{lib_path}: cannot read: {e}") from e


# ------------------------------------------------------------------------------ rows


def library_reference_step(lib: SkillLibrary) -> int:
    """The step ages are measured from: ``lib.last_step``, else the max updated/created step."""
    if lib.last_step is not None:
        return int(lib.last_step)
    steps = [max(e.updated_step, e.created_step) for e in lib.entries()]
    return max(steps) if steps else 0


def library_rows(lib: SkillLibrary) -> list[dict[str, Any]]:
    """One dict per entry (cache first, then reservoir, in library order)."""
    ref = library_reference_step(lib)
    ig = lib.ig_proxies()
    disagree = set(utility_uplift_disagreement(lib.cache))
    rows = []
    for tier, entries in (("cache", lib.cache), ("reservoir", lib.reservoir)):
        for pos, e in enumerate(entries):
            rows.append(
                {
                    "tier": tier,
                    "position": pos,
                    "id": e.skill_id,
                    "name": e.doc.skill_name,
                    "type": e.doc.problem_type,
                    "utility": float(e.utility),
                    "uses": int(e.usage_count),
                    "age": int(ref - e.created_step),
                    "created_step": int(e.created_step),
                    "updated_step": int(e.updated_step),
                    "ig": ig.get(e.skill_id),
                    "origin": e.provenance.origin,
                    "uplift": e.uplift,
                    "uplift_se": e.uplift_se,
                    "uplift_groups": int(e.uplift_groups),
                    # top half of the cache by utility, uplift interval entirely below 0
                    "utility_uplift_disagree": e.skill_id in disagree,
                    "uplift_n": int(e.uplift_n),
                    "uplift_base_n": int(e.uplift_base_n),
                    "ig_exact": e.ig_exact,
                    "ig_step": e.ig_step,
                    "source_step": e.provenance.step,
                    "source_uid": e.provenance.uid,
                    "source_query": e.provenance.query,
                    "source_rewards": list(e.provenance.rewards),
                    "mean_reward": e.mean_reward,
                    "success_rate": e.success_rate,
                    "key_insight": e.doc.key_insight,
                    "method": list(e.doc.method),
                    "check": e.doc.check,
                    "doc": e.doc.to_json(),
                }
            )
    return rows


def _sort_key(sort: str):
    tier_rank = {t: i for i, t in enumerate(TIERS)}

    def base(r):
        return (tier_rank[r["tier"]], r["position"])

    if sort == "position":
        return base
    if sort == "name":
        return lambda r: (r["name"], *base(r))
    if sort in ("ig", "uplift"):  # descending, unknown (None) last
        return lambda r: (r[sort] is None, -(r[sort] or 0.0), *base(r))
    field = {"utility": "utility", "uses": "uses", "age": "age"}[sort]
    return lambda r: (-r[field], *base(r))


def select_rows(
    rows: Sequence[dict[str, Any]],
    *,
    tier: str = "all",
    sort: str = "position",
    ptype: str | None = None,
    name: str | None = None,
    top: int | None = None,
) -> list[dict[str, Any]]:
    """Filter (tier, exact problem type, case-insensitive name substring), sort, keep the top N.

    Sorting is over the whole selection (both tiers together when ``tier="all"``); numbers sort
    descending, ``name`` ascending, ``position`` is library order (cache, then reservoir).
    Ties keep library order."""
    if tier not in ("all", *TIERS):
        raise ValueError(f"tier must be cache, reservoir or all, got {tier!r}")
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {SORT_KEYS}, got {sort!r}")
    out = [r for r in rows if tier == "all" or r["tier"] == tier]
    if ptype:
        out = [r for r in out if r["type"].lower() == ptype.lower()]
    if name:
        out = [r for r in out if name.lower() in r["name"].lower()]
    out.sort(key=_sort_key(sort))
    if top is not None:
        out = out[: max(0, int(top))]
    return out


# ---------------------------------------------------------------------------- output


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _fmt_ig(v: float | None) -> str:
    return "-" if v is None else f"{v:+.3f}"


def format_table(rows: Sequence[dict[str, Any]], *, full: bool = False) -> str:
    headers = ["tier", "id", "name", "type", "origin", "utility", "uses", "age", "uplift", "IG", "key insight"]
    body = []
    for r in rows:
        body.append(
            [
                r["tier"],
                r["id"],
                r["name"],
                r["type"],
                r["origin"],
                f"{r['utility']:.4f}",
                str(r["uses"]),
                str(r["age"]),
                _fmt_ig(r["uplift"]) + ("!" if r.get("utility_uplift_disagree") else ""),
                _fmt_ig(r["ig"]),
                r["key_insight"] if full else _clip(r["key_insight"], INSIGHT_WIDTH),
            ]
        )
    right = {5, 6, 7, 8, 9}
    widths = [max([len(h)] + [len(b[i]) for b in body]) for i, h in enumerate(headers)]
    widths[-1] = min(widths[-1], INSIGHT_WIDTH)

    def line(cells):
        parts = []
        for i, c in enumerate(cells):
            if i == len(cells) - 1:
                parts.append(c)
            elif i in right:
                parts.append(c.rjust(widths[i]))
            else:
                parts.append(c.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    for r, cells in zip(rows, body, strict=False):
        out.append(line(cells))
        if full:
            out.append(f"    method: {json.dumps(r['method'], ensure_ascii=False)}")
            out.append(f"    check:  {r['check']}")
            out.append(f"    doc:    {r['doc']}")
    return "\n".join(out)


def _header(lib_path: Path, lib: SkillLibrary) -> str:
    ref = library_reference_step(lib)
    gm = lib.global_mean_reward
    gs = lib.global_success_rate
    glob = (
        f"global mean reward {gm:.3f}, success rate {gs:.3f} over {lib.global_count} trajectories"
        if gm is not None and gs is not None
        else "no global reward statistics yet"
    )
    return (
        f"library: {lib_path}\n"
        f"step {ref} | cache {len(lib.cache)}/{lib.cache_capacity} | reservoir {len(lib.reservoir)}/"
        f"{lib.reservoir_capacity} | policy {lib.new_skill_policy} | EMA beta {lib.ema_beta} | {glob}"
    )


def inspect_library(path: str | Path, **select) -> dict[str, Any]:
    """Machine-readable view (what ``--json`` prints)."""
    lib_path, lib = load_library(path)
    rows = select_rows(library_rows(lib), **select)
    return {
        "path": str(lib_path),
        "step": library_reference_step(lib),
        "cache_capacity": lib.cache_capacity,
        "reservoir_capacity": lib.reservoir_capacity,
        "cache_size": len(lib.cache),
        "reservoir_size": len(lib.reservoir),
        "new_skill_policy": lib.new_skill_policy,
        "global_mean_reward": lib.global_mean_reward,
        "global_success_rate": lib.global_success_rate,
        "global_count": lib.global_count,
        "rows": rows,
    }


def format_skill(row: dict[str, Any], lib_path: Path) -> str:
    """One skill whole: document, statistics, provenance."""
    origin = {
        "seed": "a seed skill (the initial library)",
        "json": "parsed from a summary rollout's JSON",
        "fallback": "the trace_abstract fallback (the summary rollout did not parse)",
        "external": "added without provenance",
    }[row["origin"]]
    uplift = (
        f"{row['uplift']:+.3f} ± {row['uplift_se']:.3f} over {row['uplift_groups']} query group(s) "
        f"({row['uplift_n']} trajectories with it vs {row['uplift_base_n']} unaided; the mean of each "
        "group's own difference)"
        if row["uplift"] is not None
        else "not measured yet (no query group has used it beside a control arm)"
    )
    ig_exact = "-" if row["ig_exact"] is None else f"{row['ig_exact']:+.3f} (measured at step {row['ig_step']})"
    lines = [
        f"skill {row['id']} ({row['tier']} position {row['position']}) in {lib_path}",
        f"  document:     {row['doc']}",
        f"  utility:      {row['utility']:.4f} over {row['uses']} uses"
        + (f", mean reward {row['mean_reward']:.3f}, success rate {row['success_rate']:.3f}" if row["uses"] else ""),
        f"  uplift:       {uplift}",
        f"  IG proxy:     {_fmt_ig(row['ig'])}",
        f"  exact IG:     {ig_exact}",
        f"  origin:       {origin}",
        f"  created:      step {row['created_step']}, last updated step {row['updated_step']}",
    ]
    if row["origin"] in ("json", "fallback"):
        rewards = ", ".join(f"{r:g}" for r in row["source_rewards"]) or "-"
        lines += [
            f"  distilled at: step {row['source_step']} from query group {row['source_uid'] or '-'}",
            f"  source query: {row['source_query'] or '-'}",
            f"  from traces with rewards: {rewards}",
        ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m recipe.arise.tools.inspect_run",
        description="Print the cache and reservoir of a stored ARISE skill library.",
    )
    p.add_argument("path", help="library.parquet, a global_step_N folder, or a checkpoints root (latest step)")
    p.add_argument("--tier", choices=("cache", "reservoir", "all"), default="all")
    p.add_argument(
        "--sort",
        choices=SORT_KEYS,
        default="position",
        help="row order: library order (default), or utility/uses/age/ig descending, name ascending",
    )
    p.add_argument("--type", dest="ptype", default=None, help="only this problem_type (e.g. algebra)")
    p.add_argument("--name", default=None, help="only skills whose name contains this (case-insensitive)")
    p.add_argument("--top", type=int, default=None, help="keep the first N rows after filtering and sorting")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--full", action="store_true", help="show whole documents (method, check, JSON text)")
    p.add_argument("--skill", metavar="ID", default=None, help="show one skill whole, with its provenance")
    p.add_argument(
        "--export",
        metavar="FILE",
        default=None,
        help="write the selected skills as JSON lines (utility, uses, uplift, provenance); "
        "arise.library.load_from reads the file",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.top is not None and args.top < 0:
        print("error: --top must be >= 0", file=sys.stderr)
        return 2
    select = dict(tier=args.tier, sort=args.sort, ptype=args.ptype, name=args.name, top=args.top)
    if args.export:
        return _export(args.path, args.export, select)
    if args.skill:
        try:
            lib_path, lib = load_library(args.path)
        except InspectError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        rows = [r for r in library_rows(lib) if r["id"] == args.skill]
        if not rows:
            print(f"error: {lib_path}: no skill with id {args.skill!r}", file=sys.stderr)
            return 2
        print(json.dumps(rows[0], ensure_ascii=False, indent=1) if args.json else format_skill(rows[0], lib_path))
        return 0
    try:
        if args.json:
            print(json.dumps(inspect_library(args.path, **select), ensure_ascii=False, indent=1))
            return 0
        lib_path, lib = load_library(args.path)
    except InspectError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = select_rows(library_rows(lib), **select)
    print(_header(lib_path, lib))
    filters = [
        f"{k}={v}"
        for k, v in (("tier", args.tier), ("type", args.ptype), ("name", args.name), ("top", args.top))
        if v not in (None, "all")
    ]
    print(
        f"{len(rows)} of {len(lib)} entries"
        + (f" ({', '.join(filters)})" if filters else "")
        + f", sorted by {args.sort}"
    )
    print()
    disagree = utility_uplift_disagreement(lib.cache)
    if disagree:  # the paper's utility ranks high what the control arm measured as harmful
        print(
            f"utility vs uplift: {len(disagree)} cache skill(s) in the top half by utility have an uplift "
            f"interval entirely below 0 (marked ! in the uplift column): {', '.join(disagree)}; "
            "see docs/design.md on arise.library.rank_by: uplift"
        )
    if rows:
        print(format_table(rows, full=args.full))
    else:
        print("(no entries match)")
    return 0


def export_library(path: str | Path, out: str | Path, **select) -> tuple[Path, int]:
    """Write the selected skills of the library at ``path`` to ``out`` (JSON lines, in selection
    order); returns the library's path and how many skills were written."""
    lib_path, lib = load_library(path)
    ids = [r["id"] for r in select_rows(library_rows(lib), **select)]
    picked = SkillLibrary(cache_capacity=max(1, len(lib.cache)), reservoir_capacity=len(lib.reservoir))
    by_id = {e.skill_id: e for e in lib.entries()}
    for sid in ids:
        (picked.cache if lib.tier_of(sid) == "cache" else picked.reservoir).append(by_id[sid])
    picked.global_reward_sum, picked.global_success_count = lib.global_reward_sum, lib.global_success_count
    picked.global_count = lib.global_count  # the IG proxy in the file is the library's
    export_jsonl(picked, out)
    return lib_path, len(ids)


def _export(path, out, select) -> int:
    try:
        lib_path, n = export_library(path, out, **select)
    except InspectError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {out}: cannot write: {e}", file=sys.stderr)
        return 2
    print(f"wrote {n} skill(s) of {lib_path} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
