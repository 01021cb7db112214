"""Human in the loop: tools that need approval, external tools, and runs that wait for them.

A waiting run ends its invocation with one ``RunWaiting``; ``resume`` with decisions continues
it from the step in flight, running only its undecided calls.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anyio
import pytest

from agentloop import (
    Action,
    ActionAwaiting,
    ActionDecided,
    Agent,
    Approve,
    DecisionsPending,
    Deny,
    Edit,
    Event,
    ExternalResult,
    PendingCall,
    RunContext,
    RunFinished,
    RunWaiting,
    Tool,
    ToolContext,
    UserError,
    event_from_json,
    tool,
)
from agentloop.goals import GoalOptions, setup_goal
from agentloop.testing import Reply, ScriptedModel, call

ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    ran.clear()


@tool(requires_approval=True)
async def transfer(ctx: ToolContext, amount: int, to: str) -> str:
    """Move money.

    Args:
        amount: How much.
        to: To whom.
    """
    ran[f"transfer:{amount}:{to}"] += 1
    ran[f"key:{ctx.idempotency_key}"] += 1
    return f"sent {amount} to {to}"


@tool
async def lookup(name: str) -> str:
    """Look up an account.

    Args:
        name: Whose.
    """
    ran[f"lookup:{name}"] += 1
    return f"{name} exists"


def _big(action: Action, ctx: RunContext) -> bool:
    return bool(action.input["amount"] > 100)


async def _big_async(action: Action, ctx: RunContext) -> bool:
    await anyio.lowlevel.checkpoint()
    return bool(action.input["amount"] > 100)


browser = Tool.external(
    "open_page",
    "Open a page in the user's browser and return its title.",
    {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
)


def _two_calls() -> Reply:
    return Reply(
        calls=[
            call("lookup", {"name": "bob"}, id="look"),
            call("transfer", {"amount": 5, "to": "bob"}, id="pay"),
        ]
    )


async def _stream(agent: Agent[Any, Any], **resume: Any) -> tuple[list[Event], Any]:
    if resume:
        stream = agent.stream_resume(**resume)
    else:
        stream = agent.stream("pay bob")
    async with stream as run:
        events = [e async for e in run]
    return events, run.result


# -- waiting --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["native", "react"])
async def test_a_call_that_needs_approval_never_starts_and_the_run_waits(mode: str) -> None:
    """The step's other action runs; the approval call never starts (streamed slowly, so an
    eager start would show); the one terminal event is RunWaiting, with the call pending."""
    model = ScriptedModel([_two_calls()], chunk_size=3, native_tools=mode == "native")
    agent = Agent(model, tools=[lookup, transfer], tool_mode=mode)  # type: ignore[arg-type]
    events, result = await _stream(agent)
    assert ran == Counter({"lookup:bob": 1})
    started = [e.name for e in events if e.type == "action_started"]
    assert started == ["lookup"]
    terminal = [e for e in events if e.type in ("run_finished", "run_failed", "run_waiting")]
    assert [type(e) for e in terminal] == [RunWaiting]
    awaiting = [e for e in events if isinstance(e, ActionAwaiting)]
    assert [a.call.id for a in awaiting] == ["pay"]
    assert result.status == "waiting" and not result.ok and result.error is None
    (pending,) = result.pending
    assert pending == PendingCall(
        id="pay",
        tag="pay",
        name="transfer",
        input={"amount": 5, "to": "bob"},
        kind="approval",
        branch="agent",
    )
    result.raise_for_error()  # waiting is no error
    with pytest.raises(DecisionsPending, match="'pay'"):
        result.unwrap()
    assert result.steps == ()  # the step is still in flight


@pytest.mark.parametrize("rule", [_big, _big_async], ids=["sync", "async"])
async def test_a_predicate_decides_which_calls_need_approval(rule: Any) -> None:
    """Only the call over 100 waits; the small one runs."""
    pay = tool(name="transfer", requires_approval=rule)(transfer.activities[None].fn)
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("transfer", {"amount": 5, "to": "a"}, id="small"),
                    call("transfer", {"amount": 500, "to": "b"}, id="big"),
                ]
            )
        ]
    )
    result = await Agent(model, tools=[pay]).run("pay")
    assert [p.id for p in result.pending] == ["big"]
    assert ran["transfer:5:a"] == 1 and ran["transfer:500:b"] == 0


def test_requires_approval_must_be_a_bool_or_a_predicate() -> None:
    with pytest.raises(UserError, match="requires_approval"):
        tool(requires_approval="yes")(lookup.activities[None].fn)  # type: ignore[call-overload]


# -- decisions ------------------------------------------------------------------------------


async def test_decisions_continue_the_run_from_the_resume_state() -> None:
    """Approve and Edit run, Deny becomes an error result with the reason, then the model is
    called again; the state went through JSON, and the action that ran is not run again."""
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("lookup", {"name": "bob"}, id="look"),
                    call("transfer", {"amount": 5, "to": "bob"}, id="a"),
                    call("transfer", {"amount": 6, "to": "eve"}, id="b"),
                    call("transfer", {"amount": 7, "to": "bob"}, id="c"),
                ]
            ),
            "done",
        ]
    )
    agent = Agent(model, tools=[lookup, transfer])
    waiting = await agent.run("pay")
    assert [p.id for p in waiting.pending] == ["a", "b", "c"]
    state = json.loads(json.dumps(waiting.resume_state))
    decisions = {
        "a": Approve(),
        "b": Deny("eve is not a payee"),
        "c": Edit({"amount": 70, "to": "bob"}),
    }
    events, result = await _stream(agent, resume_state=state, decisions=decisions)
    assert result.status == "finished" and result.output == "done"
    (step, _) = result.steps
    assert [a.tag for a in step.actions] == ["look", "a", "b", "c"]
    look, a, b, c = step.actions
    assert look.output == "bob exists" and a.output == "sent 5 to bob"
    assert b.error_kind == "denied" and b.error is not None and "eve is not a payee" in b.error
    assert c.output == "sent 70 to bob" and c.input == {"amount": 70, "to": "bob"}
    assert ran == Counter(
        {"lookup:bob": 1, "transfer:5:bob": 1, "transfer:70:bob": 1, **_keys(ran)}
    )
    decided = [e for e in events if isinstance(e, ActionDecided)]
    assert [(d.call.id, d.decision, d.by) for d in decided] == [
        ("a", "approve", "resume"),
        ("b", "deny", "resume"),
        ("c", "edit", "resume"),
    ]
    assert decided[1].reason == "eve is not a payee" and decided[2].arguments["amount"] == 70
    results = model.requests[1].messages[-1].parts
    assert "eve is not a payee" in json.dumps([str(p) for p in results])
    assert [e.type for e in events][-1] == "run_finished"


def _keys(counts: Counter[str]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if k.startswith("key:")}


async def test_unknown_missing_and_invalid_decisions_are_user_errors_and_lose_nothing() -> None:
    """A partial resume, a decision for an unknown call, an edit that fails the schema and a
    decision of the wrong kind each raise before anything runs; then the right ones work."""
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("transfer", {"amount": 5, "to": "bob"}, id="a"),
                    call("open_page", {"url": "https://x.test"}, id="b"),
                ]
            ),
            "done",
        ]
    )
    agent = Agent(model, tools=[transfer, browser])
    waiting = await agent.run("pay")
    state = waiting.resume_state
    with pytest.raises(UserError, match="waits on decisions for 'b'"):
        await agent.resume(resume_state=state, decisions={"a": Approve()})
    with pytest.raises(UserError, match="unknown calls: 'zzz'"):
        await agent.resume(
            resume_state=state,
            decisions={"a": Approve(), "b": ExternalResult(output="x"), "zzz": Approve()},
        )
    with pytest.raises(UserError, match="edit of 'a' is not valid: invalid arguments: amount"):
        await agent.resume(
            resume_state=state,
            decisions={"a": Edit({"amount": "lots", "to": "bob"}), "b": ExternalResult()},
        )
    with pytest.raises(UserError, match="ExternalResult"):
        await agent.resume(resume_state=state, decisions={"a": Approve(), "b": Approve()})
    with pytest.raises(UserError, match="not a result"):
        await agent.resume(
            resume_state=state, decisions={"a": ExternalResult(), "b": ExternalResult()}
        )
    assert not ran
    result = await agent.resume(
        resume_state=state,
        decisions={"a": Approve(), "b": ExternalResult(output="Example Domain")},
    )
    assert result.output == "done"
    pay, page = result.steps[0].actions
    assert pay.output == "sent 5 to bob" and page.output == "Example Domain"
    assert ran["transfer:5:bob"] == 1


async def test_an_external_tool_waits_for_the_callers_result_or_error() -> None:
    model = ScriptedModel(
        [
            Reply(calls=[call("open_page", {"url": "https://x.test"}, id="p")]),
            Reply(calls=[call("open_page", {"url": "https://y.test"}, id="q")]),
            "done",
        ]
    )
    agent = Agent(model, tools=[browser])
    first = await agent.run("open")
    assert [(p.id, p.kind) for p in first.pending] == [("p", "external")]
    second = await agent.resume(
        resume_state=first.resume_state, decisions={"p": ExternalResult(output={"title": "X"})}
    )
    assert [p.id for p in second.pending] == ["q"]
    assert second.steps[0].actions[0].output == {"title": "X"}
    third = await agent.resume(
        resume_state=second.resume_state, decisions={"q": ExternalResult(error="no network")}
    )
    assert third.output == "done"
    failed = third.steps[1].actions[0]
    assert failed.error == "no network" and failed.error_kind == "tool_error"


async def test_a_resume_state_is_for_its_agent_and_grows_with_the_run_only() -> None:
    instructions = "You are careful. " * 2_000  # the prompt is not part of the state
    model = ScriptedModel([_two_calls()])
    agent = Agent(model, tools=[lookup, transfer], instructions=instructions)
    waiting = await agent.run("pay bob")
    assert waiting.resume_state is not None
    text = json.dumps(waiting.resume_state)
    assert len(text) < 4_000
    with pytest.raises(UserError, match="agent 'agent', not of 'other'"):
        await agent.replace(name="other").resume(resume_state=waiting.resume_state)
    with pytest.raises(UserError, match="resume_state must be"):
        await agent.resume(resume_state={"version": 99})
    with pytest.raises(UserError, match="resume needs session"):
        await agent.resume(decisions={"pay": Approve()})


# -- live approval --------------------------------------------------------------------------


async def test_a_live_approver_decides_while_the_run_goes_on() -> None:
    """Approve runs, Deny is an error result, Edit runs edited, None leaves the call pending."""
    answers = {
        "a": Approve(),
        "b": Deny("not today"),
        "c": Edit({"amount": 9, "to": "bob"}),
        "d": None,
    }
    asked: list[str] = []

    async def approver(pending: PendingCall, ctx: RunContext) -> Any:
        asked.append(pending.id)
        assert ctx.run_id
        return answers[pending.id]

    calls = [call("transfer", {"amount": i, "to": "bob"}, id=k) for i, k in enumerate("abcd")]
    model = ScriptedModel([Reply(calls=calls), "done"])
    agent = Agent(model, tools=[transfer], approver=approver)
    events, waiting = await _stream(agent)
    assert asked == ["a", "b", "c", "d"]
    assert [p.id for p in waiting.pending] == ["d"]
    assert ran["transfer:0:bob"] == 1 and ran["transfer:9:bob"] == 1 and ran["transfer:1:bob"] == 0
    decided = [(e.call.id, e.decision, e.by) for e in events if isinstance(e, ActionDecided)]
    assert decided == [
        ("a", "approve", "approver"),
        ("b", "deny", "approver"),
        ("c", "edit", "approver"),
    ]
    result = await agent.resume(resume_state=waiting.resume_state, decisions={"d": Approve()})
    assert result.output == "done"
    assert [a.output or a.error for a in result.steps[0].actions] == [
        "sent 0 to bob",
        "denied: not today",
        "sent 9 to bob",
        "sent 3 to bob",
    ]
    assert asked == ["a", "b", "c", "d"]  # the resume's decision is not asked again


async def test_an_approver_that_does_not_answer_in_time_denies_with_the_reason(
    timescale: float,
) -> None:
    async def slow(pending: PendingCall, ctx: RunContext) -> Approve:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    model = ScriptedModel([_two_calls(), "ok"])
    agent = Agent(model, tools=[lookup, transfer], approver=slow, approval_timeout=0.05)
    events, result = await _stream(agent)
    assert result.output == "ok"
    denied = result.steps[0].actions[1]
    assert denied.error_kind == "denied"
    assert denied.error == "denied: no decision within 0.05s (the approval timed out)"
    (decided,) = [e for e in events if isinstance(e, ActionDecided)]
    assert decided.by == "timeout" and decided.reason is not None
    assert ran["transfer:5:bob"] == 0


# -- sub-agents -----------------------------------------------------------------------------


async def test_approval_inside_a_sub_agent_makes_the_parent_wait_and_resumes_through() -> None:
    child_model = ScriptedModel(
        [Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="t")]), "paid"]
    )
    child = Agent(child_model, name="payer", tools=[transfer])
    parent_model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("payer", {"task": "pay bob"}, id="d"),
                    call("lookup", {"name": "bob"}, id="l"),
                ]
            ),
            "all done",
        ]
    )
    parent = Agent(parent_model, name="lead", tools=[child.as_tool(), lookup])
    events, waiting = await _stream(parent)
    assert [(p.id, p.branch) for p in waiting.pending] == [("d/t", "lead.payer")]
    (awaiting,) = [e for e in events if isinstance(e, ActionAwaiting)]
    assert awaiting.call.id == "d/t" and awaiting.branch == "lead.payer"
    terminal = [e.type for e in events if e.type in ("run_finished", "run_waiting")]
    assert terminal == ["run_waiting", "run_waiting"]  # the child's, then the parent's
    assert ran == Counter({"lookup:bob": 1})
    state = json.loads(json.dumps(waiting.resume_state))
    with pytest.raises(UserError, match="'d/t'"):
        await parent.resume(resume_state=state, decisions={})
    with pytest.raises(UserError, match="edit of 'd/t' is not valid: invalid arguments: to"):
        await parent.resume(resume_state=state, decisions={"d/t": Edit({"amount": 5})})
    assert ran == Counter({"lookup:bob": 1})  # nothing ran, nothing lost
    result = await parent.resume(resume_state=state, decisions={"d/t": Approve()})
    assert result.output == "all done"
    delegated, looked = result.steps[0].actions
    assert delegated.output == "paid" and looked.output == "bob exists"
    assert delegated.subrun is not None and delegated.subrun.branch == "lead.payer"
    assert [s.index for s in delegated.subrun.steps] == [0, 1]
    assert ran["transfer:5:bob"] == 1 and ran["lookup:bob"] == 1
    # The sub-run resumed is the same run: the same id, so the same idempotency keys.
    assert waiting.resume_state is not None
    (key,) = [k for k in ran if k.startswith("key:")]
    assert delegated.subrun.run_id in key


async def test_a_sub_agent_asks_its_parents_approver() -> None:
    seen: list[str] = []

    async def approver(pending: PendingCall, ctx: RunContext) -> Approve:
        seen.append(f"{pending.id}@{ctx.branch}")
        return Approve()

    child = Agent(
        ScriptedModel([Reply(calls=[call("transfer", {"amount": 1, "to": "x"}, id="t")]), "ok"]),
        name="payer",
        tools=[transfer],
    )
    parent = Agent(
        ScriptedModel([Reply(calls=[call("payer", {"task": "pay"}, id="d")]), "done"]),
        name="lead",
        tools=[child.as_tool()],
        approver=approver,
    )
    result = await parent.run("go")
    assert result.output == "done" and seen == ["d/t@lead.payer"]


# -- goals and events -----------------------------------------------------------------------


async def test_a_waiting_run_is_not_a_premature_final_answer_for_goal_enforcement() -> None:
    blocked: list[Any] = []
    agent = setup_goal(
        Agent(
            ScriptedModel(
                [
                    Reply(calls=[call("create_goal", {"objective": "pay bob"})]),
                    Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="t")]),
                    Reply(calls=[call("update_goal", {"status": "complete"})]),
                    "paid",
                ]
            ),
            name="worker",
            tools=[transfer],
        ),
        GoalOptions(on_retry=blocked.append),
    )
    waiting = await agent.run("pay bob")
    assert waiting.status == "waiting" and not blocked
    result = await agent.resume(resume_state=waiting.resume_state, decisions={"t": Approve()})
    assert result.output == "paid" and not blocked


async def test_the_waiting_events_round_trip_through_json() -> None:
    model = ScriptedModel([_two_calls()])
    events, _ = await _stream(Agent(model, tools=[lookup, transfer]))
    for event in events:
        if isinstance(event, ActionAwaiting | RunWaiting):
            assert event_from_json(event.to_json()) == event
    (waiting,) = [e for e in events if isinstance(e, RunWaiting)]
    assert waiting.result.pending[0].id == "pay"
    assert not any(isinstance(e, RunFinished) for e in events)


async def test_a_running_calls_question_without_an_approver_waits_and_runs_again() -> None:
    """``ToolContext.ask_approver`` with no live approver (or one that leaves it undecided):
    the tool hears ``None``, its result is set aside, and the run waits on a pending call of
    kind ``elicitation`` carrying the question. Resumed, the call runs again (same tag, same
    idempotency key) and hears the decision; the session keeps the question across the wait."""
    from agentloop.sessions import InMemoryStore

    heard: list[tuple[str, Any]] = []

    @tool
    async def book(ctx: ToolContext, room: str) -> str:
        """Book a room."""
        answer = await ctx.ask_approver({"question": f"which day for {room}?"})
        heard.append((ctx.idempotency_key, answer))
        if isinstance(answer, Edit):
            return f"booked {room} on {answer.arguments['day']}"
        return f"not booked: {answer!r}"

    async def undecided(pending: PendingCall, ctx: RunContext) -> None:
        return None

    for approver in (None, undecided):
        heard.clear()
        model = ScriptedModel([Reply(calls=[call("book", {"room": "blue"})]), "done"])
        agent = Agent(model, tools=[book], store=InMemoryStore(), approver=approver)
        waiting = await agent.run("book it", session="s")
        (pending,) = waiting.pending
        assert waiting.status == "waiting" and waiting.steps == ()
        assert pending.kind == "elicitation" and pending.input == {
            "question": "which day for blue?"
        }
        with pytest.raises(UserError, match="running call's question"):
            await agent.resume(session="s", decisions={pending.id: ExternalResult(output=1)})
        done = await agent.resume(session="s", decisions={pending.id: Edit({"day": "Monday"})})
        assert done.output == "done"
        assert done.steps[0].actions[0].output == "booked blue on Monday"
        (first_key, first), (second_key, second) = heard
        assert first is None and second == Edit({"day": "Monday"}) and first_key == second_key
