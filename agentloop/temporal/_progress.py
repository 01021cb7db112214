"""A tool's progress reports (``ToolContext.report_progress``) from its activity to the
workflow, which streams them as ``ActionProgress`` events between the action's start and its
finish. Each signal is a history event and a workflow task, and progress is a progress bar,
not a record, so it goes only while a caller streams the run, and bounded:

- the reports since the last signal go together, the last ``MAX_REPORTS`` of them, at most
  every ``PROGRESS_SECONDS`` for a call's first ``FAST_SIGNALS`` signals, then twice as far
  apart every ``FAST_SIGNALS`` more, up to ``MAX_PROGRESS_SECONDS``;
- one tool call sends ``MAX_PROGRESS_SIGNALS`` at most (later reports are dropped), each
  message cut to ``MAX_MESSAGE_CHARS``;
- the last reports go before the activity returns: the workflow has them before its result.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

PROGRESS_SECONDS = 0.1  # between two signals of one call's progress, at first
FAST_SIGNALS = 20  # then each FAST_SIGNALS more signals wait twice as long,
MAX_PROGRESS_SECONDS = 30.0  # up to this
MAX_PROGRESS_SIGNALS = 200  # of one tool call: later reports are dropped
MAX_REPORTS = 32  # in one signal: the latest
MAX_MESSAGE_CHARS = 1000
RECHECK_SECONDS = 1.0  # asked again at most this often whether a caller streams

Report = tuple[float, float | None, str | None]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Ask = Callable[[], Awaitable[bool | None]]  # ``None``: no answer now


class ProgressSender:
    """One tool call's progress on its way to the workflow, sent from its own task (``run``):
    a report never waits for a signal.

    Args:
        call: The tool call's number in the workflow run (``run_id``).
        run_id: The workflow run's id (a signal for another run of the chain is dropped).
        send: Signals one batch of reports.
        streaming: Whether a caller streamed the run when the tool was scheduled.
        ask: Asks the workflow whether a caller streams now.
    """

    def __init__(
        self, call: int, run_id: str, send: Send, *, streaming: bool, ask: Ask | None
    ) -> None:
        self._call = call
        self._run_id = run_id
        self._send = send
        self._streaming = streaming
        self._ask = ask
        self._asked_at = -math.inf
        self._pending: list[Report] = []
        self._wake = anyio.Event()
        self._closed = False
        self._done = anyio.Event()
        self.sent = 0

    async def report(
        self, _run: Any, _action: Any, progress: float, total: float | None, message: str | None
    ) -> None:
        """The tool's report (a ``ProgressSink``): kept for the next signal."""
        if self.sent >= MAX_PROGRESS_SIGNALS or not math.isfinite(progress):
            return
        if total is not None and not math.isfinite(total):
            total = None
        if message is not None:
            message = str(message)[:MAX_MESSAGE_CHARS]
        self._pending.append((progress, total, message))
        del self._pending[:-MAX_REPORTS]
        self._wake.set()

    async def close(self) -> None:
        """Send what is pending (if a caller streams), and stop."""
        self._closed = True
        self._wake.set()
        await self._done.wait()

    async def run(self) -> None:
        try:
            while True:
                if self._pending and await self._streams():
                    began = anyio.current_time()
                    reports, self._pending = self._pending, []
                    await self._send(
                        {"run": self._run_id, "call": self._call, "reports": [*map(list, reports)]}
                    )
                    self.sent += 1
                    if not self._closed:  # the next waits its turn (the last goes at once)
                        with anyio.move_on_after(self._every() - anyio.current_time() + began):
                            while not self._closed:
                                await self._wake.wait()
                                self._wake = anyio.Event()
                    continue
                self._pending.clear()
                if self._closed or self.sent >= MAX_PROGRESS_SIGNALS:
                    return
                await self._wake.wait()
                self._wake = anyio.Event()
        finally:
            self._done.set()

    def _every(self) -> float:
        slower = 2.0 ** (self.sent // FAST_SIGNALS)
        return min(PROGRESS_SECONDS * slower, MAX_PROGRESS_SECONDS)

    async def _streams(self) -> bool:
        """Whether a caller streams: as when the tool was scheduled, or asked again (at most
        every ``RECHECK_SECONDS``) while none did."""
        if self._streaming or self._ask is None:
            return self._streaming
        now = anyio.current_time()
        if now - self._asked_at >= RECHECK_SECONDS:
            self._asked_at = now
            self._streaming = bool(await self._ask())
        return self._streaming


def decode(batch: Any) -> tuple[str, int, list[Report]]:
    """A progress signal's run id, tool call number and reports; ``ValueError`` (or
    ``KeyError``/``TypeError``) for a signal no tool activity sends."""
    run, call, reports = batch["run"], batch["call"], batch["reports"]
    if not (isinstance(run, str) and isinstance(call, int) and isinstance(reports, list)):
        raise ValueError("a progress batch is {run: str, call: int, reports: list}")
    out: list[Report] = []
    for item in reports[-MAX_REPORTS:]:
        progress, total, message = item
        if not _finite(progress):
            raise ValueError("a report's progress is a finite number")
        if total is not None and not _finite(total):
            raise ValueError("a report's total is a finite number or null")
        if message is not None and not isinstance(message, str):
            raise ValueError("a report's message is a string or null")
        out.append(
            (
                float(progress),
                None if total is None else float(total),
                None if message is None else message[:MAX_MESSAGE_CHARS],
            )
        )
    return run, call, out


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
