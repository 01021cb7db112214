"""Core runtime overhead: CPU per step, and memory per waiting session.

1. **CPU per step.** Runs of a two-action step plus an answer against ``ScriptedModel`` with no
   latency, on agentloop, beside a bare loop that does the same work by hand (stream the same
   scripted deltas, run the two tools in a task group, build the next prompt) — the floor.
2. **Memory per session.** N concurrent sessions (10,000; 1,000 with ``--smoke``) each waiting
   inside a slow model call, on agentloop and on bare tasks waiting on the same event with the
   same prompt: resident memory growth per session.

Run: ``python -m benchmarks.bench_core`` (or ``python -m benchmarks`` for all benchmarks).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import anyio

from agentloop import Agent, ModelRequest, tool
from agentloop.models import Message, ResponseBuilder, ToolCallPart, ToolResultPart
from agentloop.testing import FunctionModel, Reply, ScriptedModel, call


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


def _script() -> list[Reply | str]:
    return [
        Reply(
            text="looking up",
            calls=[call("lookup", {"key": "a"}, id="c1"), call("lookup", {"key": "b"}, id="c2")],
        ),
        "A and B",
    ]


async def _agentloop_runs(n: int) -> None:
    for _ in range(n):
        model = ScriptedModel(_script(), chunk_size=8)
        result = await Agent(model, tools=[lookup]).run("look up a and b")
        assert result.output == "A and B"


async def _bare_runs(n: int) -> None:
    """The floor: the same model, deltas and tools, with a hand-written loop."""
    for _ in range(n):
        model = ScriptedModel(_script(), chunk_size=8)
        messages = [Message.user("look up a and b")]
        while True:
            request = ModelRequest(messages=tuple(messages))
            builder = ResponseBuilder()
            async with model.stream(request) as deltas:
                async for delta in deltas:
                    builder.add(delta)
            response = builder.build()
            calls = response.tool_calls
            if not calls:
                break
            results: dict[str, str] = {}

            async def run_one(part: ToolCallPart, results: dict[str, str] = results) -> None:
                results[part.id] = await lookup.activities[None].fn(**json.loads(part.arguments))

            async with anyio.create_task_group() as tg:
                for part in calls:
                    tg.start_soon(run_one, part)
            messages.append(Message(role="assistant", parts=response.parts))
            messages.append(
                Message(
                    role="tool",
                    parts=tuple(
                        ToolResultPart(id=p.id, name=p.name, content=results[p.id]) for p in calls
                    ),
                )
            )


def _cpu(fn: Any, n: int, backend: str) -> float:
    """Best-of-3 CPU seconds per run."""
    best = float("inf")
    for _ in range(3):
        gc.collect()
        start = time.process_time()
        anyio.run(fn, n, backend=backend)
        best = min(best, (time.process_time() - start) / n)
    return best


def _rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


async def _memory(sessions: int, kind: str) -> float:
    release = anyio.Event()
    waiting = 0
    all_waiting = anyio.Event()

    async def slow_reply(request: ModelRequest) -> str:
        nonlocal waiting
        waiting += 1
        if waiting == sessions:
            all_waiting.set()
        await release.wait()
        return "done"

    agent = Agent(FunctionModel(slow_reply), tools=[lookup], instructions="Be brief.")

    async def bare_session(i: int) -> None:
        nonlocal waiting
        messages = (Message.system("Be brief."), Message.user(f"session {i}"))
        waiting += 1
        if waiting == sessions:
            all_waiting.set()
        await release.wait()
        del messages

    gc.collect()
    before = _rss_kib()
    async with anyio.create_task_group() as tg:
        for i in range(sessions):
            if kind == "agentloop":
                tg.start_soon(agent.run, f"session {i}")
            else:
                tg.start_soon(bare_session, i)
        await all_waiting.wait()
        gc.collect()
        during = _rss_kib()
        release.set()
    return (during - before) / sessions


def _memory_in_subprocess(sessions: int, kind: str, backend: str) -> float:
    """Each measurement in a fresh interpreter, so that one does not reuse the other's heap."""
    import subprocess

    code = (
        "import anyio, sys; from benchmarks.bench_core import _memory; "
        f"print(anyio.run(_memory, {sessions}, {kind!r}, backend={backend!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=_root()
    )
    return float(out.stdout.strip().splitlines()[-1])


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run for CI")
    args = parser.parse_args(argv)
    runs = 50 if args.smoke else 400
    sessions = 1_000 if args.smoke else 10_000
    print("| backend | measure | agentloop | bare loop (floor) | ratio |")
    print("|---|---|---|---|---|")
    for backend in ("asyncio", "trio"):
        ours = _cpu(_agentloop_runs, runs, backend) / 2  # two steps per run
        floor = _cpu(_bare_runs, runs, backend) / 2
        print(
            f"| {backend} | CPU per step (µs) | {ours * 1e6:.0f} | {floor * 1e6:.0f} "
            f"| {ours / floor:.2f}× |"
        )
        mem = _memory_in_subprocess(sessions, "agentloop", backend)
        bare = _memory_in_subprocess(sessions, "bare", backend)
        print(
            f"| {backend} | KiB per waiting session ({sessions:,}) | {mem:.1f} | {bare:.1f} "
            f"| {mem / bare:.2f}× |"
        )
    print(f"\n{runs} runs of 2 steps each; memory as RSS growth while all sessions wait.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
