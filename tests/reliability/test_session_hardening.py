"""A run's hold on its session when the store misbehaves: cancellation stays cancellation and
is fast, a finished run is reported finished, a lease renewal survives a blip, and an end record
is retried or left for resume with a warning, never dropped silently.

The faulty store is the in-memory store with faults injected at its back-end operations; the
batching test uses a real SQLite file. Fake-clock tests assert exact times on trio's MockClock
and order only on asyncio (durations scaled by ``timescale``)."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent, ModelRequest, SessionBusy, SessionStoreError, _session_run
from agentloop import _events as ev
from agentloop._session_run import SessionScope
from agentloop.sessions import InMemoryStore, Lease, RunEndRecord, SQLiteStore
from agentloop.sessions._base import DatabaseBusy, Finish
from agentloop.sessions._codec import EncodedRecord, StateDelta
from agentloop.testing import FunctionModel
from tests.support.heap import freeze_what_lives


def _blip() -> SessionStoreError:
    return SessionStoreError("connection reset", store="test store", hint="it comes back")


class FaultyStore(InMemoryStore):
    """The in-memory store with faults: releases that hang for ``hang`` seconds or raise,
    renewals that fail, commits of an end record that fail or hang. ``events`` says what
    happened, in order. Its wall clock moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        super().__init__(clock=lambda: self.now)
        self.hang = 0.0
        self.release_error: Exception | None = None
        self.renew_errors: list[Exception] = []
        self.end_errors: list[Exception] = []
        self.end_hang = 0.0
        self.events: list[str] = []

    async def _do_release(self, lease: Lease) -> None:
        self.events.append("release started")
        if self.hang:
            await anyio.sleep(self.hang)
        if self.release_error is not None:
            raise self.release_error
        await super()._do_release(lease)
        self.events.append("released")

    async def _do_renew(self, lease: Lease, ttl: float, now: float) -> Lease:
        if self.renew_errors:
            self.events.append("renew failed")
            raise self.renew_errors.pop(0)
        self.events.append("renewed")
        return await super()._do_renew(lease, ttl, now)

    async def _do_commit(
        self,
        session_id: str,
        expected_version: int,
        records: list[EncodedRecord],
        delta: StateDelta,
        lease: Lease | None,
        now: float,
    ) -> int:
        if any(r.type == "run_end" for r in records):
            if self.end_hang:
                self.events.append("end hangs")
                await anyio.sleep(self.end_hang)
            if self.end_errors:
                self.events.append("end failed")
                raise self.end_errors.pop(0)
        return await super()._do_commit(session_id, expected_version, records, delta, lease, now)


@pytest.fixture
def bounds(monkeypatch: pytest.MonkeyPatch, timescale: float) -> float:
    """The release and end-record bounds (2 s and 10 s), scaled to the test's time."""
    binding = _session_run.SessionScope
    monkeypatch.setattr(binding, "release_timeout", 2.0 * timescale, raising=False)
    monkeypatch.setattr(binding, "end_timeout", 10.0 * timescale, raising=False)
    monkeypatch.setattr(binding, "retry_first", 0.05 * timescale, raising=False)
    monkeypatch.setattr(binding, "retry_max", 1.0 * timescale, raising=False)
    return timescale


def _waiting_agent(store: Any, started: anyio.Event | None = None, **kw: Any) -> Agent:
    async def reply(request: ModelRequest) -> str:
        if started is not None:
            started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return Agent(FunctionModel(reply), store=store, **kw)


async def _ends(store: Any, session: str) -> list[str]:
    got = await store.get(session)
    return [r.status for r in got.history if isinstance(r, RunEndRecord)]


# -- 11: cancellation stays cancellation, and fast --------------------------------------------


