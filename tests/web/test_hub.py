"""``RunHub`` on asyncio and trio, on the emulated provider over a loopback socket: a run goes on
without readers, any reader resumes from any seq, a busy session is refused before anything runs,
logs are bounded, and each caller reaches only its own runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from agentloop import Agent, RunFinished, SessionBusy, SessionNotFound
from agentloop.sessions import InMemoryStore
from agentloop.sessions._keeper import LeaseKeeper
from agentloop.testing import ProviderServer
from agentloop.web import LogTrimmed, RunHub, RunLog, TooMany, WebLimits

from ._demo import FINAL, DemoProvider, demo_agent


@pytest.fixture
async def provider() -> AsyncIterator[ProviderServer]:
    async with ProviderServer(DemoProvider(chunk_delay=0.002)) as server:
        yield server


@pytest.fixture
async def agent(provider: ProviderServer) -> AsyncIterator[Agent[Any, Any]]:
    served = demo_agent(provider.url, store=InMemoryStore())
    try:
        yield served
    finally:
        await served.model.aclose()  # type: ignore[union-attr]  # the caller's model


async def _read(log: RunLog, after: int | None = None) -> list[Any]:
    return [event async for _, event in log.follow(log.start_index(after))]


async def test_a_run_goes_on_without_readers_and_any_reader_resumes_from_any_seq(
    agent: Agent[Any, Any], provider: ProviderServer
) -> None:
    """Nobody reads while the run works; afterwards a reader from the start gets it all, one
    after seq n gets the events after n, and the model was asked as often as for one run."""
    async with RunHub(agent) as hub:
        log = await hub.start("alice", "Paris or Oslo?")
        with anyio.fail_after(10):
            await log.wait_done()
        everything = await _read(log)
        for after in (0, 1, 7, len(everything) - 1, len(everything)):
            tail = await _read(log, after)
            assert [e.seq for e in tail] == [e.seq for e in everything if e.seq > after]
    assert isinstance(everything[-1], RunFinished)
    assert everything[-1].result.output == FINAL
    assert provider.stats.requests == 4


async def test_a_reader_follows_a_run_live(agent: Agent[Any, Any]) -> None:
    """A reader that starts at once sees every event as it comes, in seq order, to the end."""
    async with RunHub(agent) as hub:
        log = await hub.start("alice", "Paris or Oslo?")
        with anyio.fail_after(10):
            seqs = [e.seq for e in await _read(log)]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_a_busy_session_is_refused_before_anything_runs(agent: Agent[Any, Any]) -> None:
    """A second run on a session a run holds raises ``SessionBusy`` at once, and so does one
    whose session another process's run holds (the store's lease)."""
    store = agent.store
    assert store is not None
    async with RunHub(agent) as hub:
        log = await hub.start("alice", "one")
        with pytest.raises(SessionBusy):
            await hub.start("alice", "two", session=log.session)
        await _read(log)
        await store.create("elsewhere", user="alice")
        lease = await store.acquire_lease("elsewhere", owner="another-process", ttl=30)
        with pytest.raises(SessionBusy):
            await hub.start("alice", "three", session="elsewhere")
        await store.release_lease(lease)
        done = await hub.start("alice", "four", session="elsewhere")
        assert isinstance((await _read(done))[-1], RunFinished)


async def test_callers_reach_only_their_own_runs_and_sessions(agent: Agent[Any, Any]) -> None:
    """Another caller's session and run are ``SessionNotFound``, as unknown ones are."""
    async with RunHub(agent) as hub:
        log = await hub.start("alice", "hi")
        await _read(log)
        with pytest.raises(SessionNotFound):
            hub.log("bob", log.id)
        with pytest.raises(SessionNotFound):
            await hub.start("bob", "mine", session=log.session)
        with pytest.raises(SessionNotFound):
            await hub.history("bob", log.session)
        with pytest.raises(SessionNotFound):
            await hub.start("alice", "hi", session="no-such-session")
        assert (await hub.history("alice", log.session))[0]["type"] == "run"


