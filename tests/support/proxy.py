"""A round-robin TCP proxy, as a load balancer in front of web replicas: each connection goes to
the next backend that accepts it (one that refuses, a dead replica, is skipped), and when either
side ends or dies the other is closed, as a balancer does to a browser whose replica went away.

Bounded: at most ``max_connections`` connections at once (more wait to be accepted), one read
of at most ``CHUNK`` bytes in flight per direction, and the start (``HEAD`` bytes) of the last
``ROUTES`` requests kept with the backend that took them (``routes``), so a test can tell which replica serves a stream.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import anyio
import anyio.abc

CHUNK = 64 * 1024
ROUTES = 1000
HEAD = 1024
_METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"PATCH ", b"HEAD ", b"OPTIONS ")


class RoundRobinProxy:
    """Forwards 127.0.0.1 connections to ``backends`` (ports on 127.0.0.1) in turn.

    Args:
        backends: The backends' ports; ``backends`` may be replaced while serving.
        max_connections: Connections served at once.
    """

    def __init__(self, backends: Sequence[int], *, max_connections: int = 256) -> None:
        self.backends = list(backends)
        self.routes: collections.deque[tuple[int, str]] = collections.deque(maxlen=ROUTES)
        self._turn = 0
        self._slots = anyio.Semaphore(max_connections)

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections until cancelled; reports the port it listens on."""
        [listener] = (await anyio.create_tcp_listener(local_host="127.0.0.1")).listeners
        assert isinstance(listener, anyio.abc.SocketListener)  # one, accepted by hand: bounded
        async with listener, anyio.create_task_group() as tg:
            task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
            while True:
                await self._slots.acquire()
                try:
                    client = await listener.accept()
                except BaseException:
                    self._slots.release()
                    raise
                tg.start_soon(self._forward, client)

    async def _upstream(self) -> tuple[int, anyio.abc.SocketStream] | None:
        for _ in range(len(self.backends)):
            port = self.backends[self._turn % len(self.backends)]
            self._turn += 1
            try:
                return port, await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                continue
        return None

    async def _forward(self, client: anyio.abc.SocketStream) -> None:
        try:
            async with client:
                found = await self._upstream()
                if found is None:
                    return
                port, upstream = found
                async with upstream, anyio.create_task_group() as tg:

                    async def pump(
                        source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream, note: bool
                    ) -> None:
                        try:
                            while True:
                                data = await source.receive(CHUNK)
                                if note and data.startswith(_METHODS):
                                    head = data[:HEAD].decode("latin-1")
                                    self.routes.append((port, head))
                                await sink.send(data)
                        except (
                            anyio.EndOfStream,
                            anyio.BrokenResourceError,
                            anyio.ClosedResourceError,
                            OSError,
                        ):
                            pass
                        tg.cancel_scope.cancel()  # one side is gone: end the other

                    tg.start_soon(pump, client, upstream, True)
                    tg.start_soon(pump, upstream, client, False)
        finally:
            self._slots.release()

    def requests(self, fragment: str) -> list[tuple[int, str]]:
        """The backends and heads of the requests whose first line contains ``fragment``."""
        return [
            (port, head) for port, head in tuple(self.routes) if fragment in head.split("\r\n")[0]
        ]
