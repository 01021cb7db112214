"""The store's operations in SQL, shared by SQLite and PostgreSQL.

Each method runs inside a transaction the back end opened (``BEGIN IMMEDIATE`` on SQLite, a row
lock taken with ``SELECT ... FOR UPDATE`` on PostgreSQL) and talks to a DB-API cursor. Every id, key
and value is a bound parameter; the only text spliced into SQL is this module's own constants.

Schema (version 2; both dialects, types differ)::

    agentloop_schema   (version)                                     one row: the schema version
    agentloop_sessions (id PK, app, user_id, version, last_seq, created_at, updated_at,
                        lease_owner, lease_fence, lease_expires_at)
    agentloop_records  (session_id, seq, type, run_id, at, body)     PK (session_id, seq);
                        partial index (session_id, seq) WHERE type = 'run' for history_limit
    agentloop_state    (session_id, key, value)                      PK (session_id, key);
                                                                     value is JSON text

Version 2 changed no table: it marks that a ``run`` record's body may hold ``input_parts`` (the
input's images and files), which an agentloop that knows only version 1 cannot read, so that one
refuses the database with "upgrade agentloop" instead of failing on the first such record.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, Protocol

from agentloop._errors import SessionBusy, SessionConflict, SessionNotFound, UserError

from ._base import (
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

SCHEMA_VERSION = 2


class Cursor(Protocol):
    """The part of a DB-API cursor we use (sqlite3 and psycopg both fit)."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: Any, params: Any, /) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> builtins.list[Any]: ...


_ROW = "version, last_seq, lease_owner, lease_fence, lease_expires_at"
_INFO = "id, app, user_id, version, created_at, updated_at"
_CHUNK = 500
"""Session ids per ``IN (...)`` of a batch's row read (SQLite allows 32,766 parameters)."""
_RECORDS_PER_INSERT = 100
"""Records per ``INSERT`` of a batch (600 parameters: under even an old SQLite's 999): one
statement for many rows, where ``executemany`` steps the database once per row (and gives the
interpreter lock back and takes it again each time, slow while the event loop is busy)."""


