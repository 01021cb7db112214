"""Durable runs on Temporal against the same runs in-process.

One workload throughout: the emulated provider over loopback, two steps per run (two parallel
tool calls, then a short answer). A Temporal dev server runs for the benchmark.

- **CPU per turn**: this process's CPU (caller and one in-process worker; in both modes it
  includes the emulated provider, a thread of this process) and the server's, per turn (one
  model call and its tools), running runs one after another.
- **Throughput**: turns per second for 40 concurrent runs, with 1 and with 2 worker processes.
- **History and CPU per run**, with and without a caller streaming the run: the history's
  events and bytes per run (fetched from the server), and the CPU per run of the worker (a
  process of its own), of this process (the caller, and the emulated provider's thread) and
  of the server, running runs one after another.
- **Added delta latency**: a model that stamps each delta with the time it made it; the caller
  reads the stamp when the delta arrives (every 50 ms, 40 deltas).
- **Seal to tool start**: a reply streams text for 0.3 s, seals a tool call stamped with the
  time, and streams 0.3 s more; the tool reads the stamp as it starts, in the worker. With and
  without a caller streaming the run.
- **Eager gain**: a reply streams for 2.0 s, sealing one tool call at 0.4 s and one at 1.0 s;
  tools take 1.0 s. The step, eager and with ``eager=False``.

- **Far behind**: callers of one process attach from seq 0, all at once, to a finished run that
  continued as new again and again (12 steps, ``continue_after=20``, each run holding a 2 KiB
  tail): the queries of its closed earlier runs (each one a worker replaying that run), of its
  latest run, and the seconds until every caller read every event.

``--smoke`` runs fewer runs, one worker process only, and scales the eager timings by 0.2;
``--costs`` runs only the history, CPU per run and seal sections; ``--far-behind`` only the
far-behind one.

Run: ``python -m benchmarks.bench_temporal``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from agentloop import Agent, StepFinished, TextDelta, tool
from agentloop.models import Model, ModelRequest
from agentloop.models._types import (
    FinishDelta,
    ModelStream,
    TextPiece,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResultPart,
    Usage,
    UsageDelta,
)
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    ProviderServer,
    Reply,
    ScriptedModel,
    call,
)

ROOT = Path(__file__).resolve().parent.parent
SCRIPT: list[EmulatedTurn | str] = [
    EmulatedTurn(
        text="Looking both up.",
        calls=[EmulatedCall("lookup", {"key": "a"}), EmulatedCall("lookup", {"key": "b"})],
    ),
    "Both are found.",
]


def _cpu_of(pid: int) -> float:
    """A process's CPU seconds (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@asynccontextmanager
async def _serving(target: str, *durables: Any) -> AsyncIterator[Any]:
    from agentloop.temporal import connect, worker

    client = await connect(target)
    async with worker(client, list(durables), max_concurrent_activities=200):
        yield client


async def _cpu_per_turn(target: str, server_pid: int, url: str, runs: int) -> list[str]:
    from benchmarks._temporal_worker import bench_agent

    durable = bench_agent(url, f"cpu-{uuid.uuid4().hex[:8]}")
    agent = durable.agent
    rows = []
    await agent.run("warm up")
    start = time.process_time()
    for _ in range(runs):
        await agent.run("look up a and b")
    local = (time.process_time() - start) / (2 * runs)
    rows.append(f"| in-process | {local * 1000:.2f} ms | - |")
    async with _serving(target, durable) as client:
        await durable.run(client, "warm up")
        start, server = time.process_time(), _cpu_of(server_pid)
        for _ in range(runs):
            await durable.run(client, "look up a and b")
        mine = (time.process_time() - start) / (2 * runs)
        theirs = (_cpu_of(server_pid) - server) / (2 * runs)
    await agent.resolved_model().aclose()
    rows.append(f"| durable | {mine * 1000:.2f} ms | {theirs * 1000:.2f} ms |")
    return rows


async def _worker_process(target: str, queue: str, url: str) -> Any:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = await anyio.open_process(
        [sys.executable, "-m", "benchmarks._temporal_worker", target, queue, url], env=env
    )
    if process.stdout is not None:
        await process.stdout.receive()  # "ready"
    return process


