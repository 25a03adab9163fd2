"""The set-up order of the ARISE trainer's mixins (``trainer_gate``, ``trainer_upload``): a mixin
declares its own state with :func:`set_by` and reads its host's late state through
:func:`needs_set_up`, so a method run before the call that makes that state raises a
:class:`SetUpError` naming the call (tests/adapters/test_trainer_interfaces.py)."""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["SetUpError", "needs_set_up", "set_by"]

T = TypeVar("T")


class SetUpError(RuntimeError, AttributeError):
    """A trainer mixin read state before the set-up call that makes it. An AttributeError too, so
    ``hasattr``/``getattr(..., default)`` still see an unset attribute as absent."""


class _SetBy:
    """A mixin's own state attribute, assigned by its set-up call: the value assigned lives in the
    instance and shadows this (a non-data descriptor), so only a read before the set-up gets here."""

    def __init__(self, setup: str):
        self.setup = setup
        self.where = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.where = f"{owner.__name__}.{name}"

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        raise SetUpError(f"ARISE: {self.where} read before {self.setup} set it (the trainer's __init__ calls it)")


def set_by(setup: str) -> Any:
    """Declare a mixin's state attribute (annotated beside it) and the set-up call that assigns it."""
    return _SetBy(setup)


def needs_set_up(value: T | None, name: str, setup: str) -> T:
    """``value``, the host's state ``name``; None means ``setup`` has not run yet: SetUpError naming it."""
    if value is None:
        raise SetUpError(f"ARISE: {name} is None: {setup} has not run yet (it builds it)")
    return value
