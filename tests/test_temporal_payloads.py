"""Durable runs whose values are large (issue 35, point 0): a long reply, many steps of large
tool outputs, a large streamed tool argument and an oversized reply each end (or fail the run
cleanly) within a bound, every payload the workflow records measured against Temporal's limit;
nothing is retried forever, and every history replays after."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from agentloop import Agent, ToolLimits, tool
from agentloop import _events as ev
from agentloop.sessions import SQLiteStore
from agentloop.testing import EmulatedProvider, ProviderServer, Reply, ScriptedModel, call
from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal import TemporalAgent, connect  # noqa: E402
from agentloop.temporal._payloads import MAX_PAYLOAD_BYTES  # noqa: E402
from tests.test_temporal import emulated_agent, serving  # noqa: E402

pytestmark = pytest.mark.temporal

BOUND = 90.0  # seconds any of these runs may take on a loaded machine (they stuck for ever)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


async def _recorded(client: Any, run_id: str) -> dict[str, list[int]]:
    """The size in bytes of every payload the run's history records, by where it is."""
    sizes: dict[str, list[int]] = {}
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        for field, attributes in (
            ("activity_task_scheduled_event_attributes", "input"),
            ("activity_task_completed_event_attributes", "result"),
            ("workflow_execution_signaled_event_attributes", "input"),
            ("workflow_execution_completed_event_attributes", "result"),
            ("workflow_execution_update_completed_event_attributes", "outcome"),
        ):
            if not event.HasField(field):
                continue
            attrs = getattr(event, field)
            where = field.removesuffix("_event_attributes")
            if where == "activity_task_scheduled":
                where += ":" + attrs.activity_type.name
            value = getattr(attrs, attributes)
            size = value.ByteSize()
            sizes.setdefault(where, []).append(size)
    return sizes


def _fits(sizes: dict[str, list[int]]) -> None:
    for where, each in sizes.items():
        assert max(each) <= MAX_PAYLOAD_BYTES, f"{where}: {max(each)} bytes"


async def test_a_600k_character_reply_ends_the_run(temporal_target: str) -> None:
    """A final reply of 600,000 characters (under the default ``max_reply_chars``) makes a
    terminal event of 2.4 MB; it is recorded by reference, and the caller streaming the run,
    and a fresh caller asking for its result, both get it whole."""
    answer = "".join(chr(ord("a") + i % 26) for i in range(600_000))
    model = ScriptedModel([Reply(text=answer, chunk_size=50_000)])
    durable = TemporalAgent(Agent(model, name="long-reply"), task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        with anyio.fail_after(BOUND):
            run = await durable.start(client, "write")
            events = [e async for e in run]
            result = await run.result()
            again = await durable.attach(await connect(temporal_target), run.run_id).result()
        sizes = await _recorded(client, run.run_id)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].result.output == answer
    assert result.output == answer and again.output == answer
    assert result.steps[-1].answer == answer
    _fits(sizes)


def _document(n: int) -> str:
    return "".join(chr(ord("A") + (n + i) % 26) for i in range(99_000))


@tool
async def bulky(n: int) -> str:
    """A large document.

    Args:
        n: Which one.
    """
    return _document(n)


async def test_25_steps_of_99kb_tool_outputs_end_the_run(temporal_target: str) -> None:
    """25 steps, each with a 99 KB tool output (under the tool output cap): the conversation
    goes to each model activity by reference, so no activity input grows with it (it passed
    2 MiB at step 21), and the run ends with every output."""
    steps = 25
    script: list[Reply | str] = [
        Reply(calls=[call("bulky", {"n": n}, id=f"c{n}")]) for n in range(steps - 1)
    ]
    model = ScriptedModel([*script, "done"])
    durable = TemporalAgent(
        Agent(model, name="bulky", tools=[bulky], max_steps=steps + 1), task_queue=_queue()
    )
    async with serving(temporal_target, durable) as client:
        with anyio.fail_after(BOUND * 2):
            run = await durable.start(client, "read them all")
            result = await run.result()
        sizes = await _recorded(client, run.run_id)
    assert result.output == "done" and len(result.steps) == steps
    outputs = [s.actions[0].output for s in result.steps[:-1]]
    assert outputs == [_document(n) for n in range(steps - 1)]
    _fits(sizes)
    model_inputs = sizes["activity_task_scheduled:agentloop.model"]
    assert len(model_inputs) == steps
    # The conversation travels by reference: the last input is a few KB, not megabytes.
    assert max(model_inputs) < 64 * 1024, model_inputs
    print("model activity input bytes by step:", model_inputs)


