"""Deadlines that cost nothing when there is none, times a person can read, and the engine's
one seam for randomness, fresh ids and the wall clock (a durable run's workflow replaces them
with its engine's deterministic ones: ``use_entropy``)."""

from __future__ import annotations

import random
import sys
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol

import anyio
from anyio._core._eventloop import get_async_backend  # see _FailAfter

from ._anyio_internals import asyncio_internals

_NO_DEADLINE: AbstractContextManager[Any] = nullcontext()
SHIELD_RECHECK = 0.01  # seconds: how soon a deadline that met a shielded scope looks again


class Entropy(Protocol):
    """Where the engine takes randomness, fresh ids and the wall clock from."""

    def unix(self) -> float:
        """The time, in unix seconds."""
        ...

    def random(self) -> float:
        """A float in [0, 1)."""
        ...

    def new_id(self) -> str:
        """A fresh 32-character hex id."""
        ...


# Context-local, not global: only the tasks of a run that set it (a workflow's) see it.
_ENTROPY: ContextVar[Entropy | None] = ContextVar("agentloop_entropy", default=None)


def use_entropy(entropy: Entropy | None) -> Token[Entropy | None]:
    """Make ``entropy`` the source of ``random_fraction`` and ``new_id`` in this context (and
    the tasks it starts from now on)."""
    return _ENTROPY.set(entropy)


def unix_time() -> float:
    """The time in unix seconds (what records are stamped with): ``time.time()`` unless a
    context replaced it."""
    entropy = _ENTROPY.get()
    return time.time() if entropy is None else entropy.unix()


def random_fraction() -> float:
    """A float in [0, 1): ``random.random()`` unless a context replaced it."""
    entropy = _ENTROPY.get()
    return random.random() if entropy is None else entropy.random()


def new_id() -> str:
    """A fresh run id: ``uuid4().hex`` unless a context replaced it."""
    entropy = _ENTROPY.get()
    return uuid.uuid4().hex if entropy is None else entropy.new_id()


def fail_after(seconds: float | None) -> AbstractContextManager[Any]:
    """``anyio.fail_after``, or nothing at all when ``seconds`` is ``None`` (hot paths)."""
    return _NO_DEADLINE if seconds is None else _FailAfter(seconds)


class _FailAfter:
    """``anyio.fail_after`` as a plain class: one cancel scope, and ``TimeoutError`` when its
    deadline cancelled the block. It guards every model attempt and tool call, and anyio's is
    a generator-based context manager: two more objects and a generator frame each time."""

    __slots__ = ("_scope",)

    def __init__(self, seconds: float) -> None:
        # Made by the backend itself: ``anyio.CancelScope(...)`` makes the backend's scope
        # and then initialises it a second time (two more sets made and dropped).
        backend = get_async_backend()
        self._scope = backend.create_cancel_scope(deadline=backend.current_time() + seconds)

    def __enter__(self) -> anyio.CancelScope:
        return self._scope.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        scope = self._scope
        caught = scope.__exit__(exc_type, exc, tb)
        if caught and anyio.current_time() >= scope.deadline:
            if exc is not None:  # our own cancellation, swallowed: the error keeps no frames
                exc.__traceback__ = None
            raise TimeoutError from None
        return caught


def task_deadline(seconds: float | None) -> AbstractContextManager[Any]:
    """``fail_after`` for a block that every run in flight holds (a model attempt): on asyncio
    a timer that cancels the task, as ``asyncio.timeout`` does, instead of a cancel scope of
    its own. An anyio scope is two sets, a timer handle and the scope, 0.9 KiB; this, the
    handle and a small object. On any other loop, or an anyio whose task states are not as
    ``asyncio_internals`` expects, ``fail_after``."""
    if seconds is None:
        return _NO_DEADLINE
    internals = asyncio_internals(get_async_backend())
    if internals is None:  # not asyncio, or an anyio that keeps its task states otherwise
        return _FailAfter(seconds)
    task = internals.current_task()
    if task is None:  # a callback: nothing to cancel natively
        return _FailAfter(seconds)
    return _TaskDeadline(task, task.get_loop().time() + seconds, internals._task_states)


class _TaskDeadline:
    """``asyncio.timeout`` as a plain context manager: at the deadline the task is cancelled
    once; the cancellation that leaves the block then becomes ``TimeoutError``, unless another
    was asked for meanwhile (the task's cancel count says so), which goes on as cancellation.
    The task is suspended inside the block whenever the timer can fire (the block disarms it
    as it leaves), so the cancellation is thrown at an await of the block's, never later.
    A native cancellation passes anyio's shields, so while the task is inside a shielded scope
    of the block (a stream closing its response) the timer looks again a little later."""

    __slots__ = ("_cancelling", "_fired", "_handle", "_outer", "_states", "_task", "_when")

    def __init__(self, task: Any, when: float, states: Any) -> None:
        self._task = task
        self._when = when
        self._states = states
        self._fired = False
        self._cancelling = 0
        self._outer: Any = None
        self._handle: Any = None

    def __enter__(self) -> None:
        task = self._task
        self._cancelling = task.cancelling()
        state = self._states.get(task)
        self._outer = state.cancel_scope if state is not None else None
        self._handle = task.get_loop().call_at(self._when, self._fire)

    def _shielded(self) -> bool:
        state = self._states.get(self._task)
        scope = state.cancel_scope if state is not None else None
        while scope is not None and scope is not self._outer:
            if scope._shield:
                return True
            scope = scope._parent_scope
        return False

    def _fire(self) -> None:
        if self._shielded():
            self._handle = self._task.get_loop().call_later(SHIELD_RECHECK, self._fire)
            return
        self._fired = True
        self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._handle.cancel()
        self._handle = None
        if not self._fired:
            return
        task = self._task
        if task.uncancel() <= self._cancelling and exc is not None:
            if isinstance(exc, sys.modules["asyncio"].CancelledError):
                exc.__traceback__ = None  # ours, swallowed: the error keeps no frames
                raise TimeoutError from None


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
