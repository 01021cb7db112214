"""The store's values (``Session``, ``Lease``, ...) and the ``SessionStore`` protocol."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, TypeAlias

from pydantic import JsonValue

from ._records import Record

JSON: TypeAlias = JsonValue
"""A JSON value: None, bool, int, finite float, str, list of JSON, dict of str to JSON."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """The right to write a session, held by ``owner`` until ``expires_at`` (unix seconds).

    ``fence`` grows on every acquisition of the session's lease: a holder whose lease was taken
    over still has the old fence, and the store refuses its commits.

    Args:
        session_id: The session's id.
        owner: Who holds it (a run's id).
        fence: The acquisition's number (see above).
        expires_at: When it expires, in unix seconds of the store's clock.
    """

    session_id: str
    owner: str
    fence: int
    expires_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Session:
    """A snapshot of a session as loaded: state, history and the version they belong to.

    ``state`` never holds ``temp:`` keys. ``history`` holds the records of the last N runs when
    loaded with ``history_limit=N``. ``lease`` is the lease as stored, possibly expired (compare
    ``expires_at`` with the wall clock), or None when nobody holds one.

    Args:
        id: The session's id.
        app: The application it belongs to.
        user: The user it belongs to.
        state: Its state.
        history: Its records, oldest first.
        version: Its version: the number of commits so far.
        created_at: When it was created, in unix seconds.
        updated_at: When it was last committed to, in unix seconds.
        lease: Its lease as stored, or ``None``.
    """

    id: str
    app: str
    user: str
    state: Mapping[str, JSON]
    history: tuple[Record, ...]
    version: int
    created_at: float
    updated_at: float
    lease: Lease | None


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionInfo:
    """A session as listed: no state, no history.

    Args:
        id: The session's id.
        app: The application it belongs to (``""``: none).
        user: The user it belongs to (``""``: none).
        version: Its version: the number of commits so far.
        created_at: When it was created, in unix seconds.
        updated_at: When it was last committed to, in unix seconds.
    """

    id: str
    app: str
    user: str
    version: int
    created_at: float
    updated_at: float


@dataclass(kw_only=True, slots=True)
class StoreStats:
    """What a store has refused so far, for metrics and tests. Counts since the store was made.

    ``conflicts`` counts every ``SessionConflict`` raised; ``busy_timeouts`` the part of them that
    were a database still locked after the busy timeout. ``busy`` counts ``SessionBusy``.

    Args:
        commits: Commits written.
        conflicts: ``SessionConflict`` errors raised.
        busy_timeouts: Those of them that were a database still locked.
        busy: ``SessionBusy`` errors raised.
        leases_acquired: Leases taken.
        lease_takeovers: Those of them taken over from an expired holder.
    """

    commits: int = 0
    conflicts: int = 0
    busy_timeouts: int = 0
    busy: int = 0
    leases_acquired: int = 0
    lease_takeovers: int = 0


class SessionStore(Protocol):
    """Where sessions live. Every method is atomic; a store is bound to one event loop."""

    stats: StoreStats

    async def create(
        self,
        session_id: str | None = None,
        *,
        app: str = "",
        user: str = "",
        state: Mapping[str, JSON] | None = None,
    ) -> Session:
        """Create a session at version 0; an existing id is a ``SessionConflict``.

        Args:
            session_id: Its id (at most 512 characters; ``None``: a random one).
            app: The application it belongs to.
            user: The user it belongs to.
            state: Its initial state.
        """
        ...

    async def get(self, session_id: str, *, history_limit: int | None = None) -> Session | None:
        """The session, with the records of its last ``history_limit`` runs (all when None).

        Args:
            session_id: Its id.
            history_limit: How many of its last runs' records to load.
        """
        ...

    async def list(
        self,
        *,
        app: str | None = None,
        user: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[SessionInfo]:
        """Sessions, most recently updated first.

        Args:
            app: Only this application's.
            user: Only this user's.
            limit: The most sessions returned.
            offset: How many to skip first (pagination).
        """
        ...

    async def delete(self, session_id: str) -> bool:
        """Delete the session; False when there was none.

        Args:
            session_id: Its id.
        """
        ...

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
        """Append records and apply a state delta if still at ``expected_version``; the new one.

        Args:
            session_id: The session's id.
            expected_version: The version the writer read (else ``SessionConflict``).
            records: Records to append to its history.
            set_state: State keys to set.
            delete_state: State keys to delete.
            lease: The writer's lease, checked (its fence) in the same transaction.
        """
        ...

    async def acquire_lease(
        self,
        session_id: str,
        *,
        owner: str,
        ttl: float,
        wait: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - bounds polling; expiry is SessionBusy
    ) -> Lease:
        """Take the session's lease (an expired one is taken over); ``SessionBusy`` if held.

        Args:
            session_id: The session's id (``SessionNotFound`` when there is none).
            owner: Who takes it (a run's id).
            ttl: Seconds it lasts unless renewed.
            wait: Wait for a held lease to be released or to expire.
            timeout: Seconds to wait, with ``wait`` (``None``: as long as it takes).
        """
        ...

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease still held; ``SessionBusy`` when it was lost.

        Args:
            lease: The lease.
            ttl: Seconds from now it lasts.
        """
        ...

    async def release_lease(self, lease: Lease) -> None:
        """Give the lease back; does nothing when it is no longer held.

        Args:
            lease: The lease.
        """
        ...

    async def aclose(self) -> None:
        """Close connections and threads; the store is unusable afterwards."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
