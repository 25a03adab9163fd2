"""Skill documents: the uniform five-field schema of ARISE (paper App. C.1, D.1).

A skill is a frozen :class:`SkillDoc`.  Its compact JSON text (:meth:`SkillDoc.to_json`)
is exactly what is injected into prompts and scored by the manager, and is hard-capped
at :data:`MAX_DOC_CHARS` characters.

:func:`parse_summary` implements the four-stage validation of the summary rollout output
(extraction -> parsing -> truncation/discard; the fourth stage, insertion, is the
library's ADD) and says which stage a rejected output failed: App. D.1's ``trace_abstract``
fallback (:func:`fallback_skill`) is for output that is not valid JSON, not for a document
discarded at truncation.

This module is framework free (stdlib only).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PROBLEM_TYPES",
    "FIELDS",
    "MAX_DOC_CHARS",
    "MAX_NAME_CHARS",
    "MAX_INSIGHT_CHARS",
    "MAX_STEP_CHARS",
    "MAX_CHECK_CHARS",
    "MIN_STEPS",
    "MAX_STEPS",
    "DEFAULT_CHECK",
    "SEED_SKILLS_PATH",
    "SkillDoc",
    "parse_skill",
    "parse_summary",
    "fallback_skill",
    "load_seed_skills",
    "normalize_problem_type",
]

PROBLEM_TYPES: tuple[str, ...] = (
    "algebra",
    "geometry",
    "combinatorics",
    "number_theory",
    "calculus",
    "general",
)
FIELDS: tuple[str, ...] = ("skill_name", "problem_type", "key_insight", "method", "check")

MAX_DOC_CHARS = 220
MAX_NAME_CHARS = 40
MAX_INSIGHT_CHARS = 160
MAX_STEP_CHARS = 100
MAX_CHECK_CHARS = 100
MIN_STEPS = 2
MAX_STEPS = 3
DEFAULT_CHECK = "Substitute back to verify"

# Robustness caps for parse_skill (the summary rollout is <= 192 new tokens, so real
# outputs are far below these).
MAX_PARSE_INPUT_CHARS = 20_000
MAX_JSON_CANDIDATES = 256
MAX_JSON_OBJECT_CHARS = 4_000  # longest JSON object considered as a skill document
MAX_JSON_DEPTH = 32

SEED_SKILLS_PATH = Path(__file__).resolve().parents[1] / "data" / "seed_skills.json"

# parse_summary's outcomes
PARSED, OVERLONG, INVALID = "parsed", "overlong", "invalid"

FALLBACK_NAME = "trace_abstract"
FALLBACK_PREFIX = "Solve by: "
FALLBACK_METHOD: tuple[str, ...] = (
    "Mimic these steps",
    "Recompute",
)


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class SkillDoc:
    """One skill document.  ``method`` is always stored as a tuple of strings.

    The constructor only enforces *types* (so that any stored library can be
    re-loaded); the schema *limits* (lengths, enum, 2-3 steps, 220-char cap) are
    checked by :meth:`validate` / :meth:`from_dict`, and every doc produced by
    :func:`parse_skill`, :func:`fallback_skill` and :func:`load_seed_skills` satisfies them.
    """

    skill_name: str
    problem_type: str
    key_insight: str
    method: tuple[str, ...]
    check: str

    def __post_init__(self) -> None:
        for name in ("skill_name", "problem_type", "key_insight", "check"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"SkillDoc field {name!r} must be a str, got {type(getattr(self, name)).__name__}")
        method = self.method
        if isinstance(method, str) or not isinstance(method, Iterable):
            raise ValueError("SkillDoc field 'method' must be a sequence of str")
        method = tuple(method)
        for i, step in enumerate(method):
            if not isinstance(step, str):
                raise ValueError(f"SkillDoc field 'method'[{i}] must be a str, got {type(step).__name__}")
        object.__setattr__(self, "method", method)

    # ------------------------------------------------------------------ views
    def to_dict(self) -> dict[str, Any]:
        return {
            "skill_name": self.skill_name,
            "problem_type": self.problem_type,
            "key_insight": self.key_insight,
            "method": list(self.method),
            "check": self.check,
        }

    def to_json(self) -> str:
        """Compact JSON text (schema key order) -- the injected and scored text."""
        return _compact(self.to_dict())

    # ------------------------------------------------------------- validation
    def validate(self) -> SkillDoc:
        """Raise ValueError naming the first field violating the schema; return self."""
        name = self.skill_name
        if not name or len(name) > MAX_NAME_CHARS or not re.fullmatch(r"[a-z0-9]+(?:_[a-z0-9]+)*", name):
            raise ValueError(
                f"field 'skill_name': must be non-empty snake_case of at most {MAX_NAME_CHARS} chars, got {name!r}"
            )
        if self.problem_type not in PROBLEM_TYPES:
            raise ValueError(f"field 'problem_type': must be one of {PROBLEM_TYPES}, got {self.problem_type!r}")
        if not self.key_insight.strip() or len(self.key_insight) > MAX_INSIGHT_CHARS:
            raise ValueError(f"field 'key_insight': must be non-empty and at most {MAX_INSIGHT_CHARS} chars")
        if not (MIN_STEPS <= len(self.method) <= MAX_STEPS):
            raise ValueError(f"field 'method': must have {MIN_STEPS}-{MAX_STEPS} steps, got {len(self.method)}")
        for i, step in enumerate(self.method):
            if not step.strip() or len(step) > MAX_STEP_CHARS:
                raise ValueError(f"field 'method'[{i}]: must be non-empty and at most {MAX_STEP_CHARS} chars")
        if not self.check.strip() or len(self.check) > MAX_CHECK_CHARS:
            raise ValueError(f"field 'check': must be non-empty and at most {MAX_CHECK_CHARS} chars")
        n = len(self.to_json())
        if n > MAX_DOC_CHARS:
            raise ValueError(f"document: to_json() is {n} chars, exceeds the {MAX_DOC_CHARS}-char cap")
        return self

    def is_valid(self) -> bool:
        try:
            self.validate()
        except ValueError:
            return False
        return True

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SkillDoc:
        """Strict constructor: exact five fields, right types, schema limits."""
        if not isinstance(d, Mapping):
            raise ValueError(f"skill must be a JSON object, got {type(d).__name__}")
        missing = [f for f in FIELDS if f not in d]
        if missing:
            raise ValueError(f"field {missing[0]!r}: missing")
        extra = sorted(k for k in d if k not in FIELDS)
        if extra:
            raise ValueError(f"field {extra[0]!r}: unknown field")
        for f in ("skill_name", "problem_type", "key_insight", "check"):
            if not isinstance(d[f], str):
                raise ValueError(f"field {f!r}: must be a string, got {type(d[f]).__name__}")
        m = d["method"]
        if not isinstance(m, (list, tuple)):
            raise ValueError(f"field 'method': must be a list of strings, got {type(m).__name__}")
        for i, step in enumerate(m):
            if not isinstance(step, str):
                raise ValueError(f"field 'method'[{i}]: must be a string, got {type(step).__name__}")
        doc = cls(d["skill_name"], d["problem_type"], d["key_insight"], tuple(m), d["check"])
        return doc.validate()


# --------------------------------------------------------------------------- helpers

_WS_RE = re.compile(r"\s+")


def _clean(text: str) -> str:
    """Drop surrogates / control / format chars, collapse whitespace, strip."""
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat == "Cs":  # lone surrogate: not encodable as UTF-8
            continue
        if cat in ("Cc", "Cf") and not ch.isspace():
            continue
        out.append(ch)
    return _WS_RE.sub(" ", "".join(out)).strip()


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip()


def _snake(text: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    s = re.sub(r"[^0-9a-zA-Z]+", "_", s).strip("_").lower()
    s = re.sub(r"_+", "_", s)
    s = s[:MAX_NAME_CHARS].strip("_")
    return s


def normalize_problem_type(value: Any) -> str:
    """lowercase, spaces/hyphens -> underscore; unknown or non-string -> 'general'."""
    if not isinstance(value, str):
        return "general"
    s = _WS_RE.sub("_", value.strip().lower()).replace("-", "_")
    s = re.sub(r"_+", "_", s).strip("_")
    return s if s in PROBLEM_TYPES else "general"


_STEP_SPLIT_RE = re.compile(r"(?:\n+|;\s*|(?:^|\s)(?:\(?\d{1,2}[.):]|step\s*\d+\s*[:.)-]?|[-*\u2022])\s+)", re.I)


def _split_steps(text: str) -> list[str]:
    """Split a single-string method into steps (newlines, ';', '1.', 'Step 2:', bullets, '->', sentences)."""
    parts = [p for p in _STEP_SPLIT_RE.split(text) if p and p.strip()]
    if len(parts) < 2 and ("->" in text or "\u2192" in text):
        parts = re.split(r"\s*(?:->|\u2192)\s*", text)
    if len(parts) < 2:
        parts = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text)
    return [p for p in (_clean(p).strip(" .") for p in parts) if p]


def _coerce_fields(d: Mapping[str, Any], shrink: bool) -> SkillDoc | str | None:
    """The skill of one JSON object; None where a required field is missing or malformed (not a
    valid skill), ``OVERLONG`` where it parsed but stays over the cap after clipping (and shrinking)."""
    # skill_name (required)
    name = d.get("skill_name")
    if not isinstance(name, str):
        return None
    name = _snake(_clean(name))
    if not name:
        return None
    # problem_type (normalised; missing/unknown -> general)
    ptype = normalize_problem_type(d.get("problem_type"))
    # key_insight (required)
    insight = d.get("key_insight")
    if not isinstance(insight, str):
        return None
    insight = _clip(_clean(insight), MAX_INSIGHT_CHARS)
    if not insight:
        return None
    # method (required): list of strings or one string split into steps
    raw_method = d.get("method")
    if isinstance(raw_method, str):
        steps = _split_steps(raw_method)
    elif isinstance(raw_method, (list, tuple)):
        if not all(isinstance(s, str) for s in raw_method):
            return None
        steps = [s for s in (_clean(s) for s in raw_method) if s]
    else:
        return None
    if len(steps) < MIN_STEPS:
        return None
    steps = [_clip(s, MAX_STEP_CHARS) for s in steps[:MAX_STEPS]]
    # check (optional, defaulted)
    check = d.get("check")
    check = _clip(_clean(check), MAX_CHECK_CHARS) if isinstance(check, str) else ""
    if not check:
        check = DEFAULT_CHECK
    doc = SkillDoc(name, ptype, insight, tuple(steps), check)
    if len(doc.to_json()) > MAX_DOC_CHARS:
        if not shrink:
            return OVERLONG  # paper App. D.1 stage 3: discard if still over the cap
        doc = _shrink(doc)
        if doc is None:
            return OVERLONG
    return doc if doc.is_valid() else None


def _shrink(doc: SkillDoc) -> SkillDoc | None:
    """Optional (non-paper) alternative to discard: drop the 3rd step, then trim the
    longest free-text field word-wise until the document fits."""
    method = list(doc.method)
    insight, check = doc.key_insight, doc.check
    for _ in range(400):
        cand = SkillDoc(doc.skill_name, doc.problem_type, insight, tuple(method), check)
        over = len(cand.to_json()) - MAX_DOC_CHARS
        if over <= 0:
            return cand
        if len(method) > MIN_STEPS:
            method.pop()
            continue
        fields = [("insight", insight), ("check", check)] + [(i, s) for i, s in enumerate(method)]
        key, longest = max(fields, key=lambda kv: len(kv[1]))
        if len(longest) <= 12:
            return None
        new = _clip(
            longest[: max(8, len(longest) - over)], MAX_STEP_CHARS if key not in ("insight",) else MAX_INSIGHT_CHARS
        )
        if " " in new[8:]:
            new = new[: new.rfind(" ")].rstrip()
        new = new or longest[:8]
        if key == "insight":
            insight = new
        elif key == "check":
            check = new
        else:
            method[key] = new
    return None


def _iter_json_objects(text: str) -> Iterable[dict]:
    """Yield JSON objects found in ``text``: for each '{' (up to a cap), try to decode a
    JSON value starting there (C decoder => braces inside strings handled correctly).

    Each try sees at most ``MAX_JSON_OBJECT_CHARS`` characters: a skill document is a few
    hundred characters (the summary rollout generates <= 192 tokens), and the bound keeps the
    worst case (deeply nested or brace-heavy input) linear in the number of candidates."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    tries = 0
    while start != -1 and tries < MAX_JSON_CANDIDATES:
        tries += 1
        try:
            obj, _end = decoder.raw_decode(text[start : start + MAX_JSON_OBJECT_CHARS])
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict):
            yield obj
        start = text.find("{", start + 1)


