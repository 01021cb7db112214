"""What every back end shares: argument checks, lease rules, waiting for a lease, statistics.

A back end implements the ``_do_*`` methods, each one atomic, and gets the public ``SessionStore``
methods from ``BaseStore``. The lease and version rules are plain functions over a ``SessionRow``
so the in-memory and SQL back ends decide exactly alike.
"""

from __future__ import annotations

import builtins
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import anyio
import anyio.lowlevel

from agentloop._errors import SessionBusy, SessionConflict, SessionError, UserError

from ._codec import MAX_ID_LENGTH as MAX_ID_LENGTH  # the one limit, for every back end
from ._codec import (
    EncodedRecord,
    StateDelta,
    check_history_limit,
    check_id,
    check_int,
    check_text,
    encode_delta,
    encode_records,
    encode_state,
)
from ._records import Record
from ._types import JSON, Lease, Session, SessionInfo, StoreStats

Clock = Callable[[], float]
"""Wall-clock time in unix seconds (``time.time``); injectable so tests can expire leases."""

_logger = logging.getLogger("agentloop")

_FINISH_BATCH = 10_000
"""The most run finishes written in one transaction (a batch is a few set-based statements,
milliseconds per thousand finishes); those queued beyond it make the next batch."""
_GATHER_SECONDS = 0.1
"""How long a batch's writer may keep waiting for more finishes to queue, while they still
arrive (one event-loop round at a time), before it writes them."""

_FIRST_BACKOFF = 0.005
_MAX_BACKOFF = 0.25


class DatabaseBusy(SessionConflict):
    """Raised by a back end when the database stayed locked past its busy timeout."""


@dataclass(slots=True)
class SessionRow:
    """The columns of a session that the version and lease rules read."""

    version: int
    last_seq: int
    lease_owner: str | None
    lease_fence: int
    lease_expires_at: float | None


@dataclass(frozen=True, slots=True)
class Held:
    """``_do_acquire``'s answer when someone else holds an unexpired lease."""

    owner: str
    expires_at: float


class GaveUp(SessionError):
    """A finish was still in a batch the store had not confirmed when its waiter's time ran
    out: it may or may not have been written (the batch goes on in its worker thread)."""


@dataclass(slots=True, eq=False)
class Finish:
    """One run's finish in a batch: commit ``records`` and ``delta`` at ``expected_version``
    (none when ``expected_version`` is None), then release ``lease``."""

    lease: Lease
    expected_version: int | None
    records: builtins.list[EncodedRecord]
    delta: StateDelta
    version: int | None = None
    error: Exception | None = None
    done: bool = False


def finish_one(commit: Callable[[], int] | None, release: Callable[[], None]) -> int | None:
    """A finish's commit (if any), then its release. After a commit refused for a moved
    version the lease is still released; after any other failure (a lost lease, a store
    error that a retry may pass) nothing is."""
    version = None
    if commit is not None:
        try:
            version = commit()
        except SessionConflict as exc:
            if not isinstance(exc, DatabaseBusy):
                release()  # the version moved: the end is refused, the lease still ours
            raise
    release()
    return version


async def finish_one_async(store: BaseStore, item: Finish, now: float) -> None:
    """``finish_one`` over a back end's separate ``_do_commit`` and ``_do_release`` (no
    transaction spans both): the version is set as soon as the commit is, and a release that
    fails after it is logged, not raised (the lease expires by itself)."""
    if item.expected_version is not None:
        try:
            item.version = await store._do_commit(
                item.lease.session_id,
                item.expected_version,
                item.records,
                item.delta,
                item.lease,
                now,
            )
        except SessionConflict as exc:
            if not isinstance(exc, DatabaseBusy):
                await store._do_release(item.lease)  # the version moved; the lease is ours
            raise
    try:
        await store._do_release(item.lease)
    except Exception as exc:
        if item.version is None:
            raise
        _logger.warning(
            "could not release the lease of session %r after recording the end of its run:"
            " %s: %s; it expires by itself",
            item.lease.session_id,
            type(exc).__name__,
            exc,
        )


