"""SQLite specifics: WAL and schema version, index use, busy database, nothing temp on disk."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from agentloop._errors import SessionConflict, UserError
from agentloop.sessions import SQLiteStore, StateChangeRecord
from agentloop.sessions._sql import SCHEMA_VERSION, SQLOps

from ._session_helpers import run_records


def _file_bytes(folder: Path, prefix: str) -> bytes:
    """The bytes of every file in ``folder`` whose name starts with ``prefix`` (db, -wal, -shm)."""
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith(prefix))


async def test_schema_and_wal_on_open(tmp_path: Path) -> None:
    """Opening creates the tables, records the schema version and switches the file to WAL."""
    path = tmp_path / "s.db"
    async with SQLiteStore(path):
        pass
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert raw.execute("SELECT version FROM agentloop_schema").fetchall() == [(SCHEMA_VERSION,)]
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    raw.close()
    assert {"agentloop_sessions", "agentloop_records", "agentloop_state"} <= tables


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database written by a newer agentloop (higher schema version) is not touched."""
    path = tmp_path / "s.db"
    async with SQLiteStore(path):
        pass
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("UPDATE agentloop_schema SET version = 99")
    raw.close()
    store = SQLiteStore(path)
    with pytest.raises(UserError, match="schema version 99"):
        await store.get("s")
    await store.aclose()


async def test_history_limit_uses_indexes(tmp_path: Path) -> None:
    """The history_limit queries search indexes: no table scan, no sort."""
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        await store.create("s")
        version = 0
        for n in range(20):
            version = await store.commit("s", expected_version=version, records=run_records(f"{n}"))
    ops = SQLOps(pg=False)
    raw = sqlite3.connect(path)
    raw.execute("ANALYZE")
    plans = [
        raw.execute("EXPLAIN QUERY PLAN " + ops.records_last_runs, ("s", "s", 9)).fetchall(),
        raw.execute("EXPLAIN QUERY PLAN " + ops.records_from, ("s", 40)).fetchall(),
    ]
    raw.close()
    details = [row[-1] for plan in plans for row in plan if "SUBQUERY" not in row[-1]]
    assert any("agentloop_records_runs" in d for d in details), details
    assert all(d.startswith("SEARCH") for d in details), details
    assert not any("TEMP B-TREE" in d for d in details), details


async def test_busy_database_is_a_counted_conflict(tmp_path: Path) -> None:
    """A write still locked out after busy_timeout raises SessionConflict and writes nothing."""
    path = tmp_path / "s.db"
    async with SQLiteStore(path, busy_timeout=0.05) as store:
        await store.create("s", state={"a": 1})
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(SessionConflict, match="busy_timeout"):
                await store.commit("s", expected_version=0, records=run_records("r"))
            got = await store.get("s")  # WAL: reads still work while a writer holds the lock
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert got is not None
        assert (got.version, got.history) == (0, ())
        assert (store.stats.conflicts, store.stats.busy_timeouts) == (1, 1)
        assert await store.commit("s", expected_version=0, records=run_records("r")) == 1


async def test_temp_keys_never_reach_the_file(tmp_path: Path) -> None:
    """The database files hold the kept marker and never the temp: key or its value."""
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        await store.create("s", state={"temp:secret-key-1": "temp-value-1", "kept": "kept-value"})
        await store.commit(
            "s",
            expected_version=0,
            records=[StateChangeRecord(changes={"temp:secret-key-2": "temp-value-2"})],
            set_state={"temp:secret-key-3": "temp-value-3", "kept2": "kept-value"},
            delete_state=["temp:secret-key-4"],
        )
        raw = sqlite3.connect(path)
        keys = [k for (k,) in raw.execute("SELECT key FROM agentloop_state")]
        bodies = [b for (b,) in raw.execute("SELECT body FROM agentloop_records")]
        raw.close()
    assert sorted(keys) == ["kept", "kept2"]
    assert len(bodies) == 1
    assert "temp:" not in bodies[0]
    data = _file_bytes(tmp_path, "s.db")
    assert b"kept-value" in data
    assert b"temp:" not in data
    assert b"temp-value" not in data


async def test_memory_database(tmp_path: Path) -> None:
    """':memory:' is one private database that keeps its data while the store is open."""
    async with SQLiteStore(":memory:") as store:
        await store.create("s")
        await store.commit("s", expected_version=0, records=run_records("r"))
        got = await store.get("s", history_limit=1)
        assert got is not None
        assert len(got.history) == 3
    assert _file_bytes(tmp_path, "") == b""


async def test_closing_the_store_never_closes_a_connection_under_its_thread(tmp_path: Path) -> None:
    """A worker thread left behind (a run that gave up waiting for it) still has its connection
    mid-transaction when the store closes: it finishes, and the connection closes when it is
    given back. Closing it under the thread crashed the process (a segmentation fault)."""

    store = SQLiteStore(tmp_path / "s.db")
    await store.create("s")
    entered, release = threading.Event(), threading.Event()

    def slow(cur: Any) -> int:
        cur.execute("SELECT 1")
        entered.set()
        release.wait(30)
        cur.execute("SELECT count(*) FROM agentloop_records")
        count: int = cur.fetchone()[0]
        return count

    results: list[int] = []
    thread = threading.Thread(target=lambda: results.append(store._read(slow)))
    thread.start()
    assert await anyio.to_thread.run_sync(entered.wait, 30)
    await store.aclose()
    release.set()
    await anyio.to_thread.run_sync(thread.join, 30)
    assert results == [0]
    assert store._all == [] and store._idle == []
