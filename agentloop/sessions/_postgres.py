"""``PostgresStore``: sessions shared by many processes and machines.

psycopg 3's sync API with a ``psycopg_pool.ConnectionPool``, driven from worker threads through a
limiter as wide as the pool, so it runs on asyncio and trio alike (psycopg's async API is
asyncio-only). psycopg is imported when a store is made, never by ``import agentloop.sessions``.

A commit locks its session row (``SELECT ... FOR UPDATE``) and checks the version and lease under
that lock, so concurrent writers serialise per session and never lose an update. A row lock still
held by another writer after ``lock_timeout`` is a ``SessionConflict`` with nothing written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, LiteralString, TypeVar

import anyio.to_thread

from agentloop._errors import SessionStoreError, UserError

from ._base import Clock, DatabaseBusy
from ._sql import SCHEMA_VERSION, SQLOps, check_schema_version
from ._threaded import ThreadedSQLStore

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

T = TypeVar("T")

INSTALL_HINT = "pip install 'agentloop-runtime[postgres]'"

# pg_advisory_xact_lock key serialising schema creation and migration across processes.
_MIGRATION_LOCK = 0x6167_6C6F_6F70_0001

_MIGRATIONS: dict[int, list[LiteralString]] = {
    1: [
        """CREATE TABLE agentloop_sessions (
            id text PRIMARY KEY,
            app text NOT NULL,
            user_id text NOT NULL,
            version bigint NOT NULL,
            last_seq bigint NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            lease_owner text,
            lease_fence bigint NOT NULL DEFAULT 0,
            lease_expires_at double precision
        )""",
        "CREATE INDEX agentloop_sessions_updated ON agentloop_sessions (updated_at)",
        "CREATE INDEX agentloop_sessions_app ON agentloop_sessions (app, user_id, updated_at)",
        "CREATE INDEX agentloop_sessions_user ON agentloop_sessions (user_id, updated_at)",
        """CREATE TABLE agentloop_records (
            session_id text NOT NULL REFERENCES agentloop_sessions (id) ON DELETE CASCADE,
            seq bigint NOT NULL,
            type text NOT NULL,
            run_id text,
            at double precision NOT NULL,
            body text NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        """CREATE INDEX agentloop_records_runs ON agentloop_records (session_id, seq)
            WHERE type = 'run'""",
        """CREATE TABLE agentloop_state (
            session_id text NOT NULL REFERENCES agentloop_sessions (id) ON DELETE CASCADE,
            key text NOT NULL,
            value text NOT NULL,
            PRIMARY KEY (session_id, key)
        )""",
    ],
    # No table changes: run records' bodies may now hold ``input_parts`` (see _sql.py).
    2: [],
}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _import_driver() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise UserError(f"PostgresStore needs the psycopg driver: {INSTALL_HINT}") from exc
    return psycopg, psycopg_pool


