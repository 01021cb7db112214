"""Human in the loop: tools that need approval, an external tool, and a run that waits.

1. A refund tool needs approval only above 100 (a predicate on the call); a lookup runs at once.
   The run stops waiting (``RunWaiting``, ``result.status == "waiting"``) with the refund in
   ``result.pending``, holding no task and no session lease. A day later (here: the next lines)
   ``agent.resume(session=..., decisions={call_id: Approve()})`` runs it, and the model is
   called again. The session keeps the pending call: a new process could resume it.
2. Without a session, ``result.resume_state`` (JSON) is what the caller keeps; an external tool
   (``Tool.external``: a schema, no function) is answered with ``ExternalResult``.
3. A live ``approver`` decides at once, as a UI would; ``agentloop chat`` asks in the terminal.

Runs offline on a scripted model. Run: ``python examples/approval.py``
"""

from __future__ import annotations

import json

import anyio

from agentloop import (
    Action,
    ActionAwaiting,
    ActionDecided,
    Agent,
    Approve,
    Deny,
    ExternalResult,
    PendingCall,
    RunContext,
    Tool,
    tool,
)
from agentloop.sessions import InMemoryStore
from agentloop.testing import Reply, ScriptedModel, call


def over_100(action: Action, ctx: RunContext) -> bool:
    """Refunds above 100 need a person's approval."""
    return bool(action.input.get("amount", 0) > 100)


@tool(requires_approval=over_100)
async def refund(order: str, amount: int) -> str:
    """Refund an order.

    Args:
        order: the order's id
        amount: how much to refund
    """
    return f"refunded {amount} on {order}"


@tool
async def find_order(order: str) -> dict[str, object]:
    """Look an order up.

    Args:
        order: the order's id
    """
    return {"order": order, "paid": 250}


location = Tool.external(
    "user_location",
    "The user's location, from their phone.",
    {"type": "object", "properties": {"precision": {"enum": ["city", "street"]}}},
)


async def waits_in_a_session() -> None:
    print("1. a run that waits, in a session")
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("find_order", {"order": "A-7"}, id="find"),
                    call("refund", {"order": "A-7", "amount": 250}, id="big"),
                    call("refund", {"order": "A-7", "amount": 20}, id="small"),
                ]
            ),
            "Refunded 270 on order A-7.",
        ]
    )
    store = InMemoryStore()
    async with Agent(model, tools=[find_order, refund], store=store) as agent:
        async with agent.stream("Refund order A-7", session="support-1") as run:
            async for event in run:
                if isinstance(event, ActionAwaiting):
                    print(f"   awaits a decision: {event.call.name} {event.call.input}")
        waiting = run.result
        print(f"   status: {waiting.status}; pending: {[p.id for p in waiting.pending]}")
        # ... later, perhaps in another process, once a person said yes:
        done = await agent.resume(session="support-1", decisions={"big": Approve()})
        print(f"   resumed: {done.status}: {done.output}")
        print(f"   results: {[a.output for a in done.steps[0].actions]}")


async def waits_without_a_session() -> None:
    print("2. no session: the caller keeps result.resume_state; an external tool")
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("user_location", {"precision": "city"}, id="where"),
                    call("refund", {"order": "B-1", "amount": 500}, id="r"),
                ]
            ),
            "You are in Lyon; the refund was not made.",
        ]
    )
    async with Agent(model, tools=[refund, location]) as agent:
        waiting = await agent.run("Where am I, and refund B-1")
        saved = json.dumps(waiting.resume_state)  # a database row, a cookie, a queue message
        print(f"   pending: {[(p.id, p.kind) for p in waiting.pending]}; state {len(saved)} bytes")
        done = await agent.resume(
            resume_state=json.loads(saved),
            decisions={
                "where": ExternalResult(output={"city": "Lyon"}),
                "r": Deny("refunds above 100 need a manager"),
            },
        )
        print(f"   resumed: {done.output}")
        print(f"   results: {[a.output or a.error for a in done.steps[0].actions]}")


async def live_approver() -> None:
    print("3. a live approver")

    async def approver(pending: PendingCall, ctx: RunContext) -> Approve | Deny:
        print(f"   asked about {pending.name} {pending.input}")
        return Approve() if pending.input["amount"] <= 300 else Deny("over the limit")

    model = ScriptedModel(
        [Reply(calls=[call("refund", {"order": "C-3", "amount": 120}, id="r")]), "Done."]
    )
    async with Agent(model, tools=[refund], approver=approver, approval_timeout=60) as agent:
        async with agent.stream("Refund C-3") as run:
            async for event in run:
                if isinstance(event, ActionDecided):
                    print(f"   decided: {event.decision} ({event.by})")
        print(f"   {run.result.status}: {run.result.output}")


async def main() -> None:
    await waits_in_a_session()
    await waits_without_a_session()
    await live_approver()


if __name__ == "__main__":
    anyio.run(main)