async def _history_costs(target: str, server_pid: int, url: str, runs: int) -> list[str]:
    """Per run, without and with a caller streaming it: history events and bytes, and CPU of
    the worker process, this process and the server."""
    from agentloop.temporal import connect
    from benchmarks._temporal_worker import bench_agent

    rows = []
    client = await connect(target)
    for streamed in (False, True):
        queue = f"hist-{uuid.uuid4().hex[:8]}"
        process = await _worker_process(target, queue, url)
        try:
            durable = bench_agent(url, queue)
            await durable.run(client, "warm up")
            ids = []
            start, server = time.process_time(), _cpu_of(server_pid)
            worker = _cpu_of(process.pid)
            for _ in range(runs):
                run = await durable.start(client, "look up a and b")
                if streamed:
                    async for _event in run:
                        pass
                await run.result()
                ids.append(run.run_id)
            mine = (time.process_time() - start) / runs
            theirs = (_cpu_of(server_pid) - server) / runs
            worker = (_cpu_of(process.pid) - worker) / runs
            events = size = 0
            for run_id in ids:
                history = await client.get_workflow_handle(run_id).fetch_history()
                events += len(history.events)
                size += sum(e.ByteSize() for e in history.events)
            await durable.agent.resolved_model().aclose()
        finally:
            process.kill()
            await process.aclose()
        rows.append(
            f"| {'streamed' if streamed else 'not streamed'} | {events / runs:.1f} "
            f"| {size / runs / 1024:.1f} KB | {worker * 1000:.1f} ms | {mine * 1000:.1f} ms "
            f"| {theirs * 1000:.1f} ms |"
        )
    return rows


async def _throughput(target: str, url: str, workers: int, runs: int) -> float:
    from agentloop.temporal import connect
    from benchmarks._temporal_worker import bench_agent

    queue = f"tp-{uuid.uuid4().hex[:8]}"
    processes = [await _worker_process(target, queue, url) for _ in range(workers)]
    try:
        durable = bench_agent(url, queue)
        client = await connect(target)
        await durable.run(client, "warm up")
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(runs):
                tg.start_soon(durable.run, client, "look up a and b")
        took = time.perf_counter() - start
        await durable.agent.resolved_model().aclose()
        return 2 * runs / took
    finally:
        for process in processes:
            process.kill()
            await process.aclose()


class _StampingModel(Model):
    """Each delta is the time it was made, so the caller can tell how late it arrives."""

    @property
    def name(self) -> str:
        return "stamping"

    def stream(self, request: ModelRequest) -> ModelStream:
        return self._stream()

    @asynccontextmanager
    async def _stream(self) -> AsyncIterator[AsyncIterator[Any]]:
        async def deltas() -> AsyncIterator[Any]:
            for _ in range(40):
                await anyio.sleep(0.05)
                yield TextPiece(f"{time.time():.6f};")
            yield UsageDelta(Usage(requests=1))
            yield FinishDelta(reason="stop")

        yield deltas()


async def _latencies(target: str, durable_mode: bool) -> list[float]:
    from agentloop.temporal import TemporalAgent

    agent = Agent(_StampingModel(), name="stamping")
    late: list[float] = []

    def take(event: Any) -> None:
        if isinstance(event, TextDelta):
            late.append(time.time() - float(event.text.rstrip(";")))

    if not durable_mode:
        async with agent.stream("go") as local:
            async for event in local:
                take(event)
        return late
    durable = TemporalAgent(agent, task_queue=f"lat-{uuid.uuid4().hex[:8]}")
    async with _serving(target, durable) as client:
        run = await durable.start(client, "go")
        async for event in run:
            take(event)
    return late


