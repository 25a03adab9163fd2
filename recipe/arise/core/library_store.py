"""The skill library on disk: ``library.parquet`` (schema, format versions, checksums, validation).

A library is stored as one parquet row per entry (:func:`library_records`) with the library-wide
settings and counters as JSON in the schema metadata (:func:`library_config`). Pages carry
checksums and the file is replaced atomically (:mod:`recipe.arise.core.store`). Every reader
error is a :class:`LibraryFormatError` naming the file, the row and the field. The library as a
JSONL file is :mod:`recipe.arise.core.library_jsonl`.

Framework free: stdlib + pyarrow (imported when a file is read or written).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from .library_entry import TIERS, Provenance, SkillEntry
from .skill import SkillDoc
from .store import write_table_atomic

# a SkillLibrary: the library imports this module, so this one names it only in words (no import cycle)
Library = TypeVar("Library")

__all__ = [
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "LibraryFormatError",
    "entry_from_record",
    "library_config",
    "library_from_records",
    "library_records",
    "load_library",
    "save_library",
]

# 2: provenance (origin, source step/uid/query/rewards), causal-uplift counts and the exact IG.
# 3: the stratified uplift sums (uplift_groups, uplift_weight, uplift_wdiff, uplift_wvar).
# 4: the seeds' step limit in the settings (seed_trial_steps, selection_start_step).
# 5: Sato's variance sums of the uplift (uplift_sato_p, uplift_sato_q); a version-3/4 file's uplift
# restarts unmeasured (its sums cannot give Sato's variance; the counts are kept).
# Version-1 and -2 files still load: the missing fields start empty. A version-2 file's pooled
# uplift counts are kept as counts, but its uplift restarts unmeasured: pooled counts cannot be
# split back into query groups, and their pooled difference is the confounded number version 3
# replaces (docs/design_core.md: causal uplift).
FORMAT_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
_META_KEY = b"arise_skill_library"
logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))


class LibraryFormatError(ValueError):
    """A stored library file is missing, truncated or malformed."""


def _arrow_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("tier", pa.string()),
            ("position", pa.int64()),
            ("skill_id", pa.string()),
            ("skill_name", pa.string()),
            ("problem_type", pa.string()),
            ("key_insight", pa.string()),
            ("method", pa.list_(pa.string())),
            ("check", pa.string()),
            ("utility", pa.float64()),
            ("usage_count", pa.int64()),
            ("created_step", pa.int64()),
            ("updated_step", pa.int64()),
            ("reward_sum", pa.float64()),
            ("success_count", pa.int64()),
            # format version 2
            ("origin", pa.string()),
            ("source_step", pa.int64()),
            ("source_uid", pa.string()),
            ("source_query", pa.string()),
            ("source_rewards", pa.list_(pa.float64())),
            ("uplift_n", pa.int64()),
            ("uplift_successes", pa.int64()),
            ("uplift_base_n", pa.int64()),
            ("uplift_base_successes", pa.int64()),
            ("ig_exact", pa.float64()),
            ("ig_step", pa.int64()),
            # format version 3
            ("uplift_groups", pa.int64()),
            ("uplift_weight", pa.float64()),
            ("uplift_wdiff", pa.float64()),
            ("uplift_wvar", pa.float64()),
            # format version 5
            ("uplift_sato_p", pa.float64()),
            ("uplift_sato_q", pa.float64()),
        ]
    )


# format version -> how many of the first columns of _arrow_schema() its files hold
_COLUMNS_OF_VERSION = {1: 14, 2: 25, 3: 29, 4: 29, 5: 31}


# ------------------------------------------------------------------ library <-> records
def library_config(lib: Any) -> dict[str, Any]:
    """The file metadata: the format version, the settings and the library-wide counters."""
    return {
        "format_version": FORMAT_VERSION,
        **lib.settings(),
        "next_id": lib.next_id,
        "global_reward_sum": lib.global_reward_sum,
        "global_success_count": lib.global_success_count,
        "global_count": lib.global_count,
        "last_step": lib.last_step,
    }


def library_records(lib: Any) -> list[dict[str, Any]]:
    """One flat record (a parquet row) per entry, cache first then reservoir, with its position."""
    rows = []
    for tier, entries in (("cache", lib.cache), ("reservoir", lib.reservoir)):
        for pos, e in enumerate(entries):
            rows.append(
                {
                    "tier": tier,
                    "position": pos,
                    "skill_id": e.skill_id,
                    "skill_name": e.doc.skill_name,
                    "problem_type": e.doc.problem_type,
                    "key_insight": e.doc.key_insight,
                    "method": list(e.doc.method),
                    "check": e.doc.check,
                    "utility": float(e.utility),
                    "usage_count": int(e.usage_count),
                    "created_step": int(e.created_step),
                    "updated_step": int(e.updated_step),
                    "reward_sum": float(e.reward_sum),
                    "success_count": int(e.success_count),
                    "origin": e.provenance.origin,
                    "source_step": e.provenance.step,
                    "source_uid": e.provenance.uid,
                    "source_query": e.provenance.query,
                    "source_rewards": list(e.provenance.rewards),
                    "uplift_n": int(e.uplift_n),
                    "uplift_successes": int(e.uplift_successes),
                    "uplift_base_n": int(e.uplift_base_n),
                    "uplift_base_successes": int(e.uplift_base_successes),
                    "uplift_groups": int(e.uplift_groups),
                    "uplift_weight": float(e.uplift_weight),
                    "uplift_wdiff": float(e.uplift_wdiff),
                    "uplift_wvar": float(e.uplift_wvar),
                    "uplift_sato_p": float(e.uplift_sato_p),
                    "uplift_sato_q": float(e.uplift_sato_q),
                    "ig_exact": e.ig_exact,
                    "ig_step": e.ig_step,
                }
            )
    return rows


def library_from_records(
    cls: type[Library],
    records: Sequence[dict[str, Any]],
    config: dict[str, Any] | None = None,
    *,
    source: str = "<records>",
) -> Library:
    """A ``cls`` library from :func:`library_records` and :func:`library_config` (validated)."""
    cfg = dict(config or {})
    version = cfg.get("format_version", FORMAT_VERSION)
    if version not in READABLE_VERSIONS:
        raise LibraryFormatError(f"{source}: unsupported format_version {version!r} (readable: {READABLE_VERSIONS})")
    # a flipped byte in a key name must not fall back to a default silently: the metadata of the
    # current format holds exactly the keys it writes, an older one no key it never wrote
    known = set(library_config(cls()))
    unknown = sorted(set(cfg) - known)
    missing = sorted(known - set(cfg)) if version == FORMAT_VERSION and config is not None else []
    if unknown or missing:
        raise LibraryFormatError(f"{source}: bad library metadata: unknown keys {unknown}, missing keys {missing}")
    defaults = cls().settings()
    try:
        # max_protected None is C_c // 2 of the file's C_c, not of the default one
        lib = cls(**{**defaults, "max_protected": None, **{k: cfg[k] for k in defaults if k in cfg}})
        lib.global_reward_sum = float(cfg.get("global_reward_sum", 0.0))
        lib.global_success_count = int(cfg.get("global_success_count", 0))
        lib.global_count = int(cfg.get("global_count", 0))
        lib.last_step = None if cfg.get("last_step") is None else int(cfg["last_step"])
    except (TypeError, ValueError) as e:
        raise LibraryFormatError(f"{source}: bad library metadata: {e}") from e
    tiers: dict[str, list[tuple[int, SkillEntry]]] = {"cache": [], "reservoir": []}
    seen: set[str] = set()
    max_num = 0
    restarted = 0
    for i, r in enumerate(records):
        try:
            entry, tier, pos = entry_from_record(r)
        except (KeyError, TypeError, ValueError) as e:
            raise LibraryFormatError(f"{source}: row {i}: {e}") from e
        if version == 2 and entry.uplift_n:
            restarted += 1
        if version in (3, 4) and entry.uplift_groups:  # no Sato sums: the uplift restarts, counts kept
            entry.uplift_groups, entry.uplift_weight, entry.uplift_wdiff, entry.uplift_wvar = 0, 0.0, 0.0, 0.0
            restarted += 1
        if entry.skill_id in seen:
            raise LibraryFormatError(f"{source}: row {i}: field 'skill_id': duplicate id {entry.skill_id!r}")
        seen.add(entry.skill_id)
        if entry.skill_id[1:].isdigit():
            max_num = max(max_num, int(entry.skill_id[1:]))
        tiers[tier].append((pos, entry))
    for tier, items in tiers.items():
        items.sort(key=lambda pe: pe[0])
        if [p for p, _ in items] != list(range(len(items))):
            raise LibraryFormatError(f"{source}: field 'position': tier {tier!r} positions are not 0..n-1")
    lib.cache = [e for _, e in tiers["cache"]]
    lib.reservoir = [e for _, e in tiers["reservoir"]]
    if len(lib.cache) > lib.cache_capacity or len(lib.reservoir) > lib.reservoir_capacity:
        raise LibraryFormatError(f"{source}: tier sizes exceed capacities")
    lib.next_id = max(int(cfg.get("next_id", 1)), max_num + 1)
    if restarted:
        logger.warning(
            f"{source}: a format-version-{version} library: the uplift of {restarted} skill(s) restarts "
            "unmeasured (version 2 pooled the counts over query groups, which confounds a skill with its "
            "queries; versions 3-4 lack the sums of Sato's variance; the counts are kept)"
        )
    return lib


# ------------------------------------------------------------------ the parquet file
def save_library(lib: Any, path: str | os.PathLike) -> Path:
    """Atomically write the library as parquet (temp file + fsync + os.replace + dir fsync)."""
    import pyarrow as pa

    table = pa.Table.from_pylist(library_records(lib), schema=_arrow_schema())
    table = table.replace_schema_metadata({_META_KEY: json.dumps(library_config(lib)).encode()})
    return write_table_atomic(table, Path(path))


def load_library(cls: type[Library], path: str | os.PathLike) -> Library:
    """Read a library file of any readable format version; every problem is a :class:`LibraryFormatError`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise LibraryFormatError(f"{path}: library file not found")
    try:
        table = pq.read_table(str(path), page_checksum_verification=True)  # files without checksums load too
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError on truncation/garbage
        raise LibraryFormatError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from e
    meta = table.schema.metadata or {}
    if _META_KEY not in meta:
        raise LibraryFormatError(f"{path}: missing library metadata key {_META_KEY.decode()!r}")
    try:
        config = json.loads(meta[_META_KEY].decode("utf-8"))
        if not isinstance(config, dict):
            raise ValueError("metadata is not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise LibraryFormatError(f"{path}: malformed library metadata: {e}") from e
    expected = _arrow_schema()
    version = config.get("format_version")
    if version in _COLUMNS_OF_VERSION:  # an older file: the columns of its version
        expected = pa.schema(list(expected)[: _COLUMNS_OF_VERSION[version]])
    try:
        names = table.schema.names
    except UnicodeDecodeError as e:  # a corrupted byte in a column name
        raise LibraryFormatError(f"{path}: corrupted column names ({e})") from e
    if names != expected.names:
        raise LibraryFormatError(f"{path}: columns {names} != expected {expected.names}")
    for f in expected:
        actual = table.schema.field(f.name).type
        if actual != f.type:
            raise LibraryFormatError(f"{path}: column {f.name!r} has type {actual}, expected {f.type}")
    try:
        records = table.to_pylist()
    except (UnicodeDecodeError, pa.ArrowException) as e:  # corrupted string data
        raise LibraryFormatError(f"{path}: corrupted contents ({type(e).__name__}: {e})") from e
    return library_from_records(cls, records, config, source=str(path))


# ------------------------------------------------------------------ one record
def check_int(value: Any, name: str, minimum: int | None = 0) -> int:
    """``value`` if it is an integer (not a bool) >= ``minimum``, else a ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"field {name!r}: must be an integer{bound}, got {value!r}")
    return value


def check_number(value: Any, name: str) -> float:
    """``value`` as a float if it is a finite number (not a bool), else a ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"field {name!r}: must be a finite number, got {value!r}")
    return float(value)


