"""The skill library as a JSONL file, and :func:`load_library_file` for either stored form.

One skill per line (``python -m recipe.arise.tools.inspect_run RUN --export skills.jsonl``), readable
by ``arise.library.load_from``. Fields: "skill" (the five-field document; required), "id", "tier"
(cache | reservoir; default cache), "utility", "uses", "created_step", "updated_step",
"provenance" {origin, step, uid, query, rewards}, "counts" {the raw counters a resumed
estimate needs}, "ig_exact", "ig_step"; and, computed at export and ignored on load, "uplift",
"uplift_se", "ig_proxy", "mean_reward", "success_rate". A line that is a bare skill document
(the seed-skill format) is read as {"skill": line}. The library-wide settings and global reward
statistics are not part of the file: the loading run's config gives the settings. Each skill must
meet the schema of a summarised skill (:meth:`SkillDoc.validate`: field lengths, 2-3 steps, at most
220 characters); one that does not is an error naming the line and the field, not clipped.

Framework free: stdlib.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .library import SkillLibrary
from .library_entry import ORIGINS, TIERS, SkillEntry, StepEvents, dup_key
from .library_store import LibraryFormatError, check_int, check_number, entry_from_record
from .skill import SkillDoc
from .store import atomic_write

__all__ = ["export_jsonl", "export_rows", "library_from_jsonl", "load_library_file"]

_COUNT_FIELDS = {
    "reward_sum": float,
    "success_count": int,
    "uplift_n": int,
    "uplift_successes": int,
    "uplift_base_n": int,
    "uplift_base_successes": int,
    "uplift_groups": int,
    "uplift_weight": float,
    "uplift_wdiff": float,
    "uplift_wvar": float,
    "uplift_sato_p": float,
    "uplift_sato_q": float,
}
_DERIVED_FIELDS = ("uplift", "uplift_se", "ig_proxy", "mean_reward", "success_rate")
_LINE_FIELDS = (
    "skill",
    "id",
    "tier",
    "utility",
    "uses",
    "created_step",
    "updated_step",
    "provenance",
    "counts",
    "ig_exact",
    "ig_step",
    *_DERIVED_FIELDS,
)
_DOC_FIELDS = ("skill_name", "problem_type", "key_insight", "method", "check")
_PROVENANCE_FIELDS = ("origin", "step", "uid", "query", "rewards")


def export_rows(lib: SkillLibrary) -> list[dict[str, Any]]:
    """One JSON-ready dict per entry, cache first then reservoir, in library order."""
    ig = lib.ig_proxies()
    rows = []
    for tier, entries in (("cache", lib.cache), ("reservoir", lib.reservoir)):
        for e in entries:
            p = e.provenance
            rows.append(
                {
                    "skill": e.doc.to_dict(),
                    "id": e.skill_id,
                    "tier": tier,
                    "utility": float(e.utility),
                    "uses": int(e.usage_count),
                    "uplift": e.uplift,
                    "uplift_se": e.uplift_se,
                    "ig_proxy": ig.get(e.skill_id),
                    "mean_reward": e.mean_reward,
                    "success_rate": e.success_rate,
                    "ig_exact": e.ig_exact,
                    "ig_step": e.ig_step,
                    "created_step": int(e.created_step),
                    "updated_step": int(e.updated_step),
                    "provenance": {
                        "origin": p.origin,
                        "step": p.step,
                        "uid": p.uid,
                        "query": p.query,
                        "rewards": list(p.rewards),
                    },
                    "counts": {name: kind(getattr(e, name)) for name, kind in _COUNT_FIELDS.items()},
                }
            )
    return rows


def export_jsonl(lib: SkillLibrary, path: str | os.PathLike) -> Path:
    """Write :func:`export_rows` as JSON lines (temp file + ``os.replace``: never a torn file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in export_rows(lib))
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
    return path


