"""Durable runs that wait on decisions (issue 18, point 6): a tool that needs approval, or an
external tool, makes the workflow wait (durably, holding no worker) for a ``decide`` update,
checked by the engine's own ``check_decisions`` before it is accepted; the run then goes on in
the same workflow and the same stream of events. Every history is replayed afterwards."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    Approve,
    Deny,
    Edit,
    ExternalResult,
    Tool,
    ToolContext,
    UserError,
    tool,
)
from agentloop import _events as ev
from agentloop.sessions import SQLiteStore
from agentloop.testing import Reply, ScriptedModel, call
from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal import TemporalAgent, connect, worker  # noqa: E402
from tests.test_temporal import _replay_all  # noqa: E402

pytestmark = pytest.mark.temporal

ran: Counter[str] = Counter()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


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
    return f"sent {amount} to {to}"


@tool
async def lookup(name: str) -> str:
    """Look up an account.

    Args:
        name: Whose.
    """
    ran[f"lookup:{name}"] += 1
    return f"{name} exists"


browser = Tool.external(
    "open_page",
    "Open a page in the user's browser and return its title.",
    {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
)


def _queue() -> str:
    return f"w-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def serving(target: str, *durables: TemporalAgent[Any]) -> AsyncIterator[Any]:
    client = await connect(target)
    async with worker(client, list(durables), sticky_queue_schedule_to_start_timeout=1.0):
        yield client
    await _replay_all(client, durables)


async def _until_waiting(run: Any) -> list[ev.Event]:
    events: list[ev.Event] = []
    with anyio.fail_after(30):
        async for event in run:
            events.append(event)
            if isinstance(event, ev.RunWaiting):
                return events
    raise AssertionError(f"the run did not wait: {[e.type for e in events]}")


async def test_a_waiting_run_is_approved_and_denied_in_the_same_workflow_and_stream(
    temporal_target: str,
) -> None:
    """The run waits (``ActionAwaiting``, ``RunWaiting``), the step's other action ran; the
    caller decides from inside its loop and the same stream goes on to ``RunFinished``, its
    only terminal event; the approved call runs once, the denied one is an error result."""
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("lookup", {"name": "bob"}, id="look"),
                    call("transfer", {"amount": 5, "to": "bob"}, id="pay"),
                    call("transfer", {"amount": 900, "to": "eve"}, id="big"),
                ]
            ),
            "done",
        ]
    )
    durable = TemporalAgent(
        Agent(model, name="payer", tools=[lookup, transfer]), task_queue=_queue()
    )
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        events: list[ev.Event] = []
        with anyio.fail_after(30):
            async for event in run:
                events.append(event)
                if isinstance(event, ev.RunWaiting):
                    waiting = await run.waiting()
                    assert waiting is not None and waiting.status == "waiting"
                    assert [p.id for p in waiting.pending] == ["pay", "big"]
                    assert ran == {"lookup:bob": 1}  # it ran while the others wait
                    await run.decide({"pay": Approve(), "big": Deny("too much")})
        result = await run.result()
        assert await run.waiting() is None
    assert result.output == "done"
    assert ran == {"lookup:bob": 1, "transfer:5:bob": 1}
    outputs = [(a.output, a.error_kind) for a in result.steps[0].actions]
    assert outputs == [("bob exists", None), ("sent 5 to bob", None), (None, "denied")]
    assert "too much" in (result.steps[0].actions[2].error or "")
    types = [e.type for e in events]
    assert types.count("action_awaiting") == 2 and types.count("run_waiting") == 1
    assert types.index("run_waiting") < types.index("action_decided")
    assert types[-1] == "run_finished" and types.count("run_finished") == 1
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_bad_decisions_are_refused_and_the_run_still_waits(temporal_target: str) -> None:
    """An edit that fails the tool's schema, an unknown call, a missing one: each a
    ``UserError`` from the update's validator, recorded nowhere; then a valid edit runs."""
    model = ScriptedModel(
        [Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="pay")]), "done"]
    )
    durable = TemporalAgent(Agent(model, name="editor", tools=[transfer]), task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        await _until_waiting(run)
        with pytest.raises(UserError, match="edit of 'pay' is not valid"):
            await run.decide({"pay": Edit({"amount": "lots", "to": "bob"})})
        with pytest.raises(UserError, match="unknown calls: 'nope'"):
            await run.decide({"pay": Approve(), "nope": Approve()})
        with pytest.raises(UserError, match="waits on decisions for 'pay'"):
            await run.decide({})
        with pytest.raises(UserError, match="must be Approve"):
            await run.decide({"pay": "yes"})  # type: ignore[dict-item]
        still = await run.waiting()
        assert still is not None and [p.id for p in still.pending] == ["pay"]
        assert not ran
        await durable.decide(client, run.run_id, {"pay": Edit({"amount": 7, "to": "bob"})})
        result = await run.result()
        with pytest.raises(UserError, match="not waiting"):
            await run.decide({"pay": Approve()})
    assert ran == {"transfer:7:bob": 1}
    assert result.steps[0].actions[0].output == "sent 7 to bob"


async def test_an_external_tools_result_comes_from_the_caller(temporal_target: str) -> None:
    model = ScriptedModel(
        [
            Reply(calls=[call("open_page", {"url": "https://x.test"}, id="p")]),
            Reply(calls=[call("open_page", {"url": "https://y.test"}, id="q")]),
            "done",
        ]
    )
    durable = TemporalAgent(Agent(model, name="browsing", tools=[browser]), task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "open")
        await _until_waiting(run)
        with pytest.raises(UserError, match="external tool"):
            await run.decide({"p": Approve()})
        await run.decide({"p": ExternalResult(output={"title": "X"})})
        await _until_waiting(run)  # the second step waits too, in the same workflow
        await run.decide({"q": ExternalResult(error="no network")})
        result = await run.result()
    assert result.output == "done"
    assert result.steps[0].actions[0].output == {"title": "X"}
    failed = result.steps[1].actions[0]
    assert failed.error == "no network" and failed.error_kind == "tool_error"


async def test_a_run_waits_across_workers_and_another_worker_takes_the_decision(
    temporal_target: str, tmp_path: Any
) -> None:
    """The worker that ran the run until it waited is gone; a new worker (nothing cached)
    rebuilds the waiting run from its history when the decision arrives. With a session:
    its pending call is committed while it waits, and the run ends in the store."""
    async with SQLiteStore(str(tmp_path / "s.db")) as store:
        model = ScriptedModel(
            [Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="pay")]), "done"]
        )
        agent = Agent(model, name="patient", tools=[transfer], store=store)
        durable = TemporalAgent(agent, task_queue=_queue())
        client = await connect(temporal_target)
        async with worker(client, [durable], sticky_queue_schedule_to_start_timeout=1.0):
            run = await durable.start(client, "pay", session="s1")
            await _until_waiting(run)
        unfinished = await agent.unfinished_run(session="s1")
        assert unfinished is not None
        async with worker(client, [durable], sticky_queue_schedule_to_start_timeout=1.0):
            await durable.decide(client, run.run_id, {"pay": Approve()})
            with anyio.fail_after(30):
                result = await run.result()  # it streamed: it reads the rest itself
        await _replay_all(client, (durable,))
        session = await store.get("s1")
        assert await agent.unfinished_run(session="s1") is None  # the store: it ended
    assert result.output == "done" and ran == {"transfer:5:bob": 1}
    assert session is not None and session.state == {}


