"""A store over a blocking database driver, run in worker threads through a bounded limiter.

Working in threads is what lets one implementation serve asyncio and trio alike. A call is not
abandoned when its task is cancelled: the transaction finishes (committed or rolled back) and the
cancellation is delivered after, so a connection is never left mid-transaction. The one exception
is a batch of run finishes (``finish_run``), whose waiters have a time bound counted in the
store's time: a waiter that gives up leaves the thread to finish its transaction on its own (it
still commits or rolls back, returns its connection and sets each finish's outcome), so a halted
database cannot hold a cancelled run.
"""

from __future__ import annotations

import builtins
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ._base import BaseStore, Clock, Finish, FinishRound, Held
from ._codec import EncodedRecord, StateDelta
from ._sql import SQLOps
from ._types import Lease, Session, SessionInfo

T = TypeVar("T")


class ThreadedSQLStore(BaseStore):
    """Implements the ``_do_*`` operations as ``SQLOps`` calls inside ``_write``/``_read``."""

    _ops: SQLOps

    def __init__(self, *, max_threads: int, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self._limiter = anyio.CapacityLimiter(max_threads)

    async def _thread(self, fn: Callable[..., T], *args: Any, abandon: bool = False) -> T:
        return await anyio.to_thread.run_sync(
            fn, *args, limiter=self._limiter, abandon_on_cancel=abandon
        )

    @abstractmethod
    def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """In a worker thread: ``fn(cursor, *args)`` in a write transaction, committed."""

    @abstractmethod
    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """In a worker thread: ``fn(cursor, *args)`` in a read-only snapshot."""

    def _write_batched(self, fn: Callable[..., T], *args: Any) -> T:
        """``_write`` for a body whose statements after its first query need no results."""
        return self._write(fn, *args)

    async def _do_create(
        self, session_id: str, app: str, user: str, state: dict[str, str], now: float
    ) -> Session:
        ops = self._ops
        return await self._thread(self._write, ops.create, session_id, app, user, state, now)

    async def _do_get(self, session_id: str, history_limit: int | None) -> Session | None:
        return await self._thread(self._read, self._ops.get, session_id, history_limit)

    async def _do_list(
        self, app: str | None, user: str | None, limit: int, offset: int
    ) -> builtins.list[SessionInfo]:
        return await self._thread(self._read, self._ops.list, app, user, limit, offset)

    async def _do_delete(self, session_id: str) -> bool:
        return await self._thread(self._write, self._ops.delete, session_id)

    async def _do_commit(
        self,
        session_id: str,
        expected_version: int,
        records: builtins.list[EncodedRecord],
        delta: StateDelta,
        lease: Lease | None,
        now: float,
    ) -> int:
        return await self._thread(
            self._write_batched,
            self._ops.commit,
            session_id,
            expected_version,
            records,
            delta,
            lease,
            now,
        )

    async def _do_acquire(
        self, session_id: str, owner: str, ttl: float, now: float
    ) -> tuple[Lease, bool] | Held:
        return await self._thread(
            self._write_batched, self._ops.acquire, session_id, owner, ttl, now
        )

    async def _do_renew(self, lease: Lease, ttl: float, now: float) -> Lease:
        return await self._thread(self._write_batched, self._ops.renew, lease, ttl, now)

    async def _do_renew_many(
        self, items: builtins.list[tuple[Lease, float]], now: float
    ) -> builtins.list[Lease | Exception]:
        return await self._thread(self._write_batched, self._ops.renew_many, items, now)

    async def _do_release(self, lease: Lease) -> None:
        await self._thread(self._write, self._ops.release_lease, lease)

    _finish_in_thread = True

    async def _do_finish(self, batch: builtins.list[Finish], now: float) -> None:
        """The whole batch in one write transaction, in a worker thread that sets each item's
        outcome itself: the waiters read it even when the task that started the thread has given
        up (see ``FinishRound``). Waiting for a connection counts as the store's time; handing
        the batch to the thread does not."""
        current = batch[0].round if batch else None
        if current is None:  # not through finish_run: begin at once
            current = FinishRound(items=batch)
        current.connecting_since = anyio.current_time()
        async with self._limiter:
            current.connecting_since = None
            await anyio.to_thread.run_sync(
                self._finish_batch,
                current,
                batch,
                now,
                limiter=anyio.CapacityLimiter(1),  # the store's limiter is held already
                abandon_on_cancel=True,
            )

    def _finish_batch(self, current: FinishRound, batch: builtins.list[Finish], now: float) -> None:
        if not current.begin(time.monotonic):
            return  # given up before it began: nothing is written
        try:
            outcome = self._write_batched(self._ops.finish, batch, now)
        except Exception as exc:  # the batch failed as a whole: nothing was written
            for item in batch:
                item.error, item.done = exc, True
            return
        for item, (version, error) in zip(batch, outcome, strict=True):
            item.version, item.error, item.done = version, error, True
