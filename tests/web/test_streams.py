"""An event stream's own duties, over a real socket (uvicorn, so asyncio only): a ping comment
while the log is quiet, the stream ended (and its count released) at once when the client
leaves, a client that does not read dropped after ``send_timeout``, and every stream ended when
the server shuts down, though its run goes on."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest
from sse_starlette.sse import AppStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentloop import RunStarted, TextDelta
from agentloop.sessions import InMemoryStore
from agentloop.testing import ProviderServer
from agentloop.web import RunLog, create_app, sse_response
from agentloop.web._sse import watch_exit

from ._demo import DemoProvider, demo_agent
from ._serving import serving

pytestmark = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn's loop


def _log() -> RunLog:
    log = RunLog(id="r", session="s", owner="o", max_events=1_000)
    log.append(RunStarted(run_id="r", branch="a", seq=0, input="hi"))
    return log


def _delta(seq: int, text: str = "hello") -> TextDelta:
    return TextDelta(run_id="r", branch="a", seq=seq, attempt=0, text=text)


@pytest.fixture(params=["deadlines", "ticker"])
def ticked(request: pytest.FixtureRequest) -> bool:
    """Each duty both ways: a stream keeping its own deadlines (``sse_response`` in any app),
    and one whose pings and send timeout the app's ticker keeps (``watch_exit`` runs in
    ``create_app``'s lifespan)."""
    return bool(request.param == "ticker")


@contextlib.asynccontextmanager
async def _streaming(
    log: RunLog, closed: list[float], ticked: bool = False, **options: Any
) -> AsyncIterator[str]:
    """An app whose ``/events`` streams ``log``; ``closed`` gets the time each stream ended;
    with ``ticked``, its lifespan runs the ticker."""

    async def events(request: Request) -> Response:
        return sse_response(log, on_close=lambda: closed.append(time.monotonic()), **options)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            if ticked:
                tg.start_soon(watch_exit)
            yield
            tg.cancel_scope.cancel()

    app = Starlette(routes=[Route("/events", events)], lifespan=lifespan)
    async with serving(app) as base:
        yield base


async def test_a_quiet_log_is_pinged_and_its_end_ends_the_stream(ticked: bool) -> None:
    log, closed = _log(), list[float]()
    async with (
        _streaming(log, closed, ticked, ping=0.2) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
        client.stream("GET", "/events") as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.aiter_lines()
        with anyio.fail_after(10):
            assert (await anext(lines)) == "id: 0"
            for _ in range(3):  # nothing appended: a keep-alive comment, again and again
                while (await anext(lines)) != ": ping":
                    pass
            log.append(_delta(1))
            log.close()
            rest = [line async for line in lines]
    assert "id: 1" in rest and rest[-1] == ""
    assert len(closed) == 1


async def test_a_client_that_leaves_ends_its_stream_at_once(ticked: bool) -> None:
    """The run goes on (its log stays open), but the stream of a client that left ends."""
    log, closed = _log(), list[float]()
    async with (
        _streaming(log, closed, ticked, ping=60) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        async with client.stream("GET", "/events") as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    break
        left = time.monotonic()
        with anyio.fail_after(5):
            while not closed:  # noqa: ASYNC110  a list the callback fills
                await anyio.sleep(0.01)
    assert closed[0] - left < 2 and not log.done


async def test_a_client_that_does_not_read_is_dropped_after_the_send_timeout(
    ticked: bool,
) -> None:
    log, closed = _log(), list[float]()
    async with _streaming(log, closed, ticked, send_timeout=0.5) as base:
        port = int(base.rsplit(":", 1)[1])
        async with await anyio.connect_tcp("127.0.0.1", port) as stalled:
            await stalled.send(b"GET /events HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            with anyio.fail_after(20):
                seq = 1
                while not closed:  # the socket's buffers fill, then a write waits
                    log.append(_delta(seq, "x" * 65_536))
                    seq += 1
                    await anyio.sleep(0.001)
    assert not log.done


async def test_the_servers_shutdown_ends_the_streams_of_runs_still_going() -> None:
    async with ProviderServer(DemoProvider(chunk_delay=0.5)) as provider:
        agent = demo_agent(provider.url, store=InMemoryStore())
        try:
            async with (
                serving(create_app(agent)) as base,
                httpx2.AsyncClient(base_url=base, timeout=30) as client,
            ):
                body = (await client.post("/api/runs", json={"input": "Paris or Oslo?"})).json()
                async with client.stream("GET", body["events"]) as response:
                    lines = response.aiter_lines()
                    assert (await anext(lines)).startswith("id:")
                    AppStatus.should_exit = True  # what sse-starlette sets on uvicorn's signal
                    try:
                        with anyio.fail_after(5):
                            seen = [line async for line in lines]
                    finally:
                        AppStatus.should_exit = False
                assert not any("run_finished" in line for line in seen)  # the run went on
        finally:
            await agent.model.aclose()  # type: ignore[union-attr]  # the caller's model


async def test_under_the_ticker_a_stream_moves_no_deadline_as_events_come() -> None:
    """Moving a cancel scope's deadline twice a wake-up (the send timeout's while writing, the
    ping's while waiting) cost a sixth of streaming a log: under the app's ticker a stream
    moves none, and every event still arrives."""
    from anyio._backends import _asyncio

    moves = 0
    prop: Any = _asyncio.CancelScope.__dict__["deadline"]
    scopes: Any = _asyncio.CancelScope

    def moved(scope: Any, value: float) -> None:
        nonlocal moves
        moves += 1
        prop.fset(scope, value)

    log, closed = _log(), list[float]()
    async with (
        _streaming(log, closed, True, ping=60) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
        client.stream("GET", "/events") as response,
    ):
        lines = response.aiter_lines()
        with anyio.fail_after(10):
            assert (await anext(lines)) == "id: 0"
            scopes.deadline = property(prop.fget, moved)
            try:
                for seq in range(1, 21):  # one wake-up each
                    log.append(_delta(seq))
                    while not (await anext(lines)).startswith("data:"):
                        pass
            finally:
                scopes.deadline = prop
            log.close()
            rest = [line async for line in lines]
    assert moves == 0
    assert rest[-1] == "" and len(closed) == 1


async def test_a_stream_whose_ticker_stops_keeps_its_own_time() -> None:
    """A stream the ticker kept the time of goes on with its own deadlines once the ticker
    stops (its app's lifespan ended, another app's stream in the same thread): still pinged."""
    log, closed = _log(), list[float]()
    tickers: list[anyio.CancelScope] = []

    async def events(request: Request) -> Response:
        return sse_response(log, on_close=lambda: closed.append(time.monotonic()), ping=0.2)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tickers.append(tg.cancel_scope)
            tg.start_soon(watch_exit)
            yield
            tg.cancel_scope.cancel()

    app = Starlette(routes=[Route("/events", events)], lifespan=lifespan)
    async with (
        serving(app) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
        client.stream("GET", "/events") as response,
    ):
        lines = response.aiter_lines()
        with anyio.fail_after(10):
            assert (await anext(lines)) == "id: 0"
            while (await anext(lines)) != ": ping":  # the ticker's
                pass
            tickers[0].cancel()
            for _ in range(2):  # the stream's own
                while (await anext(lines)) != ": ping":
                    pass
            log.append(_delta(1))
            log.close()
            rest = [line async for line in lines]
    assert "id: 1" in rest and rest[-1] == ""
    assert len(closed) == 1
