"""The loopback provider server: scripted responses (re-split, injected bytes, resets, status and
headers), recorded requests, handlers, and the emulated provider in a separate process that runs
two-turn tool sessions for each API."""

from __future__ import annotations

import gc
import json
import random
import socket
import sys
import threading
import time

import httpx2
import pytest
from anyio import from_thread

from agentloop.models import (
    Message,
    ModelRequest,
    ResponseBuilder,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from agentloop.testing import Chunk, RecordedRequest, ScriptedResponse
from agentloop.testing._scenarios import EmulatedProvider
from agentloop.testing._server import ProviderServer
from tests.support.provider_process import ProviderServerProcess, raise_fd_limit

from ._provider_helpers import make_model


def test_pieces_split_at_offsets_and_inject() -> None:
    """Bodies re-split at given offsets (or seeded random ones), with bytes injected."""
    r = ScriptedResponse(body=b"abcdefgh", split_at=[2, 5, 5, 99])
    assert [p.data for p in r.pieces()] == [b"ab", b"cde", b"fgh"]
    r = ScriptedResponse(body=[b"abc", Chunk(b"def", delay=1.0)], inject={4: b"!!"})
    assert r.pieces() == [Chunk(b"abc"), Chunk(b"d!!ef", 1.0)]
    seeded = ScriptedResponse(body=bytes(range(200)), split_seed=5, split_max=9)
    pieces = seeded.pieces()
    assert b"".join(p.data for p in pieces) == bytes(range(200))
    assert all(1 <= len(p.data) <= 9 for p in pieces)
    assert seeded.pieces() == pieces  # deterministic
    # The same splits as every earlier release: steps of random.Random(seed).randint(1, max).
    rng = random.Random(5)
    steps = [len(p.data) for p in pieces[:-1]]
    assert steps == [rng.randint(1, 9) for _ in steps]


async def test_scripted_responses_and_recorded_requests(server: ProviderServer) -> None:
    """FIFO responses keep their status, headers and body; requests are recorded; an empty
    script answers 500 and records the error."""
    server.enqueue(
        ScriptedResponse.json({"ok": 1}, status=429, headers={"retry-after": "3"}),
        ScriptedResponse.sse(b"data: 1\n\n", split_at=[3]),
    )
    async with httpx2.AsyncClient(base_url=server.url) as client:
        first = await client.post("/v1/x", json={"a": [1, 2]}, headers={"X-Test": "yes"})
        second = await client.post("/v1/y", content=b"raw")
        third = await client.get("/v1/z")
    assert (first.status_code, first.headers["retry-after"], first.json()) == (429, "3", {"ok": 1})
    assert (second.status_code, second.content) == (200, b"data: 1\n\n")
    assert second.headers["transfer-encoding"] == "chunked"
    assert third.status_code == 500
    assert len(server.errors) == 1
    requests = server.requests
    assert [(r.method, r.path) for r in requests] == [
        ("POST", "/v1/x"),
        ("POST", "/v1/y"),
        ("GET", "/v1/z"),
    ]
    assert requests[0].json == {"a": [1, 2]}
    assert requests[0].headers["x-test"] == "yes"
    assert requests[1].body == b"raw"


async def test_handler_sync_and_async() -> None:
    """A handler (plain or async function) answers every request."""

    async def handler(request: RecordedRequest) -> ScriptedResponse:
        return ScriptedResponse.json({"path": request.path})

    async with ProviderServer(handler) as server, httpx2.AsyncClient() as client:
        response = await client.get(server.url + "/hello")
    assert response.json() == {"path": "/hello"}
    with ProviderServer(lambda r: ScriptedResponse.json({"n": len(r.body)})) as server:
        assert httpx2.post(server.url, content=b"12345").json() == {"n": 5}


async def test_reset_after_bytes(server: ProviderServer) -> None:
    """``reset_after`` delivers that many body bytes, then resets the connection."""
    server.enqueue(ScriptedResponse.sse(b"data: 1\n\ndata: 2\n\n", reset_after=9))
    received: list[bytes] = []

    async def read(client: httpx2.AsyncClient) -> None:
        async with client.stream("POST", server.url) as response:
            async for chunk in response.aiter_raw():
                received.append(chunk)

    async with httpx2.AsyncClient() as client:
        with pytest.raises(httpx2.TransportError):
            await read(client)
    assert b"".join(received) == b"data: 1\n\n"
    assert server.stats.resets == 1


def _calling_the_loop(thread: threading.Thread) -> bool:
    """Whether ``thread`` is in a call into a server's loop (``BlockingPortal.call``)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        code = frame.f_code
        if (code.co_qualname, code.co_filename) == ("BlockingPortal.call", from_thread.__file__):
            return True
        frame = frame.f_back
    return False


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_connection_that_arrives_as_the_server_stops_is_closed(loop: str) -> None:
    """A client that connects as the server stops has its connection closed (by the server, or
    by the kernel with the listening socket), not left open for the garbage collector to find in
    a later test. On asyncio, cancelling an accept whose connection is ready in the same turn of
    the loop drops that connection (CPython gh-153761). Deterministic: a handler holds the
    server's loop while the client connects and ``stop()`` calls into the loop (having asked
    it to stop), so the loop sees both on its next turn."""
    held, release = threading.Event(), threading.Event()

    def hold_the_loop(request: RecordedRequest) -> ScriptedResponse:
        held.set()
        release.wait(10)  # a plain handler runs in the server's loop: nothing else runs now
        return ScriptedResponse.json({})

    server = ProviderServer(hold_the_loop, backend=loop).start()
    stopping = threading.Thread(target=server.stop)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as first:
            first.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            assert held.wait(10)
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as late:
                stopping.start()
                deadline = time.monotonic() + 10
                while not _calling_the_loop(stopping) and time.monotonic() < deadline:
                    stopping.join(0.001)
                release.set()
                stopping.join(10)
                assert not stopping.is_alive()
                try:
                    assert late.recv(1) == b""  # the server closed it
                except ConnectionResetError:
                    pass  # or the kernel did, with the listening socket
                except TimeoutError:
                    pytest.fail("the server left the connection open")
    finally:
        release.set()
        if stopping.is_alive():
            stopping.join(10)
        server.stop()
    gc.collect()  # a socket dropped in a reference cycle warns here (an error: pyproject.toml)


def test_raise_fd_limit() -> None:
    """The open-file limit is raised to the hard limit; asking for more than possible fails."""
    soft = raise_fd_limit()
    assert soft >= 1024
    with pytest.raises(RuntimeError, match="open-file limit"):
        raise_fd_limit(soft * 1000 + 10**9)


QUERY = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
WEATHER = ToolSpec(name="weather", description="", parameters=QUERY)
CLOCK = ToolSpec(name="clock", description="", parameters=QUERY)


async def _two_turns(api: str, url: str, transport: str, stream: bool) -> list[str]:
    """Run a two-turn session: two parallel calls, then a text answer after their results."""
    messages: list[Message] = [Message.user("weather and time?")]
    async with make_model(api, url, transport=transport, stream=stream) as model:
        request = ModelRequest(messages=tuple(messages), tools=(WEATHER, CLOCK))
        builder = ResponseBuilder(provider=model.provider)
        async with model.stream(request) as deltas:
            async for delta in deltas:
                builder.add(delta)
        first = builder.build()
        calls = first.tool_calls
        results = tuple(ToolResultPart(id=c.id, name=c.name, content="ok") for c in calls)
        messages += [
            Message(role="assistant", parts=first.parts),
            Message(role="tool", parts=results),
        ]
        builder = ResponseBuilder(provider=model.provider)
        async with model.stream(request.replace(messages=tuple(messages))) as deltas:
            async for delta in deltas:
                builder.add(delta)
        second = builder.build()
    assert [c.name for c in calls] == ["weather", "clock"]
    assert [json.loads(c.arguments) for c in calls] == [{"query": "first"}, {"query": "second"}]
    assert first.finish_reason == "tool_calls"
    assert second.finish_reason == "stop" and not second.tool_calls
    assert isinstance(second.parts[0], TextPart)
    assert isinstance(first.parts[0], ToolCallPart)
    return [second.text]


@pytest.fixture(scope="module")
def server_process() -> object:
    with ProviderServerProcess(chunk_delay=0.0) as process:
        yield process
    assert process.stats["handler_errors"] == 0


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_emulated_provider_in_a_separate_process(
    api: str, stream: bool, transport: str, server_process: ProviderServerProcess
) -> None:
    """The emulated provider (child process) serves a two-turn parallel-tool session per API."""
    (answer,) = await _two_turns(api, server_process.url, transport, stream)
    assert answer.startswith("Both lookups are done")


async def test_emulated_provider_streams_in_chunks_with_delays() -> None:
    """With a chunk delay the answer arrives as several SSE events, spaced out."""
    async with ProviderServer(EmulatedProvider(chunk_delay=0.001, text_chunks=4)) as server:
        (answer,) = await _two_turns("anthropic", server.url, "httpx", True)
        assert answer.endswith("All set.")
        assert server.stats.requests == 2


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_emulated_provider_answers_after_the_tool_rounds_asked_for(api: str) -> None:
    """With ``tool_rounds=3`` an agent's run takes three tool steps (two calls each), then the
    answer: a long session of tool steps for the history benchmark."""
    from agentloop import Agent, tool

    @tool
    async def weather(query: str) -> str:
        """The weather."""
        return "sunny"

    @tool
    async def clock(query: str) -> str:
        """The time."""
        return "noon"

    async with ProviderServer(EmulatedProvider(tool_rounds=3)) as server:
        async with make_model(api, server.url, transport="httpx") as model:
            result = await Agent(model, tools=[weather, clock]).run("go", raise_on_error=True)
    assert [len(step.actions) for step in result.steps] == [2, 2, 2, 0]
    assert result.unwrap().startswith("Both lookups are done")
