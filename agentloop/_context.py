"""A run's state as middleware and tools see it: ``StateView``, and the ``SerialQueue`` that
orders work on one key. (``RunContext``, the view of the run that holds it, is typed in
``models._types``, beside the ``ModelRequest`` that carries it.)"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, final

import anyio

from ._errors import UserError, as_given

TEMP_PREFIX = "temp:"
_MAKING_MUTEX = threading.Lock()  # the first change of a state makes its lock under this one


@final
class StateView(Mapping[str, Any]):
    """A session's state during a run: a flat JSON mapping with change tracking.

    Keys starting with ``temp:`` live for this run only and are never persisted. Values must be
    JSON-serialisable (checked when set). ``update(key, fn)`` is an atomic read-modify-write, also
    from sync tools running in worker threads. When parallel tools write the same key, the last to
    finish wins. Goal tools take ``lock(key)`` to serialise a load → mutate → save.

    Args:
        data: The state to start from (copied).
    """

    __slots__ = ("_changes", "_data", "_locks", "_mutex", "_read_only", "_serial")

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(data or {})
        # Keys changed since ``take_changes``: True set, False deleted (the last change wins).
        # One dict, not two sets: every run has a state, and an empty set is 216 bytes.
        self._changes: dict[str, bool] = {}
        # Made when first needed (most runs never lock a key nor write from a thread): every
        # run in flight has a state, and these are some 220 bytes.
        self._locks: dict[str, anyio.Lock] | None = None
        self._serial: dict[str, SerialQueue] | None = None
        self._mutex: threading.Lock | None = None
        self._read_only = False

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._check_writable(key)
        _check_json(key, value)
        with self._guard():
            self._data[key] = value
            self._changes[key] = True

    def __delitem__(self, key: str) -> None:
        self._check_writable(key)
        with self._guard():
            del self._data[key]
            self._changes[key] = False

    def pop(self, key: str, default: Any = None) -> Any:
        """Remove ``key`` and return its value.

        Args:
            key: The key to remove.
            default: What to return when ``key`` is not set.
        """
        if key not in self._data:
            return default
        value = self._data[key]
        del self[key]
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"StateView({self._data!r})"

    def update(self, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """Atomically replace ``state[key]`` by ``fn(old)`` (``old`` is ``default`` if unset).

        Args:
            key: The key to change.
            fn: The new value as a function of the old one (called under the state's lock).
            default: The old value when ``key`` is not set.
        """
        self._check_writable(key)
        with self._guard():
            new = fn(self._data.get(key, default))
            _check_json(key, new)
            self._data[key] = new
            self._changes[key] = True
            return new

    def lock(self, key: str) -> anyio.Lock:
        """A lock for a read-modify-write of ``key`` that spans awaits (one per key and run).

        Args:
            key: The key the lock guards.
        """
        locks = self._locks
        if locks is None:
            locks = self._locks = {}
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = anyio.Lock()
        return lock

    def serial(self, key: str) -> SerialQueue:
        """The queue that runs work on ``key`` one at a time, in the order tickets were taken.

        Args:
            key: The key the queue orders work on.
        """
        serial = self._serial
        if serial is None:
            serial = self._serial = {}
        queue = serial.get(key)
        if queue is None:
            queue = serial[key] = SerialQueue()
        return queue

    def snapshot(self) -> dict[str, Any]:
        """A copy of the persistent part of the state (no ``temp:`` keys)."""
        with self._guard():
            return {k: v for k, v in self._data.items() if not k.startswith(TEMP_PREFIX)}

    def take_changes(self) -> tuple[dict[str, Any], set[str]]:
        """The persistent keys set and deleted since the last call, and forget them."""
        if not self._changes:  # most steps change nothing
            return {}, set()
        with self._guard():
            persistent = [
                (k, kept) for k, kept in self._changes.items() if not k.startswith(TEMP_PREFIX)
            ]
            changed = {k: self._data[k] for k, kept in persistent if kept}
            deleted = {k for k, kept in persistent if not kept}
            self._changes.clear()
        return changed, deleted

    def read_only(self) -> StateView:
        """A view of the same data that refuses writes (given to abandoned sync tools)."""
        # Shared with this view, so made now: made later, each view would have its own.
        if self._locks is None:
            self._locks = {}
        if self._serial is None:
            self._serial = {}
        self._guard()
        view = StateView.__new__(StateView)
        view._data = self._data
        view._changes = self._changes
        view._locks = self._locks
        view._serial = self._serial
        view._mutex = self._mutex
        view._read_only = True
        return view

    def _guard(self) -> threading.Lock:
        """The lock of every change and copy, made with the first (under a lock of the module:
        a sync tool's thread may be the first)."""
        mutex = self._mutex
        if mutex is None:
            with _MAKING_MUTEX:
                mutex = self._mutex
                if mutex is None:
                    mutex = self._mutex = threading.Lock()
        return mutex

    def _check_writable(self, key: str) -> None:
        if self._read_only:
            raise UserError(f"state is read-only here (writing {key!r} after the action ended)")
        if not isinstance(as_given(key), str):
            raise UserError(f"state keys are strings, not {type(key).__name__}")


@final
class SerialQueue:
    """A FIFO of tickets: ``take()`` is synchronous, so the order is the order of the calls
    (the executor takes them in the model's order, before any task starts)."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[anyio.Event] = deque()

    def take(self) -> Ticket:
        turn = anyio.Event()
        if not self._queue:
            turn.set()
        self._queue.append(turn)
        return Ticket(self, turn)

    def release(self, turn: anyio.Event) -> None:
        """End ``turn`` (its ticket's): the next ticket's turn starts if it was first."""
        was_first = bool(self._queue) and self._queue[0] is turn
        self._queue.remove(turn)
        if was_first and self._queue:
            self._queue[0].set()


@final
class Ticket:
    """A place in a ``SerialQueue``: ``async with ticket:`` waits for its turn; leaving (or
    ``release()``, for a ticket never used) gives the turn to the next."""

    __slots__ = ("_queue", "_released", "_turn")

    def __init__(self, queue: SerialQueue, turn: anyio.Event) -> None:
        self._queue = queue
        self._turn = turn
        self._released = False

    async def __aenter__(self) -> None:
        try:
            await self._turn.wait()
        except BaseException:
            self.release()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._queue.release(self._turn)


def _check_json(key: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UserError(f"state[{key!r}] must be JSON-serialisable: {exc}") from None
