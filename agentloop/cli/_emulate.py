"""``agentloop emulate``: the emulated provider on a local port, to run agents (or any OpenAI or
Anthropic client) offline, with no key and no cost.

It serves ``agentloop.testing.EmulatedProvider`` through ``ProviderServer`` (its own thread and
event loop), prints where it listens, logs one line per request, and runs until Ctrl-C (or
SIGTERM): that is its normal end, so it exits 0, without a traceback.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from .. import UserError
from ..testing import EmulatedProvider, ProviderServer, RecordedRequest, ScriptedResponse


@dataclass(frozen=True, kw_only=True)
class EmulateOptions:
    host: str = "127.0.0.1"
    port: int = 0
    script: str | None = None
    answer: str | None = None
    tool_rounds: int = 1
    text_chunks: int = 6
    chunk_delay: float = 0.0
    quiet: bool = False
    backend: str = "asyncio"


def emulate_command(options: EmulateOptions, *, out: TextIO | None = None) -> int:
    """Serve until interrupted; returns the exit status (0)."""
    stream: TextIO = sys.stdout if out is None else out
    provider = _provider(options)
    handler = provider if options.quiet else _Logged(provider, stream)
    server = ProviderServer(handler, host=options.host, port=options.port, backend=options.backend)
    try:
        server.start()
    except (OSError, BaseExceptionGroup) as exc:
        reason = _os_error(exc)
        if reason is None:
            raise
        raise UserError(f"cannot listen on {options.host}:{options.port}: {reason}") from None
    try:
        with _sigterm_interrupts():
            _write(stream, _banner(options, _url(options.host, server.port)))
            idle = threading.Event()  # never set: Ctrl-C (or SIGTERM) ends the wait
            while not idle.wait(0.5):  # timed, so that Ctrl-C gets through on Windows too
                pass
    except KeyboardInterrupt:
        _write(stream, "stopped\n")
    finally:
        server.stop()
    return 0


def _provider(options: EmulateOptions) -> EmulatedProvider:
    settings: dict[str, Any] = {
        "text_chunks": options.text_chunks,
        "chunk_delay": options.chunk_delay,
        "tool_rounds": options.tool_rounds,
    }
    if options.answer is not None:
        settings["answer"] = options.answer
    if options.script is not None:
        return EmulatedProvider.from_script_file(options.script, **settings)
    return EmulatedProvider(**settings)


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def _banner(options: EmulateOptions, url: str) -> str:
    if options.script is not None:
        replies = f"the turns of {options.script}, from the start in each conversation"
    else:
        rounds = "" if options.tool_rounds == 1 else f" ({options.tool_rounds} rounds)"
        replies = (
            f"two parallel calls to the first two tools offered{rounds}, arguments made up\n"
            "         from their schemas; after the results, a text answer; with no tools, a\n"
            "         text saying that none was offered"
        )
    rows = [
        ("OpenAI Chat Completions", f"{url}/v1", "openai:emulated"),
        ("OpenAI Responses", f"{url}/v1", "openai-responses:emulated"),
        ("Anthropic Messages", url, "anthropic:emulated"),
    ]
    lines = [
        f"agentloop emulate: listening on {url} (Ctrl-C stops it)",
        "",
        f"  {'API':<25} {'base URL':<{len(url) + 5}} model",
        *(f"  {api:<25} {base:<{len(url) + 5}} {model}" for api, base, model in rows),
        "",
        f"replies: {replies}",
        f'try:     agentloop run "What is the weather in Paris?" -m openai:emulated --base-url {url}/v1',
        "         (any key will do: ANTHROPIC_API_KEY=unused for the Anthropic SDK)",
        "",
    ]
    return "\n".join(lines) + "\n"


class _Logged:
    """The provider, with one line per request on ``out``."""

    def __init__(self, provider: EmulatedProvider, out: TextIO) -> None:
        self._provider = provider
        self._out = out
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        response = self._provider(request)
        body = request.json if request.body else None
        stream = " (stream)" if isinstance(body, dict) and body.get("stream") else ""
        with self._lock:
            _write(
                self._out,
                f"{time.strftime('%H:%M:%S')} {request.method} {request.path}{stream} "
                f"→ {response.status}\n",
            )
        return response


def _write(out: TextIO, text: str) -> None:
    try:
        out.write(text)
        out.flush()
    except (BrokenPipeError, ValueError):  # the reader went away: keep serving
        pass


def _os_error(exc: BaseException) -> str | None:
    """Why listening failed, when it is an ``OSError`` (alone or in a group)."""
    while isinstance(exc, BaseExceptionGroup):
        group = exc.subgroup(OSError)
        if group is None:
            return None
        exc = group.exceptions[0]
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return None


@contextmanager
def _sigterm_interrupts() -> Generator[None, None, None]:
    """SIGTERM stops the server as Ctrl-C does (in the main thread, where signals land)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
