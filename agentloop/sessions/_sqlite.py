"""``SQLiteStore``: the embedded durable default, stdlib ``sqlite3`` in worker threads.

WAL mode lets readers run beside the one writer, across threads and processes. Every write is a
``BEGIN IMMEDIATE`` transaction, so writers queue on the database lock (up to ``busy_timeout``)
instead of failing half-way; a database still locked after that raises ``SessionConflict`` with
nothing written, and is counted in ``stats.busy_timeouts``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import anyio.to_thread

from agentloop._errors import SessionStoreError, UserError

from ._base import Clock, DatabaseBusy
from ._sql import SCHEMA_VERSION, SQLOps, check_schema_version
from ._threaded import ThreadedSQLStore

T = TypeVar("T")

_SYNCHRONOUS = {
    "FULL": "PRAGMA synchronous = FULL",
    "NORMAL": "PRAGMA synchronous = NORMAL",
}

_MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE agentloop_sessions (
            id TEXT NOT NULL PRIMARY KEY,
            app TEXT NOT NULL,
            user_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            lease_owner TEXT,
            lease_fence INTEGER NOT NULL DEFAULT 0,
            lease_expires_at REAL
        )""",
        "CREATE INDEX agentloop_sessions_updated ON agentloop_sessions (updated_at)",
        "CREATE INDEX agentloop_sessions_app ON agentloop_sessions (app, user_id, updated_at)",
        "CREATE INDEX agentloop_sessions_user ON agentloop_sessions (user_id, updated_at)",
        """CREATE TABLE agentloop_records (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            run_id TEXT,
            at REAL NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        """CREATE INDEX agentloop_records_runs ON agentloop_records (session_id, seq)
            WHERE type = 'run'""",
        """CREATE TABLE agentloop_state (
            session_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (session_id, key)
        )""",
    ],
    # No table changes: run records' bodies may now hold ``input_parts`` (see _sql.py).
    2: [],
}


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    message = str(exc).lower()
    return "locked" in message or "busy" in message


# What an SQLite result code (the primary code, the low byte) means, and what to check.
_PROBLEMS: dict[int, tuple[str, str]] = {
    sqlite3.SQLITE_CORRUPT: (
        "the database is not an SQLite database or is corrupt",
        "restore the file from a backup, or point the store at another file",
    ),
    sqlite3.SQLITE_NOTADB: (
        "the file is not an SQLite database or is corrupt",
        "restore the file from a backup, or point the store at another file",
    ),
    sqlite3.SQLITE_READONLY: (
        "the database is read-only",
        "check the permissions (and immutable attribute) of the file and its folder, which"
        " must be writable for the -wal and -shm files, and that the file system is not"
        " mounted read-only",
    ),
    sqlite3.SQLITE_PERM: (
        "access to the database was denied",
        "check the permissions of the file and its folder",
    ),
    sqlite3.SQLITE_CANTOPEN: (
        "the database file cannot be opened",
        "check that its folder exists and that the file and folder permissions allow it",
    ),
    sqlite3.SQLITE_FULL: (
        "the database or disk is full",
        "free disk space on the file's file system; nothing was written",
    ),
    sqlite3.SQLITE_IOERR: (
        "a disk I/O error occurred",
        "check the disk and the file system (and free disk space)",
    ),
}


def _store_error(path: str, exc: sqlite3.Error) -> SessionStoreError:
    """A driver error as a ``SessionStoreError`` naming the database file, with a hint."""
    code = getattr(exc, "sqlite_errorcode", None)
    message, hint = _PROBLEMS.get(
        -1 if code is None else code & 0xFF,
        (f"SQLite failed: {exc}", "see the cause for SQLite's own error"),
    )
    return SessionStoreError(f"{message} ({exc})", store=f"SQLite database {path!r}", hint=hint)


class SQLiteStore(ThreadedSQLStore):
    """Sessions in an SQLite file, shared safely by threads and processes on one machine.

    ``busy_timeout`` bounds how long a write waits for another writer. ``max_connections`` bounds
    the worker threads (and connections) this store uses. ``synchronous="FULL"`` syncs every
    commit to disk; ``"NORMAL"`` is faster and survives a process crash but may lose the last
    commits on power loss. ``":memory:"`` is a private database in one connection.

    Args:
        path: The database file (created when missing), or ``":memory:"``.
        busy_timeout: Seconds a write waits for another writer.
        max_connections: Connections, and worker threads, at most.
        synchronous: ``"FULL"`` or ``"NORMAL"`` (see above).
        clock: The store's clock for leases and timestamps (default: ``time.time``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        max_connections: int = 4,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        clock: Clock | None = None,
    ) -> None:
        raw = os.fspath(path)
        if not raw:
            raise UserError("SQLiteStore needs a file path (or ':memory:')")
        if synchronous not in _SYNCHRONOUS:
            raise UserError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        if max_connections < 1 or busy_timeout < 0:
            raise UserError("max_connections must be >= 1 and busy_timeout >= 0")
        self._memory = raw == ":memory:"
        self.path = raw if self._memory else os.path.abspath(raw)
        super().__init__(max_threads=1 if self._memory else max_connections, clock=clock)
        self._ops = SQLOps(pg=False)
        self._busy_timeout = busy_timeout
        self._synchronous = _SYNCHRONOUS[synchronous]
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        # Closing: idle connections are closed at once, one still in use (an abandoned
        # worker thread's) when its thread gives it back; closing it under the thread crashes.
        self._closing = False

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- connections (worker threads) --------------------------------------------------------

    def _take(self) -> sqlite3.Connection:
        with self._pool_lock:
            if self._closing:
                raise SessionStoreError(
                    "the store is closed", store=f"SQLite database {self.path!r}", hint="reopen it"
                )
            if self._idle:
                return self._idle.pop()
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute(self._synchronous)
        with self._pool_lock:
            self._all.append(conn)
        return conn

    def _give(self, conn: sqlite3.Connection) -> None:
        with self._pool_lock:
            if not self._closing:
                self._idle.append(conn)
                return
            self._all.remove(conn)
        conn.close()

    def _transaction(self, begin: str, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """``fn`` in one transaction; every driver error leaves as a ``SessionError``."""
        try:
            conn = self._take()
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from exc
        try:
            conn.execute(begin)
            try:
                result = fn(conn.cursor(), *args)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                raise DatabaseBusy(
                    f"SQLite database {self.path!r} stayed locked for more than"
                    f" busy_timeout={self._busy_timeout}s; nothing was written"
                ) from exc
            raise _store_error(self.path, exc) from exc
        finally:
            self._give(conn)

    def _write(self, fn: Callable[..., T], *args: Any) -> T:
        return self._transaction("BEGIN IMMEDIATE", fn, args)

    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return self._transaction("BEGIN", fn, args)

    # -- lifecycle ---------------------------------------------------------------------------

    def _migrate(self) -> None:
        if not self._memory:
            self._untransacted(self._wal)
        # Read first: a current schema needs no write, so a read-only database still reads.
        if self._read(self._schema_version) != SCHEMA_VERSION:
            self._write(self._migrate_in)

    def _schema_version(self, cur: sqlite3.Cursor) -> int | None:
        cur.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentloop_schema'"
        )
        if cur.fetchone() is None:
            return None
        found: int | None = cur.execute("SELECT max(version) FROM agentloop_schema").fetchone()[0]
        return found

    def _untransacted(self, fn: Callable[[sqlite3.Connection], None]) -> None:
        """``fn(connection)`` outside a transaction, its driver errors as ``SessionError``."""
        try:
            conn = self._take()
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from exc
        try:
            fn(conn)
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from exc
        finally:
            self._give(conn)

    @staticmethod
    def _wal(conn: sqlite3.Connection) -> None:
        # Persistent: the first opener switches the file to WAL, later ones see it set.
        conn.execute("PRAGMA journal_mode = WAL")

    def _migrate_in(self, cur: sqlite3.Cursor) -> None:
        cur.execute("CREATE TABLE IF NOT EXISTS agentloop_schema (version INTEGER NOT NULL)")
        found = cur.execute("SELECT max(version) FROM agentloop_schema").fetchone()[0]
        version = check_schema_version(found, self.path)
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                cur.execute(statement)
        if version < SCHEMA_VERSION:
            cur.execute("DELETE FROM agentloop_schema")
            cur.execute("INSERT INTO agentloop_schema (version) VALUES (?)", (SCHEMA_VERSION,))

    async def _open(self) -> None:
        self._closing = False  # a failed open closed the connections it made
        try:
            await self._thread(self._migrate)
        except BaseException:
            await anyio.to_thread.run_sync(self._close_all)
            raise

    def _close_all(self) -> None:
        """Close the idle connections; one in use closes when its thread gives it back."""
        with self._pool_lock:
            self._closing = True
            idle, self._idle = self._idle, []
            for conn in idle:
                self._all.remove(conn)
        for conn in idle:
            conn.close()

    async def _close(self) -> None:
        await anyio.to_thread.run_sync(self._close_all)
