"""Durable runs on Temporal (``agentloop.temporal``): a dev server per test session, real
workers in this process, the emulated provider over real sockets.

Temporal's Python SDK is asyncio-only: these tests run on asyncio (one checks the clear error on
trio). They skip without a server unless ``AGENTLOOP_REQUIRE_TEMPORAL=1``.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AttemptDiscarded,
    ModelConnectionError,
    RunResult,
    ToolContext,
    ToolGuardrail,
    Tripwire,
    UsageLimits,
    UserError,
    tool,
)
from agentloop import _events as ev
from agentloop.goals import setup_goal
from agentloop.models import ModelRequest, ToolResultPart
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import SQLiteStore
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    FunctionModel,
    ProviderServer,
    Reply,
    ScriptedModel,
    call,
)
from tests.support.temporal import import_temporal

temporal = import_temporal()
from agentloop.temporal import (  # noqa: E402
    ActivityOptions,
    DurableRunFailed,
    TemporalAgent,
    TemporalUnavailable,
    _durable,
    connect,
    replayer,
    worker,
)

pytestmark = pytest.mark.temporal


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first
        b: the second
    """
    return a + b


@tool
def remember(ctx: ToolContext, note: str) -> str:
    """Keep a note in the run's state.

    Args:
        note: what to keep
    """
    ctx.state["notes"] = [*ctx.state.get("notes", []), note]
    return f"kept {note}"


ADDING: list[EmulatedTurn | str] = [
    EmulatedTurn(
        text="Let me add those.",
        calls=[EmulatedCall("add", {"a": 2, "b": 3}), EmulatedCall("remember", {"note": "n1"})],
    ),
    "The sum is 5.",
]

REACT_ADDING: list[EmulatedTurn | str] = [
    'Thought: I add them.\nActions: [{"tag": "t1", "name": "add", "path": "add", '
    '"input": {"a": 2, "b": 3}}]',
    "Thought: done.\nAnswer: The sum is 5.",
]


@pytest.fixture
def provider() -> Iterator[ProviderServer]:
    with ProviderServer(EmulatedProvider(script=ADDING)) as server:
        yield server


@asynccontextmanager
async def serving(target: str, *durables: TemporalAgent[Any]) -> AsyncIterator[Any]:
    """A client and a worker of ``durables``; then every run the test made on their task
    queue is replayed from its recorded history (``Replayer`` fails on nondeterminism)."""
    client = await connect(target)
    async with worker(client, list(durables), sticky_queue_schedule_to_start_timeout=1.0):
        yield client
    await _replay_all(client, durables)


async def _replay_all(client: Any, durables: tuple[TemporalAgent[Any], ...]) -> None:
    queues = " OR ".join(f"TaskQueue = '{d.task_queue}'" for d in durables)
    replayed: list[str] = []

    async def histories() -> AsyncIterator[Any]:
        async for history in client.list_workflows(queues).map_histories():
            replayed.append(history.workflow_id)
            yield history

    results = await replayer(list(durables)).replay_workflows(histories())
    assert results.replay_failures == {}
    assert replayed, "no run to replay"


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def _same(durable: RunResult[Any], local: RunResult[Any]) -> None:
    """Equal but for the run's id and the emulated provider's call ids (it counts requests)."""

    def plain(result: RunResult[Any]) -> str:
        return re.sub(r"call_\d+_(\d+)", r"call_\1", repr(dataclasses.replace(result, run_id="x")))

    assert plain(durable) == plain(local)


@asynccontextmanager
async def emulated_agent(url: str, **kwargs: Any) -> AsyncIterator[Agent]:
    model = OpenAIChatModel("emulated", base_url=url + "/v1", api_key="k")
    try:
        yield Agent(model, **kwargs)
    finally:
        await model.aclose()


async def test_a_durable_run_ends_as_the_same_run_in_process(
    temporal_target: str, provider: ProviderServer
) -> None:
    """Same answer, steps, usage and state, on the emulated provider over real sockets; the
    tool's state change came back from its activity."""
    async with emulated_agent(provider.url, name="adder", tools=[add, remember]) as agent:
        local = await agent.run("add 2 and 3", state={"notes": []})
        durable = TemporalAgent(agent, task_queue=_queue())
        async with serving(temporal_target, durable) as client:
            result = await durable.run(client, "add 2 and 3", state={"notes": []})
    _same(result, local)
    assert result.output == "The sum is 5."
    assert result.state == {"notes": ["n1"]}
    assert [a.output for a in result.steps[0].actions] == [5, "kept n1"]


