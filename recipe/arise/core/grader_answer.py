"""The answer side of the task grader (:mod:`recipe.arise.core.grader`): which text is the answer,
how it is compared, and which answers never reach sympy.

* :func:`extract_boxed`: the LAST ``\\boxed{}``/``\\fbox{}`` of a response (balanced braces) or a
  trailing ``\\boxed 5``; ``_strip_skill_echo`` drops an echoed ``SKILL:{...}`` prompt line.
* :func:`normalize_answer`, ``_int_gold``, ``_numeric_value``: light, sympy-free normalisation, so
  integer ground truths (``204``, ``"27.0"``, ``27.0``, ``"10,\\!080"``) and plain numbers are
  matched exactly by value.
* :func:`is_pathological`: cheap pre-guards for answers that could make sympy hang or blow up
  (length, control bytes, brace depth, digit runs, power towers / huge exponents, factorials /
  binomials of big numbers).
* ``_mv_equal``: the math-verify comparison, run in the grader's worker processes
  (:mod:`recipe.arise.core.grader_workers`) or, as a fallback, in-process.

Framework free; math-verify is imported only inside ``_mv_equal``.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from typing import Any

__all__ = ["extract_boxed", "is_pathological", "normalize_answer"]

MAX_ANSWER_CHARS = 400  # MATH-500 max answer length is 53
MAX_BRACE_DEPTH = 12
MAX_DIGIT_RUN = 60
MAX_INT_DIGITS = 1000
MAX_CARETS = 16

# ----------------------------------------------------------------------------- boxes

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def _scan_group(text: str, open_idx: int) -> int | None:
    """Index of the '}' matching text[open_idx] == '{' (escape-aware), or None."""
    depth = 0
    i, n = open_idx, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def extract_boxed(text: Any) -> str | None:
    """Content of the LAST ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces) or of a
    trailing ``\\boxed 5`` form; None if there is none or the last one is unterminated."""
    if not isinstance(text, str):
        return None
    last = None
    for m in _BOX_RE.finditer(text):
        last = m
    if last is None:
        return None
    i = last.end()
    n = len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i < n and text[i] == "{":
        j = _scan_group(text, i)
        if j is None:
            return None
        return text[i + 1 : j]
    if i > last.end():  # "\boxed 5" form: up to whitespace or '$'
        m = re.match(r"[^\s$]+", text[i:])
        if m:
            return m.group(0).rstrip(".,;")
    return None


def _strip_skill_echo(text: str) -> str:
    """Drop a leading ``SKILL:{...json...}`` echo of the injected prompt line."""
    s = text.lstrip()
    if not s.startswith("SKILL:"):
        return text
    brace = s.find("{")
    if brace == -1 or brace > 12:
        return text
    try:
        _obj, end = json.JSONDecoder().raw_decode(s[:20_000], brace)
    except (ValueError, RecursionError):
        nl = s.find("\n")  # fall back to dropping the echoed line
        return s[nl + 1 :] if nl != -1 else text
    return s[end:]


# ---------------------------------------------------------------------- normalisation

_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_UNIT_TAIL_RE = re.compile(r"(?<=[0-9}])\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}(\^\{?\d\}?)?\s*$")
_SPACING_RE = re.compile(r"\\[!,;: ]|~|\\quad|\\qquad")
_LHS_RE = re.compile(r"^\s*[A-Za-z](?:_\{?\w+\}?)?\s*=\s*")
_INT_RE = re.compile(r"^([+-]?)(\d+)(?:\.0*)?$")
_DEC_RE = re.compile(r"^[+-]?(?:\d+\.\d*|\.\d+)$")
_THOUSANDS_RE = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_FRAC_RE = re.compile(r"^([+-]?)\\[dt]?frac\{([+-]?\d{1,30})\}\{(\d{1,30})\}$|^([+-]?\d{1,30})/(\d{1,30})$")


def normalize_answer(s: str) -> str:
    """Light, sympy-free normalisation used for integer matching and quick equality."""
    s = s.strip()
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("{,}", ",")
    s = _SPACING_RE.sub(" ", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\^\s*\{?\\circ\}?|\\degree|°", "", s)
    s = s.replace("\\%", "").replace("%", "")
    s = _UNIT_TAIL_RE.sub("", s)
    for _ in range(3):
        s2 = _TEXT_CMD_RE.sub(r"\1", s)
        if s2 == s:
            break
        s = s2
    s = _LHS_RE.sub("", s)
    s = s.strip().rstrip(".").strip()
    s = re.sub(r"\s+", "", s)
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    return s


def _int_gold(gt: Any) -> int | None:
    if isinstance(gt, bool):
        return None
    if isinstance(gt, int):
        return gt
    if isinstance(gt, float):
        return int(gt) if math.isfinite(gt) and gt.is_integer() and abs(gt) < 1e18 else None
    if isinstance(gt, str) and len(gt) <= 200:
        inner = extract_boxed(gt) if "\\boxed" in gt else gt
        if inner is None:
            return None
        m = _INT_RE.match(normalize_answer(inner))
        if m and len(m.group(2)) <= MAX_INT_DIGITS:
            return int(m.group(1) + m.group(2))
    return None


def _numeric_value(s: str) -> Fraction | None:
    """Exact value of a plain integer / decimal / simple fraction string, else None."""
    m = _INT_RE.match(s)
    if m:
        if len(m.group(2)) > MAX_INT_DIGITS:
            return None
        digits = m.group(2).lstrip("0") or "0"
        if len(digits) > 4000:  # int() str-conversion limit
            return None
        return Fraction(int(m.group(1) + digits))
    if _DEC_RE.match(s) and len(s) <= 60:
        return Fraction(s)
    m = _FRAC_RE.match(s)
    if m:
        if m.group(2) is not None:
            sign, num, den = m.group(1), m.group(2), m.group(3)
        else:
            sign, num, den = "", m.group(4), m.group(5)
        if int(den) == 0:
            return None
        v = Fraction(int(num), int(den))
        return -v if sign == "-" else v
    return None


# -------------------------------------------------------------------------- guards

_CTRL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
_DIGITS_RE = re.compile(r"\d+")


def _group_after(s: str, i: int) -> str:
    """The exponent/operand starting at s[i]: a {...} group, or a token."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] == "{":
        j = _scan_group(s, i)
        return s[i:] if j is None else s[i : j + 1]
    m = re.match(r"\\?[A-Za-z]+|\d+|.", s[i:])
    return m.group(0) if m else ""


def is_pathological(ans: str) -> bool:
    """Cheap structural checks for answers that could make sympy hang or blow up."""
    if len(ans) > MAX_ANSWER_CHARS or _CTRL_RE.search(ans):
        return True
    depth = 0
    for c in ans:
        if c in "{([":
            depth += 1
            if depth > MAX_BRACE_DEPTH:
                return True
        elif c in "})]":
            depth -= 1
    if any(len(d) > MAX_DIGIT_RUN for d in _DIGITS_RE.findall(ans)):
        return True
    s = ans.replace("**", "^")
    if s.count("^") > MAX_CARETS or "\\uparrow" in s or "\u2191" in s:
        return True
    for m in re.finditer(r"\^", s):
        exp = _group_after(s, m.end())
        k = m.end()
        while k < len(s) and s[k] == " ":
            k += 1
        if s[k + len(exp) :].lstrip().startswith("^"):  # chained tower a^b^c
            return True
        if "^" in exp or "!" in exp or "\\binom" in exp or "\\frac" in exp and re.search(r"\d{3,}", exp):
            return True
        if any(len(d) >= 4 for d in _DIGITS_RE.findall(exp)):
            return True
    for m in re.finditer(r"!", s):
        before = s[: m.start()].rstrip()
        if not before:
            continue
        if before[-1] in "})]":
            # operand is a group: reject if it holds a big number or a power
            k = len(before) - 1
            opener = {"}": "{", ")": "(", "]": "["}[before[-1]]
            lvl = 0
            while k >= 0:
                if before[k] in "})]":
                    lvl += 1
                elif before[k] in "{([":
                    lvl -= 1
                    if lvl == 0:
                        break
                k -= 1
            operand = before[max(k, 0) :]
            if "^" in operand or "!" in operand or re.search(r"\d{3,}", operand) or opener not in operand:
                return True
            if before[: max(k, 0)].rstrip().endswith("^"):  # a factorial on an exponent: 9^{99}!
                return True
        else:
            m2 = re.search(r"(\d+)$", before)
            if m2 and len(m2.group(1)) >= 3:
                return True
    for m in re.finditer(r"\\(?:sum|prod)", s):  # big symbolic sums/products: \sum_{k=1}^{999} k^k
        if re.search(r"\^\s*\{?\s*\d{3,}", s[m.end() : m.end() + 80]):
            return True
    for m in re.finditer(r"\\(?:binom|dbinom|tbinom|choose)", s):
        tail = s[m.end() : m.end() + 80]
        if "^" in tail or re.search(r"\d{4,}", tail):
            return True
    return False


# ------------------------------------------------------------------ math-verify core


def _mv_equal(pred: str, gold: str, timeout_int: int | None) -> bool:
    """math-verify equivalence (runs in a worker process or, as fallback, in-process)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_text = gold if ("$" in gold or "\\boxed" in gold) else f"${gold}$"
    cfg_gold = [LatexExtractionConfig(), ExprExtractionConfig()]
    cfg_pred = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    g = parse(gold_text, extraction_config=cfg_gold, parsing_timeout=timeout_int)
    if not g:
        return False
    p = parse("\\boxed{" + pred + "}", extraction_config=cfg_pred, parsing_timeout=timeout_int)
    if not p:
        return False
    return bool(verify(g, p, timeout_seconds=timeout_int))
