"""Handoffs: a triage agent hands the conversation over to a billing agent, in the same run.

The model sees ``transfer_to_billing`` as a tool. Calling it ends triage's turn; the run goes
on under billing's instructions, tools and model (events name the agent they come from), on
the branch ``billing``. The session remembers billing as its active agent, so the next run in
it starts there; billing hands back to triage by name (agents are immutable: a handoff back
names the agent the run reaches).

Runs offline on scripted models. Run: ``python examples/handoff.py``
"""

from __future__ import annotations

import anyio

from agentloop import Agent, Handoff, ModelCallStarted, RunFinished, tool
from agentloop.sessions import InMemoryStore
from agentloop.testing import Reply, ScriptedModel, call


@tool
async def refund(order: str) -> str:
    """Refund an order.

    Args:
        order: the order's id
    """
    return f"order {order} refunded"


async def main() -> None:
    billing = Agent(
        ScriptedModel(
            [
                Reply(calls=[call("refund", {"order": "A-17"})]),
                "Your order A-17 is refunded.",
                Reply(calls=[call("transfer_to_triage", {})]),
            ],
            name="billing-model",
        ),
        name="billing",
        instructions="You handle refunds.",
        tools=[refund],
        handoffs=[Handoff("triage", description="For anything that is not billing.")],
    )
    triage = Agent(
        ScriptedModel(
            [Reply(calls=[call("transfer_to_billing", {})]), "Happy to help with shipping."],
            name="triage-model",
        ),
        name="triage",
        instructions="You route questions.",
        handoffs=[Handoff(billing, description="For refunds and invoices.")],
        store=InMemoryStore(),
    )
    for question in ("Please refund order A-17.", "And where is my parcel?"):
        print("user:", question)
        async with triage.stream(question, session="customer-1") as run:
            async for event in run:
                if isinstance(event, ModelCallStarted):
                    print(f"  [{event.agent}] asks {event.model}")
                elif isinstance(event, RunFinished):
                    print(f"  [{event.agent}] answers: {event.result.output}")


if __name__ == "__main__":
    anyio.run(main)
