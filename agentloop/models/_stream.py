"""Stream a provider's raw reply as deltas, and the remote-call guard.

The body was encoded by the driver and sent by a ``_transport`` sender; the reply's bytes go
through our incremental SSE decoder and a provider ``WireDecoder`` that turns events into
``ModelDelta`` values: no typed object per chunk. Errors become ``ModelError`` values.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel

from agentloop._errors import (
    ModelConnectionError,
    ModelStreamError,
    ReplyTooLarge,
    UserError,
    as_given,
)

from ._bounds import CHECKPOINT_BYTES, Chunks, Meter, event_cap, wire_budget
from ._errors_map import error_from_exception, scrub_error
from ._sse import SSEDecoder, SSEEvent, SSEEventTooLarge
from ._transport import RawResponse, logger
from ._types import (
    CitationDelta,
    ModelDelta,
    ModelRequest,
    TextPiece,
    ThoughtDone,
    ThoughtPiece,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageDelta,
)

__all__ = ["DeltaStream", "WireDecoder", "check_remote_allowed", "is_loopback"]

BLOCK_ENV = "AGENTLOOP_BLOCK_REMOTE_MODELS"
# What a decoder raises on JSON of the wrong shape (a list for an object, nesting too deep).
_SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, RecursionError)
# Content types a reply may have: a stream, JSON, or none said (some compatible servers).
_STREAM_TYPES = ("event-stream", "json")


def _text_typed(delta: Any) -> bool:
    return type(delta.text) is str


def _start_typed(delta: ToolCallStart) -> bool:
    return type(delta.id) is str and type(delta.name) is str


def _args_typed(delta: ToolCallArgsDelta) -> bool:
    return type(delta.id) is str and type(delta.text) is str


def _end_typed(delta: ToolCallEnd) -> bool:
    arguments = delta.arguments
    return type(delta.id) is str and (arguments is None or type(arguments) is str)


def _thought_done_typed(delta: ThoughtDone) -> bool:
    signature, id = delta.signature, delta.id
    return (signature is None or type(signature) is str) and (id is None or type(id) is str)


def _usage_typed(delta: UsageDelta) -> bool:
    u = delta.usage
    return (
        type(u.requests) is int
        and type(u.input_tokens) is int
        and type(u.output_tokens) is int
        and type(u.cache_read_tokens) is int
        and type(u.cache_write_tokens) is int
        and type(u.reasoning_tokens) is int
        and type(u.unknown) is int
    )


def _citation_typed(delta: CitationDelta) -> bool:
    return isinstance(as_given(delta.data), Mapping)


# The check of each kind of delta, found by its type (a subclass by its bases); a kind not here
# holds nothing a decoder took from the wire unchecked.
_CHECKS: dict[type[Any], Callable[[Any], bool]] = {
    TextPiece: _text_typed,
    ThoughtPiece: _text_typed,
    ToolCallStart: _start_typed,
    ToolCallArgsDelta: _args_typed,
    ToolCallEnd: _end_typed,
    ThoughtDone: _thought_done_typed,
    UsageDelta: _usage_typed,
    CitationDelta: _citation_typed,
}


def _well_typed(delta: ModelDelta) -> bool:
    """A decoder builds deltas from JSON it did not write: reject values of the wrong type
    (a number where text belongs) before they reach the runtime."""
    check = _CHECKS.get(type(delta))
    if check is None:
        check = next((_CHECKS[t] for t in type(delta).__mro__ if t in _CHECKS), None)
    return check is None or check(delta)


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0:0:0:0:0:0:0:1"})


def is_loopback(base_url: str) -> bool:
    host = (urlsplit(str(base_url)).hostname or "").lower()
    return host in _LOOPBACK or host.startswith("127.")


def check_remote_allowed(base_url: str, provider: str) -> None:
    """With ``AGENTLOOP_BLOCK_REMOTE_MODELS=1`` (set by agentloop's test suite), only loopback
    servers may be called: a real provider call fails before anything is sent."""
    if os.environ.get(BLOCK_ENV) == "1" and not is_loopback(base_url):
        raise UserError(
            f"refusing to call {provider} at {base_url}: remote model calls are blocked "
            f"({BLOCK_ENV}=1). Tests use the loopback server; a live test must unset "
            f"{BLOCK_ENV} for itself (monkeypatch.delenv)."
        )


class WireDecoder(Protocol):
    """Turns one provider's stream events (or whole JSON reply) into deltas. It adds the
    characters of every text-ish field it keeps or delivers to ``meter.used`` (see ``_bounds``)."""

    meter: Meter

    def event(self, event: SSEEvent, out: list[ModelDelta]) -> None: ...

    def end(self, out: list[ModelDelta]) -> None:
        """The stream ended cleanly: emit what is left, or raise if it was cut short."""

    def document(self, value: Any, out: list[ModelDelta]) -> None:
        """A whole (non-streamed) JSON reply."""


class DeltaStream:
    """The async context manager ``Model.stream()`` returns; it is also the delta iterator.

    Entering sends the request (HTTP errors raise here); iterating reads the reply; leaving closes
    the HTTP response at once, even mid-reply, shielded from cancellation. The reply is bounded
    (``_bounds``): characters kept, bytes read, one event's size; a chunk is decoded at most
    ``CHECKPOINT_BYTES`` at a time, with a checkpoint after each such share of bytes.
    Whatever an error quotes of the reply has the request's credentials redacted.
    """

    __slots__ = (
        "_budget",
        "_closed",
        "_decoder",
        "_done",
        "_error",
        "_json",
        "_meter",
        "_model",
        "_open",
        "_owner",
        "_pending",
        "_provider",
        "_raw",
        "_request",
        "_request_id_header",
        "_response",
        "_rest",
        "_secrets",
        "_since_checkpoint",
        "_sse",
        "_streaming",
        "_wire",
    )

    def __init__(
        self,
        open_response: Callable[[Any, ModelRequest], Awaitable[RawResponse]],
        owner: Any,
        request: ModelRequest,
        decoder: WireDecoder,
        *,
        streaming: bool,
        provider: str,
        model: str,
        request_id_header: str,
        max_reply_chars: int | None = None,
        secrets: Callable[[Any], tuple[str, ...]] | None = None,
    ) -> None:
        # Plain functions of ``owner`` (the driver), with the request: not a closure over it
        # nor bound methods, which every reply in flight would hold.
        self._open = open_response
        self._owner = owner
        self._request = request
        self._decoder = decoder
        self._meter = decoder.meter = Meter(max_reply_chars)
        self._budget = wire_budget(max_reply_chars)
        self._wire = 0
        self._since_checkpoint = 0
        self._rest = b""
        self._secrets = secrets
        self._streaming = streaming
        self._provider = provider
        self._model = model
        self._request_id_header = request_id_header
        self._response: RawResponse | None = None
        self._raw: Chunks | None = None
        self._sse = SSEDecoder(max_event_bytes=event_cap(max_reply_chars))
        # The decoded deltas not yet taken, last first (``pop`` takes the next): a list the
        # size of one chunk's deltas, where a deque would hold a block of 64 per stream.
        self._pending: list[ModelDelta] = []
        self._done = False
        self._error: BaseException | None = None
        self._closed = False
        self._json = False

    async def __aenter__(self) -> AsyncIterator[ModelDelta]:
        try:
            self._response = await self._open(self._owner, self._request)
        except Exception as exc:
            error = self._wrap(exc)
            if error is exc:
                raise
            raise error from exc
        response = self._response
        content_type = response.headers.get("content-type", "").lower()
        if content_type and not any(t in content_type for t in _STREAM_TYPES):
            await self.aclose()
            raise self._wrap(
                ModelStreamError(
                    f"{self._provider} answered HTTP {response.status} with content type "
                    f"{content_type!r}, not a model reply (a proxy or captive portal page?)",
                    status=response.status,
                )
            )
        self._json = not self._streaming or "json" in content_type
        self._raw = response.chunks()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        close_at_once = getattr(self._response, "close_at_once", None)
        if close_at_once is not None:  # aiohttp's: a call, with no scope and no await
            try:
                if close_at_once():
                    return
            except Exception:
                return
        with anyio.CancelScope(shield=True):
            # Closing a connection that broke may fail; the reply is already read or given up,
            # so each failure is logged, not raised, and the response is closed whatever the
            # body's close did (else its connection would leak).
            for part, closable in (("body", self._raw), ("response", self._response)):
                if closable is None:
                    continue
                try:
                    await closable.aclose()
                except Exception as exc:
                    logger.warning(
                        "closing the %s reply's %s failed: %r", self._provider, part, exc
                    )

    def __aiter__(self) -> DeltaStream:
        return self

    async def __anext__(self) -> ModelDelta:
        # One coroutine for the read too (no ``_pull`` or ``_chunk`` below it): every stream
        # in flight holds this chain while it waits for bytes.
        while not self._pending:
            if self._error is not None:
                error, self._error = self._error, None
                self._done = True
                raise error
            if self._done:
                raise StopAsyncIteration
            raw = self._raw
            if raw is None:
                raise RuntimeError("iterate the stream inside 'async with model.stream(...)'")
            out: list[ModelDelta] = []
            try:
                if self._json:
                    await self._read_document(raw, out)
                else:
                    if self._since_checkpoint >= CHECKPOINT_BYTES:
                        self._since_checkpoint = 0
                        await anyio.lowlevel.checkpoint()
                    chunk = self._rest
                    if not chunk:
                        try:
                            chunk = await raw.__anext__()
                        except StopAsyncIteration:
                            chunk = b""
                    self._decode(self._counted(chunk), out)
                self._meter.check()
            except Exception as exc:  # every failure is wrapped, then raised after the deltas
                # The deltas decoded before the failure are delivered first, then the error.
                error = self._wrap(exc)
                if error is not exc:
                    error.__cause__ = exc
                self._error = error
            self._deliver(out)
        return self._pending.pop()

    async def _chunk(self, raw: Chunks) -> bytes:
        """The next piece of the body, at most ``CHECKPOINT_BYTES``, counted against the wire
        budget; b"" at its end. A checkpoint follows each ``CHECKPOINT_BYTES`` read."""
        if self._since_checkpoint >= CHECKPOINT_BYTES:
            self._since_checkpoint = 0
            await anyio.lowlevel.checkpoint()
        chunk = self._rest
        if not chunk:
            try:
                chunk = await raw.__anext__()
            except StopAsyncIteration:
                return b""
        return self._counted(chunk)

    def _counted(self, chunk: bytes) -> bytes:
        """``chunk`` cut to ``CHECKPOINT_BYTES`` (the rest kept for the next read) and counted
        against the wire budget."""
        if len(chunk) > CHECKPOINT_BYTES:
            chunk, self._rest = chunk[:CHECKPOINT_BYTES], chunk[CHECKPOINT_BYTES:]
        else:
            self._rest = b""
        size = len(chunk)
        self._since_checkpoint += size
        self._wire += size
        if self._wire > self._budget:
            raise ReplyTooLarge(
                f"the reply exceeded its budget of {self._budget} bytes read from the wire "
                f"(max_reply_chars={self._meter.limit})"
            )
        return chunk

    def _decode(self, chunk: bytes, out: list[ModelDelta]) -> None:
        """The deltas of one piece of an event stream (b"": its end) into ``out``."""
        if not chunk:
            self._done = True
            self._events(self._sse.close(), out, final=True)
            self._decoder.end(out)
            return
        try:
            events = self._sse.feed(chunk)
        except SSEEventTooLarge as exc:
            raise ReplyTooLarge(
                f"{self._provider} sent a stream event too large for the reply limit ({exc})"
            ) from None
        self._events(events, out, final=False)

    def _deliver(self, out: list[ModelDelta]) -> None:
        """Make ``out`` the deltas to take, up to the first of the wrong type (an error then)."""
        for delta in out:
            if not _well_typed(delta):
                out = out[: out.index(delta)]
                self._error = self._wrap(
                    ModelStreamError(
                        f"{self._provider} sent a value of the wrong type in {delta!r:.200}",
                        provider=self._provider,
                        model=self._model,
                    )
                )
                break
        out.reverse()
        self._pending = out

    async def _read_document(self, raw: Chunks, out: list[ModelDelta]) -> None:
        chunks: list[bytes] = []
        cap = self._sse.max_event_bytes or event_cap(None)
        size = 0
        while chunk := await self._chunk(raw):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                raise ReplyTooLarge(
                    f"{self._provider} sent a reply document larger than {cap} bytes, too "
                    f"large for the reply limit"
                )
        self._done = True
        body = b"".join(chunks)
        try:
            value = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ModelStreamError(
                f"{self._provider} sent a reply that is not JSON: {body[:200]!r}"
            ) from exc
        try:
            self._decoder.document(value, out)
        except _SHAPE_ERRORS as exc:
            raise ModelStreamError(
                f"{self._provider} sent a reply of an unexpected shape: {body[:200]!r}"
            ) from exc

    def _events(self, events: list[SSEEvent], out: list[ModelDelta], *, final: bool) -> None:
        decoder = self._decoder
        for event in events:
            try:
                decoder.event(event, out)
            except ValueError as exc:  # json.JSONDecodeError
                if final:  # the stream ended inside an event: it was cut, not garbled
                    raise ModelConnectionError(
                        f"{self._provider} stream ended in the middle of an event"
                    ) from exc
                raise ModelStreamError(
                    f"{self._provider} sent an event that is not JSON: {event.data[:200]!r}"
                ) from exc
            except _SHAPE_ERRORS as exc:  # JSON, but not what the provider's format allows
                raise ModelStreamError(
                    f"{self._provider} sent an event of an unexpected shape: {event.data[:200]!r}"
                ) from exc

    def _wrap(self, exc: Exception) -> Exception:
        error = error_from_exception(exc, provider=self._provider, model=self._model)
        if error is None:
            return exc
        if error.provider is None:
            error.provider = self._provider
        if error.model is None:
            error.model = self._model
        if error.request_id is None and self._response is not None:
            error.request_id = self._response.headers.get(self._request_id_header)
        if (
            error.status is None
            and self._response is not None
            and isinstance(error, ModelStreamError)
        ):
            error.status = self._response.status
        # Whatever the error quotes of the reply loses the request's credentials.
        scrub_error(error, exc, self._secrets(self._owner) if self._secrets is not None else ())
        return error