async def test_react_mode_runs_durably_too(temporal_target: str) -> None:
    with ProviderServer(EmulatedProvider(script=REACT_ADDING)) as server:
        async with emulated_agent(
            server.url, name="reacter", tools=[add], tool_mode="react"
        ) as agent:
            local = await agent.run("add")
            durable = TemporalAgent(agent, task_queue=_queue())
            async with serving(temporal_target, durable) as client:
                result = await durable.run(client, "add")
    _same(result, local)
    assert result.output == "The sum is 5."


async def test_the_caller_streams_and_resumes_from_the_last_seq_it_saw(
    temporal_target: str, provider: ProviderServer
) -> None:
    """Thoughts, actions and the answer stream; a second caller attached after seq n gets
    exactly the events after n."""
    async with emulated_agent(provider.url, name="streamer", tools=[add, remember]) as agent:
        durable = TemporalAgent(agent, task_queue=_queue())
        async with serving(temporal_target, durable) as client:
            run = await durable.start(client, "add 2 and 3")
            first: list[ev.Event] = []
            async for event in run:
                first.append(event)
                if isinstance(event, ev.ActionStarted):
                    break
            again = durable.attach(client, run.run_id, after_seq=first[-1].seq)
            rest = [event async for event in again]
            result = await again.result()
    seqs = [e.seq for e in first + rest]
    assert seqs == list(range(1, len(seqs) + 1))
    types = [e.type for e in first + rest]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert "text_delta" in types and "action_finished" in types and "step_finished" in types
    assert "".join(e.text for e in rest if isinstance(e, ev.TextDelta)).endswith("The sum is 5.")
    assert isinstance(rest[-1], ev.RunFinished) and rest[-1].result == result


async def test_a_caller_that_stopped_streaming_gets_the_result_without_the_linger(
    temporal_target: str,
) -> None:
    """A run waits up to ``linger`` for its streaming caller to read the end; a caller that
    stops iterating and asks for the result reads the rest itself, and gets it at once."""
    model = ScriptedModel([Reply(calls=[call("add", {"a": 1, "b": 2})]), "3"])
    durable = TemporalAgent(Agent(model, name="lingering", tools=[add]), task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        async for event in run:
            if isinstance(event, ev.RunStarted):
                break
        with anyio.fail_after(20):  # the linger is 60 s
            result = await run.result()
    assert result.output == "3"


async def test_a_retried_model_activity_is_discarded_for_the_caller(temporal_target: str) -> None:
    """The first model activity streams a draft and fails: the caller sees the draft, then
    ``AttemptDiscarded(reason="retry")``, then the second attempt's answer."""
    model = ScriptedModel(
        [Reply(text="a draft that", raise_after=ModelConnectionError("reset")), "the answer"]
    )
    from agentloop import RetryPolicy

    agent = Agent(model, name="retrier", retry=RetryPolicy(initial_wait=0.01, jitter=0.0))
    durable = TemporalAgent(agent, task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "hi")
        events = [event async for event in run]
        result = await run.result()
    discarded = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(d.attempt, d.reason) for d in discarded] == [(1, "retry")]
    drafts = [e for e in events if isinstance(e, ev.TextDelta) and e.attempt == 1]
    assert drafts and events.index(drafts[-1]) < events.index(discarded[0])
    assert result.output == "the answer" and result.usage.requests == 2


