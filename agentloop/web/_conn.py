"""Bounds on connections before authentication, under uvicorn (DESIGN §8, "before
authentication"): a connection that has not sent a whole request head, on arrival or between
requests on a kept-alive one, is closed after ``head_timeout`` seconds, and at most
``max_pending`` such connections are held: one more closes the one that has waited longest.
So nobody unauthenticated can hold the server's file descriptors, and a client that sends its
head at once is served however many stall.

uvicorn runs on asyncio only, and its protocols are asyncio protocols: the timers here are the
loop's ``call_later``, as uvicorn's own keep-alive timer is.
"""

from __future__ import annotations

import asyncio
from typing import Any, final

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


@final
class PendingHeads:
    """The connections waiting for a request head, oldest first, each with its deadline.

    Args:
        timeout: Seconds a connection may wait before it is closed.
        cap: Connections that may wait at once.
    """

    def __init__(self, *, timeout: float, cap: int) -> None:
        self.timeout = timeout
        self.cap = cap
        self._waiting: dict[asyncio.BaseProtocol, tuple[asyncio.BaseTransport, asyncio.Handle]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self, protocol: asyncio.BaseProtocol, transport: asyncio.BaseTransport) -> None:
        """``protocol`` now waits for a head: close it after the timeout, and close the oldest
        waiting one while more than ``cap`` wait."""
        self.arrived(protocol)
        if transport.is_closing():
            return
        timer = asyncio.get_running_loop().call_later(self.timeout, self._close, protocol)
        self._waiting[protocol] = (transport, timer)
        while len(self._waiting) > self.cap:
            self._close(next(iter(self._waiting)))

    def arrived(self, protocol: asyncio.BaseProtocol) -> None:
        """``protocol``'s head arrived (or it is gone): it no longer waits."""
        found = self._waiting.pop(protocol, None)
        if found is not None:
            found[1].cancel()

    def _close(self, protocol: asyncio.BaseProtocol) -> None:
        found = self._waiting.pop(protocol, None)
        if found is None:
            return
        transport, timer = found
        timer.cancel()
        abort = getattr(transport, "abort", None)  # at once: a stalled peer reads nothing
        if abort is not None:
            abort()
        else:
            transport.close()


class _HeadBound(asyncio.Protocol):
    """Mixed in before uvicorn's HTTP protocol: tells ``PendingHeads`` when a connection starts
    waiting for a head and when one has arrived (uvicorn starts a new request cycle)."""

    def _pending(self) -> PendingHeads:
        pending: PendingHeads = getattr(self, "config").pending  # noqa: B009  uvicorn's attribute
        return pending

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._pending().wait(self, transport)

    def data_received(self, data: bytes) -> None:
        before = getattr(self, "cycle", None)
        super().data_received(data)
        if getattr(self, "cycle", None) is not before:
            self._pending().arrived(self)

    def on_response_complete(self) -> None:
        before = getattr(self, "cycle", None)
        super().on_response_complete()  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]
        transport: asyncio.BaseTransport | None = getattr(self, "transport", None)
        if getattr(self, "cycle", None) is before and transport is not None:
            self._pending().wait(self, transport)  # kept alive: the next head is awaited

    def connection_lost(self, exc: Exception | None) -> None:
        self._pending().arrived(self)
        super().connection_lost(exc)


class _BoundedH11(_HeadBound, H11Protocol):
    pass


def _protocol() -> type[asyncio.Protocol]:
    """uvicorn's own choice of HTTP protocol (httptools if installed, else h11), bounded."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    if AutoHTTPProtocol is H11Protocol:
        return _BoundedH11
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class _BoundedHttpTools(_HeadBound, HttpToolsProtocol):
        pass

    return _BoundedHttpTools


def fd_bounded(cap: int) -> int:
    """``cap``, but at most a quarter of this process's open-file limit, so that connections
    without a head never take the descriptors a served client needs."""
    try:
        import resource
    except ImportError:  # Windows: no such limit to keep under
        return cap
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return cap
    return max(1, min(cap, soft // 4))


class _BoundedConfig(uvicorn.Config):
    """uvicorn's ``Config``, holding the server's ``PendingHeads`` for its protocols."""

    pending: PendingHeads


def bounded_config(
    app: Any, *, head_timeout: float, max_pending: int, **options: Any
) -> uvicorn.Config:
    """A uvicorn ``Config`` serving ``app`` with the bounds above (``options`` are uvicorn's)."""
    config = _BoundedConfig(app, http=_protocol(), ws="none", **options)
    config.pending = PendingHeads(timeout=head_timeout, cap=fd_bounded(max_pending))
    return config
