"""Typed ``isinstance`` for decoded JSON, as ``agentloop._json`` (a seam user imports only public
modules): ``isinstance(x, dict)`` leaves the keys and values of unknown type, which spreads
through every line that reads them; these say what JSON holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard


def is_dict(value: object) -> TypeGuard[dict[str, Any]]:
    """``isinstance(value, dict)``: a JSON object."""
    return isinstance(value, dict)


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``: a JSON object, or a mapping standing for one."""
    return isinstance(value, Mapping)


def is_list(value: object) -> TypeGuard[list[Any]]:
    """``isinstance(value, list)``: a JSON array."""
    return isinstance(value, list)