async def test_a_tool_starts_while_the_model_activity_still_streams(temporal_target: str) -> None:
    """Eager dispatch survives durability: the first action, sealed early in a slow stream,
    starts as an activity and finishes before the model activity's stream ends."""

    @tool(name="work")
    async def work(n: int) -> int:
        """Work a little.

        Args:
            n: what to return
        """
        await anyio.sleep(0.2)
        return n

    model = ScriptedModel(
        [
            Reply(
                timeline=[
                    (0.05, call("work", {"n": 1}, id="a")),
                    (1.5, call("work", {"n": 2}, id="b")),
                ]
            ),
            "done",
        ]
    )
    durable = TemporalAgent(Agent(model, name="eager", tools=[work]), task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        events = [event async for event in run]
    order = [
        (e.type, getattr(e, "tag", None) or getattr(getattr(e, "result", None), "tag", None))
        for e in events
        if isinstance(e, ev.ActionStarted | ev.ActionFinished | ev.ModelCallFinished)
    ]
    assert order[:3] == [
        ("action_started", "a"),
        ("action_finished", "a"),
        ("action_started", "b"),
    ]
    assert order.index(("action_finished", "a")) < order.index(("model_call_finished", None))


async def test_goal_tools_and_enforcement_work_inside_the_workflow(temporal_target: str) -> None:
    """The model answers while its goal is active: enforcement asks again (a discarded
    attempt), the model completes the goal through the tool activity, then answers."""
    model = ScriptedModel(
        [
            Reply(calls=[call("create_goal", {"objective": "say hi"})]),
            "hi (too early)",
            Reply(calls=[call("update_goal", {"status": "complete"})]),
            "hi",
        ]
    )
    agent = setup_goal(Agent(model, name="goaler"))
    durable = TemporalAgent(agent, task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "greet")
        events = [event async for event in run]
        result = await run.result()
    assert result.output == "hi"
    assert [d.reason for d in events if isinstance(d, AttemptDiscarded)] == ["goal"]
    goal = result.state and result.state.get("goal:goaler")
    assert goal is not None and '"status":"complete"' in goal


async def test_replaying_a_history_fails_on_a_changed_agent(
    temporal_target: str, provider: ProviderServer
) -> None:
    """Every test's runs are replayed (``serving``); here, the replay check itself: the same
    history replays cleanly with the same agent, and fails with a changed one."""
    async with emulated_agent(provider.url, name="replayed", tools=[add, remember]) as agent:
        durable = TemporalAgent(agent, task_queue=_queue())
        async with serving(temporal_target, durable) as client:
            run = await durable.start(client, "add 2 and 3")
            _ = [event async for event in run]
            await run.result()
            history = await client.get_workflow_handle(run.run_id).fetch_history()
        same = await replayer([durable]).replay_workflow(history, raise_on_replay_failure=False)
        changed = TemporalAgent(agent.replace(tools=[add]), task_queue=durable.task_queue)
        other = await replayer([changed]).replay_workflow(history, raise_on_replay_failure=False)
    assert same.replay_failure is None
    assert other.replay_failure is not None


async def test_a_worker_with_another_definition_fails_the_run_clearly(temporal_target: str) -> None:
    queue = _queue()
    caller = TemporalAgent(
        Agent(ScriptedModel(["x"]), name="versioned", tools=[add]), task_queue=queue
    )
    changed = TemporalAgent(
        Agent(ScriptedModel(["x"]), name="versioned", tools=[add, remember]), task_queue=queue
    )
    async with serving(temporal_target, changed) as client:
        with pytest.raises(DurableRunFailed, match="the run was started with agent"):
            await caller.run(client, "hi")


async def test_a_worker_without_the_runs_agent_fails_the_run_clearly(
    temporal_target: str,
) -> None:
    caller = TemporalAgent(Agent(ScriptedModel(["x"]), name="elsewhere"), task_queue=_queue())
    served = TemporalAgent(Agent(ScriptedModel(["x"]), name="here"), task_queue=caller.task_queue)
    async with serving(temporal_target, served) as client:
        with pytest.raises(DurableRunFailed, match="serves no agent named 'elsewhere'"):
            await caller.run(client, "hi")


def test_a_worker_refuses_an_agent_or_a_tool_it_cannot_import() -> None:
    with pytest.raises(UserError, match="cannot import the agent 'no_such_module:agent'"):
        temporal._worker._served(["no_such_module:agent"])

    async def orphan() -> str:
        """A tool whose module is gone."""
        return "x"

    orphan.__module__ = "no_such_module"
    durable = TemporalAgent(Agent(ScriptedModel(["x"]), name="orphaned", tools=[orphan]))
    with pytest.raises(UserError, match="its module 'no_such_module' cannot be imported"):
        temporal._worker._served([durable])


async def test_an_unreachable_server_fails_in_bounded_time() -> None:
    from tests.support.temporal import free_port

    with anyio.fail_after(10):
        with pytest.raises(TemporalUnavailable, match=r"127\.0\.0\.1"):
            await connect(f"127.0.0.1:{free_port()}", within=2.0)


def test_durable_runs_say_they_need_asyncio() -> None:
    async def on_trio() -> None:
        await connect("127.0.0.1:1")

    with pytest.raises(UserError, match="asyncio-only"):
        anyio.run(on_trio, backend="trio")


async def test_a_tool_activity_keeps_the_tools_timeout_and_heartbeats_while_it_runs(
    temporal_target: str,
) -> None:
    """A tool past its own timeout is an error result, as in-process; a tool that runs past
    its activity's heartbeat timeout still finishes in its first attempt (it heartbeats)."""
    starts: list[int] = []

    @tool(timeout=0.2)
    async def stuck() -> str:
        """Never returns in time."""
        await anyio.sleep(30)
        return "never"

    @tool
    async def long(ctx: ToolContext) -> str:
        """Runs past the heartbeat timeout."""
        starts.append(1)
        await anyio.sleep(2.5)
        return "finished"

    model = ScriptedModel([Reply(calls=[call("stuck", {}), call("long", {})]), "ok"])
    durable = TemporalAgent(
        Agent(model, name="timed", tools=[stuck, long]),
        task_queue=_queue(),
        tool_activities={"long": ActivityOptions(heartbeat=1.0)},
    )
    async with serving(temporal_target, durable) as client:
        result = await durable.run(client, "go")
    stuck_result, long_result = result.steps[0].actions
    assert stuck_result.error_kind == "timeout" and "0.2s" in (stuck_result.error or "")
    assert long_result.output == "finished" and starts == [1]


@pytest.mark.slow
async def test_a_tools_retry_policy_is_its_own(temporal_target: str) -> None:
    """Per tool, ``ActivityOptions`` replace the defaults: a tool whose activity times out
    runs twice under its policy of two attempts, then the model gets an error result."""
    from temporalio.common import RetryPolicy as TemporalRetryPolicy

    calls: list[str] = []

    @tool
    async def hangs(ctx: ToolContext) -> str:
        """Outlives its activity."""
        calls.append(ctx.idempotency_key)
        await anyio.sleep(30)
        return "never"

    model = ScriptedModel([Reply(calls=[call("hangs", {})]), "gave up"])
    twice = TemporalRetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=2)
    durable = TemporalAgent(
        Agent(model, name="retried", tools=[hangs]),
        task_queue=_queue(),
        # Each attempt times out after 1 s (the tool has long begun by then: it runs at once).
        tool_activities={"hangs": ActivityOptions(start_to_close=1.0, retry=twice)},
    )
    async with serving(temporal_target, durable) as client:
        result = await durable.run(client, "go")
    action = result.steps[0].actions[0]
    assert action.error_kind == "tool_error" and "activity failed" in (action.error or "")
    assert len(calls) == 2 and len(set(calls)) == 1  # the same idempotency key twice
    assert result.output == "gave up"


