"""1,000 concurrent SSE clients against ``agentloop serve``: time to first delta.

``agentloop serve`` (uvicorn, one process) serves an agent whose model is the emulated provider,
in a process of its own. Clients, all at once from one more process (aiohttp), each ``POST
/api/runs`` and read ``GET /api/runs/{run}/events`` to the run's end. Reported: how many streams
completed (all must), and the time from a client's POST to the first ``text_delta`` frame it
reads, p50 and p99, and the wall time for them all (after one warm-up run, which imports the
model SDK).

Run: ``python -m benchmarks.bench_web [--smoke] [--clients 1000]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.support.provider_process import ProviderServerProcess, raise_fd_limit

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _client(session, base: str) -> tuple[float, bool]:
    start = time.perf_counter()
    first: float | None = None
    async with session.post(f"{base}/api/runs", json={"input": "hello"}) as started:
        if started.status != 201:
            return float("nan"), False
        events = (await started.json())["events"]
    finished = False
    async with session.get(base + events) as response:
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            kind = json.loads(line[5:])["type"]
            if first is None and kind == "text_delta":
                first = time.perf_counter() - start
            finished = finished or kind == "run_finished"
    return (first if first is not None else float("nan")), finished


async def _load(base: str, clients: int) -> tuple[list[float], int, float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for _ in range(100):  # the server is up when it answers
            try:
                async with session.get(base + "/app.js") as ready:
                    if ready.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        await _client(session, base)  # warm-up: the first run imports the SDK and connects
        start = time.perf_counter()
        results = await asyncio.gather(*(_client(session, base) for _ in range(clients)))
        wall = time.perf_counter() - start
    firsts = [first for first, _ in results]
    done = sum(finished for _, finished in results)
    return firsts, done, wall


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_web")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--clients", type=int, default=None)
    args = parser.parse_args(argv)
    clients = args.clients or (50 if args.smoke else 1000)
    raise_fd_limit(4 * clients + 200)  # the children inherit it
    provider = ProviderServerProcess(min_fds=2 * clients)
    provider.start()
    port = _free_port()
    env = {**os.environ, "AGENTLOOP_BENCH_PROVIDER_URL": provider.url, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "agentloop", "serve", "benchmarks._web_agent:agent"]
    command += ["--port", str(port), "--max-runs-per-caller", str(clients)]
    command += ["--max-streams-per-caller", str(clients)]
    server = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        firsts, done, wall = asyncio.run(_load(f"http://127.0.0.1:{port}", clients))
    finally:
        server.terminate()
        try:
            _, errors = server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            _, errors = server.communicate()
        provider.stop()
    measured = [f for f in firsts if f == f]  # NaN: no delta seen
    print("| clients | completed | first delta p50 | first delta p99 | wall |")
    print("|---:|---:|---:|---:|---:|")
    p50 = statistics.median(measured) * 1000 if measured else float("nan")
    p99 = _percentile(measured, 0.99) * 1000 if measured else float("nan")
    print(f"| {clients} | {done} | {p50:.0f} ms | {p99:.0f} ms | {wall:.1f} s |")
    if done != clients:
        print(f"\n{clients - done} streams did not complete; server stderr:\n{errors[-2000:]}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
