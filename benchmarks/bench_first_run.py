"""The first run in a fresh process: time to the first request byte, and peak memory.

Each measurement is a fresh worker process timing one two-turn session to the first byte of its
first request written to a socket (asyncio's socket transport, patched to note the time): the
floor from before it imports ``aiohttp`` (a program on aiohttp must import it), the agent from
its first ``Agent.run`` (``import agentloop`` and building the agent come before; the import is
``bench_import``'s). Whatever the agent imports or builds lazily on the way (an SDK, an HTTP
session, templates) is in its time; aiohttp it imports when the driver is made, before the clock
starts (the *started* case below counts it in the build). Peak resident memory is the
worker's, after the session. Clients alternate, the median of the runs is reported. Targets
(issue 22): the agent's first byte within the floor's time + 30 ms, and its peak RSS within
15 MiB of the floor's.

A service builds its agent at start-up, so its first request pays for whatever the agent left
for later: the *started* case builds the agent (``import agentloop`` and the driver's module,
``OpenAIChatModel`` on the loopback server, ``Agent`` with its two tools) and then times two
sessions one after the other, counting the modules the first one imported. Targets (issue 36):
the first session within 30 ms of the second, no module imported on its way, and the import and
construction under 0.35 s.

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
TARGET_BUILD_S = 0.35
STARTED = "started"  # the worker of the agent built at start-up
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


def _started_worker(url: str) -> dict[str, float]:
    """Build the agent as a service does at start-up, then time its first two sessions."""
    start = time.perf_counter()
    import agentloop
    import agentloop.models.openai  # noqa: F401

    imported = time.perf_counter() - start
    import anyio

    from benchmarks._loopback import make_agent, make_model

    start = time.perf_counter()
    model = make_model("openai-chat", url, 1)
    bot = make_agent(model)
    built = time.perf_counter() - start

    async def main() -> dict[str, float]:
        times: list[float] = []
        before = len(sys.modules)
        new_modules = 0
        async with model:
            for _ in range(2):
                start = time.perf_counter()
                result = await bot.run("weather and time?")
                times.append((time.perf_counter() - start) * 1000)
                if result.error is not None:
                    raise RuntimeError(f"the session failed: {result.error}")
                if len(times) == 1:
                    new_modules = len(sys.modules) - before
        return {
            "build_s": imported + built,
            "first_ms": times[0],
            "second_ms": times[1],
            "modules": float(new_modules),
        }

    return anyio.run(main, backend="asyncio")


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
        work = (
            _started_worker(args.url) if args.worker == STARTED else _worker(args.worker, args.url)
        )
        print(json.dumps(work))
        return 0
    from tests.support.provider_process import ProviderServerProcess

    runs = args.runs or (2 if args.smoke else 7)
    configs = [*CLIENTS, STARTED]
    found: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    with cached_bytecode(), ProviderServerProcess() as server:
        for config in configs:  # warm the file cache and bytecode
            measure(config, server.url)
        for _ in range(runs):
            for config in configs:
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
    _report_started(medians[STARTED], runs)
    return 0


def _report_started(m: dict[str, float], runs: int) -> None:
    later = m["first_ms"] - m["second_ms"]
    print("\nAn agent built at start-up (OpenAI Chat, aiohttp): its first two sessions, medians")
    print(f"of {runs} fresh processes.\n")
    print("| import agentloop + build the agent, s | first session, ms | second, ms |")
    print("|---:|---:|---:|")
    print(f"| {m['build_s']:.3f} | {m['first_ms']:.1f} | {m['second_ms']:.1f} |")
    print(
        f"\nTargets: the first within {TARGET_MS:g} ms of the second ({later:+.1f} ms): "
        f"{'met' if later <= TARGET_MS else 'NOT met'}; modules the first imported: "
        f"{m['modules']:.0f} ({'met' if m['modules'] == 0 else 'NOT met'}); import and build "
        f"under {TARGET_BUILD_S:g} s ({m['build_s']:.3f} s): "
        f"{'met' if m['build_s'] < TARGET_BUILD_S else 'NOT met'}."
    )


if __name__ == "__main__":
    sys.exit(main())
