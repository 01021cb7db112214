"""Sub-agents: a run inside an action, on its own branch, sharing the parent's state."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from agentloop import ActionResult, Agent, ModelRequest, ToolContext, tool
from agentloop.models import _registry, register_provider
from agentloop.models.openai import OpenAIChatModel
from agentloop.testing import (
    EmulatedProvider,
    FunctionModel,
    ProviderServer,
    Reply,
    ScriptedModel,
    call,
)


@tool
async def note(ctx: ToolContext, text: str) -> str:
    """Write a note into the shared state."""
    ctx.state[f"note:{ctx.branch}"] = text
    return "noted"


async def test_a_sub_agent_runs_on_its_own_branch_and_reports_back() -> None:
    """The child's events carry branch parent.child; its steps land in the action's result."""
    child_model = ScriptedModel(
        [Reply(calls=[call("note", {"text": "from child"})]), "child answer"]
    )
    child = Agent(child_model, name="researcher", tools=[note])
    parent_model = ScriptedModel(
        [Reply(calls=[call("researcher", {"task": "dig"}, id="d1")]), "parent answer"]
    )
    parent = Agent(parent_model, name="lead", tools=[child.as_tool()])
    async with parent.stream("go") as run:
        events = [e async for e in run]
    result = run.result
    assert result.output == "parent answer"
    action: ActionResult = result.steps[0].actions[0]
    assert action.output == "child answer"
    assert action.subrun is not None and action.subrun.branch == "lead.researcher"
    assert [s.answer for s in action.subrun.steps] == [None, "child answer"]
    assert result.state == {"note:lead.researcher": "from child"}
    child_events = [e for e in events if e.branch == "lead.researcher"]
    assert child_events and all(e.parent_run_id == result.run_id for e in child_events)
    assert child_events[0].type == "run_started"
    assert [e.type for e in events].count("run_finished") == 2
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert child_model.requests[0].messages[-1].text == "dig"
    assert result.usage.requests == 4


async def test_concurrent_calls_of_one_sub_agent_get_distinct_branches() -> None:
    """Two overlapping calls run on lead.worker and lead.worker#<tag>."""
    branches: list[str] = []

    @tool
    async def where(ctx: ToolContext) -> str:
        """A test tool."""
        branches.append(ctx.branch)
        return ctx.branch

    def reply(request: ModelRequest) -> Reply | str:
        done = any(m.role == "tool" for m in request.messages)
        return "finished" if done else Reply(calls=[call("where", {})])

    child = Agent(FunctionModel(reply, delay=0.01), name="worker", tools=[where])
    parent_model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("worker", {"task": "one"}, id="t1"),
                    call("worker", {"task": "two"}, id="t2"),
                ]
            ),
            "done",
        ]
    )
    result = await Agent(parent_model, name="lead", tools=[child.as_tool()]).run("go")
    assert result.output == "done"
    plain, tagged = sorted(branches)
    assert plain == "lead.worker" and tagged in ("lead.worker#t1", "lead.worker#t2")


async def test_a_failing_sub_agent_is_an_error_result_for_the_parent() -> None:
    """A child that runs out of steps gives the parent model an error it can handle."""
    child = Agent(
        ScriptedModel([Reply(calls=[call("note", {"text": "x"})])]),
        name="helper",
        tools=[note],
        max_steps=1,
    )
    parent_model = ScriptedModel([Reply(calls=[call("helper", {"task": "t"})]), "recovered"])
    result = await Agent(parent_model, name="lead", tools=[child.as_tool()]).run("go")
    action = result.steps[0].actions[0]
    assert action.error_kind == "tool_error" and "max_steps=1" in (action.error or "")
    assert action.subrun is None
    assert result.output == "recovered"


@pytest.fixture
def loopback() -> Iterator[ProviderServer]:
    """A Chat Completions server on loopback, and ``"loopback:<model>"`` strings that make real
    OpenAI drivers (with their HTTP clients) talking to it."""
    with ProviderServer(EmulatedProvider(script=["child answer"])) as server:
        register_provider(
            "loopback",
            lambda name: OpenAIChatModel(name, base_url=server.url + "/v1", api_key="k"),
        )
        try:
            yield server
        finally:
            del _registry._PROVIDERS["loopback"]


def _delegating_parent(child: Agent) -> Agent:
    model = ScriptedModel([Reply(calls=[call("child", {"task": "x"})]), "done"])
    return Agent(model, name="parent", tools=[child.as_tool()])


def _all_closed(server: ProviderServer) -> bool:
    return server.wait_until(lambda stats: stats.open_connections == 0, 5.0)


async def test_closing_a_parent_closes_the_models_its_sub_agents_made(
    loopback: ProviderServer,
) -> None:
    """The child's model was made by the parent's run: leaving ``async with parent`` closes it
    (its HTTP client and connection), and the child stays usable."""
    child = Agent("loopback:m", name="child")
    parent = _delegating_parent(child)
    async with parent:
        result = await parent.run("go")
        assert result.steps[0].actions[0].output == "child answer"
    assert await anyio.to_thread.run_sync(_all_closed, loopback)


def test_run_sync_closes_the_models_its_sub_agents_made(loopback: ProviderServer) -> None:
    """run_sync's loop ends with the run: no model it made, the child's included, outlives it."""
    child = Agent("loopback:m", name="child")
    assert _delegating_parent(child).run_sync("go").output == "done"
    assert _all_closed(loopback)
