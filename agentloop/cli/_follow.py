"""Choosing a view for the terminal at hand, and following a streamed run with it."""

from __future__ import annotations

import importlib
import os
import sys
from contextlib import AbstractContextManager
from typing import Literal, Protocol, TextIO

import anyio

from .. import Event, RunStream
from ._plain import AnswerView, JsonView, PlainView
from ._track import Tracker

Style = Literal["auto", "rich", "plain", "json", "quiet"]
TICK = 0.05


class View(Protocol):
    ticks: bool

    def handle(self, event: Event) -> None: ...

    def tick(self) -> None: ...

    def hold(self) -> AbstractContextManager[None]: ...

    def close(self) -> None: ...


def rich_available() -> bool:
    try:
        importlib.import_module("rich")
    except ImportError:
        return False
    return True


def wants_rich(out: TextIO) -> bool:
    """A live view only on a real terminal, with rich installed, and not a dumb one."""
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty() and os.environ.get("TERM") != "dumb" and rich_available())


def make_view(
    style: Style,
    tracker: Tracker,
    *,
    out: TextIO | None = None,
    show_input: bool = True,
    final_panel: bool = True,
) -> View:
    stream: TextIO = out or sys.stdout
    if style == "json":
        return JsonView(stream)
    if style == "quiet":
        return AnswerView(stream)
    if style == "rich" or (style == "auto" and wants_rich(stream)):
        from ._live import LiveView, make_console

        return LiveView(
            make_console(stream), tracker, show_input=show_input, final_panel=final_panel
        )
    return PlainView(stream, tracker, show_input=show_input)


async def follow(run: RunStream, view: View, tracker: Tracker) -> None:
    """Feed every event of ``run`` to the tracker and the view; tick a live view meanwhile."""
    try:
        async with anyio.create_task_group() as tg:
            if view.ticks:
                tg.start_soon(_ticker, view)
            async for event in run:
                tracker.see(event)
                view.handle(event)
            tg.cancel_scope.cancel()
    finally:
        view.close()


async def _ticker(view: View) -> None:
    while True:
        await anyio.sleep(TICK)
        view.tick()