def _too_deep(text: str) -> bool:
    depth = 0
    for ch in text:
        if ch in "{[":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif ch in "}]":
            depth = max(0, depth - 1)
    return False


def parse_summary(text: Any, *, shrink: bool = False) -> tuple[SkillDoc | None, str]:
    """Four-stage validation of a summary rollout output (App. D.1); never raises.

    1. extraction: cap the input, find JSON objects (fences/prose ignored);
    2. parsing: required ``skill_name``, ``key_insight``, ``method`` (list of strings or a
       string split into steps); ``problem_type`` normalised (unknown -> general);
       ``check`` defaulted;
    3. truncation: clip fields to their limits, keep the first 3 steps, reject < 2 steps;
       discard if ``to_json()`` still exceeds 220 chars (``shrink=True`` trims first --
       not the paper's behaviour).
    The first candidate object that validates is returned with ``PARSED``; else ``(None,
    OVERLONG)`` if some candidate parsed but was discarded at stage 3, else ``(None, INVALID)``
    (no valid JSON skill: the case App. D.1's fallback is for).
    """
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text[: MAX_PARSE_INPUT_CHARS * 4]).decode("utf-8", errors="replace")
        if not isinstance(text, str):
            return None, INVALID
        text = text[:MAX_PARSE_INPUT_CHARS]
        outcome = INVALID
        for obj in _iter_json_objects(text):
            if _too_deep(_compact_safe(obj)):
                continue
            doc = _coerce_fields(obj, shrink)
            if isinstance(doc, SkillDoc):
                return doc, PARSED
            if doc == OVERLONG:
                outcome = OVERLONG
        return None, outcome
    except Exception:  # pragma: no cover - defensive: parse_summary must never raise
        return None, INVALID


