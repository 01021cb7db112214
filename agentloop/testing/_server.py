"""A loopback HTTP/1.1 server that plays provider responses to the real SDK clients.

Provider drivers are tested through their SDKs over a real socket: transport mocks tied to one HTTP
library break silently when the SDK changes its HTTP stack, a socket does not. The server runs its
own event loop in its own thread (``with ProviderServer(...) as server``, usable from sync and async
tests); ``agentloop emulate`` serves the emulated provider with it from the command line, and
``tests/support/provider_process.py`` in the repository runs it in a separate process for
benchmarks and load tests.

Each request is recorded (method, path, headers, body) and answered by a handler, or from a FIFO
script, with a ``ScriptedResponse``: status, headers and a body given whole or as chunks with
delays, optionally re-split at chosen or seeded random byte boundaries, with bytes injected at
chosen offsets, or with the connection reset after a number of body bytes. With
``faults=FaultProfile(...)`` a seeded share of answers become faults (see ``_faults``).
"""

from __future__ import annotations

import inspect
import socket
import struct
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, TypeAlias, cast

import anyio
import anyio.lowlevel
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from ._faults import FaultInjector, FaultProfile
from ._script import Chunk, RecordedRequest, ScriptedResponse

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal

__all__ = ["ProviderServer", "ServerStats"]

_MAX_HEAD = 1 << 16
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Site Overloaded",
}


@dataclass(slots=True)
class ServerStats:
    """Counters, updated by the server thread (read them under ``ProviderServer.wait_until``).

    Args:
        connections: Connections accepted.
        open_connections: Connections open now.
        max_open_connections: The most open at once.
        requests: Requests read.
        responses_completed: Responses sent whole.
        client_closed: Connections the client closed mid-response.
        resets: Connections the server reset (scripted resets).
        handler_errors: Requests whose handler raised (answered with a 500).
    """

    connections: int = 0
    open_connections: int = 0
    max_open_connections: int = 0
    requests: int = 0
    responses_completed: int = 0
    client_closed: int = 0
    resets: int = 0
    handler_errors: int = 0


Handler: TypeAlias = Callable[[RecordedRequest], "ScriptedResponse | Awaitable[ScriptedResponse]"]


