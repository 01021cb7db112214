"""Sub-agents (``Agent.as_tool``) in durable runs: the sub-run runs inside its parent's
workflow (it needs the parent's live run: events, state, usage, waits), its model calls and
tool calls are activities found by the sub-agent's path. Every history is replayed afterwards."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    Approve,
    PendingCall,
    RunContext,
    RunResult,
    ToolContext,
    UserError,
    tool,
)
from agentloop import _events as ev
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
from agentloop.temporal import TemporalAgent, replayer  # noqa: E402
from tests.test_temporal import _same, add, emulated_agent, remember, serving  # noqa: E402

pytestmark = pytest.mark.temporal

seen: list[str] = []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


def _queue() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


PARENT: list[EmulatedTurn | str] = [
    EmulatedTurn(text="Asking the helper.", calls=[EmulatedCall("helper", {"task": "add 2, 3"})]),
    "The helper says 5.",
]
CHILD: list[EmulatedTurn | str] = [
    EmulatedTurn(
        calls=[EmulatedCall("add", {"a": 2, "b": 3}), EmulatedCall("remember", {"note": "c1"})]
    ),
    "5",
]


def _sub_run_ids_cleared(result: RunResult[Any]) -> RunResult[Any]:
    """The sub-runs' ids are fresh ids (the workflow's in a durable run): all else compares."""
    steps = tuple(
        dataclasses.replace(
            step,
            actions=tuple(
                dataclasses.replace(a, subrun=dataclasses.replace(a.subrun, run_id="sub"))
                if a.subrun is not None
                else a
                for a in step.actions
            ),
        )
        for step in result.steps
    )
    return dataclasses.replace(result, steps=steps)


async def note_calls(call: Any, next: Any) -> Any:
    """A tool middleware of the parent: for the sub-agent's call, it runs in the workflow."""
    seen.append(f"{call.run.branch}:{call.action.name}")
    return await next(call)


async def test_a_durable_sub_agent_ends_as_the_same_run_in_process(temporal_target: str) -> None:
    """Same answer, steps (the sub-run's in the action's result), usage and state as the run
    in-process, on the emulated provider over real sockets; the sub-run's events reach the
    durable caller's stream on the branch ``parent.helper``."""
    with (
        ProviderServer(EmulatedProvider(script=PARENT)) as parent_server,
        ProviderServer(EmulatedProvider(script=CHILD)) as child_server,
    ):
        async with emulated_agent(child_server.url, name="helper", tools=[add, remember]) as child:
            async with emulated_agent(
                parent_server.url,
                name="parent",
                tools=[child.as_tool()],
                tool_middleware=[note_calls],
            ) as agent:
                seen.clear()
                local = await agent.run("add 2 and 3", state={"notes": []})
                assert seen == ["parent:helper"]
                seen.clear()
                durable = TemporalAgent(agent, task_queue=_queue())
                async with serving(temporal_target, durable) as client:
                    run = await durable.start(client, "add 2 and 3", state={"notes": []})
                    events = [event async for event in run]
                    result = await run.result()
    _same(_sub_run_ids_cleared(result), _sub_run_ids_cleared(local))
    # It runs in the workflow (not in a tool activity): the replay of the history ran it again.
    assert seen == ["parent:helper", "parent:helper"]
    assert result.output == "The helper says 5."
    assert result.state == {"notes": ["c1"]}
    subrun = result.steps[0].actions[0].subrun
    assert subrun is not None and subrun.output == "5"
    assert [a.output for a in subrun.steps[0].actions] == [5, "kept c1"]
    assert result.usage.requests == 4
    sub_events = [e for e in events if e.branch == "parent.helper"]
    assert {type(e) for e in sub_events} >= {ev.RunStarted, ev.ActionFinished, ev.RunFinished}
    assert all(e.parent_run_id == result.run_id for e in sub_events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[-1], ev.RunFinished) and events[-1].branch == "parent"


async def test_overlapping_calls_of_one_durable_sub_agent_run_side_by_side(
    temporal_target: str,
) -> None:
    """Two calls of the sub-agent in one step run at once in the workflow, each its own
    sub-run and branch (``#tag`` on the second), as in-process."""
    parent_script: list[EmulatedTurn | str] = [
        EmulatedTurn(
            calls=[
                EmulatedCall("helper", {"task": "one"}),
                EmulatedCall("helper", {"task": "two"}),
            ]
        ),
        "both done",
    ]
    with (
        ProviderServer(EmulatedProvider(script=parent_script)) as parent_server,
        ProviderServer(EmulatedProvider(script=["done " * 20], text_chunks=10)) as child_server,
    ):
        async with emulated_agent(child_server.url, name="helper") as child:
            async with emulated_agent(
                parent_server.url, name="parent", tools=[child.as_tool()]
            ) as agent:
                local = await agent.run("go")
                durable = TemporalAgent(agent, task_queue=_queue())
                async with serving(temporal_target, durable) as client:
                    run = await durable.start(client, "go")
                    events = [event async for event in run]
                    result = await run.result()
    _same(_sub_run_ids_cleared(result), _sub_run_ids_cleared(local))
    branches = {a.subrun.branch for a in result.steps[0].actions if a.subrun is not None}
    assert len(branches) == 2 and any("#" in b for b in branches)
    assert {e.branch for e in events if isinstance(e, ev.RunFinished)} == {*branches, "parent"}
    assert result.output == "both done"


