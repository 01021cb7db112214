"""The loopback provider server in a separate process, with the options some benchmarks need.

``BenchServer`` is ``tests.support.provider_process.ProviderServerProcess`` running this module instead of
the stock server: the same emulated provider (``EmulatedProvider``), plus ``tool_rounds`` (answer
only after that many rounds of tool calls: a long session of tool steps), ``script`` (answer every
request with this text, ``count`` times) and ``pause`` (stream a reply as a provider streams
tokens: its first two SSE events, the role and the first piece of text, go out at once, the rest
``pause`` seconds later).

Run (internal): ``python -m benchmarks._server [--tool-rounds N] [--script TEXT --count N]
[--pause SECONDS] [--min-fds N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from agentloop.testing import (
    Chunk,
    EmulatedProvider,
    ProviderServer,
    RecordedRequest,
    ScriptedResponse,
)
from tests.support.provider_process import ProviderServerProcess, raise_fd_limit


class BenchServer(ProviderServerProcess):
    """``with BenchServer(tool_rounds=50) as server: ... server.url``."""

    def __init__(
        self,
        *,
        tool_rounds: int = 1,
        script: str | None = None,
        count: int = 0,
        pause: float = 0.0,
        min_fds: int = 0,
    ) -> None:
        super().__init__(min_fds=min_fds)
        cmd = [sys.executable, "-m", "benchmarks._server", "--tool-rounds", str(tool_rounds)]
        cmd += ["--min-fds", str(min_fds), "--pause", str(pause)]
        if script is not None:
            cmd += ["--script", script, "--count", str(count)]
        self._cmd = cmd  # the stock process's READY / STATS protocol, this module's server


def _paused(response: ScriptedResponse, pause: float) -> ScriptedResponse:
    """The reply's first two SSE events at once, the rest ``pause`` seconds later."""
    body = response.body
    blob = b"".join(
        p if isinstance(p, bytes) else p.data for p in ([body] if isinstance(body, bytes) else body)
    )
    events = blob.split(b"\n\n")
    first, rest = b"\n\n".join(events[:2]) + b"\n\n", b"\n\n".join(events[2:])
    return dataclasses.replace(response, body=[first, Chunk(rest, pause)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._server")
    parser.add_argument("--tool-rounds", type=int, default=1)
    parser.add_argument("--script", default=None)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--min-fds", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        limit = raise_fd_limit(args.min_fds or None)
    except RuntimeError as exc:
        print(f"ERROR {exc}", flush=True)
        return 2
    script = [args.script] * args.count if args.script is not None else None
    emulated = EmulatedProvider(tool_rounds=args.tool_rounds, script=script)

    def handler(request: RecordedRequest) -> ScriptedResponse:
        response = emulated(request)
        return _paused(response, args.pause) if args.pause else response

    with ProviderServer(handler) as server:
        print(f"READY {server.port} fds={limit}", flush=True)
        sys.stdin.read()  # until the parent closes it
        stats: dict[str, Any] = dataclasses.asdict(server.stats)
    print("STATS " + json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
