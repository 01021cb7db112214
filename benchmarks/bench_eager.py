"""Eager dispatch, in real time: tools that start while the reply still streams.

A reply streams for 2.0 s. In ReAct mode its three action objects close at 0.4, 0.7 and 1.0 s;
in native mode two calls are sealed at 0.4 and 1.0 s. Each tool takes 1.0 s. With eager dispatch
the step ends when the stream does (about 2.0 s); with ``eager=False`` the tools wait for the
whole reply (about 3.0 s). ``--smoke`` scales every duration by 0.2.

Run: ``python -m benchmarks.bench_eager``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from agentloop import Agent, StepFinished, Tool, tool
from agentloop.testing import Reply, ScriptedModel, call


def _tools(scale: float) -> tuple[Tool, Tool]:
    @tool(name="work")
    async def eager_work(n: int) -> int:
        """Work for a while."""
        await anyio.sleep(1.0 * scale)
        return n

    @tool(name="work", eager=False)
    async def late_work(n: int) -> int:
        """Work for a while, after the reply is accepted."""
        await anyio.sleep(1.0 * scale)
        return n

    return eager_work, late_work


def _reply(mode: str, scale: float) -> Reply:
    if mode == "native":
        return Reply(
            timeline=[
                (0.4 * scale, call("work", {"n": 1}, id="a")),
                (1.0 * scale, call("work", {"n": 2}, id="b")),
                (2.0 * scale, ""),
            ]
        )
    obj = '{{"tag": "{t}", "name": "work", "path": "work", "input": {{"n": {n}}}}}'
    return Reply(
        timeline=[
            (0.0, "Thought: three things at once\nActions: ["),
            (0.4 * scale, obj.format(t="a", n=1)),
            (0.7 * scale, ", " + obj.format(t="b", n=2)),
            (1.0 * scale, ", " + obj.format(t="c", n=3) + "]"),
            (2.0 * scale, "\n"),
        ]
    )


async def _step_seconds(mode: str, eager: bool, scale: float) -> float:
    eager_tool, late_tool = _tools(scale)
    model = ScriptedModel([_reply(mode, scale), "done"], native_tools=mode == "native")
    agent = Agent(model, tools=[eager_tool if eager else late_tool], tool_mode=mode)  # type: ignore[arg-type]
    start = anyio.current_time()
    async with agent.stream("go") as run:
        async for event in run:
            if isinstance(event, StepFinished):
                return anyio.current_time() - start
    raise AssertionError("no step finished")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    scale = 0.2 if args.smoke else 1.0
    print("| mode | stream | eager step | eager=False step | gain |")
    print("|---|---|---|---|---|")
    for mode in ("react", "native"):
        for backend in ("asyncio", "trio"):
            eager = anyio.run(_step_seconds, mode, True, scale, backend=backend)
            late = anyio.run(_step_seconds, mode, False, scale, backend=backend)
            print(
                f"| {mode} ({backend}) | {2.0 * scale:.1f}s | {eager:.2f}s | {late:.2f}s "
                f"| {late - eager:.2f}s ({late / eager:.2f}×) |"
            )
    print("\nTools take 1.0 s each (scaled); the ideal is a step equal to the stream.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
