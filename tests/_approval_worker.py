"""A process that runs an agent until it waits for an approval, then dies (SIGKILL: no clean
shutdown), or resumes the waiting run with an approval, for the crash-while-waiting test.

Usage: python tests/_approval_worker.py sqlite|postgres TARGET LOG wait|resume
The ``transfer`` tool needs approval and appends each call to LOG.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from agentloop import Agent, Approve, ToolContext, tool
from agentloop.sessions import PostgresStore, SessionStore, SQLiteStore
from agentloop.testing import Reply, ScriptedModel, call


async def main(kind: str, target: str, log: str, mode: str) -> None:
    @tool(requires_approval=True)
    async def transfer(ctx: ToolContext, amount: int) -> str:
        """Move money."""
        with open(log, "a") as f:  # noqa: ASYNC230 - a tiny append, read by the test
            f.write(f"{ctx.idempotency_key}\n")
        return f"sent {amount}"

    store: SessionStore = SQLiteStore(target) if kind == "sqlite" else PostgresStore(target)
    async with store:
        if mode == "wait":
            model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 5}, id="t1")])])
            agent = Agent(model, tools=[transfer], store=store, lease_ttl=60.0)
            result = await agent.run("pay", session="s")
            print(result.status, *(p.id for p in result.pending), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        model = ScriptedModel(["paid"])
        agent = Agent(model, tools=[transfer], store=store, lease_ttl=60.0)
        waiting = await agent.unfinished_run(session="s")
        assert waiting is not None
        result = await agent.resume(session="s", decisions={"t1": Approve()})
        print(result.status, result.output, flush=True)


if __name__ == "__main__":
    kind, target, log, mode = sys.argv[1:5]
    anyio.run(main, kind, target, log, mode)
