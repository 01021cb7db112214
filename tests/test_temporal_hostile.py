"""Durable runs under bad input (issue 35, point 0): a malformed start, a forged signal, an
oversized decision or a bad ``after_seq`` is refused or fails the run cleanly, within a bound;
nothing is retried forever and nothing poisons replay (every history is replayed after)."""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta
from typing import Any

import anyio
import pytest

from agentloop import Agent, Approve, Edit, UserError, tool
from agentloop import _events as ev
from agentloop._waiting import DecisionError
from agentloop.testing import Reply, ScriptedModel, call
from tests.support.temporal import import_temporal

import_temporal()
from temporalio.client import WorkflowFailureError  # noqa: E402

from agentloop.temporal import (  # noqa: E402
    AgentChanged,
    DurableRunFailed,
    TemporalAgent,
    connect,
    replayer,
    worker,
)
from agentloop.temporal._durable import DELTAS_SIGNAL, PROGRESS_SIGNAL, WORKFLOW_NAME  # noqa: E402
from tests.test_temporal_waiting import (  # noqa: E402
    _queue,
    _until_waiting,
    ran,
    serving,
    transfer,
)

pytestmark = pytest.mark.temporal


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    ran.clear()


def _payer(name: str) -> TemporalAgent[Any]:
    model = ScriptedModel(
        [Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="pay")]), "done"]
    )
    return TemporalAgent(Agent(model, name=name, tools=[transfer]), task_queue=_queue())


@pytest.mark.parametrize("start", [{"bad": 1}, "text", "no-run-id", "bad-parts"])
async def test_a_malformed_start_fails_the_run_at_once(temporal_target: str, start: Any) -> None:
    """Started by hand with arguments agentloop never sends, the workflow fails, non-retryably,
    saying what is wrong; it is not a workflow task retried forever."""
    durable = _payer("payer")
    if start in ("no-run-id", "bad-parts"):
        made: dict[str, Any] = {"agent": "payer", "fingerprint": durable.fingerprint, "input": "hi"}
        if start == "bad-parts":
            made |= {"run_id": "r", "state": {}, "variables": {}, "session": None}
            made["input_parts"] = [{"kind": "nonsense"}]
        start = made
    async with serving(temporal_target, durable) as client:
        handle = await client.start_workflow(
            WORKFLOW_NAME, start, id=f"bad-{uuid.uuid4().hex[:8]}", task_queue=durable.task_queue
        )
        with anyio.fail_after(20), pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
    assert "start" in str(caught.value.cause)


async def test_a_forged_deltas_signal_is_dropped_and_the_run_goes_on(temporal_target: str) -> None:
    """A ``agentloop.deltas`` signal that no model activity sent (``{"x": 1}``) is dropped, as
    are forged ``agentloop.progress`` ones: the waiting run is decided and ends, and its
    history replays."""
    durable = _payer("forged")
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        await _until_waiting(run)
        handle = client.get_workflow_handle(run.run_id)
        await handle.signal(DELTAS_SIGNAL, {"x": 1})
        await handle.signal(DELTAS_SIGNAL, {"call": 1, "index": "0", "deltas": [{"kind": "?"}]})
        for reports in ([[1.0, 2.0], "abc", 5], [[float("nan"), None, None]]):
            await handle.signal(PROGRESS_SIGNAL, {"run": "r", "call": 1, "reports": reports})
        await handle.signal(PROGRESS_SIGNAL, {"x": 1})
        await run.decide({"pay": Approve()})
        with anyio.fail_after(20):
            result = await run.result()
    assert result.output == "done" and ran == {"transfer:5:bob": 1}


async def test_an_oversized_decision_is_refused_and_the_run_still_waits(
    temporal_target: str,
) -> None:
    """An ``Edit`` of 2.2 MB cannot be recorded in the history: ``decide`` refuses it before it
    is sent, and the run still waits for a decision it can take."""
    durable = _payer("big-edit")
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        await _until_waiting(run)
        with pytest.raises(UserError, match="payload limit"):
            await run.decide({"pay": Edit({"amount": 5, "to": "b" * 2_200_000})})
        assert await run.waiting() is not None
        await run.decide({"pay": Approve()})
        with anyio.fail_after(20):
            result = await run.result()
    assert result.output == "done" and ran == {"transfer:5:bob": 1}


