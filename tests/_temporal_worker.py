"""A worker process for the crash test of durable runs (``tests/test_temporal_crash.py``).

Usage: python tests/_temporal_worker.py TARGET TASK_QUEUE PROVIDER_URL LOG_PATH
Serves ``crash_agent`` until killed. Tools and each opened model stream append a line to
LOG_PATH with this process's pid, so the test knows whom to kill. ``guarded`` needs approval:
a run that calls it waits (the test of a worker killed while a run waits).
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio

from agentloop import Agent, ModelRequest, RetryPolicy, ToolContext, tool
from agentloop.models import Model
from agentloop.models.openai import OpenAIChatModel


def _log(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(f"{line} {os.getpid()} {time.time():.2f}\n")


class LoggedModel(Model):
    """The emulated provider's model, logging each stream it opens."""

    provider = "openai"

    def __init__(self, url: str, log: str) -> None:
        self._inner = OpenAIChatModel("emulated", base_url=url + "/v1", api_key="k")
        self._log = log

    @property
    def name(self) -> str:
        return self._inner.name

    def stream(self, request: ModelRequest) -> AbstractAsyncContextManager[Any]:
        _log(self._log, "stream")
        return self._inner.stream(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def crash_agent(url: str, log: str) -> Any:
    from agentloop.temporal import ActivityOptions, TemporalAgent

    @tool
    async def quick(ctx: ToolContext, n: int) -> int:
        """Return n at once.

        Args:
            n: the number
        """
        _log(log, f"start quick {ctx.idempotency_key}")
        _log(log, f"done quick {ctx.idempotency_key}")
        return n

    @tool
    async def slow(ctx: ToolContext, n: int) -> int:
        """Return n after a while.

        Args:
            n: the number
        """
        _log(log, f"start slow {ctx.idempotency_key}")
        await anyio.sleep(1.5)  # the test kills it as soon as it starts, well within this
        _log(log, f"done slow {ctx.idempotency_key}")
        return n * 10

    @tool(requires_approval=True)
    async def guarded(ctx: ToolContext, n: int) -> int:
        """Return n, once a person approves.

        Args:
            n: the number
        """
        _log(log, f"run guarded {ctx.idempotency_key}")
        return n

    agent = Agent(
        LoggedModel(url, log),
        name="crashy",
        tools=[quick, slow, guarded],
        retry=RetryPolicy(initial_wait=0.01, jitter=0.0),
    )
    fast = ActivityOptions(heartbeat=2.0)
    return TemporalAgent(
        agent,
        task_queue=sys.argv[2] if len(sys.argv) > 2 else "crash",
        model_activity=fast,
        tool_activity=fast,
        workflow_task_timeout=4.0,
    )


async def main(target: str, queue: str, url: str, log: str) -> None:
    from agentloop.temporal import connect, worker

    client = await connect(target)
    durable = crash_agent(url, log)
    durable.task_queue = queue
    async with worker(client, [durable], sticky_queue_schedule_to_start_timeout=1.0):
        _log(log, "ready")
        await anyio.sleep_forever()


if __name__ == "__main__":
    target, queue, url, log = sys.argv[1:5]
    anyio.run(main, target, queue, url, log)
