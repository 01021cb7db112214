"""A process that runs (or resumes) an agent whose model mints a fresh call id on every call,
as OpenAI and Anthropic do, for the idempotency-key crash test.

Usage: python tests/_idempotent_worker.py sqlite|postgres TARGET LOG run|resume
The ``charge`` tool has side effects: it logs each call's idempotency key to LOG, acts (appends
the key to LOG.ledger) only for a key it has not seen, and in ``run`` mode then blocks forever
so that the test can kill the process before the step's results are committed.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import anyio

from agentloop import Agent, ModelRequest, ToolContext, tool
from agentloop.models import ToolResultPart
from agentloop.sessions import PostgresStore, SessionStore, SQLiteStore
from agentloop.testing import FunctionModel, Reply, call


async def main(kind: str, target: str, log: str, mode: str) -> None:
    ledger = Path(log + ".ledger")

    @tool(side_effects=True)
    async def charge(ctx: ToolContext, amount: int) -> str:
        """Charge the card."""
        with open(log, "a") as f:  # noqa: ASYNC230 - a tiny append, read by another process
            f.write(f"call {ctx.idempotency_key}\n")
        seen = ledger.read_text().split() if ledger.exists() else []  # noqa: ASYNC240
        if ctx.idempotency_key not in seen:
            with open(ledger, "a") as f:  # noqa: ASYNC230
                f.write(f"{ctx.idempotency_key}\n")
        if mode == "run":
            await anyio.sleep_forever()
        return f"charged {amount}"

    def reply(request: ModelRequest) -> Reply | str:
        if any(isinstance(p, ToolResultPart) for m in request.messages for p in m.parts):
            return "paid"
        return Reply(calls=[call("charge", {"amount": 5}, id=f"call_{uuid.uuid4().hex}")])

    store: SessionStore = SQLiteStore(target) if kind == "sqlite" else PostgresStore(target)
    async with store:
        agent = Agent(FunctionModel(reply), tools=[charge], store=store, lease_ttl=1.0)
        if mode == "run":
            await agent.run("pay", session="crash")
        else:
            result = await agent.resume(session="crash", wait_for_session=10.0)
            print(result.output)


if __name__ == "__main__":
    kind, target, log, mode = sys.argv[1:5]
    anyio.run(main, kind, target, log, mode)