async def test_a_driver_fault_fails_the_run_as_in_process(temporal_target: str) -> None:
    def broken(request: Any) -> str:
        raise TypeError("a bug in the driver")

    durable = TemporalAgent(Agent(FunctionModel(broken), name="faulty"), task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        events = [event async for event in run]
        with pytest.raises(DurableRunFailed, match="a bug in the driver"):
            await run.result()
    assert isinstance(events[-1], ev.RunFailed) and events[-1].error.kind == "RuntimeError"


async def test_cancelling_a_durable_run_cancels_its_tool_activity(
    temporal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workflow's cancellation reaches the tool in flight (its activity is cancelled
    through its handle, never awaited inside a cancel scope: that would deadlock). The caller
    streaming it learns of the end at once (it used to poll the ended run until it counted as
    idle, 2 s; here that would be a minute)."""
    monkeypatch.setattr(_durable, "IDLE_POLLS", 600)
    cancelled = anyio.Event()

    @tool
    async def forever() -> str:
        """Never ends."""
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    model = ScriptedModel([Reply(calls=[call("forever", {})]), "x"])
    durable = TemporalAgent(
        Agent(model, name="cancelled", tools=[forever]),
        task_queue=_queue(),
        tool_activity=ActivityOptions(heartbeat=1.0),
    )
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        async for event in run:
            if isinstance(event, ev.ActionStarted):
                break
        await run.cancel()
        with anyio.fail_after(10):
            await cancelled.wait()
        with anyio.fail_after(10), pytest.raises(DurableRunFailed, match=r"[Cc]ancel"):
            await run.result()


def _remembering_model() -> FunctionModel:
    """Notes each input with the tool, then answers with every user message it was shown
    (the session's memory, then this input)."""

    def reply(request: ModelRequest) -> Reply | str:
        users = [m.text for m in request.messages if m.role == "user"]
        if not any(isinstance(p, ToolResultPart) for m in request.messages for p in m.parts):
            return Reply(calls=[call("remember", {"note": users[-1]})])
        return "seen: " + " | ".join(users)

    return FunctionModel(reply)


async def test_a_session_is_the_same_whether_its_runs_were_durable_or_not(
    temporal_target: str, tmp_path: Any
) -> None:
    """In-process, durable, in-process again on one session: memory, state and history are
    those of three in-process runs. The store stays the source of truth."""
    async with SQLiteStore(str(tmp_path / "sessions.db")) as store:
        agent = Agent(_remembering_model(), name="sessioned", tools=[remember], store=store)
        durable = TemporalAgent(agent, task_queue=_queue())
        async with serving(temporal_target, durable) as client:
            mixed = [
                await agent.run("first", session="mixed"),
                await durable.run(client, "second", session="mixed"),
                await agent.run("third", session="mixed"),
            ]
        local = [await agent.run(text, session="local") for text in ("first", "second", "third")]
        mixed_session = await store.get("mixed")
        local_session = await store.get("local")
    assert [r.output for r in mixed] == [r.output for r in local]
    assert mixed[-1].output == "seen: first | second | third"
    assert mixed_session is not None and local_session is not None
    assert mixed_session.state == local_session.state == {"notes": ["first", "second", "third"]}
    kinds = [(r.type, getattr(r, "status", None)) for r in mixed_session.history]
    assert kinds == [(r.type, getattr(r, "status", None)) for r in local_session.history]
    assert mixed_session.lease is None or mixed_session.lease.owner == mixed[-1].run_id


async def test_a_traced_agent_runs_durably_untraced_in_the_workflow(temporal_target: str) -> None:
    """The OpenTelemetry SDK reads the environment, which the sandbox refuses: the workflow
    runs the agent with tracing off rather than failing."""
    model = ScriptedModel([Reply(calls=[call("add", {"a": 1, "b": 2})]), "3"])
    agent = Agent(model, name="traced", tools=[add], instrument=True)
    durable = TemporalAgent(agent, task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        result = await durable.run(client, "go")
    assert result.output == "3"


def test_activity_options_are_checked() -> None:
    with pytest.raises(UserError, match="heartbeat"):
        ActivityOptions(heartbeat=0)
    with pytest.raises(UserError, match="unknown tools"):
        TemporalAgent(Agent(ScriptedModel(["x"])), tool_activities={"nope": ActivityOptions()})


async def test_a_busy_stream_is_read_by_queries_not_updates(
    temporal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Updates are recorded and limited per run (2,000 on the dev server); queries are
    neither. A caller streaming a busy run for over twice its idle time makes no update at all:
    it long-polls with an update only after the run has been idle for a while. (The idle time
    is 0.8 s here, not 2 s, so that the stream need only last about 2 s, not 3 s and more.)"""
    monkeypatch.setattr(_durable, "IDLE_POLLS", 8)  # polls 0.1 s apart: 0.8 s idle
    script: list[EmulatedTurn | str] = ["word " * 30]
    with ProviderServer(
        EmulatedProvider(script=script, chunk_delay=0.06, text_chunks=30)
    ) as server:
        async with emulated_agent(server.url, name="talker") as agent:
            durable = TemporalAgent(agent, task_queue=_queue())
            async with serving(temporal_target, durable) as client:
                run = await durable.start(client, "talk")
                deltas = [e async for e in run if isinstance(e, ev.TextDelta)]
                history = await client.get_workflow_handle(run.run_id).fetch_history()
    from temporalio.api.enums.v1 import EventType

    updates = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert len(deltas) >= 10  # it streamed, over about two seconds
    assert len(updates) <= 1, len(updates)


async def _no_remembering(call: Any) -> Tripwire | None:
    return Tripwire(reason="no notes today") if call.action.name == "remember" else None


async def test_tool_guardrails_and_the_tool_call_limit_hold_in_durable_runs(
    temporal_target: str, provider: ProviderServer
) -> None:
    """The run's controls wrap the tool activities in the workflow, as they wrap the tools
    in-process: a tripped call never runs, and the limit counts the durable run's calls."""
    guard = ToolGuardrail(before=_no_remembering)
    async with emulated_agent(
        provider.url, name="guarded-adder", tools=[add, remember], guardrails=[guard]
    ) as agent:
        local = await agent.run("add 2 and 3", state={"notes": []})
        durable = TemporalAgent(agent, task_queue=_queue())
        async with serving(temporal_target, durable) as client:
            result = await durable.run(client, "add 2 and 3", state={"notes": []})
    assert local.error is not None and local.error.kind == "guardrail_tripped"
    assert result.error is not None and result.error.kind == "guardrail_tripped"
    assert result.state == {"notes": []}  # the tripped call never ran
    _same(result, local)

    with ProviderServer(EmulatedProvider(script=ADDING)) as server:
        async with emulated_agent(
            server.url,
            name="limited-adder",
            tools=[add, remember],
            usage_limits=UsageLimits(tool_calls=1),
        ) as agent_limited:
            durable = TemporalAgent(agent_limited, task_queue=_queue())
            async with serving(temporal_target, durable) as client:
                limited = await durable.run(client, "add 2 and 3", state={"notes": []})
    assert limited.error is not None
    assert limited.error.kind == "usage_limit_exceeded"
    assert [a.error_kind for a in limited.steps[0].actions].count("not_run") == 1
