"""``Agent[Deps, Output](...)``: calling a subscripted frozen dataclass on Python 3.11 and 3.12."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

C = TypeVar("C", bound=type)


def subscript_callable(cls: C) -> C:
    """Let ``cls[...](...)`` make an instance of a frozen, slotted generic dataclass.

    Calling a subscripted generic sets ``__orig_class__`` on the new instance and tolerates only
    ``AttributeError``; before Python 3.13 such a dataclass raises ``TypeError`` there (its
    ``__setattr__`` names the class that ``slots=True`` replaced). That one attribute is refused
    with ``AttributeError``: the instance is made, without ``__orig_class__``.
    """
    if sys.version_info >= (3, 13):
        return cls
    frozen_setattr: Callable[[object, str, object], None] = cls.__dict__["__setattr__"]

    def __setattr__(self: object, name: str, value: object) -> None:
        if name == "__orig_class__":
            raise AttributeError(name)
        frozen_setattr(self, name, value)

    setattr(cls, "__setattr__", __setattr__)  # noqa: B010 - replacing a method of the class
    return cls
