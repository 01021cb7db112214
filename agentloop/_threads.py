"""Worker threads for sync tools: daemon threads of our own, bounded by the thread limiter.

anyio's worker threads are not daemon threads on asyncio, so one that hangs in a tool (a socket
read without a timeout) keeps the interpreter from exiting long after ``run_sync`` returned.
Ours are daemon threads, reused while busy (an idle one ends after ``IDLE_SECONDS``), and hand
their outcome back to the event loop with ``anyio.from_thread.run_sync`` and the loop's token.
While a tool runs, its thread is marked as an anyio worker thread of the run's loop (see
``_as_worker``), so the tool may call ``anyio.from_thread.run_sync`` / ``run`` as anyio documents.

The rule for abandoned threads (a sync tool cancelled or past its timeout while its thread still
runs): the waiting task returns at once; the thread keeps its limiter token until it really
ends; each abandonment is a warning naming the tool; and the abandoned threads holding tokens of
a limiter are counted per limiter. A sync call that finds every token of its limiter held by
abandoned threads does not wait for one (it might wait forever): it fails at once with
``NoWorkerThread``, naming the stuck tools, and so do calls already waiting when the last token
becomes stuck. While some tokens are held by threads that still work, a call waits, within its
own timeout.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

logger = logging.getLogger("agentloop")

IDLE_SECONDS = 10.0
_idle: list[_Worker] = []
_idle_lock = threading.Lock()


def borrow_nowait(limiter: anyio.CapacityLimiter, borrower: object) -> bool:
    """Take a token of ``limiter`` for ``borrower`` if one is free now, without a scheduling
    round trip. anyio before 4.15 lets trio's own ``WouldBlock`` out of a limiter on trio
    instead of anyio's: it means the same, none is free."""
    try:
        limiter.acquire_on_behalf_of_nowait(borrower)
    except anyio.WouldBlock:
        return False
    except Exception as exc:
        trio = sys.modules.get("trio")
        if trio is not None and isinstance(exc, trio.WouldBlock):
            return False
        raise
    return True


@contextmanager
def _as_worker(token: anyio.lowlevel.EventLoopToken | None) -> Generator[None]:
    """Mark this thread as an anyio worker thread of ``token``'s loop while a tool runs.

    anyio finds the loop of ``from_thread.run_sync`` / ``run`` called without a token in a
    thread-local that only its own ``to_thread.run_sync`` sets (and, on trio, trio's own); there
    is no public way to set them for a thread of ours, so this sets the same ones. Calls go to
    the loop as from an abandonable thread (on trio, into the system nursery): the runtime may
    abandon this thread, so no task is waiting to host them. ``from_thread.check_cancelled``
    never raises here. Should a future anyio or trio move these, the tool still runs, and only
    calls without a token fail, as they would in any thread."""
    if token is None:
        yield
        return
    marked: list[tuple[object, str]] = []  # (thread-local, attribute) to remove afterwards
    try:
        from anyio._core._eventloop import threadlocals

        marks: tuple[tuple[str, object], ...] = (
            ("current_token", token),
            ("current_cancel_scope", None),
        )
        for name, value in marks:
            setattr(threadlocals, name, value)
            marked.append((threadlocals, name))
        trio = sys.modules.get("trio")
        if trio is not None and isinstance(token.native_token, trio.lowlevel.TrioToken):
            from trio._threads import PARENT_TASK_DATA

            native: object = token.native_token
            marks = (("token", native), ("abandon_on_cancel", True), ("cancel_register", [None]))
            for name, value in marks:
                setattr(PARENT_TASK_DATA, name, value)
                marked.append((PARENT_TASK_DATA, name))
    except Exception:  # internals moved: run the tool without the marks
        logger.debug("could not mark a sync tool's thread as an anyio worker", exc_info=True)
    try:
        yield
    finally:
        for local, name in reversed(marked):
            if hasattr(local, name):
                delattr(local, name)


class _Worker:
    """A daemon thread that runs one job after another."""

    __slots__ = ("jobs",)

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._work, name="agentloop-tool", daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with _idle_lock:
                    if self in _idle:  # nobody took this worker meanwhile: end
                        _idle.remove(self)
                        return
                continue  # taken just now: its job is on the way
            job()
            del job
            with _idle_lock:
                _idle.append(self)


def start_in_thread(job: Callable[[], None]) -> None:
    """Run ``job`` in an idle worker thread, or a new one."""
    with _idle_lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
    worker.jobs.put(job)


class NoWorkerThread(Exception):
    """Every token of the thread limiter is held by an abandoned thread."""