@pytest.mark.parametrize("after_seq", [-3, 1.5, True, "2"])
async def test_attach_refuses_a_bad_after_seq(temporal_target: str, after_seq: Any) -> None:
    durable = _payer("attach")
    client = await connect(temporal_target)
    with pytest.raises(UserError, match="after_seq"):
        durable.attach(client, "any-run", after_seq=after_seq)


async def test_attach_after_seq_returns_exactly_the_later_events(temporal_target: str) -> None:
    durable = _payer("after")
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        seen = await _until_waiting(run)
        later = durable.attach(client, run.run_id, after_seq=2)
        await run.decide({"pay": Approve()})
        with anyio.fail_after(20):
            events = [e async for e in later]
            await run.result()
    assert [e.seq for e in events] == list(range(3, events[-1].seq + 1))
    assert [e.type for e in events[: len(seen) - 2]] == [e.type for e in seen[2:]]
    assert isinstance(events[-1], ev.RunFinished)


@tool
async def quit_now(how: str) -> str:
    """Leave.

    Args:
        how: Which way.
    """
    ran[f"quit:{how}"] += 1
    raise KeyboardInterrupt if how == "interrupt" else SystemExit("bye")


@pytest.mark.parametrize("how", ["interrupt", "exit"])
async def test_a_tools_base_exception_fails_the_run_once_and_keeps_its_type(
    temporal_target: str, how: str
) -> None:
    """A tool raising ``KeyboardInterrupt`` or ``SystemExit`` ends the run as in-process, its
    type kept (``DurableRunFailed.kind``); Temporal does not retry it as a transient fault."""
    model = ScriptedModel([Reply(calls=[call("quit_now", {"how": how})]), "unreached"])
    durable = TemporalAgent(
        Agent(model, name=f"quitter-{how}", tools=[quit_now]), task_queue=_queue()
    )
    async with serving(temporal_target, durable) as client:
        with anyio.fail_after(30), pytest.raises(DurableRunFailed) as caught:
            await durable.run(client, "go")
    expected = "KeyboardInterrupt" if how == "interrupt" else "SystemExit"
    assert caught.value.kind == expected and ran == {f"quit:{how}": 1}


@tool
async def audit(note: str) -> str:
    """Note something.

    Args:
        note: What.
    """
    return note


def _waiting_agent(queue: str, **changes: Any) -> TemporalAgent[Any]:
    model = ScriptedModel(
        [Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="pay")]), "done"]
    )
    fields: dict[str, Any] = {"instructions": "Version one.", "tools": [transfer]} | changes
    return TemporalAgent(Agent(model, name="changing", **fields), task_queue=queue)


@pytest.mark.parametrize(
    "change",
    [
        {"tools": [transfer, audit]},
        {"instructions": "Version two."},
    ],
    ids=["a-tool-added", "new-instructions"],
)
async def test_a_changed_agent_picking_up_a_waiting_run_ends_it_with_agent_mismatch(
    temporal_target: str, change: dict[str, Any]
) -> None:
    """A run waits; its worker is replaced by one whose agent of the same name changed. The
    decision makes the new worker replay the run: it ends, within a bound, as
    ``AgentMismatch`` naming both fingerprints, not a workflow task retried forever."""
    queue = _queue()
    before, after = _waiting_agent(queue), _waiting_agent(queue, **change)
    assert before.fingerprint != after.fingerprint
    client = await connect(temporal_target)
    async with worker(client, [before], sticky_queue_schedule_to_start_timeout=1.0):
        run = await before.start(client, "pay")
        await _until_waiting(run)
    async with worker(client, [after], sticky_queue_schedule_to_start_timeout=1.0):
        with contextlib.suppress(DecisionError):  # it may have ended already
            await after.decide(client, run.run_id, {"pay": Approve()})
        with anyio.fail_after(30), pytest.raises(DurableRunFailed) as caught:
            await after.attach(client, run.run_id).result()
    assert caught.value.kind == "AgentMismatch"
    assert before.fingerprint in str(caught.value) and after.fingerprint in str(caught.value)
    assert ran == {}


