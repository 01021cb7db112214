"""Ctrl-C for the command: it cancels the chat turn in flight, leaves the chat quietly at its
prompt (``prompt()``), else it ends the command.

SIGINT is received by the event loop for the whole command (``anyio.open_signal_receiver``), so
it never lands as a ``KeyboardInterrupt`` in the middle of a cleanup: the press cancels a scope,
and the cancellation unwinds the turn or the command like any other. A press while the command
is already ending changes nothing; once it has ended, a further press exits at once
(``ProgramEnd``), never with a traceback.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NoReturn, TextIO

import anyio

INTERRUPTED = 130  # the exit status of a command Ctrl-C ended

_CURRENT: ContextVar[Interrupts | None] = ContextVar("agentloop_cli_interrupts", default=None)


class Interrupts:
    """Where the command's Ctrl-C goes: to the turn in flight (``turn()``), else to the
    command itself (``ended`` then says so)."""

    def __init__(self) -> None:
        self.command = anyio.CancelScope()  # what Ctrl-C cancels to end the command
        self.ended = False
        self.leaving = False  # Ctrl-C at a prompt: the command is leaving, as asked
        self._turn: anyio.CancelScope | None = None
        self._prompt: anyio.CancelScope | None = None

    @classmethod
    def current(cls) -> Interrupts:
        """The running command's (an inert one outside ``run_interruptibly``: no signals)."""
        return _CURRENT.get() or cls()

    @contextmanager
    def turn(self) -> Generator[anyio.CancelScope, None, None]:
        """A scope that Ctrl-C cancels instead of ending the command (its ``cancel_called``
        says whether it did)."""
        with anyio.CancelScope() as scope:
            self._turn = scope
            try:
                yield scope
            finally:
                self._turn = None

    @contextmanager
    def prompt(self) -> Generator[anyio.CancelScope, None, None]:
        """A scope for waiting at a prompt, which Ctrl-C cancels (``cancel_called``): the
        command then leaves as at end of input, quietly; presses while it leaves change
        nothing, and once it has ended exit at once, as quietly (``ProgramEnd.quiet``)."""
        with anyio.CancelScope() as scope:
            self._prompt = scope
            try:
                yield scope
            finally:
                self._prompt = None

    def press(self) -> None:
        """Ctrl-C: cancel the turn in flight, or leave at the prompt, else end the command."""
        turn = self._turn
        if turn is not None and not turn.cancel_called:
            turn.cancel()
            return
        prompt = self._prompt
        if prompt is not None or self.leaving:
            self.leaving = True
            if prompt is not None:
                prompt.cancel()
            return
        self.ended = True
        self.command.cancel()


async def run_interruptibly(
    command: Callable[[], Awaitable[int]], *, program: ProgramEnd | None = None
) -> int | None:
    """Run the command with Ctrl-C handled as above: its exit status, or ``None`` when Ctrl-C
    ended it. As the ``program``, a Ctrl-C once the command is over ends the process at once."""
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        return await command()  # no signal receiver there: Ctrl-C stays a KeyboardInterrupt
    interrupts = Interrupts()
    token = _CURRENT.set(interrupts)
    status: int | None = None
    try:
        with anyio.open_signal_receiver(signal.SIGINT) as presses:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_listen, presses, interrupts)
                with interrupts.command:
                    status = await command()
                tg.cancel_scope.cancel()
    finally:
        if program is not None:
            if interrupts.leaving and status is not None:
                program.quiet(status)
            program.exit_on_ctrl_c()  # asyncio's receiver left the default handler behind
        _CURRENT.reset(token)
    return None if interrupts.ended else status


async def _listen(presses: AsyncIterator[int], interrupts: Interrupts) -> None:
    async for _ in presses:
        interrupts.press()


class ProgramEnd:
    """How the ``agentloop`` process ends on Ctrl-C outside its command (before its loop runs,
    while the loop and the interpreter shut down), and after an interrupted command: at once,
    with status 130 and the one ``interrupted`` line, without the interpreter's shutdown, where
    a press would land in ``threading._shutdown`` (waiting for a worker thread) and print its
    traceback. Installed before the loop starts, it also keeps asyncio and trio from
    installing their own ``KeyboardInterrupt`` handlers."""

    def __init__(self) -> None:
        self._quiet: int | None = None

    def quiet(self, status: int) -> None:
        """The command left as asked (Ctrl-C at a chat prompt): a later press exits at once
        with its ``status``, saying nothing."""
        self._quiet = status

    def left_quietly(self) -> None:
        """After a quiet leave, exit now with its status (the interpreter's shutdown restores
        the default SIGINT handler, where one more press would kill the process)."""
        if self._quiet is not None:
            self._exit()

    def exit_on_ctrl_c(self) -> None:
        signal.signal(signal.SIGINT, self._on_ctrl_c)

    def _on_ctrl_c(self, signum: int, frame: object) -> None:
        _block_ctrl_c()
        if self._quiet is None:
            say_interrupted(_write_fd)  # the code it interrupted may be writing to the streams
        self._exit()

    def interrupted(self) -> NoReturn:
        """The command was interrupted: say so and exit. Ctrl-C is blocked first, so that a
        further press cannot cut the line short."""
        _block_ctrl_c()
        say_interrupted()
        self._exit()

    def _exit(self) -> NoReturn:
        _flush()
        os._exit(INTERRUPTED if self._quiet is None else self._quiet)


def say_interrupted(write: Callable[[TextIO, str], None] | None = None) -> None:
    """The line an interrupted command ends with."""
    write = write or _write_stream
    if _isatty(sys.stdout):
        write(sys.stdout, "\n")  # off the prompt or the half-drawn line
    write(sys.stderr, "agentloop: error: interrupted\n")


def _block_ctrl_c() -> None:
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, RuntimeError):  # closed, or re-entered from a handler
            pass


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # pragma: no cover - a closed stream
        return False


def _write_stream(stream: TextIO, text: str) -> None:
    stream.write(text)
    stream.flush()


def _write_fd(stream: TextIO, text: str) -> None:
    _flush()
    try:
        os.write(stream.fileno(), text.encode())
    except (OSError, ValueError):  # pragma: no cover - no file descriptor
        pass