def check_commit(
    session_id: str, row: SessionRow, expected_version: int, lease: Lease | None, now: float
) -> None:
    """The version, then the lease: raise what a commit against ``row`` must refuse."""
    if row.version != expected_version:
        raise SessionConflict(
            f"session {session_id!r} is at version {row.version}, expected {expected_version}"
        )
    if lease is not None:
        if row.lease_owner is None or row.lease_fence != lease.fence:
            raise SessionBusy(
                f"session {session_id!r}: lease of {lease.owner!r} (fence {lease.fence}) was lost"
            )
    elif row.lease_owner is not None and (row.lease_expires_at or 0.0) > now:
        raise SessionBusy(
            f"session {session_id!r} is leased by {row.lease_owner!r}; commit with its lease"
        )


def decide_acquire(
    session_id: str, row: SessionRow, owner: str, ttl: float, now: float
) -> tuple[Lease, bool] | Held:
    """A new lease (and whether it took over an expired one), or who holds it now."""
    expires = row.lease_expires_at or 0.0
    if row.lease_owner is not None and row.lease_owner != owner and expires > now:
        return Held(owner=row.lease_owner, expires_at=expires)
    takeover = row.lease_owner is not None and row.lease_owner != owner
    lease = Lease(
        session_id=session_id, owner=owner, fence=row.lease_fence + 1, expires_at=now + ttl
    )
    return lease, takeover


def check_renew(row: SessionRow, lease: Lease) -> None:
    if row.lease_owner is None or row.lease_fence != lease.fence:
        raise SessionBusy(
            f"session {lease.session_id!r}: lease of {lease.owner!r} (fence {lease.fence}) was lost"
        )


def row_lease(session_id: str, row: SessionRow) -> Lease | None:
    if row.lease_owner is None:
        return None
    return Lease(
        session_id=session_id,
        owner=row.lease_owner,
        fence=row.lease_fence,
        expires_at=row.lease_expires_at or 0.0,
    )


def _check_ttl(ttl: object) -> float:
    if not isinstance(ttl, int | float) or not ttl > 0:
        raise UserError(f"lease ttl must be a number of seconds > 0, not {ttl!r}")
    return float(ttl)


def _check_lease(lease: object) -> Lease:
    if not isinstance(lease, Lease):
        raise UserError(f"expected a Lease, not {lease!r}")
    check_id(lease.session_id)
    return lease


