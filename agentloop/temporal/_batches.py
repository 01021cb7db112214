"""How a model activity hands its deltas to the workflow. Each signal is a history event and a
workflow task (about 4 events and 8-10 ms of the server's work), so only what someone waits for
goes by signal:

- a sealed tool call at once (``ToolCallEnd``), with everything before it: the workflow starts
  its tool while the reply still streams (eager dispatch);
- text and thoughts in batches of about ``BATCH_SECONDS``, while a caller streams the run
  (asked again every ``RECHECK_SECONDS``: one whose lease lapsed stops the batches). A call
  cannot move to a new run (continue-as-new), so its batches slow down past the first
  ``FAST_BATCHES``: each waits ``BATCH_GROWTH`` times longer than the one before, up to
  ``MAX_BATCH_SECONDS``. One streamed call takes some 1,000 signals in 10 minutes and 1,400
  in an hour, not 12,000 and 72,000; and never more than ``MAX_CALL_SIGNALS`` (seals and
  flushes of ``MAX_HELD`` included), however long it streams: past them the rest of the call
  goes with its result, merged (as while no caller streams), so one call adds at most some
  6,000 history events (a signal and a workflow task's 3 events each);
- the rest with the activity's result, when the reply ends. With no caller streaming that is
  every text and thought delta, merged: a caller that attaches during the call gets its text
  at once when it ends, and live deltas from the next call on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ..models._types import (
    FinishDelta,
    ModelDelta,
    TextPiece,
    ThoughtPiece,
    ToolCallArgsDelta,
    ToolCallEnd,
)
from . import _codec, _payloads

BATCH_SECONDS = 0.05  # text and thoughts gathered into one signal while a caller streams
FAST_BATCHES = 200  # a call's first batches (10 s of streaming) come every BATCH_SECONDS,
BATCH_GROWTH = 1.005  # then each waits this much longer than the one before (18 s at 1 h),
MAX_BATCH_SECONDS = 60.0  # up to this (past some 3 h of one call: 60 signals an hour)
# A call's signals at most (about 1 h 20 min of the schedule above): then the rest is held for
# the result, and a caller gets it when the call ends (one signal per ~1 MiB of it beyond).
MAX_CALL_SIGNALS = 1_500
RECHECK_SECONDS = 1.0  # an activity asks again this often whether a caller streams now
# After the reply's ``FinishDelta`` the stream closes within a moment: a due batch waits this
# long for the result to carry it rather than cost a signal of its own.
FINISH_GRACE = 0.005
# Held back at most, in characters and 32 a delta: bounds the result's size and how late a
# usage limit's cut comes (the workflow counts the characters as they arrive).
MAX_HELD = 32 * 1024

SIGNAL_BYTES = 256 * 1024  # a delta larger than this is cut into pieces (a signal fits many)

Send = Callable[[dict[str, Any]], Awaitable[None]]
Ask = Callable[[], Awaitable[bool | None]]  # ``None``: no answer now


class Batches:
    """The deltas of one model call on their way to the workflow, sent from their own task
    (``run``): the stream never waits for a signal. Heartbeats go with each batch, and alone
    while the provider is silent.

    Args:
        call: The call's number in the workflow.
        send: Signals one batch to the workflow.
        streaming: Whether a caller streams the run (text and thoughts then go in batches).
        ask: Asks the workflow whether a caller streams now (``None``: never asked, and
            ``streaming`` holds for the whole call).
        beat: Heartbeats the activity.
        heartbeat: Seconds between heartbeats while nothing is sent.
    """

    def __init__(
        self,
        call: int,
        send: Send,
        *,
        streaming: bool,
        ask: Ask | None = None,
        beat: Callable[[], None] = lambda: None,
        heartbeat: float = 10.0,
    ) -> None:
        self._call = call
        self._send = send
        self.streaming = streaming
        self._ask = ask
        self._beat = beat
        self._heartbeat = heartbeat
        self._pending: list[ModelDelta] = []
        self._held = 0
        self._sealed = False  # a ToolCallEnd is pending: the batch goes now
        self._finishing = False  # the FinishDelta is pending: the result comes next
        self._closed = False
        self._wake = anyio.Event()  # something was added, or the stream closed
        self._urgent = anyio.Event()  # a seal, the finish or the close, during a tick
        self._closing = anyio.Event()
        self._added = anyio.Event()
        self._done = anyio.Event()
        self._every = BATCH_SECONDS  # between two batches while a caller streams
        self.sent = 0

    @property
    def spent(self) -> bool:
        """Whether the call has sent its ``MAX_CALL_SIGNALS``: the rest waits for the end."""
        return self.sent >= MAX_CALL_SIGNALS

    def add(self, delta: ModelDelta) -> None:
        self._pending.append(delta)
        self._held += 32 + _chars(delta)
        if self.sent >= MAX_CALL_SIGNALS:
            return  # held for the result (``rest``)
        self._sealed = self._sealed or isinstance(delta, ToolCallEnd)
        self._finishing = self._finishing or isinstance(delta, FinishDelta)
        if self._sealed or self._finishing or self._held > MAX_HELD:  # a slow tick too
            self._urgent.set()
        self._wake.set()
        self._added.set()

    async def close(self) -> None:
        """Wait until what is due is sent; ``rest`` has the others."""
        self._closed = True
        for event in (self._wake, self._urgent, self._closing):
            event.set()
        await self._done.wait()

    async def rest(self, *, signal: bool = False) -> list[list[Any]]:
        """The deltas not sent, encoded, for the activity's result (after ``close``); by
        signal instead with ``signal`` (a failed call has no result), or when they would not
        fit in one payload with the result."""
        pieces = self._take()
        if signal or sum(size for _, size in pieces) > _payloads.MAX_PAYLOAD_BYTES // 2:
            await self._send_pieces(pieces)
            return []
        return [piece for piece, _ in pieces]

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                if self._ask is not None:
                    tg.start_soon(self._asks, self._ask)
                await self._loop()
                tg.cancel_scope.cancel()
        finally:
            self._done.set()

    async def _loop(self) -> None:
        while True:
            if self._pending and not self._closed and await self._due():
                began = anyio.current_time()
                await self._flush()
                if self.streaming:
                    await self._tick(began)
                continue
            if self._closed:
                return
            with anyio.move_on_after(self._heartbeat):
                await self._wake.wait()
            self._wake = anyio.Event()
            self._beat()

    async def _due(self) -> bool:
        if self.spent:
            return False
        if not (self._sealed or self.streaming or self._held > MAX_HELD):
            return False
        if self._finishing:
            with anyio.move_on_after(FINISH_GRACE):
                await self._closing.wait()
            return not self._closed
        return True

    async def _tick(self, began: float) -> None:
        """The rest of a batch's time, cut short by a seal, the finish or the close."""
        self._urgent = anyio.Event()
        left = self._every - (anyio.current_time() - began)
        if left > 0 and not (self._sealed or self._finishing or self._closed):
            with anyio.move_on_after(left):
                await self._urgent.wait()

    async def _asks(self, ask: Ask) -> None:
        """Whether a caller streams now: while quiet, asked when there are deltas held back
        and at most every ``RECHECK_SECONDS``; while streaming, every ``RECHECK_SECONDS`` (a
        caller gone, its lease lapsed: the rest of the call is quiet). Concurrent with the
        sending: a slow answer delays no seal."""
        while not self.spent:  # then nothing more is sent before the end: no need to know
            if self.streaming:
                await anyio.sleep(RECHECK_SECONDS)
            elif not self._pending:
                self._added = anyio.Event()
                await self._added.wait()
            streams = await ask()
            if streams is not None and streams != self.streaming:
                self.streaming = streams
                self._wake.set()
            if not self.streaming:
                await anyio.sleep(RECHECK_SECONDS)

    async def _flush(self) -> None:
        await self._send_pieces(self._take())

    async def _send_pieces(self, pieces: list[tuple[list[Any], int]]) -> None:
        """As few signals as fit in Temporal's payload limit (``_payloads.within``)."""
        sizes = [size for _, size in pieces]
        start = 0
        while start < len(pieces):
            count = _payloads.within(sizes, start, len(pieces) - start)
            batch = [piece for piece, _ in pieces[start : start + count]]
            await self._send({"call": self._call, "index": self.sent, "deltas": batch})
            self.sent += 1
            if self.sent > FAST_BATCHES:  # the call's history stays bounded: see above
                self._every = min(self._every * BATCH_GROWTH, MAX_BATCH_SECONDS)
            self._beat()
            start += count

    def _take(self) -> list[tuple[list[Any], int]]:
        """The pending deltas, encoded and with their sizes: merged while quiet, and a piece
        too large for one signal cut into pieces the workflow joins again."""
        quiet = not self.streaming or self.spent
        pending = _merged(self._pending) if quiet else self._pending
        self._pending = []
        self._held = 0
        self._sealed = self._finishing = False
        return [
            piece
            for delta in pending
            for piece in _payloads.split_delta(_codec.encode_delta(delta), SIGNAL_BYTES)
        ]


