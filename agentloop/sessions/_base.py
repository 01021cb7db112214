"""What every back end shares: argument checks, lease rules, waiting for a lease, statistics.

A back end implements the ``_do_*`` methods, each one atomic, and gets the public ``SessionStore``
methods from ``BaseStore``. The lease and version rules are plain functions over a ``SessionRow``
so the in-memory and SQL back ends decide exactly alike.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import math
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Self

import anyio
import anyio.lowlevel

from agentloop._errors import (
    SessionBusy,
    SessionConflict,
    SessionError,
    SessionNotFound,
    UserError,
)
from agentloop._time import duration_text, utc_text

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
from ._keeper import LeaseKeeper
from ._records import Record
from ._types import JSON, Lease, Session, SessionInfo, StoreStats

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

Clock = Callable[[], float]
"""Wall-clock time in unix seconds (``time.time``); injectable so tests can expire leases."""

_logger = logging.getLogger("agentloop")

_FINISH_BATCH = 10_000
"""The most run finishes written in one transaction (a batch is a few set-based statements,
milliseconds per thousand finishes); those queued beyond it make the next batch."""
_GATHER_SECONDS = 0.1
"""How long a batch's writer may keep waiting for more finishes to queue, while they still
arrive (one event-loop round at a time), before it writes them."""
_MAX_HANDED = _FINISH_BATCH
"""The most finishes handed over (``hand_over_finish``) that may queue for the drainer; a
finish handed over beyond it waits for its batch like a caller of ``finish_run``."""

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


def retryable(exc: Exception) -> bool:
    """Whether a store error may pass if tried again: not a lost lease, a missing session, a
    moved version, a misuse, nor a batch given up on (a database busy past its timeout may)."""
    if isinstance(exc, DatabaseBusy):
        return True
    return not isinstance(exc, SessionBusy | SessionNotFound | SessionConflict | UserError | GaveUp)


class GaveUp(SessionError):
    """A finish its waiter stopped waiting for because the store held its batch (or the batch
    ahead of it) past the waiter's bound: it may or may not have been written (an abandoned
    batch goes on in its worker thread), or, when ``written`` is False, surely was not."""

    def __init__(self, message: str, *, written: bool | None = None) -> None:
        super().__init__(message)
        self.written = written


@dataclass(slots=True, eq=False)
class FinishRound:
    """One batch of finishes on its way through the store, and how long the store has had it.

    Time the event loop spends (unwinding cancelled runs, handing the batch to a worker thread,
    delivering its answer) is not the store's: a waiter gives up only once the store itself has
    had the batch past the waiter's bound. ``started`` is when the store began on the batch, on
    ``clock`` (a back end working in a thread sets both there, on ``time.monotonic``); before
    that, ``connecting_since`` (on the event loop's clock) is when the batch began waiting for
    a connection, which a busy store counts as its time too."""

    items: builtins.list[Finish] = field(default_factory=builtins.list)
    done: anyio.Event = field(default_factory=anyio.Event)
    clock: Callable[[], float] = time.monotonic
    started: float | None = None
    connecting_since: float | None = None
    abandoned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    scope: anyio.CancelScope = field(default_factory=lambda: anyio.CancelScope(shield=True))

    def store_time(self) -> float | None:
        """How long the store has had the batch; None while it is only on its way to it."""
        if self.started is not None:
            return self.clock() - self.started
        if self.connecting_since is not None:
            return anyio.current_time() - self.connecting_since
        return None

    def begin(self, clock: Callable[[], float]) -> bool:
        """The store begins on the batch (in whichever thread does the work): False if its
        waiters gave it up before, and then it must not be written."""
        with self.lock:
            if self.abandoned:
                return False
            self.clock, self.started = clock, clock()
            return True

    def abandon(self) -> None:
        """Stop waiting for the batch: a worker that has not begun on it never will, one that
        has goes on by itself (its transaction still commits or rolls back)."""
        with self.lock:
            self.abandoned = True
        self.scope.cancel()


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
    round: FinishRound | None = None
    report: Callable[[int | Exception | None], None] | None = None
    """A finish handed over (``BaseStore.hand_over_finish``): called once with its outcome."""
    retry_until: float = 0.0
    """A finish handed over: until when (the event loop's clock) a transient error is retried."""
    settled: anyio.Event | None = None
    """A finish handed over: set once it is settled, for whoever waits for its session."""


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


def _finish_parts(
    lease: Lease,
    expected_version: int | None,
    records: Sequence[Record],
    set_state: Mapping[str, JSON] | None,
    delete_state: Iterable[str],
) -> tuple[list[EncodedRecord], StateDelta]:
    """A finish's arguments checked, and its records and state change encoded: the same for a
    finish waited for (``finish_run``) and one handed over (``hand_over_finish``)."""
    _check_lease(lease)
    encoded = encode_records(records)
    delta = encode_delta(set_state, delete_state)
    if expected_version is not None:
        check_int(expected_version, "expected_version")
    return encoded, delta


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
        self._finish_round: FinishRound | None = None
        # Finishes handed over and not settled yet, by session (the store reads its own writes);
        # the drainer that writes them; whether a batch ended with some to try again.
        self._handed: dict[str, Finish] = {}
        self._drainer: object | None = None
        self._retrying = False
        # The lease keeper, while the store is entered (``async with``), and its task group.
        self._keeper: LeaseKeeper | None = None
        self._keeper_group: TaskGroup | None = None

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

    async def _do_renew_many(
        self, items: builtins.list[tuple[Lease, float]], now: float
    ) -> builtins.list[Lease | Exception]:
        """Each lease renewed, or the error it was refused with. A back end with transactions
        renews them all in one (see ``ThreadedSQLStore``)."""
        outcome: builtins.list[Lease | Exception] = []
        for lease, ttl in items:
            try:
                outcome.append(await self._do_renew(lease, ttl, now))
            except (SessionBusy, SessionNotFound) as exc:  # this lease's, not the batch's
                outcome.append(exc)
        return outcome

    async def _do_finish(self, batch: builtins.list[Finish], now: float) -> None:
        """Each finish's commit and release, setting its ``version`` or ``error``. A back end
        with transactions does the whole batch in one (see ``ThreadedSQLStore``)."""
        for item in batch:
            try:
                await self._finish_one(item, now)
            except Exception as exc:  # this run's failure, not the batch's
                item.error = exc
            item.done = True

    async def _finish_one(self, item: Finish, now: float) -> None:
        """``finish_one`` over a back end's separate ``_do_commit`` and ``_do_release`` (no
        transaction spans both): the version is set as soon as the commit is, and a release that
        fails after it is logged, not raised (the lease expires by itself)."""
        if item.expected_version is not None:
            try:
                item.version = await self._do_commit(
                    item.lease.session_id,
                    item.expected_version,
                    item.records,
                    item.delta,
                    item.lease,
                    now,
                )
            except SessionConflict as exc:
                if not isinstance(exc, DatabaseBusy):
                    await self._do_release(item.lease)  # the version moved; the lease is ours
                raise
        try:
            await self._do_release(item.lease)
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

    _finish_in_thread = False
    """Whether ``_do_finish`` begins its batch (``FinishRound.begin``) itself, in a worker
    thread; otherwise the batch begins, on the event loop's clock, as ``_do_finish`` is called."""

    # -- lifecycle ---------------------------------------------------------------------------

    _opened = False
    _open_lock: anyio.Lock | None = None

    async def _ready(self) -> None:
        if self._closed:
            raise UserError(f"{type(self).__name__} is closed")
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = anyio.Lock(fast_acquire=True)
        async with self._open_lock:
            if not self._opened:
                await self._open()
                self._opened = True

    async def aclose(self) -> None:
        """Close the store once the finishes handed over to it are settled (each within its
        bound)."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            for item in builtins.list(self._handed.values()):
                await self._after_handed(item.lease.session_id)
            await self._close()

    async def __aenter__(self) -> Self:
        """Open the store, and start its lease keeper: one task renews the leases of every
        run on the store while the block lasts (a run on a store not entered renews its own)."""
        await self._ready()
        await self._start_keeper()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop_keeper()
        await self.aclose()

    @contextlib.asynccontextmanager
    async def keeping_leases(self) -> AsyncGenerator[Self, None]:
        """``async with store``, but the store stays open after the block: its lease keeper
        renews the leases of every run on the store while the block lasts. A store whose
        keeper runs already (entered) keeps it after the block."""
        await self._ready()
        started = await self._start_keeper()
        try:
            yield self
        finally:
            if started:
                await self._stop_keeper()

    async def _start_keeper(self) -> bool:
        """Start the lease keeper, unless it runs: whether this started it."""
        if self._keeper is not None:
            return False
        group = anyio.create_task_group()
        await group.__aenter__()
        keeper = LeaseKeeper(self.renew_leases, retryable, repr(self))
        self._keeper, self._keeper_group = keeper, group
        group.start_soon(keeper.run)
        return True

    async def _stop_keeper(self) -> None:
        keeper, group = self._keeper, self._keeper_group
        self._keeper = self._keeper_group = None
        if keeper is not None and group is not None:
            keeper.close()
            # Shielded, and not given the block's exception: that leaves as it is, not in an
            # exception group (the keeper's task, cancelled, ends at once).
            group.cancel_scope.shield = True
            await group.__aexit__(None, None, None)

    @property
    def lease_keeper(self) -> LeaseKeeper | None:
        """The keeper that renews the leases of this store's runs, while the store is entered
        with ``async with``; None otherwise."""
        return self._keeper

    def _counted(self, exc: Exception) -> None:
        """Counts a conflict or a busy session an operation raised, in ``stats`` (each
        operation catches them: a context manager cost two calls an operation)."""
        stats = self.stats
        if isinstance(exc, SessionConflict):
            stats.conflicts += 1
            if isinstance(exc, DatabaseBusy):
                stats.busy_timeouts += 1
        else:
            stats.busy += 1

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
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        try:
            return await self._do_create(
                sid, check_text(app, "app"), check_text(user, "user"), encoded, self._clock()
            )
        except (SessionConflict, SessionBusy) as exc:
            self._counted(exc)
            raise

    async def get(self, session_id: str, *, history_limit: int | None = None) -> Session | None:
        check_history_limit(history_limit)
        sid = check_id(session_id)
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        if self._handed:
            await self._after_handed(sid)
        try:
            return await self._do_get(sid, history_limit)
        except (SessionConflict, SessionBusy) as exc:
            self._counted(exc)
            raise

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
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        try:
            return await self._do_list(app, user, limit, offset)
        except (SessionConflict, SessionBusy) as exc:
            self._counted(exc)
            raise

    async def delete(self, session_id: str) -> bool:
        sid = check_id(session_id)
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        if self._handed:
            await self._after_handed(sid)
        try:
            return await self._do_delete(sid)
        except (SessionConflict, SessionBusy) as exc:
            self._counted(exc)
            raise

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
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        if self._handed:
            await self._after_handed(sid)
        try:
            version = await self._do_commit(
                sid, expected_version, encoded, delta, lease, self._clock()
            )
        except (SessionConflict, SessionBusy) as exc:
            self._counted(exc)
            raise
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
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        if self._handed:
            await self._after_handed(sid)
        deadline = None if timeout is None else anyio.current_time() + timeout
        delay = _FIRST_BACKOFF
        while True:
            try:
                answer = await self._do_acquire(sid, owner, ttl, self._clock())
            except (SessionConflict, SessionBusy) as exc:
                self._counted(exc)
                raise
            if not isinstance(answer, Held):
                lease, takeover = answer
                self.stats.leases_acquired += 1
                self.stats.lease_takeovers += takeover
                return lease
            remaining = None if deadline is None else deadline - anyio.current_time()
            if not wait or (remaining is not None and remaining <= 0):
                self.stats.busy += 1
                waited = f" after waiting {timeout:g}s" if wait and timeout is not None else ""
                left = duration_text(answer.expires_at - self._clock())
                raise SessionBusy(
                    f"session {sid!r} is leased by {answer.owner!r} until "
                    f"{utc_text(answer.expires_at)} (in {left}){waited}"
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
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        if self._handed:
            await self._after_handed(lease.session_id)
        try:
            return await self._do_renew(lease, ttl, self._clock())
        except (SessionConflict, SessionBusy) as exc:
            self._counted(exc)
            raise

    async def renew_leases(
        self, leases: Sequence[tuple[Lease, float]]
    ) -> builtins.list[Lease | Exception]:
        """Renew many ``(lease, ttl)`` at once (one transaction on SQL back ends): each lease
        renewed, or the ``SessionBusy``/``SessionNotFound`` it was refused with. A failure of
        the store as a whole raises.

        Args:
            leases: ``(lease, ttl)`` pairs: each lease to renew for ``ttl`` more seconds.
        """
        items = [(_check_lease(lease), _check_ttl(ttl)) for lease, ttl in leases]
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        if not items:
            return []
        try:
            outcome = await self._do_renew_many(items, self._clock())
        except (SessionConflict, SessionBusy) as exc:
            self._counted(exc)
            raise
        self.stats.busy += sum(isinstance(answer, SessionBusy) for answer in outcome)
        return outcome

    async def release_lease(self, lease: Lease) -> None:
        _check_lease(lease)
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        if self._handed:
            await self._after_handed(lease.session_id)
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
        within: float | None = None,
    ) -> int | None:
        """Commit a run's last records (when ``expected_version`` is given) and release its
        lease, batched with the other finishes in flight: the first caller lets the finishes on
        their way queue (``_gather``), then writes every finish queued in one back-end call (one
        transaction of set-based statements on SQL back ends) while the others wait for it on
        one event, and whoever is still queued after that writes the next batch. Cancelling
        many runs at once so costs one or a few transactions, not two per run. Returns the new
        version (None without a commit); raises what the commit (or the batch) raised.

        ``within`` bounds the wait in the store's time, not the event loop's: the call is then
        shielded from cancellation and gives up (``GaveUp``) only after ``within`` seconds
        *and* once the store has held its batch, or the batch ahead of it, that long. A loop
        slowed by thousands of runs unwinding at once so loses no finish, while a store that
        stopped answering holds the caller about ``within`` seconds. Without ``within`` the
        call waits for the store, and a cancellation gives up at once.

        Args:
            lease: The run's lease, released.
            expected_version: The version to commit at (``None``: release only).
            records: The run's last records (its end record).
            set_state: State keys to set.
            delete_state: State keys to delete.
            within: Seconds of the store's time to wait at most (see above).
        """
        encoded, delta = _finish_parts(lease, expected_version, records, set_state, delete_state)
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        item = Finish(lease=lease, expected_version=expected_version, records=encoded, delta=delta)
        if self._finish_round is None and not self._finishing and self._finish_now(item):
            return self._finished(item)
        bound = math.inf if within is None else max(float(within), 0.0)
        deadline = anyio.current_time() + bound
        self._finishing.append(item)
        try:
            with anyio.CancelScope(shield=within is not None):
                while not item.done:
                    current = self._finish_round
                    if current is None:
                        await self._write_round(deadline, bound)
                    elif not await self._wait_round(current, deadline, bound):
                        current = item.round
                        if current is not None:
                            current.abandon()  # its writer stops waiting too
                        raise GaveUp(
                            f"the store held this finish's batch, or the one ahead of it, past"
                            f" {bound:g}s" + ("; nothing was written" if current is None else ""),
                            written=False if current is None else None,
                        )
                    ended = item.round is not None and item.round.done.is_set()
                    if ended and not self._answered(item):
                        raise GaveUp(
                            "the store did not confirm this finish in time; it may or may not"
                            " have been written"
                        )
        finally:
            if not item.done and item in self._finishing:
                self._finishing.remove(item)  # gave up before its turn: nothing was written
        return self._finished(item)

    def finish_at_once(
        self,
        lease: Lease,
        *,
        expected_version: int | None = None,
        records: Sequence[Record] = (),
        set_state: Mapping[str, JSON] | None = None,
        delete_state: Iterable[str] = (),
    ) -> tuple[bool, int | None]:
        """``finish_run`` without awaiting, when this back end writes a lone finish at once (one
        in memory) and no batch is on its way: ``(True, version)``, raising what the finish
        raised; ``(False, None)``, nothing done, when it cannot (then ``finish_run``). A caller
        so needs no shield nor bound around a write that cannot wait.

        Args:
            lease: The run's lease, released.
            expected_version: The version to commit at (``None``: release only).
            records: The run's last records (its end record).
            set_state: State keys to set.
            delete_state: State keys to delete.
        """
        if not self._finishes_now() or self._finish_round is not None or self._finishing:
            return False, None
        if self._closed or not self._opened:
            return False, None  # finish_run says so, or opens the store first
        encoded, delta = _finish_parts(lease, expected_version, records, set_state, delete_state)
        item = Finish(lease=lease, expected_version=expected_version, records=encoded, delta=delta)
        if not self._finish_now(item):
            return False, None
        return True, self._finished(item)

    def _finishes_now(self) -> bool:
        """Whether ``_finish_now`` writes a lone finish (checked before encoding it)."""
        return False

    def _finish_now(self, item: Finish) -> bool:
        """Write a lone finish at once, without awaiting, if this back end can (one in memory,
        where a batch saves nothing and gathering one costs event-loop rounds and a task):
        whether it did, its outcome set in ``item``. Called only while no batch is on its way."""
        return False

    def _finished(self, item: Finish) -> int | None:
        """A written finish's outcome: its new version, or what it failed with, raised."""
        if item.error is not None:
            raise item.error
        if item.expected_version is not None:
            self.stats.commits += 1
        return item.version

    @staticmethod
    def _answered(item: Finish) -> bool:
        return item.done  # set by the store, maybe in a worker thread, while the caller waited

    async def _wait_round(self, current: FinishRound, deadline: float, bound: float) -> bool:
        """Wait for ``current`` to be over: False when the waiter gives up (its ``deadline``
        passed and the store has held ``current`` for ``bound`` seconds, or it was abandoned)."""
        while not current.done.is_set():
            wait = deadline - anyio.current_time()
            if wait <= 0:
                if current.abandoned:
                    return False
                spent = current.store_time()
                if spent is not None and spent >= bound:
                    return False
                # On its way to the store (the loop's time): look again soon; in the store:
                # when the bound will have passed there.
                wait = bound / 20 if spent is None else bound - spent
            with anyio.move_on_after(wait):
                await current.done.wait()
        return True

    async def _write_round(self, deadline: float, bound: float) -> None:
        """Write the next batch (the queued finishes) and wait for it like any waiter, the
        store's work in a task of its own that a waiter giving up cancels."""
        current = self._finish_round = FinishRound()
        try:
            await self._gather()
            batch = self._finishing[:_FINISH_BATCH]
            del self._finishing[:_FINISH_BATCH]
            current.items = batch
            for other in batch:
                other.round = current
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._run_round, current, self._clock())
                try:
                    answered = await self._wait_round(current, deadline, bound)
                except BaseException:  # cancelled (no bound): stop waiting for the store
                    current.abandon()
                    raise
                if not answered:
                    current.abandon()
        finally:
            if self._finish_round is current:
                self._finish_round = None
            current.done.set()

    async def _run_round(self, current: FinishRound, now: float) -> None:
        """The store's work on a batch, in a scope its waiters cancel when they give up; each
        finish's outcome is set in its item as soon as the store has it, and the finishes
        handed over are settled before the batch's waiters wake."""
        with current.scope:
            try:
                if self._finish_in_thread or current.begin(anyio.current_time):
                    await self._do_finish(current.items, now)
            except Exception as exc:  # the batch failed as a whole: nothing was written
                for other in current.items:
                    if not other.done:
                        other.error, other.done = exc, True
        self._settle(current)
        current.items = []  # no cycle through the finishes, which point at their batch
        if self._finish_round is current:
            self._finish_round = None
        current.done.set()

    # -- finishes handed over ----------------------------------------------------------------

    async def hand_over_finish(
        self,
        lease: Lease,
        *,
        report: Callable[[int | Exception | None], None],
        within: float,
        expected_version: int | None = None,
        records: Sequence[Record] = (),
        set_state: Mapping[str, JSON] | None = None,
        delete_state: Iterable[str] = (),
        retry_first: float = 0.05,
        retry_max: float = 1.0,
    ) -> None:
        """``finish_run`` for a caller that does not wait for the store: a cancelled run.

        When a drainer is writing batches already, the finish joins its queue and the call
        returns at once: the drainer writes it with the others and calls ``report`` once with
        its outcome (the new version, None without a commit, or the exception it ended with;
        transient errors are retried for ``within`` seconds, a batch the store held past
        ``within`` ends as ``GaveUp``). Otherwise the caller becomes the drainer: shielded, it
        writes this finish and those handed over meanwhile, batch after batch, for ``within``
        seconds (counted like ``finish_run``'s bound) and then one last batch. Thousands of runs
        cancelled at once so wait for nothing but one of them, and unwind at once, holding
        nothing for the garbage collector to walk. Until a finish is settled, this store's
        operations on its session wait for it: it reads its own writes.

        Args:
            lease: The run's lease, released by the finish.
            report: Called once with the finish's outcome.
            within: Seconds the finish may take, transient errors retried.
            expected_version: Commit ``records`` only if the session is at this version.
            records: The run's last records.
            set_state: State keys to set with the commit.
            delete_state: State keys to delete with the commit.
            retry_first: The first wait before a transient error is retried, in seconds.
            retry_max: The longest wait between retries, in seconds.
        """
        encoded, delta = _finish_parts(lease, expected_version, records, set_state, delete_state)
        if self._closed or not self._opened:  # most calls: open, no await
            await self._ready()
        bound = max(float(within), 0.0)
        now = anyio.current_time()
        item = Finish(
            lease=lease,
            expected_version=expected_version,
            records=encoded,
            delta=delta,
            report=report,
            retry_until=now + bound,
        )
        self._finishing.append(item)
        self._handed[lease.session_id] = item
        if self._drainer is not None:
            if len(self._finishing) <= _MAX_HANDED:
                return
            item.settled = anyio.Event()  # the queue is full: wait like finish_run's callers
            with anyio.CancelScope(shield=True):
                await item.settled.wait()
            return
        self._drainer = drainer = object()
        try:
            with anyio.CancelScope(shield=True):
                await self._drain(now + bound, bound, retry_first, retry_max)
        finally:
            if self._drainer is drainer:
                self._drainer = None

    async def _drain(self, deadline: float, bound: float, delay: float, most: float) -> None:
        """Write batches while finishes handed over are queued; past ``deadline`` write one
        last batch, after which a finish handed over finds no drainer and drains itself."""
        while any(item.report is not None for item in self._finishing):
            current = self._finish_round
            if current is not None:  # another caller's batch: wait for it, then write the rest
                if not await self._wait_round(current, deadline, bound):
                    self._give_up_handed(bound)
                    return
                continue
            if self._retrying:  # a batch ended with transient errors: back off, then again
                self._retrying = False
                await anyio.sleep(delay)
                delay = min(delay * 2, most)
                continue
            # Past the deadline: one last batch (if the queue fits in it), and whatever is
            # handed over from now on drains itself.
            last = anyio.current_time() >= deadline and len(self._finishing) <= _FINISH_BATCH
            if last:
                self._drainer = None
            await self._write_round(deadline, bound)
            if last:
                return

    def _give_up_handed(self, bound: float) -> None:
        """The store held the batch ahead past the bound: settle the finishes handed over that
        are still queued as not written."""
        queued = [item for item in self._finishing if item.report is not None]
        self._finishing[:] = [item for item in self._finishing if item.report is None]
        for item in queued:
            self._report(
                item,
                GaveUp(
                    f"the store held the batch ahead of this finish past {bound:g}s; nothing"
                    " was written",
                    written=False,
                ),
            )

    def _settle(self, current: FinishRound) -> None:
        """Report the outcome of each finish handed over in a batch that is over, or queue it
        again when its error may pass and a drainer will write it (before its time is up)."""
        now = anyio.current_time()
        for item in current.items:
            if item.report is None:
                continue
            if not item.done:  # given up on: the batch may still be written in its thread
                written = False if current.started is None else None
                maybe = "nothing was written" if written is False else "it may have been written"
                self._report(
                    item,
                    GaveUp(
                        f"the store held this finish's batch past its bound; {maybe}",
                        written=written,
                    ),
                )
            elif item.error is None:
                self._report(item, item.version)
            elif self._drainer is not None and retryable(item.error) and now < item.retry_until:
                item.error, item.done, item.round = None, False, None
                self._finishing.append(item)
                self._retrying = True
            else:
                self._report(item, item.error)

    def _report(self, item: Finish, outcome: int | Exception | None) -> None:
        sid = item.lease.session_id
        if self._handed.get(sid) is item:
            del self._handed[sid]
        if item.settled is not None:
            item.settled.set()
        if item.report is not None:
            try:
                item.report(outcome)
            except Exception:  # a report must not stop the drainer
                _logger.exception("reporting the finish of session %r failed", sid)

    async def _after_handed(self, session_id: str) -> None:
        """Wait until a finish handed over for the session is settled (it is, within its bound):
        what this store answers about a session includes its finish."""
        item = self._handed.get(session_id)
        if item is None:
            return
        if item.settled is None:
            item.settled = anyio.Event()
        await item.settled.wait()
