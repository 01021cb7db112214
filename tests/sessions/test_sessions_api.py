"""The package surface: exports, store URLs, the optional driver, and lease waits on a fake clock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import agentloop.sessions
from agentloop._errors import SessionBusy, UserError
from agentloop.sessions import InMemoryStore, PostgresStore, SQLiteStore, open_store


def test_all_is_sorted_and_complete() -> None:
    """__all__ is sorted and names exactly the public re-exports, shown under the public path."""
    public = {n for n in dir(agentloop.sessions) if not n.startswith("_")} - {"annotations"}
    names = agentloop.sessions.__all__
    # isort-style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    assert names == sorted(
        names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n)
    )
    assert set(agentloop.sessions.__all__) == public
    assert SQLiteStore.__module__ == "agentloop.sessions"


def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """memory://, sqlite:/// (relative, absolute, :memory:) and postgres URLs pick their store."""
    monkeypatch.chdir(tmp_path)
    assert isinstance(open_store("memory://"), InMemoryStore)
    relative = open_store("sqlite:///data/s.db")
    assert isinstance(relative, SQLiteStore)
    assert relative.path == str(tmp_path / "data" / "s.db")
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db")
    assert isinstance(absolute, SQLiteStore)
    assert absolute.path == str(tmp_path / "abs.db")
    memory = open_store("sqlite:///:memory:")
    assert isinstance(memory, SQLiteStore)
    assert memory.path == ":memory:"
    for url in ("postgresql://u@h/db", "postgres://u@h/db", "postgresql+psycopg://u@h/db"):
        assert isinstance(open_store(url), PostgresStore)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite://relative.db", "mysql://u:secret@h/db", ""])
def test_bad_store_urls(url: str) -> None:
    """Unknown or malformed URLs are a UserError that does not echo a password."""
    with pytest.raises(UserError) as info:
        open_store(url)
    assert "secret" not in str(info.value)


def test_import_does_not_import_psycopg() -> None:
    """import agentloop.sessions leaves psycopg unimported (it is an optional extra)."""
    code = "import sys, agentloop.sessions; print(sorted(m for m in sys.modules if 'psycopg' in m))"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psycopg, PostgresStore raises a UserError saying what to install."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(UserError, match=r"pip install 'agentloop-runtime\[postgres\]'"):
        PostgresStore("postgresql:///x")


@pytest.mark.fake_clock
async def test_waiter_takes_over_exactly_at_expiry(fake_time: bool, timescale: float) -> None:
    """A waiting acquire takes over the moment the held lease expires, not a poll later."""
    store = InMemoryStore(clock=lambda: 1_000.0 + anyio.current_time())
    async with store:
        await store.create("s")
        ttl = 30 * timescale
        start = anyio.current_time()
        held = await store.acquire_lease("s", owner="a", ttl=ttl)
        lease = await store.acquire_lease("s", owner="b", ttl=ttl, wait=True)
        waited = anyio.current_time() - start
        assert (lease.owner, lease.fence) == ("b", held.fence + 1)
        assert store.stats.lease_takeovers == 1
        if fake_time:
            assert 29.999 < waited < 30.01
        with pytest.raises(SessionBusy, match="after waiting"):
            await store.acquire_lease("s", owner="c", ttl=ttl, wait=True, timeout=ttl / 2)


async def test_session_busy_says_when_the_lease_ends_in_words() -> None:
    """SessionBusy names the lease's end as a date and a wait, not raw epoch seconds."""
    store = InMemoryStore(clock=lambda: 1_764_590_400.25)  # 2025-12-01 12:00:00.25 UTC
    async with store:
        await store.create("s")
        await store.acquire_lease("s", owner="a-run", ttl=90)
        with pytest.raises(SessionBusy) as busy:
            await store.acquire_lease("s", owner="b", ttl=90)
    message = str(busy.value)
    assert "leased by 'a-run' until 2025-12-01 12:01:30 UTC (in 1 min 30 s)" in message
    assert "1764590490" not in message


async def test_an_in_memory_store_answers_without_passing_the_loop_a_round() -> None:
    """An in-memory store's operations return without a round of the event loop (no lock: none
    awaits inside), and a run's finish with no batch on its way is written at once: gathering a
    batch saves nothing there, and the rounds and the task cost more than the write (a served
    run does seven operations)."""
    from agentloop.sessions import RunEndRecord

    store = InMemoryStore()
    others: list[str] = []

    async def other() -> None:
        others.append("ran")

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        await store.create("s", user="u")
        lease = await store.acquire_lease("s", owner="run", ttl=30)
        end = RunEndRecord(run_id="r", status="finished", output="done", usage={})
        assert await store.finish_run(lease, expected_version=0, records=[end], within=2) == 1
        session = await store.get("s")
        assert others == []  # no operation let the other task run
    assert session is not None and session.lease is None
    assert [record.type for record in session.history] == ["run_end"]
    assert store.stats.commits == 1