class ProviderServer:
    """A loopback HTTP/1.1 server in its own thread and event loop.

    ``handler(request) -> ScriptedResponse`` (sync or async, run in the server's loop) answers
    each request; without one, responses are taken from the FIFO filled by ``enqueue`` (an empty
    queue answers 500). ``faults`` turns a seeded share of answers into faults (429, 5xx,
    resets, slow or malformed streams); ``server.faults.counts`` says how many of each. Use as a
    context manager, sync or async.

    Args:
        handler: Answers each request (default: the ``enqueue`` FIFO).
        host: The address to listen on.
        port: The port (0: a free one).
        backend: The server thread's event loop: ``"asyncio"`` or ``"trio"``.
        faults: Faults to inject.
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        backend: str = "asyncio",
        faults: FaultProfile | None = None,
    ) -> None:
        self._handler = handler
        self._faults = FaultInjector(faults) if faults is not None else None
        self._host = host
        self._port = port
        self._backend = backend
        self._script: deque[ScriptedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self._cond = threading.Condition()
        self.stats = ServerStats()
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._serve_future: Future[Any] | None = None
        self._listener: SocketListener | None = None

    # -- public surface -------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: an Anthropic base URL; OpenAI's is ``url + "/v1"``."""
        return f"http://{self._host}:{self._port}"

    @property
    def faults(self) -> FaultInjector | None:
        """The fault injector (its ``counts``), when the server was given ``faults=``."""
        return self._faults

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised by the handler (each was answered with a 500)."""
        with self._cond:
            return list(self._errors)

    def enqueue(self, *responses: ScriptedResponse) -> None:
        """Answers for the next requests, in order (when the server has no handler).

        Args:
            *responses: The answers.
        """
        with self._cond:
            self._script.extend(responses)

    def clear(self) -> None:
        """Forget recorded requests, scripted responses, errors and counters."""
        with self._cond:
            self._requests.clear()
            self._script.clear()
            self._errors.clear()
            open_now = self.stats.open_connections
            self.stats = ServerStats(open_connections=open_now, max_open_connections=open_now)

    def wait_until(self, predicate: Callable[[ServerStats], bool], timeout: float = 5.0) -> bool:
        """Block until ``predicate(stats)`` holds (checked on every change); False on timeout.

        Args:
            predicate: A test of the server's ``ServerStats``.
            timeout: Seconds to wait.
        """
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.stats), timeout)

    def start(self) -> Self:
        from anyio.from_thread import start_blocking_portal

        self._portal_cm = start_blocking_portal(self._backend, name="agentloop-provider-server")
        self._portal = self._portal_cm.__enter__()
        try:
            self._serve_future, self._port = self._portal.start_task(self._serve)
        except BaseException:
            self._portal_cm.__exit__(*sys.exc_info())
            raise
        return self

    def stop(self) -> None:
        if self._portal_cm is None:
            return
        try:
            if self._portal is not None:
                self._portal.call(self._stop_accepting)
        finally:
            if self._serve_future is not None:
                self._serve_future.cancel()
            cm, self._portal_cm, self._portal = self._portal_cm, None, None
            cm.__exit__(None, None, None)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await anyio.to_thread.run_sync(self.stop)

    # -- server loop ------------------------------------------------------------------------

    def _bump(self, **counts: int) -> None:
        with self._cond:
            stats = self.stats
            for name, n in counts.items():
                setattr(stats, name, getattr(stats, name) + n)
            stats.max_open_connections = max(stats.max_open_connections, stats.open_connections)
            self._cond.notify_all()

    async def _stop_accepting(self) -> None:
        """Close the listening socket, before ``stop`` cancels the server: on asyncio, an accept
        cancelled on the loop's turn that finds a connection ready takes that connection and
        drops it, open, for the garbage collector (CPython gh-153761); closing the listener
        first removes the pending accept from the loop (anyio does), and a connection that was
        not accepted is reset by the kernel."""
        if self._listener is not None:
            await self._listener.aclose()

    async def _serve(self, *, task_status: TaskStatus[int]) -> None:
        multi = await anyio.create_tcp_listener(local_host=self._host, local_port=self._port)
        listener = self._listener = cast("SocketListener", multi.listeners[0])
        port = listener.extra(SocketAttribute.local_port)
        async with multi, anyio.create_task_group() as tg:
            task_status.started(port)
            while True:
                try:
                    stream = await listener.accept()
                except anyio.ClosedResourceError:  # stop(): open connections run until it cancels
                    return
                except OSError as exc:  # EMFILE/ENFILE: say so loudly, then stop serving
                    print(f"agentloop provider server: accept failed: {exc!r}", file=sys.stderr)
                    raise
                self._bump(connections=1, open_connections=1)
                tg.start_soon(self._connection, stream)

    async def _connection(self, stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        try:
            while True:
                try:
                    request = await self._read_request(reader)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                    return
                except anyio.DelimiterNotFound:
                    return
                if request is None:
                    return
                response = await self._respond_to(request)
                if not await self._send(stream, reader, response):
                    return
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            return
        finally:
            self._bump(open_connections=-1)
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def _read_request(self, reader: BufferedByteReceiveStream) -> RecordedRequest | None:
        head = await reader.receive_until(b"\r\n\r\n", _MAX_HEAD)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int((await reader.receive_until(b"\r\n", 1024)).split(b";")[0], 16)
                if size == 0:
                    await reader.receive_until(b"\r\n", _MAX_HEAD)
                    break
                parts.append(await reader.receive_exactly(size))
                await reader.receive_exactly(2)
            body = b"".join(parts)
        else:
            length = int(headers.get("content-length", "0") or 0)
            body = await reader.receive_exactly(length) if length else b""
        request = RecordedRequest(method=method, path=path, headers=headers, body=body)
        with self._cond:
            self._requests.append(request)
        self._bump(requests=1)
        return request

    async def _respond_to(self, request: RecordedRequest) -> ScriptedResponse:
        if self._faults is not None:
            return await self._faults.respond(request, lambda: self._answer(request))
        return await self._answer(request)

    async def _answer(self, request: RecordedRequest) -> ScriptedResponse:
        try:
            if self._handler is not None:
                result = self._handler(request)
                if inspect.isawaitable(result):
                    result = await result
                return result
            with self._cond:
                if self._script:
                    return self._script.popleft()
            raise LookupError(f"no scripted response left for {request.method} {request.path}")
        except Exception as exc:
            with self._cond:
                self._errors.append(exc)
            self._bump(handler_errors=1)
            return ScriptedResponse.json(
                {"error": {"message": f"loopback server: {exc!r}", "type": "server_error"}},
                status=500,
            )

    async def _send(
        self, stream: SocketStream, reader: BufferedByteReceiveStream, response: ScriptedResponse
    ) -> bool:
        """Send one response; True when the connection stays open for the next request."""
        pieces = response.pieces()
        reset_after = response.reset_after
        keep_alive = reset_after is None
        head = _head(response, pieces, keep_alive)
        if reset_after is not None:
            pieces = _truncate(pieces, reset_after)
        frame = _frame_chunked if response.chunked else _frame_plain
        terminate = keep_alive and response.chunked
        resplit = response.split_at is not None or response.split_seed is not None
        if not any(p.delay for p in pieces) and not resplit:
            payload = b"".join(frame(p.data) for p in pieces)
            await stream.send(head + payload + (b"0\r\n\r\n" if terminate else b""))
        elif not any(p.delay for p in pieces):
            # Re-split bodies go out one piece per send, yielding in between, so that the
            # client's reads see (roughly) those boundaries.
            await stream.send(head)
            for piece in pieces:
                await stream.send(frame(piece.data))
                await anyio.lowlevel.checkpoint()
            if terminate:
                await stream.send(b"0\r\n\r\n")
        elif not await self._send_slowly(stream, reader, head, pieces, frame, terminate):
            self._bump(client_closed=1)
            return False
        if reset_after is not None:
            await anyio.sleep(response.reset_delay)
            _reset(stream)
            self._bump(resets=1)
            return False
        self._bump(responses_completed=1)
        return True

    async def _send_slowly(
        self,
        stream: SocketStream,
        reader: BufferedByteReceiveStream,
        head: bytes,
        pieces: list[Chunk],
        frame: Callable[[bytes], bytes],
        terminate: bool,
    ) -> bool:
        """Send pieces with their delays, watching for the client closing meanwhile."""
        closed = False

        async def watch(scope: anyio.CancelScope) -> None:
            nonlocal closed
            try:
                data = await reader.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                closed = True
                scope.cancel()
                return
            reader.feed_data(data)  # pragma: no cover - clients do not pipeline

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, tg.cancel_scope)
            try:
                await stream.send(head)
                for piece in pieces:
                    if piece.delay:
                        await anyio.sleep(piece.delay)
                    if piece.data:
                        await stream.send(frame(piece.data))
                if terminate:
                    await stream.send(b"0\r\n\r\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                closed = True
            tg.cancel_scope.cancel()
        return not closed


def _head(response: ScriptedResponse, pieces: list[Chunk], keep_alive: bool) -> bytes:
    reason = _REASONS.get(response.status, "Status")
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    skip = {"content-length", "transfer-encoding", "connection"}
    lines += [f"{k}: {v}" for k, v in response.headers.items() if k.lower() not in skip]
    if response.chunked:
        lines.append("transfer-encoding: chunked")
    else:
        lines.append(f"content-length: {sum(len(p.data) for p in pieces)}")
    lines.append("connection: keep-alive" if keep_alive else "connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _frame_chunked(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def _frame_plain(data: bytes) -> bytes:
    return data


def _truncate(pieces: Iterable[Chunk], limit: int) -> list[Chunk]:
    out: list[Chunk] = []
    left = limit
    for piece in pieces:
        if left <= 0:
            break
        out.append(Chunk(piece.data[:left], piece.delay))
        left -= len(piece.data)
    return out


def _reset(stream: SocketStream) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0); the caller's ``aclose`` sends it."""
    sock = stream.extra(SocketAttribute.raw_socket)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:  # pragma: no cover - already gone
        pass