@tool
async def measure(blob: str) -> int:
    """How long a value is.

    Args:
        blob: The value.
    """
    return len(blob)


@pytest.mark.parametrize("session", [False, True], ids=["no-session", "session"])
async def test_a_streamed_tool_argument_of_900kb_ends_the_run(
    temporal_target: str, tmp_path: Any, session: bool
) -> None:
    """A tool call whose argument streams 0.9 MB: the tool gets it whole, the run ends, and no
    recorded payload (the tool's input, the next model input, the events, the session's
    commits, the result) is over the limit."""
    blob = "".join(chr(ord("a") + i % 26) for i in range(900_000))
    model = ScriptedModel(
        [Reply(calls=[call("measure", {"blob": blob}, id="m")], chunk_size=20_000), "measured"]
    )
    async with SQLiteStore(str(tmp_path / "s.db")) as store:
        agent = Agent(model, name="measurer", tools=[measure], store=store if session else None)
        durable = TemporalAgent(agent, task_queue=_queue())
        async with serving(temporal_target, durable) as client:
            with anyio.fail_after(BOUND):
                run = await durable.start(client, "measure it", session="s" if session else None)
                events = [e async for e in run]
                result = await run.result()
            sizes = await _recorded(client, run.run_id)
        stored = await store.get("s")
    assert result.output == "measured"
    [action] = result.steps[0].actions
    assert action.output == len(blob) and action.input == {"blob": blob}
    assert any(isinstance(e, ev.StepFinished) for e in events)
    _fits(sizes)
    if session:  # the session's record has the step whole
        assert stored is not None and blob in repr(stored.history)


ran: list[int] = []


@tool
async def flood(n: int) -> str:
    """Too much output.

    Args:
        n: Characters.
    """
    ran.append(n)
    return "f" * n


async def test_a_tool_output_over_the_limit_is_refused_once_and_the_run_goes_on(
    temporal_target: str,
) -> None:
    """A tool's output that cannot be recorded (2.5 MB, its cap raised) is refused as that
    call's error, which the model sees: the tool ran once (it was retried as a lost worker's),
    and the run ends."""
    ran.clear()
    model = ScriptedModel([Reply(calls=[call("flood", {"n": 2_500_000}, id="f")]), "noted"])
    agent = Agent(
        model, name="flooder", tools=[flood], tool_limits=ToolLimits(max_output_chars=3_000_000)
    )
    durable = TemporalAgent(agent, task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        with anyio.fail_after(BOUND):
            run = await durable.start(client, "flood")
            result = await run.result()
        sizes = await _recorded(client, run.run_id)
    assert result.output == "noted" and ran == [2_500_000]
    [action] = result.steps[0].actions
    assert action.error_kind == "tool_error" and "payload limit" in (action.error or "")
    _fits(sizes)


async def test_an_oversized_reply_batch_is_reply_too_large_once(temporal_target: str) -> None:
    """A reply streamed faster than 2 MiB a batch, and over ``max_reply_chars``: the run ends
    with ``reply_too_large``, as in-process, and the provider is called once (it was reported
    as a connection error, and called four times)."""
    answer = "é" * 1_200_000  # 6 bytes a character in JSON: one piece of 400,000 passes 2 MiB
    with ProviderServer(EmulatedProvider(answer=answer, text_chunks=3)) as server:
        async with emulated_agent(server.url, name="flood") as agent:
            local = await agent.run("flood")
            assert local.error is not None and local.error.kind == "reply_too_large"
            assert len(server.requests) == 1
            durable = TemporalAgent(agent, task_queue=_queue())
            async with serving(temporal_target, durable) as client:
                with anyio.fail_after(BOUND):
                    run = await durable.start(client, "flood")
                    result = await run.result()
                sizes = await _recorded(client, run.run_id)
    assert result.error is not None and result.error.kind == "reply_too_large"
    assert len(server.requests) == 2  # one in-process, one durable
    _fits(sizes)


def test_the_bound_is_temporals_limit_with_a_margin() -> None:
    assert 1.8 * 2**20 <= MAX_PAYLOAD_BYTES < 2 * 2**20
