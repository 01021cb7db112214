"""What a durable run costs Temporal: history events per run without a streaming caller, and
eager dispatch when nobody streams. A dev server, real workers, the emulated provider over
real sockets; histories fetched from the server."""

from __future__ import annotations

import math
import uuid
from typing import Any

import anyio
import pytest

from agentloop import Agent, tool
from agentloop import _events as ev
from agentloop.models.openai import OpenAIChatModel
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    ProviderServer,
    Reply,
    ScriptedModel,
    call,
)
from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal import TemporalAgent, connect, worker  # noqa: E402
from tests.test_temporal import add  # noqa: E402

pytestmark = pytest.mark.temporal

# PydanticAI's and OpenAI Agents' Temporal integrations record 26-29 events for such a run.
PEERS_EVENTS = 29


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


def _names(history: Any) -> list[str]:
    from temporalio.api.enums.v1 import EventType

    return [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]


async def test_a_run_nobody_streams_records_no_more_events_than_the_peers(
    temporal_target: str,
) -> None:
    """Two turns, one tool, text streamed in chunks 20 ms apart: its deltas are not signalled
    (46-64 events when they were); a caller streaming the same run still gets them."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(text="Let me add those.", calls=[EmulatedCall("add", {"a": 2, "b": 3})]),
        "The sum is 5.",
    ]
    with ProviderServer(EmulatedProvider(script=script, chunk_delay=0.02)) as server:
        model = OpenAIChatModel("emulated", base_url=server.url + "/v1", api_key="k")
        durable = TemporalAgent(
            Agent(model, name="costed", tools=[add]), task_queue=f"q-{uuid.uuid4().hex[:8]}"
        )
        client = await connect(temporal_target)
        async with worker(client, [durable]):
            quiet = await durable.start(client, "add 2 and 3")
            result = await quiet.result()
            streamed = await durable.start(client, "add 2 and 3")
            deltas = [e async for e in streamed if isinstance(e, ev.TextDelta)]
            history = await client.get_workflow_handle(quiet.run_id).fetch_history()
        await model.aclose()
    names = _names(history)
    assert result.output == "The sum is 5."
    assert len(names) <= PEERS_EVENTS, names
    assert names.count("WORKFLOW_EXECUTION_SIGNALED") <= 1, names  # the seal, at most
    assert "".join(d.text for d in deltas).endswith("The sum is 5.") and len(deltas) > 2


async def test_a_tool_starts_while_the_reply_streams_with_nobody_streaming(
    temporal_target: str,
) -> None:
    """Eager dispatch without a streaming caller: the sealed call is signalled at once, so
    its tool activity is scheduled (and done) before the model activity completes."""

    @tool(name="work")
    async def work(n: int) -> int:
        """Work a little.

        Args:
            n: what to return
        """
        await anyio.sleep(0.1)
        return n

    reply = Reply(timeline=[(0.05, "Working. "), (0.1, call("work", {"n": 1}, id="a")), (1.5, "")])
    model = ScriptedModel([reply, "done"])
    durable = TemporalAgent(
        Agent(model, name="quiet-eager", tools=[work]), task_queue=f"q-{uuid.uuid4().hex[:8]}"
    )
    client = await connect(temporal_target)
    async with worker(client, [durable]):
        run = await durable.start(client, "go")
        result = await run.result()
        history = await client.get_workflow_handle(run.run_id).fetch_history()
    names = _names(history)
    assert result.output == "done"
    scheduled = [i for i, n in enumerate(names) if n == "ACTIVITY_TASK_SCHEDULED"]
    completed = [i for i, n in enumerate(names) if n == "ACTIVITY_TASK_COMPLETED"]
    # model, tool, model: the tool's activity completes before the first model activity does
    assert len(scheduled) == 3 and scheduled[1] < completed[0]
    assert names.count("WORKFLOW_EXECUTION_SIGNALED") == 1, names
    assert result.steps[0].actions[0].output == 1


def _deltas_signalled_in_last_model_call(history: Any) -> tuple[int, int]:
    """The ``agentloop.deltas`` signals before and after the last activity was scheduled."""
    before = after = 0
    seen_last = False
    last = max(
        i
        for i, e in enumerate(history.events)
        if e.HasField("activity_task_scheduled_event_attributes")
    )
    for i, e in enumerate(history.events):
        seen_last = seen_last or i == last
        if (
            e.HasField("workflow_execution_signaled_event_attributes")
            and e.workflow_execution_signaled_event_attributes.signal_name == "agentloop.deltas"
        ):
            if seen_last:
                after += 1
            else:
                before += 1
    return before, after


async def test_a_caller_that_stops_reading_stops_costing_signals(temporal_target: str) -> None:
    """A caller streams the first model call, then stops reading: past its ``stream_lease``
    the second call's text is not signalled. A caller that reads on across the same slow
    tool keeps its lease (it acks while it reads), and gets the second call live."""

    @tool(name="slow")
    async def slow() -> str:
        """Take longer than the lease."""
        await anyio.sleep(2.5)
        return "ok"

    def replies() -> list[Reply]:
        first = [(0.05 * i, f"part {i}. ") for i in range(1, 6)]
        second = [(0.1 * i, f"word {i}. ") for i in range(1, 9)]
        return [
            Reply(timeline=[*first, (0.3, call("slow", {}, id="s")), (0.35, "")]),
            Reply(timeline=second),
        ]

    model = ScriptedModel([*replies(), *replies()])
    durable = TemporalAgent(
        Agent(model, name="leased", tools=[slow]),
        task_queue=f"q-{uuid.uuid4().hex[:8]}",
        stream_lease=1.0,
        linger=0.5,
    )
    client = await connect(temporal_target)
    async with worker(client, [durable]):
        gone = await durable.start(client, "go")
        async for event in gone:
            if isinstance(event, ev.ActionStarted):
                break  # and reads no more
        await client.get_workflow_handle(gone.run_id).result()
        left = await client.get_workflow_handle(gone.run_id).fetch_history()
        stayed = await durable.start(client, "go")
        texts = [e.text async for e in stayed if isinstance(e, ev.TextDelta)]
        kept = await client.get_workflow_handle(stayed.run_id).fetch_history()
    first_call, second_call = _deltas_signalled_in_last_model_call(left)
    assert first_call > 1, "the first call streamed to the caller"
    assert second_call == 0, "nobody streams the second call: its text comes with its result"
    assert _deltas_signalled_in_last_model_call(kept)[1] > 1, "the caller that stayed streams"
    assert "".join(texts).endswith("word 8. ")


async def test_a_sessions_second_run_fails_no_activity(temporal_target: str, tmp_path: Any) -> None:
    """Every durable run of a session creates it if it is new; for one that exists the store
    activity answers so as a value, not as a failed activity (a warning and its traceback on
    the worker, on every run but the session's first)."""
    from temporalio.api.enums.v1 import EventType

    from agentloop.sessions import SQLiteStore

    async with SQLiteStore(str(tmp_path / "s.db")) as store:
        agent = Agent(ScriptedModel(["one", "two"]), name="sessioned", store=store)
        durable = TemporalAgent(agent, task_queue=f"q-{uuid.uuid4().hex[:8]}")
        client = await connect(temporal_target)
        async with worker(client, [durable]):
            first = await durable.run(client, "hi", session="s")
            run = await durable.start(client, "again", session="s")
            second = await run.result()
            history = await client.get_workflow_handle(run.run_id).fetch_history()
        kept = await store.get("s")
    failed = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert (first.output, second.output) == ("one", "two")
    assert failed == [], failed
    assert kept is not None and len([r for r in kept.history if r.type == "run"]) == 2


async def test_one_long_streamed_call_signals_within_the_schedules_bound(
    temporal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model call cannot move to a new run, so one call's signals are bounded: the batches
    come every ``BATCH_SECONDS`` for the first ``FAST_BATCHES``, then each ``BATCH_GROWTH``
    times longer than the one before (the schedule scaled down here: 20 ms, 10, 1.15). A 5 s
    call of a delta every 10 ms reaches the streaming caller whole and in order, within the
    signals the schedule allows in the time the call took (37 in 5 s; 239 at a steady 20 ms)."""
    from agentloop.temporal import _batches

    fast, every, growth = 10, 0.02, 1.15
    monkeypatch.setattr(_batches, "BATCH_SECONDS", every)
    monkeypatch.setattr(_batches, "FAST_BATCHES", fast, raising=False)
    monkeypatch.setattr(_batches, "BATCH_GROWTH", growth, raising=False)
    seconds, pieces = 5.0, 500
    words = [f"w{i} " for i in range(pieces)]
    reply = Reply(timeline=[(seconds * (i + 1) / pieces, w) for i, w in enumerate(words)])
    durable = TemporalAgent(
        Agent(ScriptedModel([reply]), name="long-call"), task_queue=f"q-{uuid.uuid4().hex[:8]}"
    )
    client = await connect(temporal_target)
    async with worker(client, [durable]):
        run = await durable.start(client, "talk for a while")
        with anyio.fail_after(60):
            texts = [e.text async for e in run if isinstance(e, ev.TextDelta)]
            result = await run.result()
        history = await client.get_workflow_handle(run.run_id).fetch_history()
    names = _names(history)
    signals = names.count("WORKFLOW_EXECUTION_SIGNALED")
    started, ended = (
        e.event_time.ToDatetime()
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        or e.HasField("activity_task_completed_event_attributes")
    )
    took = (ended - started).total_seconds()  # the call's, under the machine's load
    # The first batch, the fast ones, then m batches in every * (growth**m - 1) / (growth - 1).
    slow = math.log(1 + (took - fast * every) * (growth - 1) / every, growth)
    bound = 1 + fast + math.ceil(slow)
    assert "".join(texts) == "".join(words) == result.output
    assert len(texts) > 20, "the caller streamed the call"
    assert signals <= bound, (signals, bound, took, len(names))
    assert len(names) <= 4 * bound + 20, len(names)  # a signal, and a workflow task's 3 events


async def test_one_call_signals_at_most_its_budget_however_long_it_streams(
    temporal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However long one model call streams, it sends at most ``MAX_CALL_SIGNALS`` signals
    (1,500: some 6,000 history events), seals included; past them the rest of the call comes
    with its result. Scaled down here: 12 signals, a batch every 5 ms that never slows (some
    300 signals in 3 s on main). 6,000 deltas and a tool call sealed past the budget: the
    caller gets the whole text in order, the tool runs, and the history stays in the bound."""
    from agentloop.temporal import _batches

    budget = 12
    monkeypatch.setattr(_batches, "BATCH_SECONDS", 0.005)
    monkeypatch.setattr(_batches, "FAST_BATCHES", 10**9, raising=False)
    monkeypatch.setattr(_batches, "MAX_CALL_SIGNALS", budget, raising=False)
    seconds, pieces = 3.0, 6000
    words = [f"w{i} " for i in range(pieces)]
    timeline: list[Any] = [(seconds * (i + 1) / pieces, w) for i, w in enumerate(words)]
    timeline.append((seconds + 0.05, call("add", {"a": 2, "b": 3}, id="c")))
    durable = TemporalAgent(
        Agent(ScriptedModel([Reply(timeline=timeline), "done"]), name="budget", tools=[add]),
        task_queue=f"q-{uuid.uuid4().hex[:8]}",
    )
    client = await connect(temporal_target)
    async with worker(client, [durable]):
        run = await durable.start(client, "talk for a long while")
        with anyio.fail_after(90):
            events = [e async for e in run]
            result = await run.result()
        history = await client.get_workflow_handle(run.run_id).fetch_history()
    texts = [e.text for e in events if isinstance(e, ev.TextDelta)]
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    deltas = signals.count("agentloop.deltas")
    assert "".join(texts) == "".join(words) + "done"
    assert len(texts) > budget, "the caller streamed the call live, then got the rest"
    assert result.output == "done" and result.steps[0].actions[0].output == 5
    assert deltas <= budget + 1, (deltas, len(history.events))  # the budget, and one flush
    # Each signal a workflow task's 3 events at most; the run's own, the second call's, acks.
    assert len(history.events) <= 4 * (budget + 1) + 4 * signals.count("agentloop.ack") + 60
