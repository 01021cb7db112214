"""The bounded channel a streamed run's events take from its task to the reader.

``anyio``'s memory object stream does more than one writer and one reader need, on the hottest
path of a streamed run: a dict of waiting receivers with a task handle each, and a full
scheduling round trip (``checkpoint``) before every wait, on top of the wake-up itself. This
channel is a deque: a read takes a buffered event at once (all the events of one wake-up are
read without another), and a reader with nothing to read waits once, woken by the next event.
Its promises are the stream's: at most ``capacity`` events are held (a writer with a full
buffer waits for the reader: backpressure), and every read is a cancellation point, even when
events are buffered.

On asyncio two of anyio's costs are skipped, with its semantics kept. A buffered read asks
whether the reader's cancel scopes were cancelled (``_AsyncioCancelCheck``: anyio's own walk,
done without its coroutine, the task-state lookup and a property call per scope: 9 K
instructions a read, 10 reads a turn) and takes the checkpoint only when they were. A reader
or writer with nothing to do waits on a bare future, which anyio's cancellation cancels as it
would an ``anyio.Event``'s (that is an ``asyncio.Event`` and two coroutines around the same
future). Both read anyio's private task states; a version without them gets the backend's own
``checkpoint_if_cancelled`` and events (``tests/test_channel.py`` checks both on the installed
one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

from anyio import BrokenResourceError, ClosedResourceError, EndOfStream, WouldBlock
from anyio._core._eventloop import get_async_backend  # the backend, looked up once per run

from ._anyio_internals import asyncio_internals

__all__ = ["EventChannel"]

T = TypeVar("T")


class _Waiter(Protocol):
    def set(self) -> None: ...

    def wait(self) -> Awaitable[Any]: ...


class _FutureWaiter:
    """A one-shot wake-up on asyncio: a bare future (see the module's docstring)."""

    __slots__ = ("_future",)

    def __init__(self, loop: Any) -> None:
        self._future = loop.create_future()

    def set(self) -> None:
        future = self._future
        if not future.done():
            future.set_result(None)

    def wait(self) -> Awaitable[Any]:
        future: Awaitable[Any] = self._future
        return future


class _AsyncioCancelCheck:
    """Whether the current task's anyio cancel scopes were cancelled, as anyio's asyncio
    ``checkpoint_if_cancelled`` decides it (the nearest scopes up to a shielded one), without
    the checkpoint. The reader's task state is looked up once: anyio keeps one per task for
    the task's life."""

    __slots__ = ("_current_task", "_state", "_states", "_task")

    def __init__(self, module: Any) -> None:
        self._states = module._task_states
        self._current_task = module.current_task
        self._task: Any = None
        self._state: Any = None

    def __call__(self) -> bool:
        task = self._current_task()
        if task is not self._task:
            state = self._states.get(task) if task is not None else None
            if state is None:
                return False  # no anyio scope in this task: nothing can cancel the read
            self._task, self._state = task, state
        scope = self._state.cancel_scope
        while scope is not None:
            if scope._cancel_called:
                return True
            if scope._shield:
                return False
            scope = scope._parent_scope
        return False


class EventChannel(Generic[T]):
    """One writer (the run, whose ``Emitter`` keeps its sends in order) and one reader.

    The writer's side is a ``MemoryObjectSendStream``'s: ``send_nowait`` (``WouldBlock`` when
    full, ``BrokenResourceError`` once the reader left), ``send`` and ``close``.

    Args:
        capacity: The most events held for the reader.
    """

    __slots__ = (
        "_backend",
        "_buffer",
        "_cancelled",
        "_capacity",
        "_new_waiter",
        "_reader",
        "_reader_closed",
        "_writer",
        "_writer_closed",
    )

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("an event channel holds at least one event")
        self._buffer: deque[T] = deque()
        self._capacity = capacity
        backend = self._backend = get_async_backend()
        internals = asyncio_internals(backend)
        self._cancelled: Callable[[], bool] | None  # None: take the checkpoint every read
        self._new_waiter: Callable[[], _Waiter]
        if internals is not None:
            self._cancelled = _AsyncioCancelCheck(internals)
            loop = internals.get_running_loop()
            self._new_waiter = lambda: _FutureWaiter(loop)
        else:
            self._cancelled = None
            self._new_waiter = backend.create_event
        self._reader: _Waiter | None = None  # the reader waits for an event
        self._writer: _Waiter | None = None  # the writer waits for room
        self._reader_closed = False
        self._writer_closed = False

    # -- the writer ----------------------------------------------------------------------------

    def send_nowait(self, item: T) -> None:
        if self._writer_closed:
            raise ClosedResourceError
        if self._reader_closed:
            raise BrokenResourceError
        buffer = self._buffer
        if len(buffer) >= self._capacity:
            raise WouldBlock
        buffer.append(item)
        reader = self._reader
        if reader is not None:
            self._reader = None
            reader.set()

    async def send(self, item: T) -> None:
        """Send, waiting while the buffer is full (cancellable meanwhile)."""
        await self._backend.checkpoint_if_cancelled()
        while True:
            try:
                return self.send_nowait(item)
            except WouldBlock:
                pass
            room = self._writer = self._new_waiter()
            await room.wait()

    def close(self) -> None:
        """The writer is done: the reader gets ``EndOfStream`` once the buffer is empty."""
        self._writer_closed = True
        reader = self._reader
        if reader is not None:
            self._reader = None
            reader.set()

    async def __aenter__(self) -> EventChannel[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- the reader ----------------------------------------------------------------------------

    def receive(self) -> Awaitable[T]:
        """The next event: a cancellation point even when one is buffered; ``EndOfStream``
        after the last, ``ClosedResourceError`` once the reader closed."""
        return self._receive(False)

    def next(self) -> Awaitable[T]:
        """``receive`` for an ``async for``: ``StopAsyncIteration`` instead of both errors (the
        stream's ``__anext__`` is this, not a coroutine around it: one less per event)."""
        return self._receive(True)

    async def _receive(self, iterating: bool) -> T:
        backend = self._backend
        buffer = self._buffer
        if buffer:  # taken at once: a cancellation point all the same
            cancelled = self._cancelled
            if cancelled is None or cancelled():
                await backend.checkpoint_if_cancelled()
        while not buffer:
            if self._reader_closed or self._writer_closed:
                await backend.checkpoint_if_cancelled()  # a cancelled reader hears that first
                if self._reader_closed:
                    raise StopAsyncIteration if iterating else ClosedResourceError
                raise StopAsyncIteration if iterating else EndOfStream
            # Nothing to take: the wait is the read's cancellation point (no check before it).
            event = self._reader = self._new_waiter()
            try:
                await event.wait()
            finally:
                self._reader = None
        if self._reader_closed:
            raise StopAsyncIteration if iterating else ClosedResourceError
        item = buffer.popleft()
        writer = self._writer
        if writer is not None:
            self._writer = None
            writer.set()
        return item

    def close_reader(self) -> None:
        """The reader left: the writer's next send raises ``BrokenResourceError``, and a writer
        waiting for room wakes to it. What was buffered is dropped."""
        self._reader_closed = True
        self._buffer.clear()
        writer = self._writer
        if writer is not None:
            self._writer = None
            writer.set()