class BaseStore(ABC):
    """The public methods of every store; subclasses supply the atomic ``_do_*`` operations."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or time.time
        self.stats = StoreStats()
        self._closed = False
        self._finishing: builtins.list[Finish] = []
        self._finish_round: anyio.Event | None = None

    # -- what a back end implements ---------------------------------------------------------

    @abstractmethod
    async def _open(self) -> None:
        """Connect and create or migrate the schema; called once, before the first operation."""

    @abstractmethod
    async def _close(self) -> None: ...

    @abstractmethod
    async def _do_create(
        self, session_id: str, app: str, user: str, state: dict[str, str], now: float
    ) -> Session: ...

    @abstractmethod
    async def _do_get(self, session_id: str, history_limit: int | None) -> Session | None: ...

    @abstractmethod
    async def _do_list(
        self, app: str | None, user: str | None, limit: int, offset: int
    ) -> builtins.list[SessionInfo]: ...

    @abstractmethod
    async def _do_delete(self, session_id: str) -> bool: ...

    @abstractmethod
    async def _do_commit(
        self,
        session_id: str,
        expected_version: int,
        records: builtins.list[EncodedRecord],
        delta: StateDelta,
        lease: Lease | None,
        now: float,
    ) -> int: ...

    @abstractmethod
    async def _do_acquire(
        self, session_id: str, owner: str, ttl: float, now: float
    ) -> tuple[Lease, bool] | Held: ...

    @abstractmethod
    async def _do_renew(self, lease: Lease, ttl: float, now: float) -> Lease: ...

    @abstractmethod
    async def _do_release(self, lease: Lease) -> None: ...

    async def _do_finish(self, batch: builtins.list[Finish], now: float) -> None:
        """Each finish's commit and release, setting its ``version`` or ``error``. A back end
        with transactions does the whole batch in one (see ``ThreadedSQLStore``)."""
        for item in batch:
            try:
                await finish_one_async(self, item, now)
            except Exception as exc:  # this run's failure, not the batch's
                item.error = exc
            item.done = True

    # -- lifecycle ---------------------------------------------------------------------------

    _opened = False
    _open_lock: anyio.Lock | None = None

    async def _ready(self) -> None:
        if self._closed:
            raise UserError(f"{type(self).__name__} is closed")
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = anyio.Lock()
        async with self._open_lock:
            if not self._opened:
                await self._open()
                self._opened = True

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._close()

    async def __aenter__(self) -> Self:
        await self._ready()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @contextmanager
    def _counting(self) -> Iterator[None]:
        try:
            yield
        except SessionConflict as exc:
            self.stats.conflicts += 1
            if isinstance(exc, DatabaseBusy):
                self.stats.busy_timeouts += 1
            raise
        except SessionBusy:
            self.stats.busy += 1
            raise

    # -- the SessionStore methods ------------------------------------------------------------

    async def create(
        self,
        session_id: str | None = None,
        *,
        app: str = "",
        user: str = "",
        state: Mapping[str, JSON] | None = None,
    ) -> Session:
        sid = uuid.uuid4().hex if session_id is None else check_id(session_id)
        encoded = encode_state(state)
        await self._ready()
        with self._counting():
            return await self._do_create(
                sid, check_text(app, "app"), check_text(user, "user"), encoded, self._clock()
            )

    async def get(self, session_id: str, *, history_limit: int | None = None) -> Session | None:
        check_history_limit(history_limit)
        sid = check_id(session_id)
        await self._ready()
        with self._counting():
            return await self._do_get(sid, history_limit)

    async def list(
        self,
        *,
        app: str | None = None,
        user: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[SessionInfo]:
        if app is not None:
            check_text(app, "app")
        if user is not None:
            check_text(user, "user")
        check_int(limit, "limit", minimum=0)
        check_int(offset, "offset", minimum=0)
        await self._ready()
        with self._counting():
            return await self._do_list(app, user, limit, offset)

    async def delete(self, session_id: str) -> bool:
        sid = check_id(session_id)
        await self._ready()
        with self._counting():
            return await self._do_delete(sid)

    async def commit(
        self,
        session_id: str,
        *,
        expected_version: int,
        records: Sequence[Record] = (),
        set_state: Mapping[str, JSON] | None = None,
        delete_state: Iterable[str] = (),
        lease: Lease | None = None,
    ) -> int:
        sid = check_id(session_id)
        check_int(expected_version, "expected_version")
        if lease is not None and _check_lease(lease).session_id != sid:
            raise UserError(f"lease is for session {lease.session_id!r}, not {sid!r}")
        encoded = encode_records(records)
        delta = encode_delta(set_state, delete_state)
        await self._ready()
        with self._counting():
            version = await self._do_commit(
                sid, expected_version, encoded, delta, lease, self._clock()
            )
        self.stats.commits += 1
        return version

    async def acquire_lease(
        self,
        session_id: str,
        *,
        owner: str,
        ttl: float,
        wait: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - bounds polling; expiry is SessionBusy
    ) -> Lease:
        sid = check_id(session_id)
        check_id(owner, "lease owner")
        ttl = _check_ttl(ttl)
        await self._ready()
        deadline = None if timeout is None else anyio.current_time() + timeout
        delay = _FIRST_BACKOFF
        while True:
            with self._counting():
                answer = await self._do_acquire(sid, owner, ttl, self._clock())
            if not isinstance(answer, Held):
                lease, takeover = answer
                self.stats.leases_acquired += 1
                self.stats.lease_takeovers += takeover
                return lease
            remaining = None if deadline is None else deadline - anyio.current_time()
            if not wait or (remaining is not None and remaining <= 0):
                self.stats.busy += 1
                waited = f" after waiting {timeout}s" if wait else ""
                raise SessionBusy(
                    f"session {sid!r} is leased by {answer.owner!r} until "
                    f"{answer.expires_at:.3f}{waited}"
                )
            # Poll with bounded exponential backoff, never past the lease's expiry or the deadline.
            pause = min(delay, max(answer.expires_at - self._clock(), 0.001))
            if remaining is not None:
                pause = min(pause, remaining)
            await anyio.sleep(pause)
            delay = min(delay * 2, _MAX_BACKOFF)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        _check_lease(lease)
        ttl = _check_ttl(ttl)
        await self._ready()
        with self._counting():
            return await self._do_renew(lease, ttl, self._clock())

    async def release_lease(self, lease: Lease) -> None:
        _check_lease(lease)
        await self._ready()
        await self._do_release(lease)

    async def _gather(self) -> None:
        """Let the finishes on their way join the batch: pass event-loop rounds while each one
        queues more (many runs cancelled at once reach their end over a few rounds), for at
        most ``_GATHER_SECONDS``. A lone finish costs one round."""
        deadline = anyio.current_time() + _GATHER_SECONDS
        queued = 0
        while len(self._finishing) != queued and anyio.current_time() < deadline:
            queued = len(self._finishing)
            await anyio.lowlevel.cancel_shielded_checkpoint()

    async def finish_run(
        self,
        lease: Lease,
        *,
        expected_version: int | None = None,
        records: Sequence[Record] = (),
        set_state: Mapping[str, JSON] | None = None,
        delete_state: Iterable[str] = (),
    ) -> int | None:
        """Commit a run's last records (when ``expected_version`` is given) and release its
        lease, batched with the other finishes in flight: the first caller lets the finishes on
        their way queue (``_gather``), then writes every finish queued in one back-end call (one
        transaction of set-based statements on SQL back ends) while the others wait for it on
        one event, and whoever is still queued after that writes the next batch. Cancelling
        many runs at once so costs one or a few transactions, not two per run. Returns the new
        version (None without a commit); raises what the commit (or the batch) raised."""
        _check_lease(lease)
        encoded = encode_records(records)
        delta = encode_delta(set_state, delete_state)
        if expected_version is not None:
            check_int(expected_version, "expected_version")
        await self._ready()
        item = Finish(lease=lease, expected_version=expected_version, records=encoded, delta=delta)
        self._finishing.append(item)
        try:
            while not item.done:
                if self._finish_round is not None:
                    await self._finish_round.wait()
                    continue
                self._finish_round = anyio.Event()
                await self._gather()
                batch = self._finishing[:_FINISH_BATCH]
                del self._finishing[:_FINISH_BATCH]
                answered = False
                try:
                    await self._do_finish(batch, self._clock())
                    answered = True
                except Exception as exc:  # the batch failed as a whole: nothing was written
                    answered = True
                    for other in batch:
                        if not other.done:
                            other.error = exc
                finally:
                    for other in batch:
                        if not other.done and not answered and other.version is None:
                            other.error = GaveUp(
                                "the store did not confirm this finish in time; it may or may"
                                " not have been written"
                            )
                        other.done = True
                    round_over, self._finish_round = self._finish_round, None
                    round_over.set()
        finally:
            if not item.done and item in self._finishing:
                self._finishing.remove(item)  # gave up before its turn: nothing was written
        if item.error is not None:
            raise item.error
        if item.expected_version is not None:
            self.stats.commits += 1
        return item.version
