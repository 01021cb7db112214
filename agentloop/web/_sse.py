"""A run's event log as a server-sent event response: each frame's ``id:`` is the ``seq`` of the
event it comes from, so a reconnecting ``EventSource`` (``Last-Event-ID``) reads on from there.
The log is any ``EventLog``: a ``RunLog`` in this process, or a durable run's on Temporal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from sse_starlette import EventSourceResponse
from starlette.requests import Request

from agentloop import Event

from ._hub import EventLog, RunLog
from ._protocols import Encoder, encoder

_CHUNK = 64 * 1024  # bytes of frames past which a batch's chunk is cut (one write)
_SEP = "\n"  # LF line ends: @ag-ui/client splits events on a bare blank line, not on CRLF


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
) -> EventSourceResponse:
    """Stream ``log`` from the event after seq ``after`` (all of it when ``None``) in
    ``protocol`` (``agentloop``, ``ag-ui`` or ``vercel``). ``LogTrimmed`` if those events are
    no longer kept; ``ValueError`` for an unknown protocol.

    Args:
        log: The run's event log (``RunHub.log``, or a durable hub's).
        after: The seq the client last saw (``last_event_id(request)``).
        protocol: The wire protocol of the frames.
        ping: Seconds between keep-alive comments.
        send_timeout: Seconds a frame may wait on a client that does not read before the
            stream is dropped (the run never waits on it: it writes to the log).
    """
    codec = encoder(protocol, thread_id=log.session)
    batches = log.replay_batches(after) if isinstance(log, RunLog) else _batched(log.replay(after))
    return EventSourceResponse(
        _frames(batches, codec),
        headers={**codec.headers, "cache-control": "no-store"},
        ping=ping,
        sep=_SEP,
        send_timeout=send_timeout,
    )


async def _frames(
    batches: AsyncIterator[Sequence[tuple[Event, bool]]], codec: Encoder
) -> AsyncIterator[bytes]:
    """The frames of each batch of events (what a reader found at one wake-up) as one chunk,
    so one write, cut after the event that takes it past ``_CHUNK`` bytes; each event's last
    frame carries its ``id:``. Framed here, not by ``ServerSentEvent``: the data is JSON (or a
    bare word), one line."""
    async for batch in batches:
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
    ending = b"".join(b"data: %s\n\n" % message for message in codec.end_json())
    if ending:
        yield ending


async def _batched(
    events: AsyncIterator[tuple[Event, bool]],
) -> AsyncIterator[list[tuple[Event, bool]]]:
    """A log that cannot say what it holds: each event a batch of its own."""
    async for item in events:
        yield [item]