def _reject_unknown(obj: dict[str, Any], known: Sequence[str], prefix: str = "") -> None:
    """A ValueError naming the first (sorted) field of ``obj`` that is not ``known``: a misspelt
    field must not fall back to its default silently."""
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise ValueError(f"field {prefix + unknown[0]!r}: unknown field (known: {', '.join(known)})")


def _object(value: Any, name: str, known: Sequence[str]) -> dict[str, Any]:
    """``value`` (the line's field ``name``) if it is a JSON object holding only ``known`` fields."""
    if not isinstance(value, dict):
        raise ValueError(f"field {name!r}: must be a JSON object, got {type(value).__name__}")
    _reject_unknown(value, known, f"{name}.")
    return value


def _record_from_line(obj: Any) -> dict[str, Any]:
    """A :func:`entry_from_record` record from one JSONL line (errors name the line's field)."""
    if not isinstance(obj, dict):
        raise ValueError(f"not a JSON object (got {type(obj).__name__})")
    if "skill" not in obj and "skill_name" in obj:  # a bare skill document
        obj = {"skill": obj}
    _reject_unknown(obj, _LINE_FIELDS)
    if "skill" not in obj:
        raise ValueError("field 'skill': missing")
    doc = _object(obj["skill"], "skill", _DOC_FIELDS)
    for name in _DOC_FIELDS:
        if name not in doc:
            raise ValueError(f"field 'skill.{name}': missing")
        if name == "method":
            if not isinstance(doc[name], list) or not all(isinstance(x, str) for x in doc[name]):
                raise ValueError("field 'skill.method': must be a list of strings")
        elif not isinstance(doc[name], str):
            raise ValueError(f"field 'skill.{name}': must be a string, got {type(doc[name]).__name__}")
    try:  # the schema every summarised skill meets (field lengths, 2-3 steps, the 220-char document)
        SkillDoc.from_dict(doc)
    except ValueError as e:
        message = str(e)
        raise ValueError(
            message.replace("field '", "field 'skill.", 1)
            if message.startswith("field '")
            else f"field 'skill': {message}"
        ) from e
    tier = obj.get("tier", "cache")
    if tier not in TIERS:
        raise ValueError(f"field 'tier': must be one of {TIERS}, got {tier!r}")
    sid = obj.get("id")
    if sid is not None and (not isinstance(sid, str) or not sid):
        raise ValueError(f"field 'id': must be a non-empty string, got {sid!r}")
    created = check_int(obj.get("created_step", 0), "created_step")
    record: dict[str, Any] = {
        "tier": tier,
        "position": 0,
        "skill_id": sid or "",
        **{name: doc[name] for name in _DOC_FIELDS},
        "utility": check_number(obj.get("utility", 0.0), "utility"),
        "usage_count": check_int(obj.get("uses", 0), "uses"),
        "created_step": created,
        "updated_step": check_int(obj.get("updated_step", created), "updated_step"),
    }
    counts = _object(obj.get("counts", {}), "counts", tuple(_COUNT_FIELDS))
    for name, kind in _COUNT_FIELDS.items():
        value = counts.get(name, kind(0))
        if kind is int:
            record[name] = check_int(value, f"counts.{name}")
        else:
            record[name] = check_number(value, f"counts.{name}")
    if record["success_count"] > record["usage_count"]:
        raise ValueError("field 'counts.success_count': more successes than uses")
    if "uplift_sato_q" not in counts:  # an older export: no Sato sums, so its uplift restarts (counts kept)
        record.update(uplift_groups=0, uplift_weight=0.0, uplift_wdiff=0.0, uplift_wvar=0.0)
    prov = _object(obj.get("provenance", {"origin": "external"}), "provenance", _PROVENANCE_FIELDS)
    origin = prov.get("origin", "external")
    if origin not in ORIGINS:
        raise ValueError(f"field 'provenance.origin': must be one of {ORIGINS}, got {origin!r}")
    step = prov.get("step")
    if step is not None:
        check_int(step, "provenance.step")
    for name in ("uid", "query"):
        if not isinstance(prov.get(name, ""), str):
            raise ValueError(f"field 'provenance.{name}': must be a string")
    rewards = prov.get("rewards", [])
    if not isinstance(rewards, list):
        raise ValueError("field 'provenance.rewards': must be a list of numbers")
    for r in rewards:
        check_number(r, "provenance.rewards")
    record.update(
        origin=origin,
        source_step=step,
        source_uid=prov.get("uid", ""),
        source_query=prov.get("query", ""),
        source_rewards=rewards,
    )
    ig_exact, ig_step = obj.get("ig_exact"), obj.get("ig_step")
    record["ig_exact"] = None if ig_exact is None else check_number(ig_exact, "ig_exact")
    record["ig_step"] = None if ig_step is None else check_int(ig_step, "ig_step")
    return record


