"""Store hardening: one session id length limit in every back end, and every SQLite failure (a
corrupt, read-only or full database) an ``AgentLoopError`` naming the store, with a hint."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from agentloop._errors import SessionError, UserError
from agentloop.sessions import Lease, SessionStore, SQLiteStore, StepRecord
from agentloop.sessions._base import MAX_ID_LENGTH

# -- session id length --------------------------------------------------------------------------


def _incompressible(n: int, seed: int = 0) -> str:
    """``n`` random characters outside the BMP (4 UTF-8 bytes each), so no database can
    compress them: the worst case of a limit in characters."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x10000, 0x1FFFF)) for _ in range(n))


def test_the_limit_is_512_characters() -> None:
    assert MAX_ID_LENGTH == 512


async def test_an_id_at_the_limit_works_in_every_store(store: SessionStore) -> None:
    """512 incompressible characters (2 KB of UTF-8) are a valid id everywhere, PostgreSQL's
    index included."""
    sid = _incompressible(MAX_ID_LENGTH)
    await store.create(sid)
    lease = await store.acquire_lease(sid, owner=_incompressible(MAX_ID_LENGTH, 1), ttl=30)
    version = await store.commit(sid, expected_version=0, lease=lease)
    await store.release_lease(lease)
    got = await store.get(sid)
    assert got is not None and got.id == sid and got.version == version == 1
    assert await store.delete(sid)


@pytest.mark.parametrize("length", [MAX_ID_LENGTH + 1, 3000])
async def test_a_longer_id_is_a_user_error_up_front_in_every_store(
    store: SessionStore, length: int
) -> None:
    """Every operation that takes a session id (or a lease owner) refuses a longer one with a
    ``UserError`` stating the limit, before the database sees it: memory, SQLite and PostgreSQL
    agree (PostgreSQL used to fail with "PostgreSQL is unavailable" past about 2.7 KB)."""
    long_id = _incompressible(length)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.create(long_id),
        lambda: store.get(long_id),
        lambda: store.delete(long_id),
        lambda: store.commit(long_id, expected_version=0),
        lambda: store.acquire_lease(long_id, owner="me", ttl=30),
        lambda: store.renew_lease(Lease(session_id=long_id, owner="me", fence=1, expires_at=0), 30),
        lambda: store.release_lease(Lease(session_id=long_id, owner="me", fence=1, expires_at=0)),
    ]
    for make_call in calls:
        with pytest.raises(UserError, match="512 characters"):
            await make_call()
    await store.create("short")
    with pytest.raises(UserError, match=r"lease owner .*512 characters"):
        await store.acquire_lease("short", owner=long_id, ttl=30)


# -- SQLite failures ------------------------------------------------------------------------------


def _check(exc: pytest.ExceptionInfo[SessionError], path: Path, *words: str) -> None:
    message = str(exc.value)
    assert str(path) in message, message
    for word in words:
        assert word in message.lower(), message
    assert not isinstance(exc.value, UserError)
    assert isinstance(exc.value.__cause__, sqlite3.Error)


async def test_a_corrupt_file_is_a_session_error(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(random.Random(1).randbytes(16_384))
    store = SQLiteStore(path)
    with pytest.raises(SessionError) as exc:
        await store.create("s")
    _check(exc, path, "not an sqlite database", "restore")
    await store.aclose()


async def test_a_database_damaged_after_opening_is_a_session_error(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    async with SQLiteStore(path) as store:
        await store.create("s")
    with path.open("r+b") as f:  # overwrite everything past the header: the schema pages
        f.seek(100)
        f.write(b"\xff" * (path.stat().st_size - 100))
    store = SQLiteStore(path)
    with pytest.raises(SessionError) as exc:
        await store.get("s")
    _check(exc, path, "corrupt", "restore")
    await store.aclose()


@pytest.fixture
def make_immutable() -> Iterator[Callable[[Path], None]]:
    """Makes a file immutable with ``chattr +i`` (read-only even for root), restored after;
    skips the test where the file system or the container does not allow it."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    made: list[Path] = []

    def make(path: Path) -> None:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not possible here: {done.stderr.decode().strip()}")
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


async def test_a_read_only_file_is_a_session_error(
    tmp_path: Path, make_immutable: Callable[[Path], None]
) -> None:
    """An immutable database file (``chattr +i``: root cannot write it either)."""
    path = tmp_path / "ro.db"
    async with SQLiteStore(path) as store:
        await store.create("s")
    make_immutable(path)
    async with SQLiteStore(path) as store:
        got = await store.get("s")  # reading works
        assert got is not None
        with pytest.raises(SessionError) as exc:
            await store.create("t")
    _check(exc, path, "read-only", "permission")


class _QueryOnlyStore(SQLiteStore):
    """Every connection with ``PRAGMA query_only``: SQLite refuses writes (SQLITE_READONLY)."""

    def _take(self) -> sqlite3.Connection:
        conn = super()._take()
        conn.execute("PRAGMA query_only = ON")
        return conn


async def test_a_read_only_connection_is_a_session_error(tmp_path: Path) -> None:
    path = tmp_path / "query-only.db"
    async with SQLiteStore(path) as store:
        await store.create("s")
    async with _QueryOnlyStore(path) as store:
        with pytest.raises(SessionError) as exc:
            await store.create("t")
    _check(exc, path, "read-only")


class _FullStore(SQLiteStore):
    """``PRAGMA max_page_count = 1`` caps the file at its current size: the next write that
    needs a new page fails with "database or disk is full", as on a full disk."""

    def _take(self) -> sqlite3.Connection:
        conn = super()._take()
        conn.execute("PRAGMA max_page_count = 1")
        return conn


async def test_a_full_disk_is_a_session_error(tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    async with SQLiteStore(path) as store:
        await store.create("s")
    async with _FullStore(path) as store:
        big = StepRecord(run_id="r", index=0, step={"pad": "x" * 200_000})
        with pytest.raises(SessionError) as exc:
            await store.commit("s", expected_version=0, records=[big])
        _check(exc, path, "full", "disk space")
        got = await store.get("s")  # nothing was written; the store still reads
        assert got is not None and got.version == 0
