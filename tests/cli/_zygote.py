"""The ``agentloop`` command, forked from a warm process (run as a script: ``python _zygote.py
SOCKET``; see ``tests.support.zygote``).

It imports what the command imports (the CLI, the OpenAI SDK) once; each child
then runs ``python -m agentloop ARGS`` as the interpreter would: its own standard streams
(made anew on the launcher's, as at start-up), environment, working folder and ``sys.argv``,
Python's own Ctrl-C handler, and the interpreter's exit (threads joined, ``atexit`` run,
streams flushed; an uncaught ``KeyboardInterrupt`` dies of SIGINT). Start-up itself is not
exercised here: tests that need it run the real command.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import runpy
import signal
import sys
import threading
import traceback
from typing import NoReturn

# What the command imports, once: the CLI, and the SDK its OpenAI driver imports for a client
# (no test here runs the command on Anthropic: a child that did would import that SDK itself).
import openai  # noqa: F401

import agentloop.cli._chat
import agentloop.cli._run
import agentloop.models.openai  # noqa: F401
from tests.support.zygote import Request, serve


def _stream(fd: int, model: io.TextIOWrapper, *, line_buffering: bool) -> io.TextIOWrapper:
    """A new text stream on ``fd`` (a standard stream the launcher sent), encoded as ``model``."""
    raw = io.FileIO(fd, "w" if fd else "r", closefd=False)
    buffered = io.BufferedWriter(raw) if fd else io.BufferedReader(raw)
    return io.TextIOWrapper(
        buffered, encoding=model.encoding, errors=model.errors, line_buffering=line_buffering
    )


def become_agentloop(request: Request) -> NoReturn:
    """In the forked child: be ``python -m agentloop ARGS``; never return."""
    os.environ.clear()
    os.environ.update(request.env)
    os.chdir(request.cwd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    assert isinstance(sys.stdin, io.TextIOWrapper)
    assert isinstance(sys.stdout, io.TextIOWrapper)
    assert isinstance(sys.stderr, io.TextIOWrapper)
    streams = {
        "stdin": _stream(0, sys.stdin, line_buffering=False),
        "stdout": _stream(1, sys.stdout, line_buffering=os.isatty(1)),
        "stderr": _stream(2, sys.stderr, line_buffering=True),
    }
    for name, stream in streams.items():
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    sys.argv = ["-m", *request.args]  # runpy sets argv[0] to the module's file, as -m does
    sys.path[0] = request.cwd  # -m puts the working folder first, not this script's folder
    code: int = 0
    try:
        runpy.run_module("agentloop", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    _shut_down(code)


def _shut_down(code: int) -> NoReturn:
    """The interpreter's exit: wait for non-daemon threads, run ``atexit``, flush, exit."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    gc.collect()
    gc.freeze()  # what was imported: children neither scan it nor copy it by collecting
    serve(sys.argv[1], become_agentloop)