def library_from_jsonl(path: str | os.PathLike, step: int | None = None, **settings) -> tuple[SkillLibrary, StepEvents]:
    """A library with ``settings`` (the run's config) holding the skills of a JSONL file.

    Each line's tier is kept while the tiers fit: more cache lines than C_c are evicted to the
    reservoir by the configured ranking, more reservoir entries than C_r dropped by the overflow
    rule (the returned events list them). Ids are kept (lines without one get fresh ids).
    Raises :class:`LibraryFormatError` naming the file, the line and the field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LibraryFormatError(f"{path}: cannot read ({type(e).__name__}: {e})") from e
    lib = SkillLibrary(seed_skills=(), **settings)
    seen_ids: dict[str, int] = {}
    seen_docs: dict[tuple[str, str], int] = {}
    pending: list[tuple[str, str, SkillEntry]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise LibraryFormatError(f"{path}: line {number}: not valid JSON ({e.msg} at column {e.colno})") from e
        try:
            record = _record_from_line(obj)
            given_id = record["skill_id"]
            record["skill_id"] = given_id or "pending"
            entry, tier, _ = entry_from_record(record)
        except (KeyError, TypeError, ValueError) as e:
            raise LibraryFormatError(f"{path}: line {number}: {e}") from e
        if given_id:
            if given_id in seen_ids:
                raise LibraryFormatError(
                    f"{path}: line {number}: field 'id': {given_id!r} is also the id of line {seen_ids[given_id]}"
                )
            seen_ids[given_id] = number
        key = dup_key(entry.doc)
        if key in seen_docs:
            raise LibraryFormatError(
                f"{path}: line {number}: field 'skill': the same skill as line {seen_docs[key]} (name and insight)"
            )
        seen_docs[key] = number
        pending.append((tier, given_id, entry))
    numbers = [int(sid[1:]) for sid in seen_ids if sid[:1] == "s" and sid[1:].isdigit()]
    lib.next_id = max(numbers, default=0) + 1
    for tier, given_id, entry in pending:
        if not given_id:
            entry.skill_id = f"s{lib.next_id:06d}"
            lib.next_id += 1
        (lib.reservoir if tier == "reservoir" else lib.cache).append(entry)
    ref = max((max(e.created_step, e.updated_step) for _, _, e in pending), default=0) if step is None else step
    return lib, lib.fit_capacities(int(ref))


def load_library_file(
    path: str | os.PathLike, step: int | None = None, **settings
) -> tuple[SkillLibrary, dict[str, tuple[Any, Any]], StepEvents]:
    """A stored library (``library.parquet`` or an exported ``.jsonl``) under the run's ``settings``.

    Returns the library, the settings the file held that the run changed (``{name: (file, run)}``;
    always empty for a JSONL file, which holds no settings) and what fitting the run's capacities
    moved (:meth:`SkillLibrary.reconfigure`). Settings not given keep the file's value."""
    path = Path(path)
    if path.suffix == ".jsonl":
        lib, ev = library_from_jsonl(path, step=step, **settings)
        return lib, {}, ev
    lib = SkillLibrary.load(path)
    changes, ev = lib.reconfigure(step=step, **settings)
    return lib, changes, ev
