"""Reading lines from stdin without blocking the event loop, and without a thread that keeps the
process alive: each line is read by a short-lived daemon thread (a blocked read cannot be
cancelled, and anyio's worker threads are joined at exit, which would hang Ctrl-C at a prompt).
On a terminal ``input()`` is used, so line editing works.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Generator
from contextlib import contextmanager

import anyio
import anyio.from_thread
import anyio.lowlevel


async def read_line(prompt: str = "") -> str | None:
    """The next line of stdin without its newline, or ``None`` at end of input."""
    if prompt and sys.stdin.isatty():
        _line_editing()
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    box: list[str | None] = []
    failure: list[Exception] = []

    def read() -> None:
        try:
            if prompt and sys.stdin.isatty():
                try:
                    line: str | None = input(prompt)
                except EOFError:
                    line = None
            else:
                raw = sys.stdin.readline()
                line = raw.rstrip("\r\n") if raw else None
            box.append(line)
        except Exception as exc:  # delivered to the caller's task
            failure.append(exc)
        try:
            anyio.from_thread.run_sync(done.set, token=token)
        except Exception:  # the event loop is gone (the caller was cancelled): nothing to do
            pass

    threading.Thread(target=read, name="agentloop-stdin", daemon=True).start()
    await done.wait()
    if failure:
        raise failure[0]
    return box[0]


def _line_editing() -> None:
    """``readline`` gives ``input()`` history and editing (and writes the prompt to stdout)."""
    try:
        importlib.import_module("readline")
    except ImportError:  # pragma: no cover - Windows without pyreadline
        pass


@contextmanager
def kept_terminal() -> Generator[None, None, None]:
    """Restore stdin's terminal settings on the way out: a reader left blocked in ``input()``
    (Ctrl-C at the prompt ends the command) leaves them as readline set them, without echo."""
    try:
        import termios

        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except Exception:  # not a terminal, no termios (Windows), a closed stdin: nothing to keep
        yield
        return
    try:
        yield
    finally:
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        except (termios.error, OSError):  # pragma: no cover - the terminal went away
            pass