class _SealingModel(Model):
    """Text for 0.3 s, a tool call stamped with the time it seals, 0.3 s more text; then, once
    the tool's result is in, an answer."""

    @property
    def name(self) -> str:
        return "sealing"

    def stream(self, request: ModelRequest) -> ModelStream:
        answered = any(isinstance(p, ToolResultPart) for m in request.messages for p in m.parts)
        return self._stream(answered)

    @asynccontextmanager
    async def _stream(self, answered: bool) -> AsyncIterator[AsyncIterator[Any]]:
        async def deltas() -> AsyncIterator[Any]:
            if answered:
                yield TextPiece("done")
            else:
                for _ in range(6):
                    await anyio.sleep(0.05)
                    yield TextPiece("word ")
                yield ToolCallStart(id="a", name="started")
                yield ToolCallArgsDelta(id="a", text=f'{{"sealed": {time.time():.6f}}}')
                yield ToolCallEnd(id="a")
                for _ in range(6):
                    await anyio.sleep(0.05)
                    yield TextPiece("word ")
            yield UsageDelta(Usage(requests=1))
            yield FinishDelta(reason="stop")

        yield deltas()


async def _seal_latency(target: str, streamed: bool, runs: int) -> list[float]:
    from agentloop.temporal import TemporalAgent

    late: list[float] = []

    @tool
    async def started(sealed: float) -> str:
        """Say when it started.

        Args:
            sealed: when the call sealed
        """
        late.append(time.time() - sealed)
        return "ok"

    agent = Agent(_SealingModel(), name="sealing", tools=[started])
    durable = TemporalAgent(agent, task_queue=f"seal-{uuid.uuid4().hex[:8]}")
    async with _serving(target, durable) as client:
        for _ in range(runs):
            run = await durable.start(client, "go")
            if streamed:
                async for _event in run:
                    pass
            await run.result()
    return late


async def _step(target: str | None, eager: bool, scale: float) -> float:
    from agentloop.temporal import TemporalAgent

    @tool(name="work", eager=eager)
    async def work(n: int) -> int:
        """Work for a while.

        Args:
            n: what to return
        """
        await anyio.sleep(1.0 * scale)
        return n

    reply = Reply(
        timeline=[
            (0.4 * scale, call("work", {"n": 1}, id="a")),
            (1.0 * scale, call("work", {"n": 2}, id="b")),
            (2.0 * scale, ""),
        ]
    )
    agent = Agent(ScriptedModel([reply, "done"]), name="eager", tools=[work])
    start = time.perf_counter()
    if target is None:
        async with agent.stream("go") as local:
            async for event in local:
                if isinstance(event, StepFinished):
                    return time.perf_counter() - start
        raise AssertionError("no step finished")
    durable = TemporalAgent(agent, task_queue=f"eager-{uuid.uuid4().hex[:8]}")
    async with _serving(target, durable) as client:
        start = time.perf_counter()
        run = await durable.start(client, "go")
        async for event in run:
            if isinstance(event, StepFinished):
                took = time.perf_counter() - start
        return took


async def _far_behind(target: str, callers: int, steps: int) -> str:
    """The far-behind row: queries of the chain's closed runs, and the time, for ``callers``."""
    from collections import Counter

    from temporalio.client import Interceptor, OutboundInterceptor, QueryWorkflowInput

    from agentloop.temporal import TemporalAgent, _carry, connect

    counts: Counter[str] = Counter()

    class Counting(Interceptor):
        def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
            class Outbound(OutboundInterceptor):
                async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                    counts["latest" if input.run_id is None else "earlier"] += 1
                    return await super().query_workflow(input)

            return Outbound(next)

    @tool
    async def note(n: int) -> str:
        """Note a number.

        Args:
            n: The number.
        """
        return f"noted {n}"

    replies = [
        Reply(timeline=[(0.01, f"step {i} "), (0.02, call("note", {"n": i}, id=f"n{i}"))])
        for i in range(steps)
    ]
    agent = Agent(ScriptedModel([*replies, "all done."]), name="far", tools=[note])
    durable = TemporalAgent(agent, task_queue=f"far-{uuid.uuid4().hex[:8]}", continue_after=20)
    kept, _carry.TAIL_BYTES = _carry.TAIL_BYTES, 2048
    try:
        async with _serving(target, durable) as client:
            run = await durable.start(client, "go")
            await run.result()
            chain = [w async for w in client.list_workflows(f"WorkflowId = '{run.run_id}'")]
            readers = await connect(target, interceptors=[Counting()])
            start = time.perf_counter()

            async def follow() -> None:
                async for _ in durable.attach(readers, run.run_id):
                    pass

            async with anyio.create_task_group() as tg:
                for _ in range(callers):
                    tg.start_soon(follow)
            took = time.perf_counter() - start
    finally:
        _carry.TAIL_BYTES = kept
    return f"| {callers} | {len(chain)} | {counts['earlier']} | {counts['latest']} | {took:.1f} s |"