def entry_from_record(r: dict[str, Any]) -> tuple[SkillEntry, str, int]:
    """The entry, tier and position of one record; a missing or malformed field raises (KeyError,
    TypeError or ValueError naming the field). Fields newer than format version 1 may be absent."""
    if not isinstance(r, dict):
        raise TypeError("record is not a mapping")
    tier = r["tier"]
    if tier not in TIERS:
        raise ValueError(f"field 'tier': must be one of {TIERS}, got {tier!r}")
    for name in ("skill_id", "skill_name", "problem_type", "key_insight", "check"):
        if not isinstance(r[name], str):
            raise ValueError(f"field {name!r}: must be a string, got {type(r[name]).__name__}")
    if not r["skill_id"]:
        raise ValueError("field 'skill_id': empty")
    method = r["method"]
    if not isinstance(method, (list, tuple)) or not all(isinstance(s, str) for s in method):
        raise ValueError("field 'method': must be a list of strings")
    nums: dict[str, Any] = {}
    for name in ("position", "usage_count", "created_step", "updated_step", "success_count"):
        nums[name] = check_int(r[name], name, minimum=None)
    for name in ("utility", "reward_sum"):
        nums[name] = check_number(r[name], name)
    if nums["usage_count"] < 0 or nums["success_count"] < 0 or nums["position"] < 0:
        raise ValueError("fields 'position'/'usage_count'/'success_count' must be >= 0")
    doc = SkillDoc(r["skill_name"], r["problem_type"], r["key_insight"], tuple(method), r["check"])
    if "origin" not in r:  # format version 1: no provenance; its seeds are the entries of step 0
        r = {**r, "origin": "seed" if nums["created_step"] == 0 else "external"}
    for name in ("uplift_n", "uplift_successes", "uplift_base_n", "uplift_base_successes", "uplift_groups"):
        nums[name] = check_int(r.get(name, 0), name)
    if nums["uplift_successes"] > nums["uplift_n"] or nums["uplift_base_successes"] > nums["uplift_base_n"]:
        raise ValueError("fields 'uplift_*': more successes than trajectories")
    for name in ("uplift_weight", "uplift_wdiff", "uplift_wvar", "uplift_sato_p", "uplift_sato_q"):
        nums[name] = check_number(r.get(name, 0.0), name)
    if nums["uplift_weight"] < 0 or nums["uplift_wvar"] < 0 or nums["uplift_sato_q"] < 0:
        raise ValueError("fields 'uplift_weight'/'uplift_wvar'/'uplift_sato_q' must be >= 0")
    if (nums["uplift_groups"] == 0) != (nums["uplift_weight"] == 0.0):
        raise ValueError("fields 'uplift_groups'/'uplift_weight': a weight needs groups and groups need a weight")
    ig_exact, ig_step = r.get("ig_exact"), r.get("ig_step")
    if ig_exact is not None and (isinstance(ig_exact, bool) or not math.isfinite(float(ig_exact))):
        raise ValueError(f"field 'ig_exact': must be a finite number or null, got {ig_exact!r}")
    rewards = r.get("source_rewards") or []
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rewards):
        raise ValueError("field 'source_rewards': must be a list of numbers")
    provenance = Provenance(
        origin=r["origin"],
        step=r.get("source_step"),
        uid=r.get("source_uid") or "",
        query=r.get("source_query") or "",
        rewards=tuple(rewards),
    )
    entry = SkillEntry(
        skill_id=r["skill_id"],
        doc=doc,
        provenance=provenance,
        ig_exact=None if ig_exact is None else float(ig_exact),
        ig_step=None if ig_step is None else int(ig_step),
        **{k: v for k, v in nums.items() if k != "position"},
    )
    return entry, tier, nums["position"]