async def test_event_logs_and_runs_per_caller_are_bounded(agent: Agent[Any, Any]) -> None:
    """A log keeps its last ``max_events_per_run`` events (a reader from before them gets
    ``LogTrimmed``); an owner's runs beyond ``max_runs_per_owner`` are ``TooMany``."""
    limits = WebLimits(max_events_per_run=5, max_runs_per_owner=1)
    async with RunHub(agent, limits=limits) as hub:
        log = await hub.start("alice", "hi")
        with pytest.raises(TooMany):
            await hub.start("alice", "again")
        with anyio.fail_after(10):
            await log.wait_done()
        kept = log.events()
        assert len(kept) == 5
        with pytest.raises(LogTrimmed):
            log.start_index(None)
        with pytest.raises(LogTrimmed):
            log.start_index(kept[0].seq - 2)
        tail = await _read(log, kept[0].seq - 1)
        assert tail == kept
        await hub.start("bob", "another caller")  # alice's bound is alice's


async def test_a_cancelled_run_ends_its_log(agent: Agent[Any, Any]) -> None:
    """``cancel`` stops the run; its readers reach the end of its log."""
    async with RunHub(agent) as hub:
        log = await hub.start("alice", "hi")
        hub.cancel("alice", log.id)
        with anyio.fail_after(10):
            events = await _read(log)
    assert log.done
    assert not any(isinstance(e, RunFinished) for e in events)


async def test_refused_runs_give_their_places_back(agent: Agent[Any, Any]) -> None:
    """Runs the engine refuses before they begin (another process holds the session) leave the
    caller's run count as it was: the bound still holds, no looser and no tighter."""
    store = agent.store
    assert store is not None
    await store.create("held", user="alice")
    lease = await store.acquire_lease("held", owner="another-process", ttl=30)
    async with RunHub(agent, limits=WebLimits(max_runs_per_owner=2)) as hub:
        for _ in range(3):
            with pytest.raises(SessionBusy):
                await hub.start("alice", "two", session="held")
        await store.release_lease(lease)
        first = await hub.start("alice", "three")
        second = await hub.start("alice", "four")
        with pytest.raises(TooMany):
            await hub.start("alice", "five")
        await first.wait_done()
        await second.wait_done()


async def test_a_reader_takes_every_event_already_in_the_log_at_once(
    agent: Agent[Any, Any],
) -> None:
    """A finished run's log gives a reader every event in one batch (what ``LogStream`` sends
    in one write), the same events as one at a time, from the start or after a seq."""
    async with RunHub(agent) as hub:
        log = await hub.start("alice", "hello")
        await log.wait_done()
        events = await _read(log)
        assert log.batch(log.position(log.start_index(None))) == events
        after = events[2].seq
        assert log.start_index(after) == 3
        assert log.batch(log.position(3)) == events[3:]
        assert log.batch(log.position(len(events))) == []


def _keeper(store: InMemoryStore) -> LeaseKeeper | None:
    return store.lease_keeper


async def test_the_store_the_hub_makes_keeps_its_leases_with_one_keeper(
    provider: ProviderServer, agent: Agent[Any, Any]
) -> None:
    """An agent without a store is served from an in-memory store the hub makes, whose lease
    keeper runs while the hub is entered: it holds each running run's lease (not a renewal
    task per run). The store stays open after the hub, its sessions kept, and the hub can be
    entered again. A store the hub is given is its owner's to enter."""
    bare = demo_agent(provider.url)
    try:
        hub = RunHub(bare)
        async with hub:
            store = hub.store
            assert isinstance(store, InMemoryStore)
            keeper = store.lease_keeper
            assert keeper is not None
            log = await hub.start("alice", "Paris or Oslo?")
            assert len(keeper.holdings) == 1  # the run's lease, while it runs
            with anyio.fail_after(10):
                await log.wait_done()
            assert not keeper.holdings
        assert _keeper(store) is None
        assert await store.get(log.session) is not None
        async with hub:  # again: the same store, its keeper running again
            assert hub.store is store
            assert _keeper(store) is not None
            again = await hub.start("alice", "And Rome?", session=log.session)
            with anyio.fail_after(10):
                await again.wait_done()
    finally:
        await bare.model.aclose()  # type: ignore[union-attr]
    async with RunHub(agent) as given:
        assert given.store is agent.store
        assert isinstance(given.store, InMemoryStore)
        assert _keeper(given.store) is None  # not entered