@tool(requires_approval=True)
async def transfer(ctx: ToolContext, amount: int) -> str:
    """Move money.

    Args:
        amount: How much.
    """
    return f"sent {amount}"


async def test_approval_inside_a_durable_sub_agent_waits_and_decide_continues_it(
    temporal_target: str,
) -> None:
    """The sub-agent's call needs approval: the parent's run waits (one ``RunWaiting``, the
    pending call's id prefixed with the parent's action's tag), ``run.decide`` continues the
    sub-run where it stopped, and the parent answers."""
    child = Agent(
        ScriptedModel([Reply(calls=[call("transfer", {"amount": 5}, id="pay")]), "paid"]),
        name="teller",
        tools=[transfer],
    )
    parent_model = ScriptedModel(
        [Reply(calls=[call("teller", {"task": "pay 5"}, id="t1")]), "all paid"]
    )
    agent = Agent(parent_model, name="bank", tools=[child.as_tool()])
    durable = TemporalAgent(agent, task_queue=_queue())
    assert durable.may_wait()
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        events: list[ev.Event] = []
        with anyio.fail_after(30):
            async for event in run:
                events.append(event)
                if isinstance(event, ev.RunWaiting) and event.branch == "bank":
                    waiting = await run.waiting()
                    assert waiting is not None
                    assert [p.id for p in waiting.pending] == ["t1/pay"]
                    await run.decide({"t1/pay": Approve()})
        result = await run.result()
    assert result.output == "all paid"
    subrun = result.steps[0].actions[0].subrun
    assert subrun is not None and subrun.output == "paid"
    assert subrun.steps[0].actions[0].output == "sent 5"
    assert [e.type for e in events].count("run_waiting") == 2  # the sub-run's, the parent's
    assert [e.type for e in events if e.branch == "bank"][-1] == "run_finished"


async def test_nested_sub_agents_run_durably_each_found_by_its_path(temporal_target: str) -> None:
    """A sub-agent's sub-agent: its model and tool activities are found by the path
    ``mid/inner``; its events reach the stream on the branch ``outer.mid.inner``."""
    inner = Agent(
        ScriptedModel([Reply(calls=[call("add", {"a": 1, "b": 2})]), "3"]),
        name="inner",
        tools=[add],
    )
    mid = Agent(
        ScriptedModel([Reply(calls=[call("inner", {"task": "1+2"})]), "inner says 3"]),
        name="mid",
        tools=[inner.as_tool()],
    )
    outer = Agent(
        ScriptedModel([Reply(calls=[call("mid", {"task": "ask"})]), "mid says 3"]),
        name="outer",
        tools=[mid.as_tool()],
    )
    durable = TemporalAgent(outer, task_queue=_queue())
    assert durable.agent_paths() == ["", "mid", "mid/inner"]
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        events = [event async for event in run]
        result = await run.result()
    assert result.output == "mid says 3"
    mid_run = result.steps[0].actions[0].subrun
    assert mid_run is not None
    inner_run = mid_run.steps[0].actions[0].subrun
    assert inner_run is not None and inner_run.steps[0].actions[0].output == 3
    assert result.usage.requests == 6
    finished = [e.branch for e in events if isinstance(e, ev.RunFinished)]
    assert finished == ["outer.mid.inner", "outer.mid", "outer"]


def test_a_sub_agent_is_checked_and_fingerprinted_with_its_parent() -> None:
    """A sub-agent's tools are part of the definition a worker and a caller must agree on;
    a sub-agent with a live approver is refused like its parent would be."""

    def parent_with(*tools: Any) -> TemporalAgent[Any]:
        child = Agent(ScriptedModel(["x"]), name="child", tools=list(tools))
        return TemporalAgent(Agent(ScriptedModel(["x"]), name="parent", tools=[child.as_tool()]))

    plain = parent_with()
    assert plain.agent_paths() == ["", "child"]
    assert parent_with(add).fingerprint != plain.fingerprint
    assert parent_with().fingerprint == plain.fingerprint
    assert [t.name for t in parent_with(add).tools("child")] == ["add"]

    async def approve(pending: PendingCall, run: RunContext[Any]) -> Approve:
        return Approve()

    child = Agent(ScriptedModel(["x"]), name="child", approver=approve)
    with pytest.raises(UserError, match=r"live approver.*'child'"):
        TemporalAgent(Agent(ScriptedModel(["x"]), name="parent", tools=[child.as_tool()]))
    assert replayer([plain]) is not None