def parse_skill(text: Any, *, shrink: bool = False) -> SkillDoc | None:
    """The skill :func:`parse_summary` accepts, or None (discarded or not valid JSON)."""
    return parse_summary(text, shrink=shrink)[0]


def _compact_safe(obj: Any) -> str:
    try:
        return _compact(obj)
    except (ValueError, RecursionError, TypeError):
        return "[" * (MAX_JSON_DEPTH + 1)


def fallback_skill(trace: Any, problem_type: str = "general") -> SkillDoc:
    """``trace_abstract`` fallback (App. D.1): key_insight = "Solve by: " + the
    whitespace-collapsed start of the trace, truncated so that ``to_json()`` <= 220
    characters whatever the trace contains (JSON escaping is accounted for)."""
    if isinstance(trace, (bytes, bytearray)):
        trace = bytes(trace[:4096]).decode("utf-8", errors="replace")
    if not isinstance(trace, str):
        trace = ""
    trace = _clean(trace[:4096])
    ptype = normalize_problem_type(problem_type)
    base = SkillDoc(FALLBACK_NAME, ptype, FALLBACK_PREFIX.rstrip(), FALLBACK_METHOD, DEFAULT_CHECK)
    # chars available for the trace inside key_insight: JSON cap and field cap
    budget = min(MAX_DOC_CHARS - len(base.to_json()) - 1, MAX_INSIGHT_CHARS - len(FALLBACK_PREFIX))
    pieces: list[str] = []
    used = 0
    for ch in trace:
        cost = len(_compact(ch)) - 2  # escaped length of this char inside a JSON string
        if used + cost > budget:
            break
        pieces.append(ch)
        used += cost
    snippet = "".join(pieces).rstrip()
    insight = FALLBACK_PREFIX + snippet if snippet else FALLBACK_PREFIX + "direct computation"
    doc = SkillDoc(FALLBACK_NAME, ptype, insight, FALLBACK_METHOD, DEFAULT_CHECK)
    return doc.validate()


def load_seed_skills(path: str | Path | None = None) -> list[SkillDoc]:
    """Load seed skills from a JSON file: a list of skill objects (or ``{"skills": [...]}``).

    Raises ValueError naming the file, and the entry index / field on bad input."""
    p = Path(path) if path is not None else SEED_SKILLS_PATH
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{p}: cannot read seed skills file: {e}") from e
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: invalid JSON: {e}") from e
    if isinstance(data, dict) and "skills" in data:
        data = data["skills"]
    if not isinstance(data, list):
        raise ValueError(f"{p}: expected a JSON list of skill objects, got {type(data).__name__}")
    docs: list[SkillDoc] = []
    seen: set[str] = set()
    for i, entry in enumerate(data):
        try:
            doc = SkillDoc.from_dict(entry)
        except ValueError as e:
            raise ValueError(f"{p}: entry {i}: {e}") from e
        if doc.skill_name in seen:
            raise ValueError(f"{p}: entry {i}: field 'skill_name': duplicate {doc.skill_name!r}")
        seen.add(doc.skill_name)
        docs.append(doc)
    return docs
