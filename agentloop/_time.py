"""Deadlines that cost nothing when there is none."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import anyio

_NO_DEADLINE: AbstractContextManager[Any] = nullcontext()


def fail_after(seconds: float | None) -> AbstractContextManager[Any]:
    """``anyio.fail_after``, or nothing at all when ``seconds`` is ``None`` (hot paths)."""
    return _NO_DEADLINE if seconds is None else anyio.fail_after(seconds)