def _chars(delta: ModelDelta) -> int:
    if isinstance(delta, TextPiece | ThoughtPiece | ToolCallArgsDelta):
        return len(delta.text)
    if isinstance(delta, ToolCallEnd):
        return len(delta.arguments or "")
    return 0


def _merged(deltas: list[ModelDelta]) -> list[ModelDelta]:
    """Adjacent pieces of text, of thought, or of one call's arguments, as one piece each."""
    out: list[ModelDelta] = []
    run: list[str] = []  # the texts of the pieces merging into ``out[-1]``

    def close() -> None:
        last = out[-1]
        text = "".join(run)
        if isinstance(last, ToolCallArgsDelta):
            out[-1] = ToolCallArgsDelta(id=last.id, text=text)
        elif isinstance(last, TextPiece | ThoughtPiece):
            out[-1] = type(last)(text)

    for delta in deltas:
        last = out[-1] if out else None
        if isinstance(delta, TextPiece | ThoughtPiece | ToolCallArgsDelta) and (
            type(delta) is type(last) and getattr(delta, "id", None) == getattr(last, "id", None)
        ):
            run.append(delta.text)
            continue
        if len(run) > 1:
            close()
        out.append(delta)
        run = (
            [delta.text] if isinstance(delta, TextPiece | ThoughtPiece | ToolCallArgsDelta) else []
        )
    if len(run) > 1:
        close()
    return out
