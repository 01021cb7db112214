"""Handoffs: one agent hands the conversation over to another, in the same run."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from agentloop import (
    Agent,
    Approve,
    Event,
    Handoff,
    ModelCallStarted,
    RunFinished,
    RunStarted,
    ToolContext,
    UserError,
    tool,
)
from agentloop.goals import GoalOptions, setup_goal, start_goal
from agentloop.models import Model
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import InMemoryStore
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    ProviderServer,
    Reply,
    ScriptedModel,
    call,
)


@tool
async def refund(ctx: ToolContext, order: str) -> str:
    """Refund an order."""
    return f"refunded {order} on branch {ctx.branch}"


async def _stream(agent: Agent[Any, Any], text: str, **kwargs: Any) -> list[Event]:
    async with agent.stream(text, **kwargs) as run:
        return [e async for e in run]


def _result(events: list[Event]) -> Any:
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last.result


async def test_a_handoff_continues_the_run_under_the_other_agent() -> None:
    """The transfer tool hands over: the other agent's instructions, tools and model answer,
    in the same run, and every event names the agent it was emitted under."""
    billing_model = ScriptedModel([Reply(calls=[call("refund", {"order": "A1"})]), "refund done"])
    billing = Agent(billing_model, name="billing", instructions="You do billing.", tools=[refund])
    triage_model = ScriptedModel([Reply(calls=[call("transfer_to_billing", {})])])
    triage = Agent(triage_model, name="triage", instructions="You triage.", handoffs=[billing])
    events = await _stream(triage, "refund my order")
    result = _result(events)
    assert result.output == "refund done" and result.agent == "billing"
    assert [s.actions[0].name for s in result.steps[:2]] == ["transfer_to_billing", "refund"]
    assert result.steps[1].actions[0].output == "refunded A1 on branch billing"
    assert [t.name for t in triage_model.requests[0].tools] == ["transfer_to_billing"]
    assert billing_model.requests[0].system == "You do billing."
    assert {t.name for t in billing_model.requests[0].tools} == {"refund"}
    started = [(e.agent, e.model) for e in events if isinstance(e, ModelCallStarted)]
    assert started == [("triage", "scripted"), ("billing", "scripted"), ("billing", "scripted")]
    assert isinstance(events[0], RunStarted) and events[0].agent == "triage"
    assert events[-1].agent == "billing" and events[-1].branch == "billing"
    assert len({e.run_id for e in events}) == 1


async def test_the_history_policy_decides_what_the_new_agent_sees() -> None:
    """history="full": the input, the transfer call and its result; "input": the input only."""
    cases: list[tuple[Literal["full", "input"], int]] = [("full", 3), ("input", 1)]
    for history, expected in cases:
        billing_model = ScriptedModel(["ok"])
        billing = Agent(billing_model, name="billing")
        triage = Agent(
            ScriptedModel([Reply(calls=[call("transfer_to_billing", {})])]),
            name="triage",
            handoffs=[Handoff(billing, history=history, description="For money matters.")],
        )
        assert (await triage.run("hi")).output == "ok"
        messages = [m for m in billing_model.requests[0].messages if m.role != "system"]
        assert len(messages) == expected, (history, messages)
        assert "hi" in str(messages[0])


async def test_a_session_remembers_the_active_agent_for_its_next_run() -> None:
    """A handoff in a session's first run; its second run starts under the agent handed over
    to, and a handoff back by name returns to the first."""
    store = InMemoryStore()
    billing_model = ScriptedModel(
        ["billing here", Reply(calls=[call("transfer_to_triage", {})])], name="billing-model"
    )
    triage_model = ScriptedModel(
        [Reply(calls=[call("transfer_to_billing", {})]), "triage again"], name="triage-model"
    )
    billing = Agent(billing_model, name="billing", handoffs=["triage"])
    triage = Agent(triage_model, name="triage", handoffs=[billing], store=store)
    first = await _stream(triage, "I want a refund", session="s1")
    assert _result(first).output == "billing here"
    second = await _stream(triage, "and another", session="s1")
    assert isinstance(second[0], RunStarted) and second[0].agent == "billing"
    assert next(e.model for e in second if isinstance(e, ModelCallStarted)) == "billing-model"
    # billing hands back to triage by name, reachable through the handoffs
    assert _result(second).output == "triage again" and _result(second).agent == "triage"
    session = await store.get("s1")
    assert session is not None and session.state["active_agent:triage"] == "triage"


async def test_goal_enforcement_applies_on_the_new_agents_branch() -> None:
    """The billing agent's goal (on branch billing) holds back its premature answer."""
    store = InMemoryStore()
    await start_goal(store, session_id="g", objective="refund A1", branch="billing")
    billing_model = ScriptedModel(
        [
            "premature answer",
            Reply(calls=[call("update_goal", {"status": "complete"})]),
            "refunded",
        ]
    )
    billing = setup_goal(Agent(billing_model, name="billing"), GoalOptions(max_retries=2))
    triage = Agent(
        ScriptedModel([Reply(calls=[call("transfer_to_billing", {})])]),
        name="triage",
        handoffs=[billing],
        store=store,
    )
    result = await triage.run("refund", session="g")
    assert result.output == "refunded"
    assert len(billing_model.requests) == 3


