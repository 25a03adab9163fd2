"""The fields of one raw record: answer normalisation (the ground-truth string the grader sees)
and the checks that send a malformed record to the bad-row report.

Pure Python.  The scripts import these names through :mod:`recipe.arise.data_prep.common`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from recipe.arise.data_prep.records import BadRowCollector, Record

# --------------------------------------------------------------------------------------
# Answer normalisation
# --------------------------------------------------------------------------------------

# JSON escapes that swallow a LaTeX backslash: "\frac" in a JSON string is form-feed + "rac".
_CTRL_FIX = {"\x0c": "\\f", "\x08": "\\b", "\x07": "\\a", "\x0b": "\\v"}
_WRAPPERS = [("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")]


class AnswerError(ValueError):
    """The answer is missing or of an unusable type."""


def _strip_wrappers(s: str) -> str:
    changed = True
    while changed:
        changed = False
        s = s.strip()
        for left, right in _WRAPPERS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                inner = s[len(left) : len(s) - len(right)]
                # "$a$ and $b$" must not become "a$ and $b"
                if left == "$" and "$" in inner:
                    continue
                s = inner
                changed = True
                break
    return s.strip()


def _extract_last_boxed(s: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` / ``\\fbox{...}`` in s, else None."""
    idx = max(s.rfind("\\boxed{"), s.rfind("\\fbox{"))
    if idx < 0:
        return None
    start = s.index("{", idx)
    depth = 0
    for j in range(start, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return s[start + 1 : j]
    return None  # unbalanced


def _format_number(x: float | int) -> str:
    if isinstance(x, bool):
        raise AnswerError("boolean answer")
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        raise AnswerError(f"non-finite numeric answer {x!r}")
    if float(x).is_integer():
        return str(int(x))
    return repr(float(x))  # shortest round-trip repr, e.g. 0.5 -> "0.5"


def normalize_answer(ans: Any, *, strip_leading_zeros: bool = False) -> str:
    """Turn a raw dataset answer into the ground-truth string used by the grader.

    Rules (see docs/data.md):
      * None / empty / whitespace-only -> AnswerError (row is malformed).
      * bool, dict, other objects -> AnswerError.
      * int -> str(int); float -> "27" for 27.0, shortest repr otherwise ("0.5").
      * numpy scalars are treated like int/float.
      * list/tuple (Minerva / OlympiadBench style): elements normalised; empty ones dropped;
        one element -> that element; several -> joined with ", "; empty list -> AnswerError.
      * str: control characters produced by bad JSON escapes are repaired ("\\x0crac" -> "\\frac"),
        surrounding whitespace and $..$, $$..$$, \\(..\\), \\[..\\] are stripped; if the answer
        contains \\boxed{...} the content of the last one is used; wrappers are stripped again.
        The LaTeX itself is otherwise kept verbatim.
      * strip_leading_zeros=True (AIME-style sources only): a pure digit string loses leading
        zeros ("012" -> "12", "000" -> "0").
    """
    if ans is None:
        raise AnswerError("missing answer (null)")
    # numpy / pandas scalars without importing numpy
    if hasattr(ans, "item") and not isinstance(ans, (str, bytes, list, tuple, dict)):
        try:
            ans = ans.item()
        except Exception:  # pragma: no cover
            pass
    if hasattr(ans, "tolist") and not isinstance(ans, (str, bytes, list, tuple, dict)):
        ans = ans.tolist()  # numpy array (parquet list column read through pandas)
    if isinstance(ans, bool):
        raise AnswerError("boolean answer")
    if isinstance(ans, (int, float)):
        out = _format_number(ans)
    elif isinstance(ans, (list, tuple)):
        parts = []
        for a in ans:
            try:
                parts.append(normalize_answer(a, strip_leading_zeros=strip_leading_zeros))
            except AnswerError:
                continue
        if not parts:
            raise AnswerError("empty answer list")
        return ", ".join(parts)
    elif isinstance(ans, str):
        s = ans
        for bad_c, good in _CTRL_FIX.items():
            s = s.replace(bad_c, good)
        s = re.sub(r"\t(?=[a-zA-Z])", r"\\t", s)  # "\theta", "\times", "\tfrac"
        s = re.sub(r"\r(?=[a-zA-Z])", r"\\r", s)  # "\right", "\rangle"
        s = _strip_wrappers(s)
        boxed = _extract_last_boxed(s)
        if boxed is not None:
            s = _strip_wrappers(boxed)
        out = s
    else:
        raise AnswerError(f"unsupported answer type {type(ans).__name__}")
    if not out.strip():
        raise AnswerError("empty answer")
    if strip_leading_zeros and re.fullmatch(r"\d+", out):
        out = str(int(out))
    return out


def raw_answer_repr(ans: Any) -> str:
    if isinstance(ans, str):
        return ans
    try:
        return json.dumps(ans, ensure_ascii=False)
    except TypeError:
        return repr(ans)


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def validate_problem(rec: Record, problem: Any, bad: BadRowCollector) -> str | None:
    if problem is None:
        bad.add(rec, "missing problem (null)")
        return None
    if not isinstance(problem, str):
        bad.add(rec, f"problem is {type(problem).__name__}, not a string")
        return None
    if not problem.strip():
        bad.add(rec, "empty problem")
        return None
    return problem.strip()


def validate_answer(rec: Record, answer: Any, bad: BadRowCollector, *, strip_leading_zeros=False) -> str | None:
    try:
        return normalize_answer(answer, strip_leading_zeros=strip_leading_zeros)
    except AnswerError as e:
        bad.add(rec, str(e) + f" [raw: {raw_answer_repr(answer)[:60]!r}]")
        return None


def _clean_float(x) -> float | None:
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def clean_float(x) -> float | None:
    """float or None (NaN / unparsable -> None)."""
    return _clean_float(x)


def clean_int(x) -> int | None:
    f = _clean_float(x)
    return None if f is None or not f.is_integer() else int(f)
