"""Run the loopback provider server as a separate process (for benchmarks and load tests).

::

    python -m tests.support.provider_process [--port 0] [--chunk-delay 0.0] [--text-chunks 6]
                                       [--min-fds 0] [--faults '{"rate_limit": 0.05}']

It serves the emulated provider (``agentloop.testing.EmulatedProvider``) for the three APIs, prints
``READY <port>`` once listening, and runs until its standard input closes (or it is signalled);
then it prints ``STATS <json>`` (with ``"faults"``: the faults injected, by kind, when
``--faults`` gave a ``FaultProfile`` as JSON). The open-file limit is raised to the hard limit first; with
``--min-fds`` it exits with an error when that leaves fewer descriptors than asked for.
``ProviderServerProcess`` starts and stops such a process from Python.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from agentloop.testing import EmulatedProvider, FaultProfile, ProviderServer

__all__ = ["ProviderServerProcess", "main", "raise_fd_limit"]

# The child imports this module from the repository root, wherever the parent runs.
_ROOT = str(Path(__file__).resolve().parent.parent)


def raise_fd_limit(required: int | None = None) -> int:
    """Raise this process's open-file limit to its hard limit; return the new soft limit.

    With ``required``, fail loudly (``RuntimeError``) when the limit stays below it.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # pragma: no cover - platform refused
            pass
    if required is not None and soft < required:
        raise RuntimeError(
            f"open-file limit is {soft}, below the {required} descriptors this run needs; "
            "raise the hard limit (ulimit -Hn) and try again"
        )
    return soft


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.provider_process")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--text-chunks", type=int, default=6)
    parser.add_argument("--min-fds", type=int, default=0)
    parser.add_argument("--faults", default=None, help="a FaultProfile as JSON")
    args = parser.parse_args(argv)
    faults = FaultProfile.from_json(args.faults) if args.faults else None
    try:
        limit = raise_fd_limit(args.min_fds or None)
    except RuntimeError as exc:
        print(f"ERROR {exc}", flush=True)
        return 2
    handler = EmulatedProvider(text_chunks=args.text_chunks, chunk_delay=args.chunk_delay)
    with ProviderServer(handler, host=args.host, port=args.port, faults=faults) as server:
        print(f"READY {server.port} fds={limit}", flush=True)
        try:
            sys.stdin.read()
        except KeyboardInterrupt:  # pragma: no cover - interactive use
            pass
        stats: dict[str, Any] = dataclasses.asdict(server.stats)
        if server.faults is not None:
            stats["faults"] = server.faults.counts
    print("STATS " + json.dumps(stats), flush=True)
    return 0


_ENTRY = "import sys; from tests.support.provider_process import main; sys.exit(main())"


class ProviderServerProcess:
    """Start the emulated provider in a child process: ``with ProviderServerProcess() as p:``
    then ``p.url``; ``p.stats`` after exit (``p.stats["faults"]`` with ``faults=``)."""

    def __init__(
        self,
        *,
        chunk_delay: float = 0.0,
        text_chunks: int = 6,
        min_fds: int = 0,
        faults: FaultProfile | None = None,
        python: str = sys.executable,
    ) -> None:
        self._cmd = [
            python,
            "-c",  # not "-m": the package imports this module first, and runpy warns about that
            _ENTRY,
            "--chunk-delay",
            str(chunk_delay),
            "--text-chunks",
            str(text_chunks),
            "--min-fds",
            str(min_fds),
        ]
        if faults is not None:
            self._cmd += ["--faults", faults.to_json()]
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.stats: dict[str, Any] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("the server was not started")
        return self._proc.pid

    def start(self) -> Self:
        path = os.pathsep.join(filter(None, (_ROOT, os.environ.get("PYTHONPATH"))))
        self._proc = subprocess.Popen(
            self._cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
        )
        line = self._proc.stdout.readline() if self._proc.stdout is not None else ""
        if not line.startswith("READY "):
            self._proc.kill()
            self._proc.wait()
            raise RuntimeError(f"provider server process failed to start: {line.strip()!r}")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            out, _ = proc.communicate(input="", timeout=30)  # closing stdin stops it
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            proc.kill()
            out, _ = proc.communicate()
        for line in out.splitlines():
            if line.startswith("STATS "):
                self.stats = json.loads(line[6:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
