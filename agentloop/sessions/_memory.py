"""``InMemoryStore``: sessions in a dict, for tests and throwaway runs.

It keeps the same encoded text a database would (JSON state values, record bodies) and decodes on
every read, so it accepts, refuses and returns exactly what the durable back ends do, and a caller
mutating a dict it passed in cannot change stored history.

An operation does not await between its first look at the sessions and its last change to them,
so each is atomic on the store's event loop without a lock (taking one cost more than the
operation), and returns without a scheduling round.
"""

from __future__ import annotations

import builtins
import functools
from dataclasses import dataclass, field
from types import MappingProxyType

from agentloop._errors import SessionBusy, SessionConflict, SessionNotFound

from ._base import (
    BaseStore,
    Clock,
    Finish,
    Held,
    SessionRow,
    check_commit,
    check_renew,
    decide_acquire,
    finish_one,
    row_lease,
)
from ._codec import EncodedRecord, StateDelta, decode_state
from ._records import records_from_bodies
from ._types import Lease, Session, SessionInfo


@dataclass(slots=True)
class _Stored:
    app: str
    user: str
    created_at: float
    updated_at: float
    row: SessionRow
    state: dict[str, str] = field(default_factory=dict)
    records: builtins.list[tuple[int, str]] = field(default_factory=builtins.list)
    runs: builtins.list[int] = field(default_factory=builtins.list)
    """Positions in ``records`` of the run records, so ``history_limit`` is one index lookup."""


