"""A process that runs (or resumes) an agent on a SQLite session, for the crash test.

Usage: python tests/_crash_worker.py DB_PATH LOG_PATH run|resume
Each tool invocation appends its label to LOG_PATH. In ``run`` mode the tool of step 2 blocks
forever after logging, so that the test can kill the process mid-step.
"""

from __future__ import annotations

import sys

import anyio

from agentloop import Agent, ModelRequest, ToolContext, tool
from agentloop.models import ToolResultPart
from agentloop.sessions import SQLiteStore
from agentloop.testing import FunctionModel, Reply, call


async def main(db: str, log: str, mode: str) -> None:
    @tool
    async def work(ctx: ToolContext, label: int) -> str:
        """A test tool."""
        with open(log, "a") as f:  # noqa: ASYNC230 - a tiny append, read by another process
            f.write(f"{label}\n")
        ctx.state[f"done:{label}"] = True
        if mode == "run" and label == 2:
            await anyio.sleep_forever()
        return f"did {label}"

    def reply(request: ModelRequest) -> Reply | str:
        n = sum(isinstance(p, ToolResultPart) for m in request.messages for p in m.parts)
        if n < 4:
            return Reply(calls=[call("work", {"label": n}, id=f"w{n}")])
        return f"all {n} done"

    async with SQLiteStore(db) as store:
        agent = Agent(FunctionModel(reply), tools=[work], store=store, lease_ttl=1.0)
        if mode == "run":
            await agent.run("do four things", session="crash")
        else:
            result = await agent.resume(session="crash", wait_for_session=10.0)
            print(result.output)
            print(",".join(str(s.index) for s in result.steps))


if __name__ == "__main__":
    db, log, mode = sys.argv[1:4]
    anyio.run(main, db, log, mode)
