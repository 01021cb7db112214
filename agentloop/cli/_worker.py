"""``agentloop worker``: serve an agent's durable runs (the ones ``agentloop serve --temporal``
starts) from this machine, until Ctrl-C. Needs the ``[temporal]`` extra only."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import anyio

from .. import Agent, UserError
from ._setup import load_object, open_store


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerOptions:
    agent: str
    temporal: str
    namespace: str
    task_queue: str | None
    store: str | None
    sticky_timeout: float


async def worker_command(options: WorkerOptions) -> None:
    """Serve until cancelled, saying on stderr once it polls."""
    try:
        from agentloop.temporal import TemporalAgent, connect, worker
    except ImportError as exc:
        raise UserError(
            f"agentloop worker needs the temporal extra: pip install "
            f"'agentloop-runtime[temporal]' ({exc})"
        ) from None
    found = load_object(options.agent, option="worker")
    if not isinstance(found, Agent | TemporalAgent):
        raise UserError(f"worker {options.agent!r} is a {type(found).__name__}, not an Agent")
    async with contextlib.AsyncExitStack() as stack:
        if options.store:
            if isinstance(found, TemporalAgent):
                raise UserError("--store: give the store to the Agent in the TemporalAgent")
            found = found.replace(store=await stack.enter_async_context(open_store(options.store)))
        durable = found if isinstance(found, TemporalAgent) else TemporalAgent(found)
        client = await connect(options.temporal, namespace=options.namespace)
        queue = options.task_queue or durable.task_queue
        await stack.enter_async_context(durable.agent)
        await stack.enter_async_context(
            worker(
                client,
                [durable],
                task_queue=queue,
                sticky_queue_schedule_to_start_timeout=options.sticky_timeout,
            )
        )
        sys.stderr.write(
            f"agentloop worker: serving {durable.name!r} on task queue {queue!r} at "
            f"{options.temporal} (namespace {options.namespace})\n"
        )
        sys.stderr.flush()
        await anyio.sleep_forever()
