"""Streaming runs to web clients: an ASGI app serving many concurrent sessions as server-sent events.

Shows: a plain ASGI application (no framework, no new dependency) whose ``GET /runs?session=…&q=…``
streams one run as ``text/event-stream``, every ``data:`` line being exactly ``event.to_json()``
(parse it back with ``agentloop.event_from_json``); a client that goes away cancels its run; one
agent and one session store serve every session at once; each session remembers its earlier runs.

The app runs under any ASGI server (``uvicorn web_streaming:app``). So that the example needs
nothing else, it also carries a tiny HTTP/1.1 server on anyio: ``python examples/web_streaming.py``
serves http://127.0.0.1:8000 (open it in a browser, or
``curl -N 'http://127.0.0.1:8000/runs?session=s1&q=hello'``) until Ctrl-C.

With ``CI=true`` (or ``--clients N``) it instead starts the server on a free loopback port, opens N
concurrent sessions over real sockets, checks every stream ends with ``run_finished``, and exits.
Offline on a scripted model; with ``OPENAI_API_KEY`` set it uses ``openai:gpt-4o-mini``.

Run: ``python examples/web_streaming.py`` (serve) or ``python examples/web_streaming.py --clients 50``
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from typing import Any
from urllib.parse import parse_qs, quote, unquote

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from agentloop import Agent, RunFinished, event_from_json, tool
from agentloop.models import ModelRequest
from agentloop.sessions import InMemoryStore, SessionStore
from agentloop.testing import FunctionModel, Reply, call

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# -- the agent ------------------------------------------------------------------------------------


@tool
async def lookup(topic: str) -> str:
    """Look a topic up.

    Args:
        topic: what to look up
    """
    await anyio.sleep(0.1)
    return f"{len(topic)} characters, {len(topic.split())} words"


def scripted_reply(request: ModelRequest) -> Reply:
    """A model for many concurrent sessions: its reply depends only on the request."""
    last = request.messages[-1]
    if last.role == "user":  # the run's input: look it up first
        return Reply(text="Let me look that up.", calls=[call("lookup", {"topic": last.text})])
    turns = sum(1 for m in request.messages if m.role == "user")
    return Reply(text=f"Found it: {last.parts[0].content}. (Turn {turns} of this session.)")  # type: ignore[union-attr]


def make_agent() -> Agent:
    model: Any = (
        "openai:gpt-4o-mini"
        if os.environ.get("OPENAI_API_KEY")
        else FunctionModel(scripted_reply, chunk_size=5, delay=0.01)
    )
    return Agent(model, name="web", tools=[lookup], instructions="Be brief.")


# -- the ASGI app ---------------------------------------------------------------------------------

PAGE = b"""<!doctype html><meta charset="utf-8"><title>agentloop SSE</title>
<form onsubmit="go(); return false"><input id="q" size="60" value="What is agentloop?">
<input id="s" size="10" value="s1"> <button>run</button></form><pre id="out"></pre>
<script>
function go() {
  const out = document.getElementById("out"); out.textContent = "";
  const q = encodeURIComponent(document.getElementById("q").value);
  const s = encodeURIComponent(document.getElementById("s").value);
  const source = new EventSource(`/runs?session=${s}&q=${q}`);
  source.onmessage = (m) => {
    const e = JSON.parse(m.data);
    if (e.type === "text_delta") out.textContent += e.text;
    else if (e.type === "action_started") out.textContent += `\\n-> ${e.name}(${JSON.stringify(e.input)})\\n`;
    else if (e.type === "attempt_discarded") out.textContent += `\\n[draft ${e.attempt} withdrawn]\\n`;
    else if (e.type === "run_finished" || e.type === "run_failed") { out.textContent += "\\n[done]"; source.close(); }
  };
}
</script>
"""


class RunStreamingApp:
    """``GET /`` a test page; ``GET /runs?session=ID&q=TEXT`` one run as server-sent events."""

    def __init__(self, agent: Agent, store: SessionStore) -> None:
        self.agent = agent
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            if scope["path"] == "/":
                await _respond(send, 200, b"text/html; charset=utf-8", PAGE)
            elif scope["path"] == "/runs" and scope["method"] == "GET":
                query = parse_qs(scope.get("query_string", b"").decode())
                session = query.get("session", [""])[0]
                prompt = query.get("q", [""])[0]
                if not session or not prompt:
                    await _respond(send, 400, b"text/plain", b"need ?session=...&q=...")
                else:
                    await self._stream(session, prompt, receive, send)
            else:
                await _respond(send, 404, b"text/plain", b"not found")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        """Close the agent (its model's HTTP client) and the session store."""
        await self.agent.aclose()
        await self.store.aclose()

    async def _stream(self, session: str, prompt: str, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        async with anyio.create_task_group() as tg:

            async def cancel_on_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()  # the client left: stop its run (tools, model stream)

            tg.start_soon(cancel_on_disconnect)
            async with self.agent.stream(prompt, session=session, store=self.store) as run:
                async for event in run:
                    chunk = f"id: {event.seq}\ndata: {event.to_json()}\n\n".encode()
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            tg.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _respond(send: Send, status: int, content_type: bytes, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type)],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


app = RunStreamingApp(make_agent(), InMemoryStore())


# -- a tiny HTTP/1.1 server for the app (GET only, one request per connection) --------------------

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


async def serve(asgi: Any, host: str, port: int, *, task_status: TaskStatus[int]) -> None:
    async with await anyio.create_tcp_listener(local_host=host, local_port=port) as listener:
        task_status.started(listener.extra(SocketAttribute.local_port))
        await listener.serve(partial(_connection, asgi, host))


async def _connection(asgi: Any, host: str, stream: SocketStream) -> None:
    async with stream:
        reader = BufferedByteReceiveStream(stream)
        try:
            head = await reader.receive_until(b"\r\n\r\n", 65536)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
            return
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = request_line.split(" ", 2)
        path, _, query = target.partition("?")
        headers = [
            (name.strip().lower().encode(), value.strip().encode())
            for name, _, value in (line.partition(":") for line in lines)
        ]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": unquote(path),
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "headers": headers,
            "server": (host, stream.extra(SocketAttribute.local_port)),
        }
        requested = False

        async def receive() -> Message:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            try:  # nothing more is expected: wait for the client to hang up
                while await reader.receive():
                    pass
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                out = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
                out += [f"{k.decode()}: {v.decode()}" for k, v in message.get("headers", [])]
                out.append("connection: close")
                await stream.send(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
            elif message["type"] == "http.response.body" and message.get("body"):
                await stream.send(message["body"])

        try:
            await asgi(scope, receive, send)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            pass  # the client went away mid-stream


# -- clients --------------------------------------------------------------------------------------


async def fetch_run(port: int, session: str, prompt: str, *, leave_at: str = "") -> list[Any]:
    """One client: GET /runs and parse every ``data:`` line back into an event. With
    ``leave_at``, hang up as soon as an event of that type arrives."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        request = (
            f"GET /runs?session={quote(session)}&q={quote(prompt)} HTTP/1.1\r\nhost: x\r\n\r\n"
        )
        await stream.send(request.encode())
        data = bytearray()
        try:
            while not (leave_at and f'"type":"{leave_at}"'.encode() in data):
                data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
    _, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = body.decode().splitlines()
    return [event_from_json(line[len("data: ") :]) for line in lines if line.startswith("data: ")]


def condensed(types: list[str]) -> str:
    """``text_delta ×4`` for runs of one event type."""
    out: list[str] = []
    for t in types:
        if out and out[-1].split(" ×")[0] == t:
            name, _, count = out[-1].partition(" ×")
            out[-1] = f"{name} ×{int(count or 1) + 1}"
        else:
            out.append(t)
    return ", ".join(out)


async def run_clients(n: int) -> None:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve, app, "127.0.0.1", 0)
        print(f"serving on http://127.0.0.1:{port}; {n} sessions, two runs each, one client leaves")
        results: dict[str, list[list[Any]]] = {}

        async def session(i: int) -> None:
            name = f"session-{i}"
            # Session 0's first client hangs up mid-run: its run is cancelled, the session freed.
            leave = "action_started" if i == 0 else ""
            results[name] = [await fetch_run(port, name, f"question {i}", leave_at=leave)]
            results[name].append(await fetch_run(port, name, f"follow-up {i}"))

        start = anyio.current_time()
        async with anyio.create_task_group() as clients:
            for i in range(n):
                clients.start_soon(session, i)
        took = anyio.current_time() - start
        tg.cancel_scope.cancel()
    events = sum(len(run) for runs in results.values() for run in runs)
    for name, runs in results.items():
        for run in runs[1:] if name == "session-0" else runs:
            assert isinstance(run[-1], RunFinished), f"{name}: stream did not finish: {run[-1]}"
    print(f"{2 * n} runs streamed concurrently: {events} events in {took:.2f}s")
    left, sample = results["session-0"]
    print(f"session-0, run 1, client left after: {condensed([e.type for e in left])}")
    print(
        f"session-1, run 2, as its client saw it: {condensed([e.type for e in results['session-1'][1]])}"
    )
    print(f"  answer: {results['session-1'][1][-1].result.output}")
    print(f"session-0, run 2 (the session was free again): {sample[-1].result.output}")
    print("a line on the wire:  data: " + sample[0].to_json()[:80] + "…")


async def main() -> None:
    try:
        if "--clients" in sys.argv:
            await run_clients(int(sys.argv[sys.argv.index("--clients") + 1]))
        elif os.environ.get("CI") == "true":
            await run_clients(50)
        else:
            async with anyio.create_task_group() as tg:
                port = await tg.start(serve, app, "127.0.0.1", 8000)
                print(f"serving on http://127.0.0.1:{port} (Ctrl-C stops)")
    finally:  # as an ASGI server's lifespan shutdown would
        with anyio.CancelScope(shield=True):
            await app.aclose()


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