@pytest.mark.fake_clock
async def test_a_timeout_with_a_halted_store_raises_timeout_within_the_bound(
    bounds: float, fake_time: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The store stops answering (recording the end and releasing each hang for 30 s):
    ``fail_after(1.5)`` raises ``TimeoutError`` 2 s after it fires, without waiting for the
    store, and a warning says the end was left for resume. (It used to wait the store out.)"""
    store = FaultyStore()
    agent = _waiting_agent(store)
    store.hang = store.end_hang = 30 * bounds
    start = anyio.current_time()
    with pytest.raises(TimeoutError), anyio.fail_after(1.5 * bounds):
        await agent.run("go", session="s")
    took = anyio.current_time() - start
    assert "released" not in store.events  # abandoned, not waited out
    if fake_time:
        assert 1.5 + 2.0 <= took <= 1.5 + 2.0 + 1e-6
    assert "was not recorded" in caplog.text and "resume" in caplog.text
    assert await _ends(store, "s") == []


async def test_a_store_error_on_release_does_not_replace_the_cancellation(
    bounds: float, caplog: pytest.LogCaptureFixture
) -> None:
    """The release fails: the cancellation goes on (it used to become a ``SessionError``)."""
    store = FaultyStore()
    store.release_error = _blip()
    agent = _waiting_agent(store)
    with anyio.move_on_after(1.5 * bounds) as scope:
        await agent.run("go", session="s")
    assert scope.cancelled_caught
    assert "could not release the lease" in caplog.text
    assert await _ends(store, "s") == ["cancelled"]


class _CountingSQLiteStore(SQLiteStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes = 0

    def _write(self, fn: Any, *args: Any) -> Any:
        self.writes += 1
        return super()._write(fn, *args)


async def test_cancelling_many_runs_batches_their_ends_and_releases(tmp_path: Path) -> None:
    """100 runs cancelled at once on SQLite: each raises the cancellation, records its end and
    releases its lease, all in one write transaction rather than two per run."""
    runs = 100
    async with _CountingSQLiteStore(tmp_path / "s.db") as store:
        before: list[int] = []
        cancelled = await _cancel_waiting_runs(
            store, runs, before_cancel=lambda: before.append(store.writes)
        )
        writes = store.writes - before[0]
        assert cancelled == runs
        for i in range(runs):
            session = await store.get(f"s{i}")
            assert session is not None and session.lease is None
            assert await _ends(store, f"s{i}") == ["cancelled"]
    # The finishes gather into a few transactions (usually one; a loaded machine may split
    # them), never one or more per run as before.
    assert writes <= 10, writes


@pytest.mark.postgres
async def test_cancelling_many_runs_on_postgresql_batches_their_ends_and_releases(
    pg_schema_dsn: str,
) -> None:
    """The same on PostgreSQL: 100 runs cancelled at once each raise the cancellation, and
    their ends and releases are written in a few transactions, not one per run; the store,
    entered, renews the runs' leases together meanwhile."""
    from agentloop.sessions import PostgresStore

    class Counting(PostgresStore):
        finishes = 0

        def _write_batched(self, fn: Any, *args: Any) -> Any:
            if getattr(fn, "__name__", "") == "finish":
                self.finishes += 1
            return super()._write_batched(fn, *args)

    runs = 100
    async with Counting(pg_schema_dsn) as store:
        assert await _cancel_waiting_runs(store, runs) == runs
        for i in range(runs):
            assert await _ends(store, f"s{i}") == ["cancelled"]
            session = await store.get(f"s{i}")
            assert session is not None and session.lease is None
        assert 1 <= store.finishes <= 10, store.finishes


class _HeldSQLiteStore(_CountingSQLiteStore):
    """A SQLite store whose transactions of run finishes (``finishes`` counts them) wait in
    their worker thread until ``hold`` is set, or fail once as busy (``busy_once``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hold = threading.Event()
        self.hold.set()
        self.busy_once = False
        self.finishes = 0

    def _write_batched(self, fn: Any, *args: Any) -> Any:
        if fn == self._ops.finish:
            self.finishes += 1
            self.hold.wait(60)
            if self.busy_once:
                self.busy_once = False
                raise DatabaseBusy("the database stayed locked (injected)")
        return super()._write_batched(fn, *args)


async def test_cancelled_runs_hand_their_ends_over_and_return_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """200 runs cancelled at once on SQLite while the store holds their batch: 199 return
    before anything is written (another store on the file still sees their leases), the one
    writing the batch once it is. All the ends and releases go out in one or a few
    transactions, not one per run. A session whose run returned early can be taken at once by
    a new run: this store waits for the finish handed over to it (it reads its own writes)
    instead of answering that the session is leased. (Every run used to wait for the batch.)"""
    monkeypatch.setattr(SessionScope, "release_timeout", 60.0, raising=False)  # not the subject
    runs = 200
    path = tmp_path / "s.db"
    returned: list[str] = []
    early = anyio.Event()
    all_waiting = anyio.Event()
    waiting = 0

    async def reply(request: ModelRequest) -> str:
        nonlocal waiting
        waiting += 1
        if waiting == runs:
            all_waiting.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with _HeldSQLiteStore(path) as store, SQLiteStore(path) as other:
        agent = Agent(FunctionModel(reply), store=store)
        again = Agent(FunctionModel(lambda request: "again"), store=store)
        cancelled = anyio.CancelScope()
        taken: list[str] = []

        async def one(i: int) -> None:
            try:
                await agent.run("go", session=f"s{i}")
            finally:
                returned.append(f"s{i}")
                if len(returned) == runs - 1:
                    early.set()

        async def every_run() -> None:
            with cancelled:
                async with anyio.create_task_group() as tg:
                    for i in range(runs):
                        tg.start_soon(one, i)

        async def take_again(session: str) -> None:
            taken.append((await again.run("again", session=session)).text or "")

        async with anyio.create_task_group() as tg:
            tg.start_soon(every_run)
            try:
                with anyio.fail_after(60):  # a guard against a hang, not a measure
                    await all_waiting.wait()
                store.hold.clear()
                cancelled.cancel()
                with anyio.fail_after(20):  # well within the bound: the runs do not wait
                    await early.wait()
                assert store.finishes <= 1 and len(returned) == runs - 1
                first = returned[0]
                leased = await other.get(first)
                assert leased is not None and leased.lease is not None  # not yet written
                tg.start_soon(take_again, first)
                await anyio.sleep(0.05)
                assert taken == []  # waiting for the finish handed over, not refused as leased
            finally:
                store.hold.set()
        assert len(returned) == runs and taken == ["again"]
        assert store.finishes <= 10, store.finishes
        for i in range(runs):
            session = await other.get(f"s{i}")
            assert session is not None and session.lease is None
            ends = ["cancelled", "finished"] if f"s{i}" == first else ["cancelled"]
            assert await _ends(other, f"s{i}") == ends
    assert "was not recorded" not in caplog.text


async def test_a_batch_of_handed_over_ends_that_fails_as_busy_is_written_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """50 runs cancelled at once; the transaction of their ends finds the database locked:
    the store tries the batch again for the runs that handed their ends over, and every end
    is recorded, every lease released, in two transactions."""
    runs = 50
    async with _HeldSQLiteStore(tmp_path / "s.db") as store:
        store.busy_once = True
        assert await _cancel_waiting_runs(store, runs) == runs
        assert not store.busy_once and 2 <= store.finishes <= 10, store.finishes
        for i in range(runs):
            assert await _ends(store, f"s{i}") == ["cancelled"]
            session = await store.get(f"s{i}")
            assert session is not None and session.lease is None
    assert "was not recorded" not in caplog.text


class _CountingObjectsStore(SQLiteStore):
    """A SQLite store that counts, as its first batch of run finishes goes to the database,
    the objects the collector tracks that are not frozen (``gc.freeze``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.alive: int | None = None

    async def _do_finish(self, batch: list[Finish], now: float) -> None:
        if self.alive is None:
            self.alive = len(gc.get_objects())
        await super()._do_finish(batch, now)


@pytest.fixture
def refrozen() -> Iterator[None]:
    """After a test that unfreezes the heap (``gc.unfreeze``), what the suite froze after
    collecting (conftest) is frozen again, once the test's garbage is collected: else every
    later full collection in this worker would walk it again."""
    frozen = gc.get_freeze_count()
    yield
    if frozen and not gc.get_freeze_count():
        freeze_what_lives()


@pytest.mark.usefixtures("refrozen")
async def test_cancelled_runs_hold_little_while_their_ends_are_written(tmp_path: Path) -> None:
    """200 session runs cancelled at once, the collector off: while their ends go to the
    store, the cancellation has left fewer than 30 new objects per run for the collector to
    walk. A cancellation's traceback and the exceptions chained to it (the run's task group's)
    held the frames of the whole call chain it unwound, and every run waited for the batch
    holding them: about 100 objects per run on trio (whose task group keeps a task's exception
    until it exits), 45 on asyncio, enough for full collections of the whole heap while
    thousands of runs were cancelled."""
    runs = 200
    store = _CountingObjectsStore(tmp_path / "s.db")

    def before_cancel() -> None:
        gc.collect()
        gc.disable()
        gc.freeze()  # what is older than the cancel is not counted

    enabled = gc.isenabled()
    try:
        async with store:
            assert await _cancel_waiting_runs(store, runs, before_cancel=before_cancel) == runs
            assert await _ends(store, "s0") == ["cancelled"]
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()
    assert store.alive is not None
    assert store.alive < 30 * runs, store.alive / runs


class _LateSQLiteStore(SQLiteStore):
    """A SQLite store whose batches of finishes reach their worker thread late: ``_do_finish``
    waits, on the event loop, until ``go`` is set (as a loop busy unwinding thousands of runs
    does), or whose worker thread, once begun, waits until ``unblock`` is set (a store that
    stopped answering)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.go: anyio.Event | None = None
        self.reached = anyio.Event()
        self.unblock: threading.Event | None = None
        self.written = threading.Event()

    async def _do_finish(self, batch: list[Finish], now: float) -> None:
        self.reached.set()
        if self.go is not None:
            await self.go.wait()
        await super()._do_finish(batch, now)

    def _write_batched(self, fn: Any, *args: Any) -> Any:
        if self.unblock is not None and fn == self._ops.finish:
            self.unblock.wait(60)
        try:
            return super()._write_batched(fn, *args)
        finally:
            self.written.set()


async def _cancel_waiting_runs(
    store: Any, runs: int, while_cancelling: Any = None, before_cancel: Any = None
) -> int:
    """Start ``runs`` runs waiting in their model call, cancel them all; how many raised the
    cancellation. ``while_cancelling()`` runs beside the cancelled runs; ``before_cancel()`` is
    called once they all wait, just before the cancel."""
    cancelled = 0
    waiting = 0
    all_waiting = anyio.Event()

    async def reply(request: ModelRequest) -> str:
        nonlocal waiting
        waiting += 1
        if waiting == runs:
            all_waiting.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    agent = Agent(FunctionModel(reply), store=store)

    async def one(i: int) -> None:
        nonlocal cancelled
        try:
            await agent.run("go", session=f"s{i}")
        except anyio.get_cancelled_exc_class():
            cancelled += 1
            raise

    async with anyio.create_task_group() as outer:
        async with anyio.create_task_group() as tg:
            for i in range(runs):
                tg.start_soon(one, i)
            await all_waiting.wait()
            if while_cancelling is not None:
                outer.start_soon(while_cancelling)
            if before_cancel is not None:
                before_cancel()
            tg.cancel_scope.cancel()
    return cancelled


async def test_a_batch_handed_to_its_thread_after_the_bound_still_records_every_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """50 runs cancelled at once; their batch reaches its worker thread only after every
    run's bound has passed on the event loop. The loop's time is not the store's: every end is
    recorded and every lease released. (The bound used to count the loop's time: the writer
    gave up before its thread began, anyio dropped the job and every run of the batch lost its
    end record.) The bound is 0.5 s of real time, not scaled down: the store's own time for
    the batch must fit in it on a loaded machine."""
    monkeypatch.setattr(SessionScope, "release_timeout", 0.5, raising=False)
    runs = 50
    async with _LateSQLiteStore(tmp_path / "s.db") as store:
        store.go = go = anyio.Event()

        async def late() -> None:
            await store.reached.wait()
            await anyio.sleep(2 * SessionScope.release_timeout)  # every bound has passed
            go.set()

        assert await _cancel_waiting_runs(store, runs, late) == runs
        for i in range(runs):
            assert await _ends(store, f"s{i}") == ["cancelled"]
            session = await store.get(f"s{i}")
            assert session is not None and session.lease is None
    assert "was not recorded" not in caplog.text


async def test_a_halted_sqlite_store_does_not_hold_cancelled_runs(
    tmp_path: Path, bounds: float, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker thread writing the batch stops answering: the cancelled runs return, as
    cancellation, without waiting for it (the test would hang otherwise), and warn that their
    ends were left for resume."""
    runs = 20
    async with _LateSQLiteStore(tmp_path / "s.db") as store:
        store.unblock = unblock = threading.Event()
        try:
            with anyio.fail_after(60):  # a guard against a hang, not a measure
                assert await _cancel_waiting_runs(store, runs) == runs
        finally:
            unblock.set()
            # The abandoned thread finishes its transaction before the store closes.
            await anyio.to_thread.run_sync(store.written.wait, 60)
    assert caplog.text.count("was not recorded") == runs


# -- 12: a run committed as finished is reported finished ---------------------------------------


async def test_a_finished_run_whose_release_fails_is_reported_finished(
    bounds: float, caplog: pytest.LogCaptureFixture
) -> None:
    """The end was committed; releasing the lease fails: the stream still ends with
    ``RunFinished``, the result is returned, and the failure is logged (the lease expires by
    itself). It used to raise ``SessionError`` with no terminal event."""
    store = FaultyStore()
    store.release_error = _blip()
    agent = Agent(FunctionModel(lambda request: "the answer"), store=store)
    async with agent.stream("go", session="s") as run:
        events = [event async for event in run]
    assert isinstance(events[-1], ev.RunFinished)
    assert run.result.text == "the answer"
    assert await _ends(store, "s") == ["finished"]
    assert "could not release the lease" in caplog.text
    assert (await agent.run("again", session="t")).text == "the answer"


# -- 13: lease renewal survives a blip ------------------------------------------------------------


def _slow_agent(store: Any, ttl: float, takes: float | None = None) -> Agent:
    """An agent whose model answers after ``takes`` seconds (``2 * ttl``: a few renewals)."""

    async def reply(request: ModelRequest) -> str:
        await anyio.sleep(2 * ttl if takes is None else takes)
        return "done"

    return Agent(FunctionModel(reply), store=store, lease_ttl=ttl)


@pytest.fixture(params=["own renewal", "store's keeper"])
def kept(request: pytest.FixtureRequest) -> bool:
    """Whether the store is entered (``async with``): then its lease keeper renews the run's
    lease; otherwise the run renews its own. The rules are the same."""
    return bool(request.param == "store's keeper")


@contextlib.asynccontextmanager
async def _maybe_entered(store: FaultyStore, entered: bool) -> AsyncIterator[None]:
    if entered:
        async with store:
            yield
    else:
        yield


@pytest.mark.fake_clock
async def test_a_renewal_that_fails_once_is_retried(timescale: float, kept: bool) -> None:
    """One transient store error at a renewal, with two thirds of the TTL left, no longer kills
    a healthy run: the renewal is retried with backoff and the run finishes."""
    store = FaultyStore()
    store.renew_errors = [_blip(), _blip()]
    ttl = 30 * timescale
    async with _maybe_entered(store, kept):
        # The first renewal is due at a third of the TTL, and retried within a tenth of it.
        result = await _slow_agent(store, ttl, takes=ttl).run("go", session="s")
        assert result.text == "done"
        assert store.events[:3] == ["renew failed", "renew failed", "renewed"]
        assert await _ends(store, "s") == ["finished"]


@pytest.mark.fake_clock
async def test_a_renewal_still_failing_ends_the_run_before_the_lease_expires(
    timescale: float, fake_time: bool, kept: bool
) -> None:
    """A store that stays down: the run ends with the store's error while its lease is still
    valid, never running on without one."""
    store = FaultyStore()
    store.renew_errors = [_blip() for _ in range(1000)]
    ttl = 30 * timescale
    async with _maybe_entered(store, kept):
        start = anyio.current_time()
        with pytest.raises(SessionStoreError):
            await _slow_agent(store, ttl).run("go", session="s")
        if fake_time:
            assert ttl / 3 < anyio.current_time() - start < ttl
        assert store.events.count("renew failed") > 1


@pytest.mark.fake_clock
async def test_a_lost_lease_still_ends_the_run_at_once(timescale: float, kept: bool) -> None:
    """``SessionBusy`` (the lease was taken over) is not retried."""
    store = FaultyStore()
    store.renew_errors = [SessionBusy("lease lost"), _blip()]
    async with _maybe_entered(store, kept):
        with pytest.raises(SessionBusy):
            await _slow_agent(store, 30 * timescale).run("go", session="s")
        assert store.events.count("renew failed") == 1


class _RenewCountingSQLiteStore(SQLiteStore):
    """A SQLite store that counts the transactions that renew leases."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.renewals = 0

    def _write_batched(self, fn: Any, *args: Any) -> Any:
        if getattr(fn, "__name__", "") in ("renew", "renew_many"):
            self.renewals += 1
        return super()._write_batched(fn, *args)


async def test_an_entered_store_renews_its_runs_leases_together(tmp_path: Path) -> None:
    """100 session runs on a SQLite store entered with ``async with``, each waiting 2 s with a
    lease of 1.5 s: the store's keeper renews their leases together, a few transactions per
    renewal period, where a renewal task per run wrote one each (about 400 here). At 2 s,
    another store on the file sees every lease renewed past its first expiry; then every run
    finishes and releases its lease."""
    runs, ttl = 100, 1.5
    path = tmp_path / "s.db"
    halfway = anyio.Event()
    seen: list[float] = []

    async def reply(request: ModelRequest) -> str:
        await halfway.wait()
        return "done"

    async with _RenewCountingSQLiteStore(path) as store, SQLiteStore(path) as other:
        agent = Agent(FunctionModel(reply), store=store, lease_ttl=ttl)
        answers: list[str] = []

        async def one(i: int) -> None:
            answers.append((await agent.run("go", session=f"s{i}")).text or "")

        async with anyio.create_task_group() as tg:
            for i in range(runs):
                tg.start_soon(one, i)
            await anyio.sleep(2.0)  # past the first leases' expiry
            now = time.time()
            for i in range(runs):
                session = await other.get(f"s{i}")
                assert session is not None and session.lease is not None
                seen.append(session.lease.expires_at - now)
            halfway.set()
        assert answers == ["done"] * runs
        assert min(seen) > 0, min(seen)  # renewed: still valid past the first expiry
        assert 0 < store.renewals < runs, store.renewals
        for i in range(runs):
            session = await other.get(f"s{i}")
            assert session is not None and session.lease is None


# -- 14: end records are never dropped silently ---------------------------------------------------


def _failing_agent(store: Any) -> Agent:
    async def reply(request: ModelRequest) -> str:
        raise RuntimeError("the model function broke")

    return Agent(FunctionModel(reply), store=store)


@pytest.mark.parametrize("status", ["cancelled", "failed"])
async def test_an_end_record_that_fails_once_is_retried(bounds: float, status: str) -> None:
    """A transient store error when recording the end: retried, so the end is recorded."""
    store = FaultyStore()
    store.end_errors = [_blip()]
    if status == "cancelled":
        with anyio.move_on_after(1.5 * bounds):
            await _waiting_agent(store).run("go", session="s")
    else:
        with pytest.raises(RuntimeError):
            await _failing_agent(store).run("go", session="s")
    assert store.events.count("end failed") == 1
    assert await _ends(store, "s") == [status]
    assert (await store.get("s")).lease is None  # type: ignore[union-attr]


@pytest.mark.fake_clock
async def test_a_slow_store_leaves_the_end_for_resume_with_a_warning(
    bounds: float, caplog: pytest.LogCaptureFixture, fake_time: bool
) -> None:
    """The store takes 30 s to record the end of a cancelled run: after the 2 s bound the run
    returns, a warning names the run and says it is left for resume. (It used to wait up to
    10 s and then drop the record without a word.)"""
    store = FaultyStore()
    store.end_hang = 30 * bounds
    agent = _waiting_agent(store)
    start = anyio.current_time()
    with anyio.move_on_after(1.5 * bounds):
        await agent.run("go", session="s")
    if fake_time:
        assert anyio.current_time() - start <= 1.5 + 2.0 + 1e-6
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("not recorded" in r.getMessage() and "resume" in r.getMessage() for r in warnings)
    assert await _ends(store, "s") == []
    store.now += 30  # the lease expires by itself
    resumed = await Agent(FunctionModel(lambda request: "resumed")).resume(session="s", store=store)
    assert resumed.text == "resumed"


@pytest.mark.postgres
async def test_cancel_with_a_locked_postgresql_row_stays_cancellation_and_is_bounded(
    pg_schema_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Real PostgreSQL that cannot answer: another connection holds the session's row lock
    (for 10 s at most, or until the run returned). The cancelled run returns, as cancellation,
    while the lock is still held: its end and release are abandoned after the bound, and left
    for resume. It used to wait for the lock, then raise instead of the cancellation."""
    import psycopg

    from agentloop.sessions import PostgresStore

    monkeypatch.setattr(_session_run.SessionScope, "release_timeout", 0.5, raising=False)
    events: list[str] = []
    started, returned = anyio.Event(), anyio.Event()
    async with PostgresStore(pg_schema_dsn, lock_timeout=30.0) as store:
        agent = _waiting_agent(store, started)
        holder: psycopg.Connection[Any] = await anyio.to_thread.run_sync(
            functools.partial(psycopg.connect, pg_schema_dsn)
        )

        async def hold_the_lock() -> None:
            await anyio.to_thread.run_sync(
                holder.execute, "SELECT id FROM agentloop_sessions WHERE id = 's' FOR UPDATE"
            )
            locked.set()
            with anyio.move_on_after(10):
                await returned.wait()
            await anyio.to_thread.run_sync(holder.rollback)
            events.append("lock released")

        locked = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                with anyio.CancelScope() as scope:
                    async with anyio.create_task_group() as runs:
                        runs.start_soon(functools.partial(agent.run, "go", session="s"))
                        await started.wait()
                        tg.start_soon(hold_the_lock)
                        await locked.wait()
                        scope.cancel()
                events.append("run returned")
                returned.set()
        finally:
            await anyio.to_thread.run_sync(holder.close)
    assert events == ["run returned", "lock released"]
    assert scope.cancelled_caught
    assert "was not recorded" in caplog.text