class InMemoryStore(BaseStore):
    """Sessions held in this process only; safe for concurrent tasks of one event loop.

    Args:
        clock: The store's clock for leases and timestamps, in unix seconds (default:
            ``time.time``).
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self._sessions: dict[str, _Stored] = {}

    async def _open(self) -> None:
        pass

    async def _close(self) -> None:
        self._sessions.clear()

    def _session(self, sid: str, stored: _Stored, history_limit: int | None) -> Session:
        start = 0
        if history_limit is not None:
            runs = stored.runs
            start = len(stored.records) if history_limit == 0 else 0
            if 0 < history_limit <= len(runs):
                start = runs[-history_limit]
        return Session(
            id=sid,
            app=stored.app,
            user=stored.user,
            state=MappingProxyType(decode_state(stored.state.items())),
            history=records_from_bodies(stored.records[start:]),
            version=stored.row.version,
            created_at=stored.created_at,
            updated_at=stored.updated_at,
            lease=row_lease(sid, stored.row),
        )

    def _stored(self, sid: str) -> _Stored:
        try:
            return self._sessions[sid]
        except KeyError:
            raise SessionNotFound(f"no session {sid!r}") from None

    async def _do_create(
        self, session_id: str, app: str, user: str, state: dict[str, str], now: float
    ) -> Session:
        if session_id in self._sessions:
            raise SessionConflict(f"session {session_id!r} already exists")
        row = SessionRow(
            version=0, last_seq=0, lease_owner=None, lease_fence=0, lease_expires_at=None
        )
        stored = _Stored(app=app, user=user, created_at=now, updated_at=now, row=row)
        stored.state.update(state)
        self._sessions[session_id] = stored
        return self._session(session_id, stored, None)

    async def _do_get(self, session_id: str, history_limit: int | None) -> Session | None:
        stored = self._sessions.get(session_id)
        return None if stored is None else self._session(session_id, stored, history_limit)

    async def _do_list(
        self, app: str | None, user: str | None, limit: int, offset: int
    ) -> builtins.list[SessionInfo]:
        infos = [
            SessionInfo(
                id=sid,
                app=s.app,
                user=s.user,
                version=s.row.version,
                created_at=s.created_at,
                updated_at=s.updated_at,
            )
            for sid, s in self._sessions.items()
            if (app is None or s.app == app) and (user is None or s.user == user)
        ]
        infos.sort(key=lambda i: (-i.updated_at, i.id))
        return infos[offset : offset + limit]

    async def _do_delete(self, session_id: str) -> bool:
        return self._sessions.pop(session_id, None) is not None

    async def _do_commit(
        self,
        session_id: str,
        expected_version: int,
        records: builtins.list[EncodedRecord],
        delta: StateDelta,
        lease: Lease | None,
        now: float,
    ) -> int:
        return self._commit(session_id, expected_version, records, delta, lease, now)

    def _commit(
        self,
        session_id: str,
        expected_version: int,
        records: builtins.list[EncodedRecord],
        delta: StateDelta,
        lease: Lease | None,
        now: float,
    ) -> int:
        stored = self._stored(session_id)
        row = stored.row
        check_commit(session_id, row, expected_version, lease, now)
        for record in records:
            row.last_seq += 1
            if record.type == "run":
                stored.runs.append(len(stored.records))
            stored.records.append((row.last_seq, record.body))
        stored.state.update(delta.set)
        for key in delta.delete:
            stored.state.pop(key, None)
        row.version += 1
        stored.updated_at = now
        return row.version

    async def _do_acquire(
        self, session_id: str, owner: str, ttl: float, now: float
    ) -> tuple[Lease, bool] | Held:
        row = self._stored(session_id).row
        answer = decide_acquire(session_id, row, owner, ttl, now)
        if not isinstance(answer, Held):
            lease = answer[0]
            row.lease_owner, row.lease_fence = lease.owner, lease.fence
            row.lease_expires_at = lease.expires_at
        return answer

    async def _do_renew(self, lease: Lease, ttl: float, now: float) -> Lease:
        return self._renew(lease, ttl, now)

    def _renew(self, lease: Lease, ttl: float, now: float) -> Lease:
        row = self._stored(lease.session_id).row
        check_renew(row, lease)
        row.lease_expires_at = now + ttl
        return Lease(
            session_id=lease.session_id, owner=lease.owner, fence=lease.fence, expires_at=now + ttl
        )

    async def _do_renew_many(
        self, items: builtins.list[tuple[Lease, float]], now: float
    ) -> builtins.list[Lease | Exception]:
        """All of them at once (a subclass that overrides ``_do_renew``
        still goes through it)."""
        if type(self)._do_renew is not InMemoryStore._do_renew:
            return await super()._do_renew_many(items, now)
        outcome: builtins.list[Lease | Exception] = []
        for lease, ttl in items:
            try:
                outcome.append(self._renew(lease, ttl, now))
            except (SessionNotFound, SessionBusy) as exc:
                outcome.append(exc)
        return outcome

    async def _do_release(self, lease: Lease) -> None:
        self._release(lease)

    def _release(self, lease: Lease) -> None:
        stored = self._sessions.get(lease.session_id)
        if stored is not None and stored.row.lease_fence == lease.fence:
            stored.row.lease_owner = None
            stored.row.lease_expires_at = None

    def _own_finish(self) -> bool:
        """Whether a finish is this class's commit and release (a subclass that overrides
        ``_do_commit`` or ``_do_release`` goes through them)."""
        cls = type(self)
        return (
            cls._do_commit is InMemoryStore._do_commit
            and cls._do_release is InMemoryStore._do_release
        )

    async def _do_finish(self, batch: builtins.list[Finish], now: float) -> None:
        """The whole batch at once, without a pause between finishes."""
        if not self._own_finish():
            await super()._do_finish(batch, now)
            return
        self._finish_all(batch, now)

    def _finishes_now(self) -> bool:
        return self._own_finish()

    def _finish_now(self, item: Finish) -> bool:
        """A lone finish, written at once (see the module)."""
        if not self._own_finish():
            return False
        self._finish_all([item], self._clock())
        return True

    def _finish_all(self, batch: builtins.list[Finish], now: float) -> None:
        for item in batch:
            commit = None
            if item.expected_version is not None:
                commit = functools.partial(
                    self._commit,
                    item.lease.session_id,
                    item.expected_version,
                    item.records,
                    item.delta,
                    item.lease,
                    now,
                )
            try:
                item.version = finish_one(commit, functools.partial(self._release, item.lease))
            except Exception as exc:  # this run's failure, not the batch's
                item.error = exc
            item.done = True