class Stuck:
    """The abandoned threads that hold tokens of one thread limiter, by tool name."""

    __slots__ = ("count", "names", "waiters")

    def __init__(self) -> None:
        self.count = 0
        self.names: Counter[str] = Counter()
        self.waiters: set[anyio.CancelScope] = set()

    def add(self, name: str, limiter: anyio.CapacityLimiter) -> None:
        self.count += 1
        self.names[name] += 1
        if self.count >= limiter.total_tokens:
            for scope in self.waiters:
                scope.cancel()

    def remove(self, name: str) -> None:
        self.count -= 1
        self.names[name] -= 1
        if self.names[name] <= 0:
            del self.names[name]

    def message(self) -> str:
        tools = ", ".join(
            f"{name!r}" + (f" ({n})" if n > 1 else "") for name, n in self.names.most_common()
        )
        are = "thread is" if self.count == 1 else "threads are"
        return (
            f"no worker thread is free for this sync tool: {self.count} worker {are} stuck "
            f"in tools that timed out or were cancelled ({tools}); it was not run"
        )


_stuck: weakref.WeakKeyDictionary[anyio.CapacityLimiter, Stuck] = weakref.WeakKeyDictionary()


def stuck_of(limiter: anyio.CapacityLimiter) -> Stuck:
    found = _stuck.get(limiter)
    if found is None:
        found = _stuck[limiter] = Stuck()
    return found


class Job:
    """One sync call: the borrower of its token, run in a worker thread."""

    __slots__ = (
        "abandoned",
        "done",
        "error",
        "finished",
        "fn",
        "kwargs",
        "limiter",
        "name",
        "started",
        "stuck",
        "token",
        "value",
    )

    def __init__(
        self, name: str, fn: Callable[..., Any], kwargs: dict[str, Any], limiter: Any
    ) -> None:
        self.name = name
        self.fn: Callable[..., Any] | None = fn
        self.kwargs: dict[str, Any] | None = kwargs
        self.limiter: anyio.CapacityLimiter = limiter
        self.stuck = stuck_of(limiter)
        self.started = False
        self.finished = False
        self.abandoned = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = anyio.Event()
        self.token: anyio.lowlevel.EventLoopToken | None = None

    async def take_token(self) -> None:
        """Take a token of the limiter, or raise ``NoWorkerThread`` when all are stuck."""
        limiter, stuck = self.limiter, self.stuck
        if borrow_nowait(limiter, self):
            return
        if stuck.count >= limiter.total_tokens:
            raise NoWorkerThread(stuck.message())
        with anyio.CancelScope() as scope:  # cancelled by Stuck.add when the last one sticks
            stuck.waiters.add(scope)
            try:
                await limiter.acquire_on_behalf_of(self)
                return
            finally:
                stuck.waiters.discard(scope)
        raise NoWorkerThread(stuck.message())

    def start(self) -> None:
        self.token = anyio.lowlevel.current_token()
        self.started = True
        start_in_thread(self._run)

    def _run(self) -> None:  # in the worker thread
        fn, kwargs = self.fn, self.kwargs
        self.fn = self.kwargs = None
        value: Any = None
        error: BaseException | None = None
        try:
            with _as_worker(self.token):
                value = fn(**kwargs) if fn is not None and kwargs is not None else None
        except BaseException as exc:  # SystemExit too: raised again in the waiting task
            error = exc
        del fn, kwargs
        try:
            anyio.from_thread.run_sync(self._deliver, value, error, token=self.token)
        except Exception:  # the event loop is gone, and its limiter with it
            pass

    def _deliver(self, value: Any, error: BaseException | None) -> None:  # in the event loop
        self.finished = True
        self.limiter.release_on_behalf_of(self)
        if self.abandoned:
            self.stuck.remove(self.name)
            logger.info("the abandoned worker thread of tool %r ended", self.name)
            return
        self.value, self.error = value, error
        self.done.set()

    def abandon(self, why: str) -> None:
        """The waiting task leaves; the thread runs on with its token (called in the loop)."""
        if not self.started or self.finished or self.abandoned:
            return
        self.abandoned = True
        self.stuck.add(self.name, self.limiter)
        logger.warning(
            "sync tool %r %s; its worker thread was abandoned and still runs "
            "(%d abandoned threads hold %d of this thread limiter's %g tokens)",
            self.name,
            why,
            self.stuck.count,
            self.stuck.count,
            self.limiter.total_tokens,
        )

    def outcome(self) -> Any:
        error = self.error
        if error is not None:
            self.error = None
            try:
                raise error
            finally:
                del error
        return self.value