def test_handoffs_are_checked_when_the_agent_is_made() -> None:
    """Twice the same agent, or something that is not an agent, is a UserError."""
    billing = Agent(ScriptedModel([]), name="billing")
    with pytest.raises(UserError, match="twice"):
        Agent(ScriptedModel([]), handoffs=[billing, "billing"])
    with pytest.raises(UserError):
        Agent(ScriptedModel([]), handoffs=[42])  # type: ignore[list-item]
    with pytest.raises(UserError):
        Handoff(billing, history="some")  # type: ignore[arg-type]


async def test_a_handoff_between_real_drivers_over_a_socket() -> None:
    """Over a real socket: the first driver's model calls the transfer tool, and the second
    driver's model answers in the same run."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("transfer_to_billing", {})]),
        "billing here",
    ]
    with ProviderServer(EmulatedProvider(script=script)) as server:
        models: list[Model] = [
            OpenAIChatModel(name, base_url=server.url + "/v1", api_key="k")
            for name in ("triage-model", "billing-model")
        ]
        billing = Agent(models[1], name="billing")
        triage = Agent(models[0], name="triage", handoffs=[billing])
        try:
            events = await _stream(triage, "refund please")
        finally:
            for model in models:
                await model.aclose()
    started = [(e.agent, e.model) for e in events if isinstance(e, ModelCallStarted)]
    assert started == [("triage", "triage-model"), ("billing", "billing-model")]
    assert _result(events).output == "billing here"


async def test_a_run_that_waits_under_the_agent_handed_over_to_resumes_under_it() -> None:
    """billing's refund needs approval: the run waits under billing, and the decision resumes
    it there (billing's tool runs, billing answers)."""
    ran: list[str] = []

    @tool(requires_approval=True)
    async def big_refund(order: str) -> str:
        """Refund a large order."""
        ran.append(order)
        return "refunded"

    store = InMemoryStore()
    billing_model = ScriptedModel([Reply(calls=[call("big_refund", {"order": "B2"})]), "done"])
    billing = Agent(billing_model, name="billing", tools=[big_refund])
    triage = Agent(
        ScriptedModel([Reply(calls=[call("transfer_to_billing", {})])]),
        name="triage",
        handoffs=[billing],
        store=store,
    )
    waiting = await triage.run("refund B2", session="w")
    assert waiting.status == "waiting" and ran == []
    decisions = {p.id: Approve() for p in waiting.pending}
    result = await triage.resume(session="w", decisions=decisions)
    assert ran == ["B2"] and result.output == "done" and result.agent == "billing"


@pytest.mark.parametrize("history", ["input", "full"])
async def test_a_session_run_that_waits_after_a_handoff_resumes_with_the_history_it_was_given(
    history: Literal["input", "full"],
) -> None:
    """``Handoff(history="input")``: billing sees the input and its own steps, not triage's;
    a session run that waits under billing and resumes shows billing the same history as
    before it waited (before, the resume replayed every step of the run, triage's too)."""

    @tool(requires_approval=True)
    async def big_refund(order: str) -> str:
        """Refund a large order."""
        return "refunded"

    billing_model = ScriptedModel([Reply(calls=[call("big_refund", {"order": "B2"})]), "done"])
    billing = Agent(billing_model, name="billing", tools=[big_refund])
    triage = Agent(
        ScriptedModel([Reply(calls=[call("transfer_to_billing", {})])]),
        name="triage",
        handoffs=[Handoff(billing, history=history)],
        store=InMemoryStore(),
    )
    waiting = await triage.run("refund B2", session="w")
    decisions = {p.id: Approve() for p in waiting.pending}
    result = await triage.resume(session="w", decisions=decisions)
    assert result.output == "done" and result.agent == "billing"
    before, after = (r.messages for r in billing_model.requests)
    sees_triage = any("transfer_to_billing" in repr(m) for m in after)
    assert sees_triage == (history == "full")
    assert not any("transfer_to_billing" in repr(m) for m in before) or history == "full"
