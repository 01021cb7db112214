"""PostgreSQL specifics: schema creation under concurrency, index use, row locks, no temp rows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from agentloop._errors import SessionConflict
from agentloop.sessions import PostgresStore, StateChangeRecord
from agentloop.sessions._sql import SCHEMA_VERSION, SQLOps

from ._session_helpers import run_records

pytestmark = pytest.mark.postgres


@pytest.fixture
def raw(pg_schema_dsn: str) -> Iterator[Any]:
    """A plain psycopg connection to the test's schema, for reading tables directly."""
    import psycopg

    with psycopg.connect(pg_schema_dsn, autocommit=True) as conn:
        yield conn


async def test_concurrent_schema_creation_is_safe(pg_schema_dsn: str, raw: Any) -> None:
    """Eight stores opening an empty database at once create the schema exactly once."""
    stores = [PostgresStore(pg_schema_dsn, pool_size=1) for _ in range(8)]
    try:
        async with anyio.create_task_group() as tg:
            for store in stores:
                tg.start_soon(store.list)
    finally:
        for store in stores:
            await store.aclose()
    assert raw.execute("SELECT version FROM agentloop_schema").fetchall() == [(SCHEMA_VERSION,)]


async def test_a_store_opens_when_the_pools_workers_start_before_it_is_open(
    pg_schema_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg-pool 3.1.0 marked a pool open only after its worker threads had its first
    connection tasks, and a worker that took one before then dropped it: the pool never filled,
    and opening the store failed after ``connect_timeout`` (once in CI, under load). The floor is
    3.1.1; the wait here makes the workers win that race every time."""
    from psycopg_pool import ConnectionPool

    start_tasks = ConnectionPool._start_initial_tasks

    def then_wait(pool: ConnectionPool) -> None:
        start_tasks(pool)
        time.sleep(0.3)  # a worker takes the first task before the pool's open() goes on

    monkeypatch.setattr(ConnectionPool, "_start_initial_tasks", then_wait)
    async with PostgresStore(pg_schema_dsn, connect_timeout=3) as store:
        await store.create("s")
        assert (await store.get("s")).id == "s"  # type: ignore[union-attr]


async def test_history_limit_uses_the_run_index(pg_schema_dsn: str, raw: Any) -> None:
    """The N-th-run lookup and the tail read are index scans (with seq scans made unattractive)."""
    async with PostgresStore(pg_schema_dsn) as store:
        await store.create("s")
        version = 0
        for n in range(20):
            version = await store.commit("s", expected_version=version, records=run_records(f"{n}"))
    ops = SQLOps(pg=True)
    raw.execute("SET enable_seqscan = off")
    nth = "\n".join(r[0] for r in raw.execute("EXPLAIN " + ops.records_last_runs, ("s", "s", 9)))
    tail = "\n".join(r[0] for r in raw.execute("EXPLAIN " + ops.records_from, ("s", 40)))
    assert "agentloop_records_runs" in nth, nth
    assert "Index" in tail, tail
    assert "Seq Scan" not in nth + tail, (nth, tail)
    assert "Sort" not in nth + tail, (nth, tail)


async def test_locked_row_is_a_counted_conflict(pg_schema_dsn: str, raw: Any) -> None:
    """A session row locked past lock_timeout raises SessionConflict and writes nothing."""
    async with PostgresStore(pg_schema_dsn, lock_timeout=0.1) as store:
        await store.create("s")
        with raw.transaction():
            raw.execute("SELECT 1 FROM agentloop_sessions WHERE id = %s FOR UPDATE", ("s",))
            with pytest.raises(SessionConflict, match="lock_timeout"):
                await store.commit("s", expected_version=0, records=run_records("r"))
        assert (store.stats.conflicts, store.stats.busy_timeouts) == (1, 1)
        got = await store.get("s")
        assert got is not None
        assert (got.version, got.history) == (0, ())


async def test_temp_keys_never_reach_the_tables(pg_schema_dsn: str, raw: Any) -> None:
    """The state and records tables hold kept keys only, never temp: keys or their values."""
    async with PostgresStore(pg_schema_dsn) as store:
        await store.create("s", state={"temp:secret-key-1": "temp-value-1", "kept": "kept-value"})
        await store.commit(
            "s",
            expected_version=0,
            records=[StateChangeRecord(changes={"temp:secret-key-2": "temp-value-2", "k": 1})],
            set_state={"temp:secret-key-3": "temp-value-3", "kept2": "kept-value"},
            delete_state=["temp:secret-key-4"],
        )
    keys = sorted(k for (k,) in raw.execute("SELECT key FROM agentloop_state"))
    values = [v for (v,) in raw.execute("SELECT value FROM agentloop_state")]
    bodies = [b for (b,) in raw.execute("SELECT body FROM agentloop_records")]
    assert keys == ["kept", "kept2"]
    assert values == ['"kept-value"', '"kept-value"']
    assert len(bodies) == 1
    assert "temp" not in bodies[0]


async def test_an_unreachable_server_fails_at_once_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server that refuses connections: one SessionStoreError with the driver's reason, at
    once, not after the pool retried (and logged each attempt) for connect_timeout."""
    import socket

    from agentloop import SessionStoreError, UserError

    pytest.importorskip("psycopg")

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresStore(f"postgresql://agent:pw@127.0.0.1:{port}/db", connect_timeout=30)
    started = anyio.current_time()
    with pytest.raises(SessionStoreError, match="Connection refused") as failed:
        async with store:
            pass
    assert anyio.current_time() - started < 20  # the pool alone would wait the 30 s
    assert "\n" not in str(failed.value)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]
    with pytest.raises(UserError, match="bad PostgreSQL DSN"):
        async with PostgresStore(f"postgresql://agent@127.0.0.1:{port}/db?bogus=1"):
            pass
