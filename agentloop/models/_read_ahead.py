"""A reply sent before the request's body was read survives the failed write.

A server (often a proxy with a body limit) may answer ``413`` after the request's headers and
close the connection with the body unread. httpcore2 then fails to write the body, suppresses
that error and reads the reply, as it should, but the reply is gone by then:

- on asyncio, anyio's socket reads from the kernel only while a task waits in ``receive()``
  (between receives the transport is paused), so during the write the reply stays in the
  kernel, and when the write fails asyncio closes the socket with it;
- on trio over TLS, the TLS stream is broken once a write failed, and refuses to read (trio's
  plain socket keeps the bytes for the read that follows).

The caller saw a retried broken pipe (or reset) instead of the ``413``.

``read_ahead_on_writes`` wraps the network backend of an httpx2 client the driver made. While
a write of ``READ_AHEAD_FROM`` bytes or more is in progress, a task reads the connection into a
buffer of at most ``READ_AHEAD_LIMIT`` bytes, which later reads serve first; the task is
cancelled when the write ends. Past the limit the task stops reading and TCP's flow control
holds the server back: a server that streams while we write grows no buffer. The bytes read
ahead reach the response like any others, so every bound on a reply counts them. (HTTP/1.1
only: the driver's clients do not enable HTTP/2, whose connections read while they write.)

The task costs some tens of microseconds per write (a task group, a task, a checkpoint and a
cancellation; measured: 190-230 µs on a loaded 2-core machine where a bare checkpoint takes 7 µs),
so smaller writes go without: an agent's usual request body pays nothing. A write that small
fits in a new connection's send buffer on loopback and often on a WAN (about 30 KB of payload
at first, growing with the congestion window), goes to the kernel whole at once, and never
waits while a reply goes unread. A reply to a smaller body is lost only if its write had to
wait all the same and the server closed on it abruptly before reading it (a reset, not the
lingering close nginx does).

It patches private attributes of httpx2 (the client's transports and their pools) and httpcore2
(the pool's backend), so only on the versions of those two that ``_transport.CHECKED`` lists
(whatever the provider SDK's version); elsewhere, and for a client passed in by the user (whose
transport is the user's), the gap stays.
"""

from __future__ import annotations

import ssl
from collections import deque
from collections.abc import Iterable
from typing import Any, Final

import anyio
import anyio.lowlevel
import httpcore2

from . import _transport

__all__ = ["READ_AHEAD_FROM", "READ_AHEAD_LIMIT", "ReadAheadBackend", "read_ahead_on_writes"]

READ_AHEAD_FROM: Final = 64 << 10
"""Writes of at least this many bytes read the connection while they wait."""
READ_AHEAD_LIMIT: Final = 64 << 10
"""The most a connection reads ahead (a reply's head and the start of its body)."""


class _ReadAheadStream(httpcore2.AsyncNetworkStream):
    """A connection whose large writes read ahead (see the module docstring)."""

    def __init__(self, stream: httpcore2.AsyncNetworkStream) -> None:
        self._stream = stream
        self._early: deque[bytes] = deque()
        self._early_bytes = 0
        self._failure: Exception | None = None

    async def read(
        self,
        max_bytes: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
    ) -> bytes:
        if self._early:
            chunk = self._early.popleft()
            if len(chunk) > max_bytes:
                chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
                self._early.appendleft(rest)
            self._early_bytes -= len(chunk)
            return chunk
        if self._failure is not None:  # what the read ahead met, for the read it stood in for
            failure, self._failure = self._failure, None
            raise failure
        return await self._stream.read(max_bytes, timeout)

    async def write(
        self,
        buffer: bytes,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
    ) -> None:
        if len(buffer) < READ_AHEAD_FROM or self._failure is not None:
            await self._stream.write(buffer, timeout)
            return
        failure: Exception | None = None
        async with anyio.create_task_group() as reading:
            reading.start_soon(self._read_ahead)
            # Let the reader start waiting (asyncio runs tasks in the order they were scheduled)
            # before the first bytes go out: a reply that arrives during the write, even during
            # its first, immediate send, is then read before a failed send closes the socket.
            await anyio.lowlevel.checkpoint()
            try:
                await self._stream.write(buffer, timeout)
            except Exception as exc:  # raised below, as itself, once the read ahead stopped
                failure = exc
            reading.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _read_ahead(self) -> None:
        while self._early_bytes < READ_AHEAD_LIMIT:
            try:
                data = await self._stream.read(READ_AHEAD_LIMIT - self._early_bytes)
            except Exception as exc:  # the next read raises it, after the bytes before it
                self._failure = exc
                return
            if not data:  # end of stream: the next read past the bytes read here sees it too
                return
            self._early.append(data)
            self._early_bytes += len(data)

    async def aclose(self) -> None:
        self._early.clear()
        self._early_bytes = 0
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
    ) -> httpcore2.AsyncNetworkStream:
        if self._early or self._failure is not None:
            # A handshake never follows a large write (a proxy's CONNECT is small): bytes read
            # ahead here would be lost under the TLS layer.
            raise httpcore2.ConnectError("bytes arrived before the TLS handshake")
        return _ReadAheadStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and (self._early or self._failure is not None):
            return True  # an idle connection with bytes waiting is not reused
        return self._stream.get_extra_info(info)


class ReadAheadBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend, whose connections read ahead during large writes."""

    def __init__(self, backend: httpcore2.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _ReadAheadStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _ReadAheadStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def read_ahead_on_writes(client: Any) -> int:
    """Wrap the network backend of each of an httpx2 client's connection pools (the default
    transport's and any proxy's) in ``ReadAheadBackend``; how many were wrapped (none on an
    unchecked version). For clients the driver made, not for one passed in."""
    if not _transport.internals_checked(*_transport.HTTPX):
        return 0
    transports: list[Any] = [getattr(client, "_transport", None)]  # internal
    mounts: dict[Any, Any] = getattr(client, "_mounts", None) or {}  # internal: proxies
    transports.extend(mounts.values())
    wrapped = 0
    for transport in transports:
        pool: Any = getattr(transport, "_pool", None)  # internal
        backend = getattr(pool, "_network_backend", None)  # internal
        if isinstance(backend, httpcore2.AsyncNetworkBackend) and not isinstance(
            backend, ReadAheadBackend
        ):
            pool._network_backend = ReadAheadBackend(backend)
            wrapped += 1
    return wrapped
