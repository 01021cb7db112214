"""Deadlines that cost nothing when there is none, and times a person can read."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Any

import anyio

_NO_DEADLINE: AbstractContextManager[Any] = nullcontext()


def fail_after(seconds: float | None) -> AbstractContextManager[Any]:
    """``anyio.fail_after``, or nothing at all when ``seconds`` is ``None`` (hot paths)."""
    return _NO_DEADLINE if seconds is None else anyio.fail_after(seconds)


def utc_text(unix: float) -> str:
    """``2026-05-01 12:00:07 UTC``: a unix time in a message, where raw epoch seconds say
    nothing to a person."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration_text(seconds: float) -> str:
    """``0.25 s``, ``12 s``, ``3 min 5 s``, ``2 h 5 min``: a span of time in a message."""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
