"""The ``arise.*`` command-line overrides, checked against the ``arise:`` schema before Hydra composes.

Hydra refuses an override of a key the yaml does not hold with "Could not override ... To append to
your config use +arise...": for a mistyped key that advice is wrong (the key would then fail
``ARISEConfig``). The preflight and the entry point call :func:`check_arise_overrides` first, so a
typo gets the project's message: the key, the closest known one, the section's known keys.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable

from recipe.arise.core.arise_config import ARISEConfig

__all__ = ["check_arise_overrides"]


def _section(cls) -> dict[str, type | None]:
    """A section's keys -> the sub-section's dataclass (None for a leaf)."""
    out = {}
    for f in dataclasses.fields(cls):
        factory = f.default_factory
        out[f.name] = factory if factory is not dataclasses.MISSING and dataclasses.is_dataclass(factory) else None
    return out


def _key(override: str) -> str:
    """The dotted key of a Hydra override (``+``/``++``/``~`` prefixes and the value dropped)."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def check_arise_overrides(overrides: Iterable[str]) -> None:
    """Raise ValueError naming the first ``arise.*`` override whose key the schema does not know."""
    for override in overrides:
        key = _key(override)
        if not key.startswith("arise."):
            continue
        cls, path = ARISEConfig, "arise"
        for name in key.split(".")[1:]:
            if cls is None:  # below a leaf: arise.enable.x
                raise ValueError(f"unknown key {key!r}: {path} is a value, not a section")
            known = _section(cls)
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {path}.{close[0]}?)" if close else ""
                raise ValueError(
                    f"unknown key {key!r} in {path}{hint}; known: {', '.join(sorted(known))} "
                    "(docs/config.md lists every arise key)"
                )
            cls, path = known[name], f"{path}.{name}"