class SQLOps:
    """The statements of one dialect and the operations built from them."""

    def __init__(self, *, pg: bool) -> None:
        def q(sql: str) -> str:
            return sql.replace("?", "%s") if pg else sql

        lock = " FOR UPDATE" if pg else ""
        self.q = q
        self.lock = lock
        self.select_rows: dict[int, str] = {}
        self.select_row = q(f"SELECT {_ROW} FROM agentloop_sessions WHERE id = ?{lock}")
        self.select_full = q(
            f"SELECT {_ROW}, app, user_id, created_at, updated_at FROM agentloop_sessions"
            " WHERE id = ?"
        )
        self.insert_session = q(
            "INSERT INTO agentloop_sessions (id, app, user_id, version, last_seq, created_at,"
            " updated_at, lease_fence) VALUES (?, ?, ?, 0, 0, ?, ?, 0) ON CONFLICT (id) DO NOTHING"
        )
        self.select_state = q("SELECT key, value FROM agentloop_state WHERE session_id = ?")
        self.upsert_state = q(
            "INSERT INTO agentloop_state (session_id, key, value) VALUES (?, ?, ?)"
            " ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value"
        )
        self.delete_state = q("DELETE FROM agentloop_state WHERE session_id = ? AND key = ?")
        self.insert_record = q(
            "INSERT INTO agentloop_records (session_id, seq, type, run_id, at, body)"
            " VALUES (?, ?, ?, ?, ?, ?)"
        )
        self.records_from = q(
            "SELECT seq, body FROM agentloop_records WHERE session_id = ? AND seq >= ? ORDER BY seq"
        )
        # The records from the N-th most recent run record on (all when there are fewer runs):
        # the subquery walks the partial index backwards, the outer query reads the tail by key.
        self.records_last_runs = q(
            "SELECT seq, body FROM agentloop_records WHERE session_id = ? AND seq >= coalesce(("
            "SELECT seq FROM agentloop_records WHERE session_id = ? AND type = 'run'"
            " ORDER BY seq DESC LIMIT 1 OFFSET ?), 0) ORDER BY seq"
        )
        self.update_version = q(
            "UPDATE agentloop_sessions SET version = ?, last_seq = ?, updated_at = ? WHERE id = ?"
        )
        self.update_lease = q(
            "UPDATE agentloop_sessions SET lease_owner = ?, lease_fence = ?, lease_expires_at = ?"
            " WHERE id = ?"
        )
        self.release = q(
            "UPDATE agentloop_sessions SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE id = ? AND lease_fence = ? AND lease_owner IS NOT NULL"
        )
        self.end_and_release = q(
            "UPDATE agentloop_sessions SET version = ?, last_seq = ?, updated_at = ?,"
            " lease_owner = NULL, lease_expires_at = NULL WHERE id = ? AND lease_fence = ?"
        )
        self.insert_records: dict[int, str] = {}
        self.deletes = [
            q("DELETE FROM agentloop_records WHERE session_id = ?"),
            q("DELETE FROM agentloop_state WHERE session_id = ?"),
            q("DELETE FROM agentloop_sessions WHERE id = ?"),
        ]
        where = {
            (False, False): "",
            (True, False): " WHERE app = ?",
            (False, True): " WHERE user_id = ?",
            (True, True): " WHERE app = ? AND user_id = ?",
        }
        self.lists = {
            k: q(
                f"SELECT {_INFO} FROM agentloop_sessions{w}"
                " ORDER BY updated_at DESC, id LIMIT ? OFFSET ?"
            )
            for k, w in where.items()
        }

    def _row(self, cur: Cursor, sid: str) -> SessionRow:
        cur.execute(self.select_row, (sid,))
        found = cur.fetchone()
        if found is None:
            raise SessionNotFound(f"no session {sid!r}")
        return SessionRow(*found)

    def create(
        self, cur: Cursor, sid: str, app: str, user: str, state: dict[str, str], now: float
    ) -> Session:
        cur.execute(self.insert_session, (sid, app, user, now, now))
        if cur.rowcount != 1:
            raise SessionConflict(f"session {sid!r} already exists")
        if state:
            cur.executemany(self.upsert_state, [(sid, k, v) for k, v in state.items()])
        row = SessionRow(
            version=0, last_seq=0, lease_owner=None, lease_fence=0, lease_expires_at=None
        )
        return Session(
            id=sid,
            app=app,
            user=user,
            state=MappingProxyType(decode_state(state.items())),
            history=(),
            version=0,
            created_at=now,
            updated_at=now,
            lease=row_lease(sid, row),
        )

    def get(self, cur: Cursor, sid: str, history_limit: int | None) -> Session | None:
        """Run inside one snapshot (a read transaction) so state, history and version agree."""
        cur.execute(self.select_full, (sid,))
        found = cur.fetchone()
        if found is None:
            return None
        row = SessionRow(*found[:5])
        app, user, created_at, updated_at = found[5:]
        cur.execute(self.select_state, (sid,))
        state = decode_state(cur.fetchall())
        rows: builtins.list[tuple[int, str]] = []
        if history_limit is None:
            cur.execute(self.records_from, (sid, 0))
            rows = cur.fetchall()
        elif history_limit > 0:
            cur.execute(self.records_last_runs, (sid, sid, history_limit - 1))
            rows = cur.fetchall()
        return Session(
            id=sid,
            app=app,
            user=user,
            state=MappingProxyType(state),
            history=records_from_bodies(rows),
            version=row.version,
            created_at=created_at,
            updated_at=updated_at,
            lease=row_lease(sid, row),
        )

    def list(
        self, cur: Cursor, app: str | None, user: str | None, limit: int, offset: int
    ) -> builtins.list[SessionInfo]:
        params = [p for p in (app, user) if p is not None]
        cur.execute(self.lists[app is not None, user is not None], (*params, limit, offset))
        return [
            SessionInfo(id=i, app=a, user=u, version=v, created_at=c, updated_at=up)
            for i, a, u, v, c, up in cur.fetchall()
        ]

    def delete(self, cur: Cursor, sid: str) -> bool:
        for statement in self.deletes:
            cur.execute(statement, (sid,))
        return bool(cur.rowcount)

    def commit(
        self,
        cur: Cursor,
        sid: str,
        expected_version: int,
        records: Sequence[EncodedRecord],
        delta: StateDelta,
        lease: Lease | None,
        now: float,
    ) -> int:
        row = self._row(cur, sid)
        check_commit(sid, row, expected_version, lease, now)
        seq = row.last_seq
        if records:
            params = []
            for record in records:
                seq += 1
                params.append((sid, seq, record.type, record.run_id, record.at, record.body))
            cur.executemany(self.insert_record, params)
        if delta.set:
            cur.executemany(self.upsert_state, [(sid, k, v) for k, v in delta.set.items()])
        if delta.delete:
            cur.executemany(self.delete_state, [(sid, k) for k in delta.delete])
        version = row.version + 1
        cur.execute(self.update_version, (version, seq, now, sid))
        return version

    def acquire(
        self, cur: Cursor, sid: str, owner: str, ttl: float, now: float
    ) -> tuple[Lease, bool] | Held:
        answer = decide_acquire(sid, self._row(cur, sid), owner, ttl, now)
        if not isinstance(answer, Held):
            lease = answer[0]
            cur.execute(self.update_lease, (lease.owner, lease.fence, lease.expires_at, sid))
        return answer

    def renew(self, cur: Cursor, lease: Lease, ttl: float, now: float) -> Lease:
        check_renew(self._row(cur, lease.session_id), lease)
        renewed = Lease(
            session_id=lease.session_id, owner=lease.owner, fence=lease.fence, expires_at=now + ttl
        )
        cur.execute(
            self.update_lease, (lease.owner, lease.fence, renewed.expires_at, lease.session_id)
        )
        return renewed

    def renew_many(
        self, cur: Cursor, items: Sequence[tuple[Lease, float]], now: float
    ) -> builtins.list[Lease | Exception]:
        """Renew many leases in this one transaction: their rows are read (and locked, on
        PostgreSQL) a chunk at a time, each lease is checked as ``renew`` does, and the renewed
        ones are written with one ``executemany``. Returns each lease renewed, or the
        ``SessionError`` it was refused with."""
        rows = self._rows(cur, sorted({lease.session_id for lease, _ in items}))
        outcome: builtins.list[Lease | Exception] = []
        renewed: dict[str, tuple[str, int, float, str]] = {}
        for lease, ttl in items:
            sid = lease.session_id
            row = rows.get(sid)
            try:
                if row is None:
                    raise SessionNotFound(f"no session {sid!r}")
                check_renew(row, lease)
            except (SessionNotFound, SessionBusy) as exc:
                outcome.append(exc)
                continue
            expires = now + ttl
            outcome.append(
                Lease(session_id=sid, owner=lease.owner, fence=lease.fence, expires_at=expires)
            )
            renewed[sid] = (lease.owner, lease.fence, expires, sid)
        if renewed:
            cur.executemany(self.update_lease, [renewed[sid] for sid in sorted(renewed)])
        return outcome

    def release_lease(self, cur: Cursor, lease: Lease) -> None:
        cur.execute(self.release, (lease.session_id, lease.fence))

    def _rows(self, cur: Cursor, sids: Sequence[str]) -> dict[str, SessionRow]:
        """The rows of ``sids`` (sorted: PostgreSQL locks them in that order, so two batches
        cannot deadlock), read a chunk of ids per statement."""
        rows: dict[str, SessionRow] = {}
        for at in range(0, len(sids), _CHUNK):
            chunk = sids[at : at + _CHUNK]
            statement = self.select_rows.get(len(chunk))
            if statement is None:
                marks = ", ".join(["?"] * len(chunk))
                statement = self.q(
                    f"SELECT id, {_ROW} FROM agentloop_sessions WHERE id IN ({marks})"
                    f" ORDER BY id{self.lock}"
                )
                self.select_rows[len(chunk)] = statement
            cur.execute(statement, chunk)
            for sid, *row in cur.fetchall():
                rows[sid] = SessionRow(*row)
        return rows

    def finish(
        self, cur: Cursor, batch: Sequence[Finish], now: float
    ) -> builtins.list[tuple[int | None, Exception | None]]:
        """Every finish of a batch in this one transaction, set-based: the batch's rows are read
        (and locked, on PostgreSQL) a chunk at a time; each finish is decided in order against
        them by the rules of ``finish_one`` (a version check for its end, a fence check for its
        release); then all the records, state changes, versions and releases are written with
        one ``executemany`` each. Returns each finish's new version or the ``SessionError``
        its commit raised. A driver error fails the whole batch (nothing is written)."""
        outcome: builtins.list[tuple[int | None, Exception | None]] = [(None, None)] * len(batch)
        rows = self._rows(cur, sorted({item.lease.session_id for item in batch}))
        records: builtins.list[tuple[str, int, str, str | None, float, str]] = []
        upserts: builtins.list[tuple[str, str, str]] = []
        deletes: builtins.list[tuple[str, str]] = []
        committed: dict[str, SessionRow] = {}
        released: dict[str, SessionRow] = {}
        for i, item in enumerate(batch):
            lease = item.lease
            sid = lease.session_id
            row = rows.get(sid)

            def release(
                row: SessionRow | None = row, sid: str = sid, fence: int = lease.fence
            ) -> None:
                if row is not None and row.lease_owner is not None and row.lease_fence == fence:
                    row.lease_owner = row.lease_expires_at = None
                    released[sid] = row

            def commit(item: Finish = item, row: SessionRow | None = row, sid: str = sid) -> int:
                if row is None:
                    raise SessionNotFound(f"no session {sid!r}")
                if item.expected_version is None:  # only finishes with records commit
                    raise UserError("a finish that commits needs an expected version")
                check_commit(sid, row, item.expected_version, item.lease, now)
                for record in item.records:
                    row.last_seq += 1
                    records.append(
                        (sid, row.last_seq, record.type, record.run_id, record.at, record.body)
                    )
                upserts.extend((sid, k, v) for k, v in item.delta.set.items())
                deletes.extend((sid, k) for k in item.delta.delete)
                row.version += 1
                committed[sid] = row
                return row.version

            try:
                version = finish_one(None if item.expected_version is None else commit, release)
                outcome[i] = (version, None)
            except (SessionConflict, SessionNotFound, SessionBusy) as exc:
                outcome[i] = (None, exc)
        self._insert_records(cur, records)
        if upserts:
            cur.executemany(self.upsert_state, upserts)
        if deletes:
            cur.executemany(self.delete_state, deletes)
        # A session whose end was committed and lease released: one statement for both.
        ended = [
            (r.version, r.last_seq, now, sid, r.lease_fence)
            for sid, r in sorted(committed.items())
            if sid in released
        ]
        if ended:
            cur.executemany(self.end_and_release, ended)
        versions = [
            (r.version, r.last_seq, now, sid)
            for sid, r in sorted(committed.items())
            if sid not in released
        ]
        if versions:
            cur.executemany(self.update_version, versions)
        releases = [
            (sid, r.lease_fence) for sid, r in sorted(released.items()) if sid not in committed
        ]
        if releases:
            cur.executemany(self.release, releases)
        return outcome

    def _insert_records(
        self, cur: Cursor, rows: Sequence[tuple[str, int, str, str | None, float, str]]
    ) -> None:
        for at in range(0, len(rows), _RECORDS_PER_INSERT):
            chunk = rows[at : at + _RECORDS_PER_INSERT]
            statement = self.insert_records.get(len(chunk))
            if statement is None:
                values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(chunk))
                statement = self.q(
                    "INSERT INTO agentloop_records (session_id, seq, type, run_id, at, body)"
                    f" VALUES {values}"
                )
                self.insert_records[len(chunk)] = statement
            cur.execute(statement, [value for row in chunk for value in row])


def check_schema_version(found: int | None, where: str) -> int:
    """The stored schema version (0 for a new database); a newer one than ours is refused."""
    version = found or 0
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{where} has agentloop session schema version {version}, newer than this agentloop"
            f" understands ({SCHEMA_VERSION}); upgrade agentloop"
        )
    return version