async def _main(smoke: bool, costs_only: bool = False, far_only: bool = False) -> int:
    from tests.support.temporal import TemporalUnavailableHere, start_dev_server

    try:
        server = start_dev_server()
    except TemporalUnavailableHere as exc:
        print(f"Skipped: {exc}")
        return 0
    runs = 5 if smoke else 40
    try:
        if not costs_only:
            print("| callers | runs in the chain | queries of closed runs | of its latest | took |")
            print("|---|---|---|---|---|")
            print(await _far_behind(server.target, 5 if smoke else 30, 6 if smoke else 12))
            if far_only:
                return 0
            print()
        with ProviderServer(EmulatedProvider(script=SCRIPT)) as provider:
            if costs_only:
                return await _costs(server, smoke, runs)
            print("| mode | CPU per turn, caller and worker | CPU per turn, server |")
            print("|---|---|---|")
            for row in await _cpu_per_turn(server.target, server.process.pid, provider.url, runs):
                print(row)
            print("\n| worker processes | turns per second |")
            print("|---|---|")
            for workers in (1,) if smoke else (1, 2):
                rate = await _throughput(server.target, provider.url, workers, runs)
                print(f"| {workers} | {rate:.1f} |")
        await _costs(server, smoke, runs)
        local = await _latencies(server.target, False)
        durable = await _latencies(server.target, True)
        print("\n| mode | delta latency, median | p90 | max |")
        print("|---|---|---|---|")
        for name, values in (("in-process", local), ("durable", durable)):
            q = statistics.quantiles(values, n=10)
            print(
                f"| {name} | {statistics.median(values) * 1000:.0f} ms | {q[-1] * 1000:.0f} ms "
                f"| {max(values) * 1000:.0f} ms |"
            )
        scale = 0.2 if smoke else 1.0
        print("\n| mode | stream | eager step | eager=False step | gain |")
        print("|---|---|---|---|---|")
        for name, target in (("in-process", None), ("durable", server.target)):
            eager = await _step(target, True, scale)
            late = await _step(target, False, scale)
            print(
                f"| {name} | {2.0 * scale:.1f} s | {eager:.2f} s | {late:.2f} s "
                f"| {late - eager:.2f} s |"
            )
    finally:
        server.stop()
    return 0


async def _costs(server: Any, smoke: bool, runs: int) -> int:
    """The history and CPU per run, and seal to tool start, streamed and not."""
    # Text in chunks 20 ms apart, as a model streams it (at 0 ms nothing would be batched).
    with ProviderServer(EmulatedProvider(script=SCRIPT, chunk_delay=0.02)) as provider:
        print(
            "\n| caller | history events per run | history bytes per run "
            "| CPU per run, worker | this process (caller, provider) | server |"
        )
        print("|---|---|---|---|---|---|")
        for row in await _history_costs(server.target, server.process.pid, provider.url, runs):
            print(row)
    print("\n| caller | seal to tool start, median | max |")
    print("|---|---|---|")
    for streamed in (False, True):
        values = await _seal_latency(server.target, streamed, 3 if smoke else 10)
        print(
            f"| {'streamed' if streamed else 'not streamed'} "
            f"| {statistics.median(values) * 1000:.1f} ms | {max(values) * 1000:.1f} ms |"
        )
    if smoke:
        late = await _latencies(server.target, True)
        print(
            f"\ndelta latency to a streaming caller, median: {statistics.median(late) * 1000:.0f} ms"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--costs", action="store_true", help="only history, CPU per run, seals")
    parser.add_argument("--far-behind", action="store_true", help="only callers far behind")
    args = parser.parse_args(argv)
    return asyncio.run(_main(args.smoke, args.costs, args.far_behind))


if __name__ == "__main__":
    sys.exit(main())