class PostgresStore(ThreadedSQLStore):
    """Sessions in PostgreSQL. ``dsn`` is a libpq URL or ``key=value`` string.

    ``pool_size`` bounds connections and worker threads; ``lock_timeout`` bounds the wait for a
    session row another writer holds; ``connect_timeout`` bounds opening the pool. Tables are
    created (and migrated) on first use in the schema first on the connection's ``search_path``.
    Lease expiry is judged by this process's clock: keep the machines' clocks in sync.

    Args:
        dsn: The database: a libpq URL or ``key=value`` string.
        pool_size: Connections, and worker threads, at most.
        lock_timeout: Seconds to wait for a session row another writer holds.
        connect_timeout: Seconds to open the pool.
        clock: The store's clock for leases and timestamps (default: ``time.time``).
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 10,
        lock_timeout: float = 5.0,
        connect_timeout: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self._psycopg, self._pool_module = _import_driver()
        if pool_size < 1 or lock_timeout <= 0 or connect_timeout <= 0:
            raise UserError("pool_size must be >= 1 and the timeouts > 0")
        super().__init__(max_threads=pool_size, clock=clock)
        self._ops = SQLOps(pg=True)
        self._dsn = dsn
        self._pool_size = pool_size
        self._lock_timeout = f"{int(lock_timeout * 1000)}ms"
        self._connect_timeout = connect_timeout
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] | None = None

    def __repr__(self) -> str:
        return "PostgresStore(...)"  # the DSN may hold a password

    # -- connections (worker threads) --------------------------------------------------------

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (self._lock_timeout,))
        conn.commit()

    def _transaction(
        self, fn: Callable[..., T], args: tuple[Any, ...], *, read: bool, pipeline: bool = False
    ) -> T:
        if self._pool is None:  # every operation opens the store first
            raise UserError("the PostgreSQL store is not open")
        errors = self._psycopg.errors
        try:
            with self._pool.connection() as conn:
                # Pipeline mode sends the statements that need no answer, and the COMMIT, in one
                # round trip; reading a result (the locked session row) still waits for it.
                with (
                    conn.pipeline() if pipeline else nullcontext(),
                    conn.transaction(),
                    conn.cursor() as cur,
                ):
                    if read:
                        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    return fn(cur, *args)
        except errors.LockNotAvailable as exc:
            raise DatabaseBusy(
                f"a session row stayed locked for more than lock_timeout={self._lock_timeout};"
                " nothing was written"
            ) from exc
        except (self._psycopg.OperationalError, self._pool_module.PoolTimeout) as exc:
            raise SessionStoreError(
                f"PostgreSQL is unavailable: {exc}",
                store="PostgreSQL",
                hint="check that the server is up and reachable, and its logs",
            ) from exc
        except self._psycopg.Error as exc:
            raise SessionStoreError(
                f"PostgreSQL refused the operation: {exc}",
                store="PostgreSQL",
                hint="check the server's logs, the schema and the database user's privileges",
            ) from exc

    def _write(self, fn: Callable[..., T], *args: Any) -> T:
        return self._transaction(fn, args, read=False)

    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return self._transaction(fn, args, read=True)

    def _write_batched(self, fn: Callable[..., T], *args: Any) -> T:
        return self._transaction(fn, args, read=False, pipeline=True)

    # -- lifecycle ---------------------------------------------------------------------------

    def _migrate_in(self, cur: psycopg.Cursor[Any]) -> None:
        cur.execute("SELECT set_config('lock_timeout', '0', true)")
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        cur.execute("CREATE TABLE IF NOT EXISTS agentloop_schema (version integer NOT NULL)")
        cur.execute("SELECT max(version) FROM agentloop_schema")
        row = cur.fetchone()
        version = check_schema_version(None if row is None else row[0], "the PostgreSQL database")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                cur.execute(statement)
        if version < SCHEMA_VERSION:
            cur.execute("DELETE FROM agentloop_schema")
            cur.execute("INSERT INTO agentloop_schema (version) VALUES (%s)", (SCHEMA_VERSION,))

    def _probe(self) -> None:
        """Connect once before the pool does: a bad DSN or a server that is down fails at once
        with the driver's reason, where the pool would retry (and log each failure) until
        ``connect_timeout``."""
        psycopg = self._psycopg
        try:
            conn = psycopg.connect(
                self._dsn, connect_timeout=max(2, math.ceil(self._connect_timeout))
            )
        except psycopg.ProgrammingError as exc:
            raise UserError(f"bad PostgreSQL DSN: {_one_line(exc)}") from exc
        except psycopg.Error as exc:
            raise SessionStoreError(
                f"cannot connect: {_one_line(exc)}",
                store="PostgreSQL",
                hint="check the URL (host, port, database, user, password) and that the server is up",
            ) from exc
        conn.close()

    def _open_pool(self) -> None:
        self._probe()
        pool = self._pool_module.ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            configure=self._configure,
            timeout=self._connect_timeout,
            name="agentloop-sessions",
        )
        self._pool = pool
        try:
            pool.open(wait=True, timeout=self._connect_timeout)
        except self._pool_module.PoolTimeout as exc:
            raise SessionStoreError(
                f"could not connect to PostgreSQL within {self._connect_timeout}s",
                store="PostgreSQL",
                hint="check the DSN, that the server is up, and connect_timeout",
            ) from exc
        self._write(self._migrate_in)

    async def _open(self) -> None:
        try:
            await self._thread(self._open_pool)
        except BaseException:
            await self._close()
            raise

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await anyio.to_thread.run_sync(pool.close)