async def test_a_decision_timeout_denies_the_waiting_calls(temporal_target: str) -> None:
    model = ScriptedModel(
        [Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="pay")]), "gave up"]
    )
    durable = TemporalAgent(
        Agent(model, name="impatient", tools=[transfer]), task_queue=_queue(), decision_timeout=1
    )
    async with serving(temporal_target, durable) as client:
        with anyio.fail_after(30):
            result = await durable.run(client, "pay")
    assert result.output == "gave up" and not ran
    denied = result.steps[0].actions[0]
    assert denied.error_kind == "denied" and "decision_timeout" in (denied.error or "")


def test_a_live_approver_is_refused_in_durable_mode() -> None:
    async def approve(call: Any, ctx: Any) -> Approve:
        return Approve()

    agent = Agent(ScriptedModel(["x"]), name="live", tools=[transfer], approver=approve)
    with pytest.raises(UserError, match="live approver"):
        TemporalAgent(agent)
    with pytest.raises(UserError, match="decision_timeout"):
        TemporalAgent(Agent(ScriptedModel(["x"])), decision_timeout=0)


async def test_a_fresh_callers_result_after_a_decision_does_not_wait_for_a_gone_streamer(
    temporal_target: str,
) -> None:
    """A caller streamed the run until it waited, then went away; the decision comes with only
    the run's id, and a fresh client's ``result()`` returns as the run ends: the workflow does
    not linger (60 s by default) for the caller that streamed before the wait."""
    model = ScriptedModel(
        [Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="pay")]), "done"]
    )
    durable = TemporalAgent(Agent(model, name="left", tools=[transfer]), task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        streamed = await durable.start(client, "pay")
        await _until_waiting(streamed)  # and then it reads no more
        run_id = streamed.run_id
        await durable.decide(client, run_id, {"pay": Approve()})
        with anyio.fail_after(15):  # well under the 60 s linger
            result = await durable.attach(await connect(temporal_target), run_id).result()
    assert result.output == "done" and ran == {"transfer:5:bob": 1}


async def test_a_run_does_not_linger_for_a_caller_whose_lease_has_lapsed(
    temporal_target: str,
) -> None:
    """A caller streamed the start of the run, then stopped reading (without going: it holds
    its iterator). Past its ``stream_lease`` it no longer counts as streaming: the finished run
    stops lingering for it (60 s by default), and a fresh client's ``result()`` returns within
    a few leases of the run's end."""

    @tool(name="slow")
    async def slow() -> str:
        """Take a moment."""
        await anyio.sleep(0.5)
        return "ok"

    model = ScriptedModel([Reply(calls=[call("slow", {}, id="s")]), "done"])
    durable = TemporalAgent(
        Agent(model, name="lapsed", tools=[slow]), task_queue=_queue(), stream_lease=1.0
    )
    async with serving(temporal_target, durable) as client:
        stalled = await durable.start(client, "go")
        with anyio.fail_after(30):
            async for event in stalled:
                if isinstance(event, ev.ActionStarted):
                    break  # and reads no more
        with anyio.fail_after(10):  # the lease (1 s) and a margin, well under the 60 s linger
            result = await durable.attach(await connect(temporal_target), stalled.run_id).result()
    assert result.output == "done"
