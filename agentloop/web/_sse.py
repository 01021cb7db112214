"""A run's event log as a server-sent event response: each frame's ``id:`` is the ``seq`` of the
event it comes from, so a reconnecting ``EventSource`` (``Last-Event-ID``) reads on from there.
The log is any ``EventLog``: a ``RunLog`` in this process, or a durable run's on Temporal.

A ``RunLog`` is streamed by ``LogStream``, a response of its own: one task beside the stream
(to hear the client leave) where sse-starlette's ``EventSourceResponse`` starts four, and the
keep-alive ping is the stream's own wait for the log timing out. In ``create_app``'s app, whose
lifespan runs ``watch_exit``, that ticker keeps each stream's ping and send timeout instead (a
stream moves no deadline per wake-up), each within a quarter of its interval. Other logs go
through ``EventSourceResponse``.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import anyio
from sse_starlette import EventSourceResponse
from sse_starlette.sse import AppStatus
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentloop import Event

from ._hub import EventLog, RunLog
from ._protocols import Encoder, encoder

_CHUNK = 64 * 1024  # bytes of frames past which a batch's chunk is cut (one write)
_SEP = "\n"  # LF line ends: @ag-ui/client splits events on a bare blank line, not on CRLF
_PING = b": ping\n\n"
_EXIT_POLL = 0.5  # seconds between looks at whether the server is shutting down
_WAITING, _WRITING = 0, 1  # what a stream the ticker keeps the time of is doing


class _Open(threading.local):
    """The ``LogStream``s open in this thread (its event loop's), to end when the server shuts
    down (``watch_exit``): a scope is cancelled from its own loop only. While a ``watch_exit``
    runs here (``ticking``), it also keeps the time of the streams in ``timed``: their pings
    and their send timeouts."""

    def __init__(self) -> None:
        self.scopes: set[anyio.CancelScope] = set()
        self.timed: set[LogStream] = set()
        self.bounds: dict[float, int] = {}  # how many of them have each shortest bound
        self.ticking = 0


_open = _Open()


def last_event_id(request: Request) -> int | None:
    """The ``seq`` a reconnecting client last saw (its ``Last-Event-ID`` header, or the
    ``last_event_id`` query parameter for clients that cannot set headers), if any.

    Args:
        request: The request for the event stream.
    """
    raw = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if raw is None or not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError("Last-Event-ID must be an event's seq (an integer)") from None


def sse_response(
    log: EventLog,
    *,
    after: int | None = None,
    protocol: str = "agentloop",
    ping: float = 15.0,
    send_timeout: float = 30.0,
    on_close: Callable[[], None] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """Stream ``log`` from the event after seq ``after`` (all of it when ``None``) in
    ``protocol`` (``agentloop``, ``ag-ui`` or ``vercel``). ``LogTrimmed`` if those events are
    no longer kept; ``ValueError`` for an unknown protocol.

    Args:
        log: The run's event log (``RunHub.log``, or a durable hub's).
        after: The seq the client last saw (``last_event_id(request)``).
        protocol: The wire protocol of the frames.
        ping: Seconds between keep-alive comments (in ``create_app``'s app, within a quarter
            more).
        send_timeout: Seconds a frame may wait on a client that does not read before the
            stream is dropped (the run never waits on it: it writes to the log; in
            ``create_app``'s app, within a quarter more).
        on_close: Called once when the stream ends, however it ends.
        headers: More headers for the response.
    """
    codec = encoder(protocol, thread_id=log.session)
    fields = {**codec.headers, "cache-control": "no-store", **(headers or {})}
    if isinstance(log, RunLog):
        return LogStream(
            log, after, codec, fields, ping=ping, send_timeout=send_timeout, on_close=on_close
        )
    response = EventSourceResponse(
        _frames(_batched(log.replay(after)), codec),
        headers=fields,
        ping=ping,
        sep=_SEP,
        send_timeout=send_timeout,
    )
    if on_close is not None:
        response.body_iterator = _closing(response.body_iterator, on_close)
    return response


class LogStream(Response):
    """A ``RunLog`` as server-sent events: the frames of the events found at each wake-up in
    one write; a ping comment when the log has been quiet for ``ping`` seconds; a client that
    leaves ends the stream at once, one that does not read for ``send_timeout`` seconds is
    dropped, and a server shutting down (uvicorn's signal, as ``EventSourceResponse`` sees
    it; ``watch_exit``) ends it.

    Args:
        log: The run's log.
        after: The seq the client last saw (``None``: from the start).
        codec: The protocol's encoder.
        headers: The response's headers.
        ping: Seconds of quiet before a keep-alive comment.
        send_timeout: Seconds a write may wait on the client.
        on_close: Called once when the stream ends.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        log: RunLog,
        after: int | None,
        codec: Encoder,
        headers: dict[str, str],
        *,
        ping: float,
        send_timeout: float,
        on_close: Callable[[], None] | None,
    ) -> None:
        start = log.start_index(after)  # LogTrimmed now, not once streaming
        for event in log.events()[:start]:
            codec.encode(event)  # sent before: encoded only to rebuild the encoder's state
        self._log = log
        self._position = log.position(start)
        self._codec = codec
        self._ping = ping
        self._send_timeout = send_timeout
        self._on_close = on_close
        self._done = _Done()
        # Kept by the ticker (``watch_exit``), when one runs: what the stream does, a count of
        # its changes of what it does, and whether its ping or its send timeout came.
        self._phase = _WAITING
        self._moves = 0
        self._seen = -1
        self._since = 0.0
        self._guard: anyio.CancelScope | None = None
        self._due = False
        self.status_code = 200
        self.background = None
        self.init_headers({**headers, "x-accel-buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if scope.get("method") == "HEAD":
                await self._write(send, self._start())
                await self._write(send, _last(b""))
                return
            async with anyio.create_task_group() as tg:
                _open.scopes.add(tg.cancel_scope)  # what a shutdown cancels
                try:
                    tg.start_soon(_left, receive, tg.cancel_scope, self._done)
                    if _open.ticking:
                        await self._stream_ticked(send)
                    else:
                        await self._stream(send)
                finally:
                    _open.scopes.discard(tg.cancel_scope)
            if not self._done.sent:  # the client left, or the server shuts down
                await self._write(send, _last(b""))
        finally:
            if self._on_close is not None:
                self._on_close()

    def _start(self) -> Any:
        return {"type": "http.response.start", "status": 200, "headers": self.raw_headers}

    async def _stream(self, send: Send, *, started: bool = False) -> None:
        """The log's frames as they come, under one cancel scope whose deadline is a write's
        timeout while writing and the ping's while waiting: a scope per write or wait cost
        more than the writing. The last frames go with the response's end, in one message.
        ``started``: the response's start is sent already."""
        log, codec, first = self._log, self._codec, not started
        while True:
            writing = True
            with anyio.CancelScope(deadline=anyio.current_time() + self._send_timeout) as guard:
                if first:
                    first = False
                    await send(self._start())
                while True:
                    batch = log.batch(self._position)
                    if batch:
                        if not writing:
                            writing = True
                            guard.deadline = anyio.current_time() + self._send_timeout
                        self._position += len(batch)
                        chunks = _framed(batch, codec)
                        if log.done and not log.batch(self._position):  # the run's last events
                            tail = chunks.pop() if chunks else b""
                            for chunk in chunks:
                                await send(_body(chunk))
                            self._done.sent = True
                            await send(_last(tail + _ending(codec)))  # the end in the same write
                            return
                        for chunk in chunks:
                            await send(_body(chunk))
                        continue
                    if log.done:
                        self._done.sent = True
                        await send(_last(_ending(codec)))
                        return
                    writing = False
                    guard.deadline = anyio.current_time() + self._ping
                    await log.changed()
                    if guard.cancel_called:  # the ping's deadline came with the change
                        break
            if writing:  # the scope timed out on a write
                raise TimeoutError(f"the client read nothing for {self._send_timeout} s")
            await self._write(send, _body(_PING))  # quiet for a ping's interval

    async def _stream_ticked(self, send: Send) -> None:
        """``_stream``, its ping and its send timeout kept by the app's ticker (``watch_exit``,
        ``tick``): a stream marks what it does and cancels nothing per wake-up, where moving a
        deadline twice a wake-up cost a sixth of streaming the log. Each comes within a tick
        of its time."""
        log, codec, first = self._log, self._codec, True
        self._phase = _WRITING
        _open.timed.add(self)
        bound = self.shortest
        _open.bounds[bound] = _open.bounds.get(bound, 0) + 1
        try:
            while True:
                with anyio.CancelScope() as self._guard:
                    if first:
                        first = False
                        await send(self._start())
                    while True:
                        batch = log.batch(self._position)
                        if batch:
                            if self._phase == _WAITING:
                                self._phase, self._moves = _WRITING, self._moves + 1
                            self._position += len(batch)
                            chunks = _framed(batch, codec)
                            if log.done and not log.batch(self._position):  # the last events
                                tail = chunks.pop() if chunks else b""
                                for chunk in chunks:
                                    await send(_body(chunk))
                                self._done.sent = True
                                await send(_last(tail + _ending(codec)))
                                return
                            for chunk in chunks:
                                await send(_body(chunk))
                            continue
                        if log.done:
                            self._done.sent = True
                            await send(_last(_ending(codec)))
                            return
                        if not _open.ticking:  # the ticker stopped (its app's lifespan ended)
                            break
                        self._phase, self._moves = _WAITING, self._moves + 1
                        await log.changed()
                if not _open.ticking:
                    break
                if not self._due:  # cancelled from outside: the client left, or a shutdown
                    return
                self._due = False
                if self._phase == _WRITING:
                    raise TimeoutError(f"the client read nothing for {self._send_timeout} s")
                self._guard, self._moves = None, self._moves + 1  # the ping's write: its own bound
                await self._write(send, _body(_PING))  # quiet for a ping's interval
        finally:
            _open.timed.discard(self)
            left = _open.bounds[bound] - 1
            if left:
                _open.bounds[bound] = left
            else:
                del _open.bounds[bound]
        self._guard = None
        await self._stream(send, started=True)  # on its own deadlines from here

    def tick(self, now: float) -> None:
        """The ticker's look at the stream (``watch_exit``): its ping (waiting) or its send
        timeout (writing) is due once it has done the same for that long.

        Args:
            now: The time (``anyio.current_time()``).
        """
        if self._moves != self._seen:
            self._seen, self._since = self._moves, now
            return
        limit = self._ping if self._phase == _WAITING else self._send_timeout
        if now - self._since >= limit and not self._due and self._guard is not None:
            self._due = True
            self._guard.cancel()

    def untimed(self) -> None:
        """The ticker stopped: the stream goes on keeping its own time (its deadlines), from
        its wait for the log (a stream writing sees it before its next wait)."""
        if self._guard is not None and self._phase == _WAITING:
            self._guard.cancel()

    @property
    def shortest(self) -> float:
        """The shorter of its ping interval and its send timeout (the ticker's bound)."""
        return min(self._ping, self._send_timeout)

    async def _write(self, send: Send, message: Any) -> None:
        with anyio.move_on_after(self._send_timeout) as late:
            await send(message)
        if late.cancelled_caught:
            raise TimeoutError(f"the client read nothing for {self._send_timeout} s")


def _body(chunk: bytes) -> Any:
    return {"type": "http.response.body", "body": chunk, "more_body": True}


def _last(chunk: bytes) -> Any:
    return {"type": "http.response.body", "body": chunk, "more_body": False}


class _Done:
    """Whether a stream has sent its response's end (``LogStream``)."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent = False


async def _left(receive: Receive, stream: anyio.CancelScope, done: _Done) -> None:
    """Ends ``stream`` when the client disconnects; returns by itself once the response is
    complete, when ``receive`` answers ``http.disconnect`` too (the ASGI spec): no cancel,
    whose message formats the task's repr."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if not done.sent:
        stream.cancel()


async def watch_exit() -> None:
    """Until cancelled: when the server shuts down (``AppStatus.should_exit``, which
    sse-starlette sets on uvicorn's signal), end every ``LogStream`` open in this thread, as
    ``EventSourceResponse`` ends its own. The app runs this in its lifespan. It also keeps the
    time of the streams opened meanwhile (their pings and send timeouts), a tick at most a
    quarter of the shortest of them."""
    _open.ticking += 1
    try:
        while True:  # a flag, not an event: polled as sse-starlette polls it
            await anyio.sleep(_interval())
            if AppStatus.should_exit:  # and again for any opened while the server drains
                for stopped in list(_open.scopes):
                    stopped.cancel()
            if _open.timed:
                now = anyio.current_time()
                for stream in list(_open.timed):
                    stream.tick(now)
    finally:
        _open.ticking -= 1
        if not _open.ticking:  # the streams it kept the time of keep their own from now on
            for stream in list(_open.timed):
                stream.untimed()


def _interval() -> float:
    """The ticker's next sleep: ``_EXIT_POLL``, or a quarter of the shortest ping or send
    timeout of the streams it keeps the time of."""
    shortest = min(_open.bounds, default=_EXIT_POLL * 4)
    return max(min(shortest, _EXIT_POLL * 4) / 4, 0.005)


def _framed(batch: Sequence[Event], codec: Encoder) -> list[bytes]:
    """``_chunks`` of events all new to the reader (a ``LogStream``'s batch), as a list: made
    without a generator and a pair per event."""
    chunks: list[bytes] = []
    parts: list[bytes] = []
    size = 0
    for event in batch:
        messages = codec.encode_json(event)
        if not messages:
            continue
        last = messages[-1]
        if len(messages) > 1:
            for message in messages[:-1]:
                parts += (b"data: ", message, b"\n\n")
                size += len(message)
        parts += (b"id: %d\ndata: " % event.seq, last, b"\n\n")
        size += len(last)
        if size >= _CHUNK:
            chunks.append(b"".join(parts))
            parts = []
            size = 0
    if parts:
        chunks.append(b"".join(parts))
    return chunks


def _chunks(batch: Iterator[tuple[Event, bool]], codec: Encoder) -> Iterator[bytes]:
    """The frames of a batch of events as chunks (one write each), cut after the event that
    takes one past ``_CHUNK`` bytes; each event's last frame carries its ``id:``. Framed here,
    not by ``ServerSentEvent``: the data is JSON (or a bare word), one line."""
    parts: list[bytes] = []
    size = 0
    for event, new in batch:
        if not new:  # sent before: encoded only to rebuild the encoder's state
            codec.encode(event)
            continue
        messages = codec.encode_json(event)
        if not messages:
            continue
        for message in messages[:-1]:
            parts += (b"data: ", message, b"\n\n")
        parts += (b"id: %d\ndata: " % event.seq, messages[-1], b"\n\n")
        size += sum(map(len, messages))
        if size >= _CHUNK:
            yield b"".join(parts)
            parts.clear()
            size = 0
    if parts:
        yield b"".join(parts)


async def _frames(
    batches: AsyncIterator[Sequence[tuple[Event, bool]]], codec: Encoder
) -> AsyncIterator[bytes]:
    """``_chunks`` of each batch (what a reader found at one wake-up), then the protocol's
    ending."""
    async for batch in batches:
        for chunk in _chunks(iter(batch), codec):
            yield chunk
    ending = _ending(codec)
    if ending:
        yield ending


def _ending(codec: Encoder) -> bytes:
    """The frames that end the protocol's stream (none for some protocols)."""
    return b"".join(b"data: %s\n\n" % message for message in codec.end_json())


async def _batched(
    events: AsyncIterator[tuple[Event, bool]],
) -> AsyncIterator[list[tuple[Event, bool]]]:
    """A log that cannot say what it holds: each event a batch of its own."""
    async for item in events:
        yield [item]


async def _closing(frames: Any, on_close: Callable[[], None]) -> AsyncIterator[Any]:
    try:
        async for frame in frames:
            yield frame
    finally:
        on_close()
