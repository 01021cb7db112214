"""A tool's progress in a durable run (``ToolContext.report_progress`` inside its activity):
a caller streaming the run gets its ``ActionProgress`` events, in order between the action's
start and finish, as in-process; nobody streaming, they cost no history. A dev server, a real
worker, histories read from the server."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from agentloop import Agent, ToolContext, tool
from agentloop import _events as ev
from agentloop.sessions import InMemoryStore, SessionStore
from agentloop.testing import Reply, ScriptedModel, call
from tests.support.temporal import import_temporal

import_temporal()
from agentloop.durable_web import create_app  # noqa: E402
from agentloop.temporal import TemporalAgent, connect, replayer, worker  # noqa: E402
from tests.web._serving import frames, serving  # noqa: E402

pytestmark = pytest.mark.temporal


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


@tool
async def crunch(n: int, pause: float, context: ToolContext) -> str:
    """Crunch ``n`` items, reporting progress after each.

    Args:
        n: how many items
        pause: seconds per item
    """
    for i in range(1, n + 1):
        await context.report_progress(i, n, f"item {i}")
        if pause:
            await anyio.sleep(pause)
    return f"crunched {n}"


def _agent(
    n: int, pause: float, name: str, runs: int = 1, store: SessionStore | None = None
) -> Agent[Any, str]:
    replies: list[Reply | str] = [
        Reply(calls=[call("crunch", {"n": n, "pause": pause}, id="c")]),
        "done",
    ]
    return Agent(ScriptedModel(replies * runs), name=name, tools=[crunch], store=store)


def _progress_signals(history: Any) -> int:
    return sum(
        1
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
        and e.workflow_execution_signaled_event_attributes.signal_name == "agentloop.progress"
    )


def _between(events: list[ev.Event]) -> list[ev.ActionProgress]:
    """The progress events, checked to come between their action's start and finish."""
    types = [type(e) for e in events]
    started, finished = types.index(ev.ActionStarted), types.index(ev.ActionFinished)
    progress = [e for e in events if isinstance(e, ev.ActionProgress)]
    assert all(started < events.index(p) < finished for p in progress), types
    return progress


async def test_a_streaming_caller_sees_the_tools_progress_as_in_process(
    temporal_target: str,
) -> None:
    """Three reports 0.3 s apart: the same three ``ActionProgress`` events as in-process,
    between ``ActionStarted`` and ``ActionFinished``, each in a signal of its own; the history
    replays."""
    async with _agent(3, 0.3, "local").stream("go") as stream:
        local = [e async for e in stream]
    durable = TemporalAgent(_agent(3, 0.3, "progressed"), task_queue=f"q-{uuid.uuid4().hex[:8]}")
    client = await connect(temporal_target)
    async with worker(client, [durable]):
        run = await durable.start(client, "go")
        with anyio.fail_after(60):
            events = [e async for e in run]
            result = await run.result()
        history = await client.get_workflow_handle(run.run_id).fetch_history()
    seen = [(p.tag, p.name, p.progress, p.total, p.message) for p in _between(events)]
    want = [(p.tag, p.name, p.progress, p.total, p.message) for p in _between(local)]
    assert seen == want == [(want[0][0], "crunch", float(i), 3.0, f"item {i}") for i in (1, 2, 3)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert result.output == "done"
    assert _progress_signals(history) == 3
    await replayer([durable]).replay_workflow(history)  # its signals replay as they ran


async def test_a_tools_progress_is_bounded_and_costs_nothing_unstreamed(
    temporal_target: str,
) -> None:
    """5,000 reports at once: a streaming caller gets the last of them (the bar ends full)
    within a few signals; a run nobody streams signals none of them."""
    durable = TemporalAgent(
        _agent(5000, 0.0, "burst", runs=2), task_queue=f"q-{uuid.uuid4().hex[:8]}"
    )
    client = await connect(temporal_target)
    async with worker(client, [durable]):
        run = await durable.start(client, "go")
        with anyio.fail_after(60):
            events = [e async for e in run]
        streamed = await client.get_workflow_handle(run.run_id).fetch_history()
        quiet = await durable.start(client, "go")
        assert (await quiet.result()).output == "done"
        unstreamed = await client.get_workflow_handle(quiet.run_id).fetch_history()
    progress = _between(events)
    assert progress and progress[-1].progress == 5000.0 and progress[-1].message == "item 5000"
    assert [p.progress for p in progress] == sorted(p.progress for p in progress)
    assert 1 <= _progress_signals(streamed) <= 3, _progress_signals(streamed)
    assert _progress_signals(unstreamed) == 0


async def test_the_web_front_on_temporal_streams_the_progress_in_both_protocols(
    temporal_target: str,
) -> None:
    """Through ``agentloop.durable_web``: AG-UI's ``CUSTOM`` ``agentloop.action_progress``
    events between the call's end and its result, and the Vercel stream's transient
    ``data-agentloop-action-progress`` parts, as the in-process front sends them."""
    import httpx2

    queue = f"q-{uuid.uuid4().hex[:8]}"
    durable = TemporalAgent(
        _agent(3, 0.2, "webbed", runs=2, store=InMemoryStore()), task_queue=queue
    )
    client = await connect(temporal_target)
    app = create_app(durable, temporal=client, task_queue=queue)
    async with (
        worker(client, [durable]),
        serving(app) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as http,
    ):
        streams: dict[str, list[Any]] = {}
        for protocol in ("ag-ui", "vercel"):
            body = (await http.post("/api/runs", json={"input": "go"})).json()
            with anyio.fail_after(60):
                async with http.stream("GET", f"{body['events']}?protocol={protocol}") as response:
                    assert response.status_code == 200
                    streams[protocol] = [
                        f.json() for f in await frames(response) if f.data != "[DONE]"
                    ]
    ag_ui, vercel = streams["ag-ui"], streams["vercel"]
    types = [e["type"] for e in ag_ui]
    custom = [
        e for e in ag_ui if e["type"] == "CUSTOM" and e["name"] == "agentloop.action_progress"
    ]
    assert [(e["value"]["progress"], e["value"]["message"]) for e in custom] == [
        (float(i), f"item {i}") for i in (1, 2, 3)
    ]
    assert types.index("TOOL_CALL_END") < types.index("CUSTOM")
    assert len(types) - 1 - types[::-1].index("CUSTOM") < types.index("TOOL_CALL_RESULT")
    parts = [e for e in vercel if e.get("type") == "data-agentloop-action-progress"]
    assert [(p["data"]["progress"], p["data"]["message"]) for p in parts] == [
        (float(i), f"item {i}") for i in (1, 2, 3)
    ]
    assert all(p.get("transient") for p in parts)
