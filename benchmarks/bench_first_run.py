"""The first run in a fresh process: time to the first request byte, and peak memory.

Each measurement is a fresh worker process timing one two-turn session to the first byte of its
first request written to a socket (asyncio's socket transport, patched to note the time): the
floor from before it imports ``aiohttp`` (a program on aiohttp must import it), the agent from
its first ``Agent.run`` (``import agentloop`` and building the agent come before; the import is
``bench_import``'s). Whatever the agent imports or builds lazily on the way (aiohttp, an SDK, an
HTTP session, templates) is in its time. Peak resident memory is the worker's, after the session. Clients alternate, the
median of the runs is reported. Targets (issue 22): the agent's first byte within the floor's time
+ 30 ms, and its peak RSS within 15 MiB of the floor's.

Run: ``python -m benchmarks.bench_first_run [--smoke] [--runs 7]``
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks._bytecode import cached_bytecode

TARGET_MS = 30.0
TARGET_MIB = 15.0
CLIENTS = {
    "floor": "floor: aiohttp + json",
    "agent-openai-chat": "agentloop Agent.run, OpenAI Chat (aiohttp)",
}


def _worker(config: str, url: str) -> dict[str, float]:
    import asyncio.selector_events

    import anyio

    from benchmarks._loopback import setup

    written: list[float] = []
    transport_type: Any = vars(asyncio.selector_events)["_SelectorSocketTransport"]  # internal
    write = transport_type.write

    def noting_write(self: Any, data: Any) -> None:
        if not written:
            written.append(time.perf_counter())
        write(self, data)

    transport_type.write = noting_write

    async def main() -> float:
        start = time.perf_counter()  # the floor's clock starts before it imports aiohttp
        async with setup(config, url, 1) as run:
            if config != "floor":
                start = time.perf_counter()  # the agent's at its first run
            await run(1)
        return (written[0] - start) * 1000

    first_byte_ms = anyio.run(main, backend="asyncio")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"first_byte_ms": first_byte_ms, "peak_mib": peak}


def measure(config: str, url: str) -> dict[str, float]:
    """One fresh worker process for ``config``."""
    cmd = [sys.executable, "-m", "benchmarks.bench_first_run", "--worker", config, "--url", url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{config} worker failed:\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_first_run")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--worker", default=None)
    parser.add_argument("--url", default=None)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, args.url)))
        return 0
    from tests.support.provider_process import ProviderServerProcess

    runs = args.runs or (2 if args.smoke else 7)
    found: dict[str, list[dict[str, float]]] = {c: [] for c in CLIENTS}
    with cached_bytecode(), ProviderServerProcess() as server:
        for config in CLIENTS:  # warm the file cache and bytecode
            measure(config, server.url)
        for _ in range(runs):
            for config in CLIENTS:
                found[config].append(measure(config, server.url))
    medians = {
        config: {k: statistics.median(r[k] for r in results) for k in results[0]}
        for config, results in found.items()
    }
    floor = medians["floor"]
    print("| client | first request byte, ms (median) | − floor ms | peak RSS MiB | − floor MiB |")
    print("|---|---:|---:|---:|---:|")
    for config, label in CLIENTS.items():
        m = medians[config]
        print(
            f"| {label} | {m['first_byte_ms']:.1f} | {m['first_byte_ms'] - floor['first_byte_ms']:+.1f} "
            f"| {m['peak_mib']:.0f} | {m['peak_mib'] - floor['peak_mib']:+.0f} |"
        )
    agent = medians["agent-openai-chat"]
    late = agent["first_byte_ms"] - floor["first_byte_ms"]
    heavier = agent["peak_mib"] - floor["peak_mib"]
    print(
        f"\n{runs} fresh processes per client, taking turns; one two-turn session each, timed "
        "to the first byte of its first request written to the socket: the floor from before "
        "`import aiohttp`, the agent from its first `Agent.run`."
    )
    print(
        f"\nTargets: first byte within the floor's + {TARGET_MS:g} ms ({late:+.1f} ms): "
        f"{'met' if late <= TARGET_MS else 'NOT met'}; peak RSS within {TARGET_MIB:g} MiB of "
        f"the floor's ({heavier:+.0f} MiB): {'met' if heavier <= TARGET_MIB else 'NOT met'}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