async def test_replaying_a_history_against_a_changed_agent_names_the_change(
    temporal_target: str,
) -> None:
    """A recorded run replayed against an agent whose instructions changed fails with
    ``AgentChanged`` naming both fingerprints, not a bare nondeterminism error; against the
    agent it ran with, it replays."""
    queue = _queue()
    before = _waiting_agent(queue, tools=[lookup_once])
    after = _waiting_agent(queue, tools=[lookup_once], instructions="Version two.")
    client = await connect(temporal_target)
    async with worker(client, [before], sticky_queue_schedule_to_start_timeout=1.0):
        run = await before.start(client, "pay")
        with anyio.fail_after(30):
            await run.result()
    history = await client.get_workflow_handle(run.run_id).fetch_history()
    with anyio.fail_after(20):
        await replayer([before]).replay_workflow(history)
    with anyio.fail_after(20), pytest.raises(AgentChanged) as caught:
        await replayer([after]).replay_workflow(history)
    assert before.fingerprint in str(caught.value) and after.fingerprint in str(caught.value)
    assert "instructions" in str(caught.value)
    results = await replayer([after]).replay_workflows(_one(history), raise_on_replay_failure=False)
    assert isinstance(results.replay_failures[history.run_id], AgentChanged)


async def _one(history: Any) -> Any:
    yield history


@tool(name="transfer")
async def lookup_once(amount: int, to: str) -> str:
    """Look up a transfer (no approval needed).

    Args:
        amount: How much.
        to: To whom.
    """
    return f"{amount} to {to}"


def test_the_fingerprint_covers_instructions_middleware_and_version() -> None:
    async def logged(call: Any, next: Any) -> Any:
        return await next(call)

    queue = _queue()
    base = _waiting_agent(queue)
    assert _waiting_agent(queue).fingerprint == base.fingerprint  # stable
    assert _waiting_agent(queue, instructions="Other.").fingerprint != base.fingerprint
    assert _waiting_agent(queue, tool_middleware=[logged]).fingerprint != base.fingerprint
    versioned = TemporalAgent(base.agent, task_queue=queue, version="2")
    assert versioned.fingerprint != base.fingerprint


@tool(name="slow_lookup")
async def slow_lookup() -> str:
    """Look something up, slowly: the test swaps workers meanwhile."""
    ran["slow_lookup"] += 1
    await anyio.sleep(1.5)
    return "found"


def _running_agent(queue: str, **changes: Any) -> tuple[TemporalAgent[Any], ScriptedModel]:
    model = ScriptedModel([Reply(calls=[call("slow_lookup", {}, id="look")]), "done"])
    fields: dict[str, Any] = {"instructions": "Version one.", "tools": [slow_lookup]} | changes
    agent = Agent(model, name="changing-mid-run", **fields)
    return TemporalAgent(agent, task_queue=queue), model


@pytest.mark.parametrize(
    "change",
    [{"tools": [slow_lookup, audit]}, {"instructions": "Version two."}],
    ids=["a-tool-added", "new-instructions"],
)
async def test_a_changed_agent_picking_up_a_running_run_ends_it_with_agent_mismatch(
    temporal_target: str, change: dict[str, Any]
) -> None:
    """A run's first model call starts a slow tool; its worker stops (letting the tool finish)
    and one whose agent of the same name changed takes over. The run ends, within a bound, as
    ``AgentMismatch`` naming both fingerprints: no second model call with the new definition,
    no workflow task retried forever."""
    queue = _queue()
    (before, old_model), (after, new_model) = _running_agent(queue), _running_agent(queue, **change)
    assert before.fingerprint != after.fingerprint
    client = await connect(temporal_target)
    async with worker(
        client,
        [before],
        sticky_queue_schedule_to_start_timeout=1.0,
        graceful_shutdown_timeout=timedelta(seconds=10),  # the tool finishes on this worker
    ):
        run = await before.start(client, "look it up")
        with anyio.fail_after(20):
            async for event in run:
                if isinstance(event, ev.ActionStarted):
                    break  # the tool runs: swap the workers under it
    async with worker(client, [after], sticky_queue_schedule_to_start_timeout=1.0):
        with anyio.fail_after(30), pytest.raises(DurableRunFailed) as caught:
            await after.attach(client, run.run_id).result()
    assert caught.value.kind == "AgentMismatch"
    assert before.fingerprint in str(caught.value) and after.fingerprint in str(caught.value)
    assert ran == {"slow_lookup": 1}
    assert len(old_model.requests) == 1 and new_model.requests == []  # no call 2 at all
