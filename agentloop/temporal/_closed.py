"""What callers read from the earlier runs of a chain (a run that continued as new). Such a run
has closed: a worker answers each query of it by fetching and replaying its whole history, and
its answers never change. So a process asks each question of it once: the replies are kept per
client, the least recently used dropped past ``MAX_BYTES``, and callers asking the same
question at once wait for the one query in flight."""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from . import _payloads

if TYPE_CHECKING:
    from temporalio.client import Client

MAX_BYTES = 32 * 1024 * 1024  # of the replies kept, per client

Key = tuple[str, str, str, str]  # workflow id, run id, query, its argument as JSON


class ClosedReads:
    """The replies of one client's queries of closed runs."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._max = max_bytes
        self._kept: OrderedDict[Key, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._asking: dict[Key, anyio.Event] = {}

    async def ask(
        self,
        workflow_id: str,
        run_id: str,
        query: str,
        arg: Any,
        send: Callable[[], Awaitable[Any]],
    ) -> Any:
        """The reply to ``query`` of the closed run: kept, or ``send`` once (a failure is the
        asker's; a caller that waited for it asks again)."""
        key = (workflow_id, run_id, query, json.dumps(arg, sort_keys=True, default=str))
        while True:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return kept[0]
            asking = self._asking.get(key)
            if asking is None:
                break
            await asking.wait()  # then kept, or it failed: asked again (by the first to wake)
        done = self._asking[key] = anyio.Event()
        try:
            reply = await send()
            self._keep(key, reply)
            return reply
        finally:
            del self._asking[key]
            done.set()

    def _keep(self, key: Key, reply: Any) -> None:
        size = _payloads.size_of(reply)
        if size > self._max:
            return
        self._kept[key] = (reply, size)
        self._bytes += size
        while self._bytes > self._max:
            _, (_, dropped) = self._kept.popitem(last=False)
            self._bytes -= dropped


_READS: weakref.WeakKeyDictionary[Client, ClosedReads] = weakref.WeakKeyDictionary()


def reads_of(client: Client) -> ClosedReads:
    """The client's kept replies (made at its first use, gone with it)."""
    reads = _READS.get(client)
    if reads is None:
        reads = _READS[client] = ClosedReads()
    return reads
