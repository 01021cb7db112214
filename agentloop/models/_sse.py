"""An incremental server-sent-events decoder (the WHATWG event-stream format).

Providers stream replies as SSE. The SDKs build one typed object per chunk; we decode the bytes
ourselves so a turn costs one ``json.loads`` per event and nothing else. ``feed`` takes bytes
split anywhere (mid-line, mid-UTF-8 sequence, between ``\\r`` and ``\\n``) and returns the events
completed so far; total work is linear in the input, because a partial line is only ever appended
to, never rescanned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent"]

_BLANK_RUN = re.compile(rb"\n{3,}")


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. ``event`` is ``"message"`` unless the stream named it. (Not
    frozen: a frozen dataclass sets each field through ``object.__setattr__``, and a reply
    is an event per chunk; nothing keeps or changes one past its decoder.)"""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEEventTooLarge(ValueError):
    """One event (or one line without an end) is larger than the decoder may buffer."""


class SSEDecoder:
    """Feed bytes, get events. Call ``close()`` at the end of the stream."""

    __slots__ = (
        "_data",
        "_event",
        "_has_data",
        "_last_id",
        "_max_event",
        "_partial",
        "_retry",
        "_size",
        "_skip_lf",
    )

    def __init__(self, *, max_event_bytes: int | None = None) -> None:
        self._max_event = max_event_bytes  # bounds one event (and one endless line)
        self._size = 0  # bytes of data in the event being read
        self._partial = bytearray()  # the current, unterminated line
        self._skip_lf = False  # the last chunk ended in "\r": a leading "\n" belongs to it
        self._data: list[bytes] = []
        self._has_data = False
        self._event: str | None = None
        self._last_id: str | None = None
        self._retry: int | None = None

    @property
    def max_event_bytes(self) -> int | None:
        return self._max_event

    @property
    def last_event_id(self) -> str | None:
        return self._last_id

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk``; return the events it completed (possibly none)."""
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        if b"\r" in chunk:
            self._skip_lf = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n\n\n" in chunk:
            # A blank line after a blank line dispatches nothing: a run of them (padding, a
            # decompression bomb of newlines) costs one line, not one call each.
            chunk = _BLANK_RUN.sub(b"\n\n", chunk)
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            self._partial += chunk
            self._check_size(len(self._partial))
            return []
        if self._partial:
            self._partial += lines[0]
            lines[0] = bytes(self._partial)
        self._partial = bytearray(lines[-1])
        events: list[SSEEvent] = []
        line_fn = self._line
        for i in range(len(lines) - 1):
            line = lines[i]
            if line[:6] == b"data: ":  # the usual line, taken here (``_line`` does the rest)
                value = line[6:]
                self._data.append(value)
                self._size += len(value)
                self._has_data = True
                continue
            event = line_fn(line) if line else self._dispatch()  # a blank line ends an event
            if event is not None:
                events.append(event)
        self._check_size(len(self._partial))
        return events

    def _check_size(self, partial: int) -> None:
        if self._max_event is not None and self._size + partial > self._max_event:
            raise SSEEventTooLarge(f"an event grew past {self._max_event} bytes")

    def close(self) -> list[SSEEvent]:
        """End of stream: the last line and event count even without a trailing blank line."""
        events: list[SSEEvent] = []
        if self._partial:
            line, self._partial = bytes(self._partial), bytearray()
            event = self._line(line)
            if event is not None:  # pragma: no cover - a non-empty line never dispatches
                events.append(event)
        event = self._line(b"")
        if event is not None:
            events.append(event)
        return events

    def _line(self, line: bytes) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == 0x3A:  # ":" starts a comment (keep-alive)
            return None
        field, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._data.append(value)
            self._size += len(value)
            self._has_data = True
        elif field == b"event":
            self._event = value.decode("utf-8", "replace")
        elif field == b"id" and b"\x00" not in value:
            self._last_id = value.decode("utf-8", "replace")
        elif field == b"retry" and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        event_type, self._event = self._event, None
        if not self._has_data:
            return None
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        self._data = []
        self._size = 0
        self._has_data = False
        return SSEEvent(
            data.decode("utf-8", "replace"), event_type or "message", self._last_id, self._retry
        )
