"""What bounds one provider reply: characters kept, bytes read, and how often a stream yields.

``max_reply_chars`` (``ModelRequest.max_reply_chars``, from ``Agent(max_reply_chars=...)``)
bounds a reply three ways:

- every text-ish field a wire decoder keeps or delivers (text, thoughts, tool-call arguments,
  names and ids, refusals, signatures, citations, server-tool input, provider items) counts
  against it in a ``Meter``; a tool call, a citation and a provider block also count
  ``STRUCTURE_CHARS`` each, for the objects they cost (so 500,000 tiny tool calls cannot hide
  under the limit);
- the raw bytes read from the wire (after decompression: SSE framing, JSON, comments,
  keep-alives, events the decoder ignores) count against a wire budget of
  ``WIRE_BYTES_PER_CHAR * max_reply_chars + WIRE_BYTES_BASE`` (a real stream carries a few
  hundred bytes of JSON per token, a token being one to four characters);
- one SSE event, and one non-streamed JSON document, may not grow past ``event_cap``.

Going over any of them ends the reply with ``ReplyTooLarge`` (the run's ``reply_too_large``).
Without a limit (``max_reply_chars=None``) only the event cap holds (64 MiB), and time bounds
(``RetryPolicy.attempt_timeout``) end an endless stream.

An error response's body is read up to ``ERROR_BODY_BYTES``. Compressed bodies (gzip, deflate)
are inflated here, at most ``CHECKPOINT_BYTES`` per step, and a stream reaches a checkpoint
every ``CHECKPOINT_BYTES`` of bytes it processed: one reply never holds the event loop for long,
whatever it inflates to.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable
from typing import Protocol

from agentloop._errors import ModelStreamError, ReplyTooLarge

__all__ = [
    "CHECKPOINT_BYTES",
    "ERROR_BODY_BYTES",
    "STRUCTURE_CHARS",
    "WIRE_BYTES_BASE",
    "WIRE_BYTES_PER_CHAR",
    "Chunks",
    "Inflating",
    "Meter",
    "event_cap",
    "read_prefix",
    "wire_budget",
]

WIRE_BYTES_PER_CHAR = 256
WIRE_BYTES_BASE = 4 << 20
STRUCTURE_CHARS = 64
CHECKPOINT_BYTES = 64 << 10
ERROR_BODY_BYTES = 64 << 10
_NO_CAP = 64 << 20  # one stream event, when the runtime set no reply limit
_UNLIMITED = 1 << 62


def event_cap(max_reply_chars: int | None) -> int:
    """How large one SSE event (or a whole JSON document) may grow: a few bytes per allowed
    character of the reply (one Responses event repeats the whole reply), never unbounded."""
    if max_reply_chars is None:
        return _NO_CAP
    return 8 * max_reply_chars + (1 << 20)


def wire_budget(max_reply_chars: int | None) -> int:
    """How many bytes (inflated) one reply may read from the wire."""
    if max_reply_chars is None:
        return _UNLIMITED
    return WIRE_BYTES_PER_CHAR * max_reply_chars + WIRE_BYTES_BASE


class Meter:
    """The characters a reply's decoder kept or delivered. Decoders add to ``used`` (one
    attribute add per field, no call); the stream compares it with ``limit`` once per chunk."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = _UNLIMITED if limit is None else limit
        self.used = 0

    def check(self) -> None:
        if self.used > self.limit:
            raise ReplyTooLarge(f"the reply exceeded {self.limit} characters")


class Chunks(Protocol):
    def __anext__(self) -> Awaitable[bytes]: ...

    async def aclose(self) -> None: ...


class Inflating:
    """The inflated bytes of a gzip or deflate body, at most ``CHECKPOINT_BYTES`` per step
    (``zlib``'s ``max_length``): a small compressed chunk never inflates to a huge one."""

    __slots__ = ("_eof", "_first", "_inner", "_tail", "_wbits", "_z")

    def __init__(self, inner: Chunks, encoding: str) -> None:
        self._inner = inner
        # gzip: 16 + 15; "deflate" means zlib-wrapped deflate (raw deflate is tried if not).
        self._wbits = 31 if encoding in ("gzip", "x-gzip") else 15
        self._z = zlib.decompressobj(self._wbits)
        self._tail = b""
        self._first = True
        self._eof = False

    def _inflate(self, data: bytes) -> bytes:
        try:
            out = self._z.decompress(data, CHECKPOINT_BYTES)
        except zlib.error as exc:
            if self._first and self._wbits == 15:
                self._wbits = -15
                self._z = zlib.decompressobj(-15)
                return self._inflate(data)
            raise ModelStreamError(
                f"the provider sent a body that does not inflate: {exc}"
            ) from None
        self._first = False
        self._tail = self._z.unconsumed_tail
        if self._z.eof and self._z.unused_data:  # the next gzip member
            self._tail = self._z.unused_data
            self._z = zlib.decompressobj(self._wbits)
        return out

    async def __anext__(self) -> bytes:
        while True:
            if self._tail:
                out = self._inflate(self._tail)
                if out:
                    return out
                continue
            if self._eof:
                raise StopAsyncIteration
            try:
                raw = await self._inner.__anext__()
            except StopAsyncIteration:
                self._eof = True
                continue
            out = self._inflate(raw)
            if out:
                return out

    async def aclose(self) -> None:
        await self._inner.aclose()


async def read_prefix(chunks: Chunks, limit: int = ERROR_BODY_BYTES) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of a body, and whether that was all of it."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        try:
            data = await chunks.__anext__()
        except StopAsyncIteration:
            return b"".join(parts), True
        parts.append(data)
        size += len(data)
    return b"".join(parts)[:limit], False
