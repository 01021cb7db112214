"""Model and tool middleware: order, re-asking, discarded attempts and carried actions."""

from __future__ import annotations

from collections import Counter

import pytest

from agentloop import (
    ActionResult,
    Agent,
    AttemptDiscarded,
    Event,
    ModelCall,
    ModelMiddleware,
    ModelRequest,
    ModelResponse,
    RunFinished,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallNext,
    tool,
)
from agentloop.models import TextPart
from agentloop.testing import Reply, ScriptedModel, call


def _counting_tool(counter: Counter[str]) -> Tool:
    @tool
    async def work(label: str) -> str:
        """A test tool."""
        counter[label] += 1
        return f"did {label}"

    return work


async def _events(agent: Agent, text: str = "go") -> list[Event]:
    async with agent.stream(text) as run:
        return [event async for event in run]


async def test_first_middleware_is_outermost() -> None:
    """Middleware wrap in list order: the first sees the request first and the reply last."""
    trace: list[str] = []

    def named(name: str) -> ModelMiddleware:
        async def mw(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
            trace.append(f"{name}>")
            response = await call_next(request)
            trace.append(f"<{name}")
            return response

        return mw

    agent = Agent(ScriptedModel(["ok"]), model_middleware=[named("a"), named("b")])
    await agent.run("x")
    assert trace == ["a>", "b>", "<b", "<a"]


async def test_middleware_can_rewrite_the_request() -> None:
    """A middleware's request changes reach the model."""

    async def add_rule(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        return await call_next(request.with_system((request.system or "") + "\nRULE"))

    model = ScriptedModel(["ok"])
    await Agent(model, instructions="base", model_middleware=[add_rule]).run("x")
    assert model.requests[0].system == "base\nRULE"


async def test_middleware_asking_twice_discards_one_attempt_and_runs_no_action_twice() -> None:
    """A re-ask discards the first draft (one event) and every action runs once."""
    counter: Counter[str] = Counter()

    async def ask_twice(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        scratch = request.run.scratch(ask_twice) if request.run else {}
        first = await call_next(request)
        if scratch.get("asked"):
            return first
        scratch["asked"] = True
        first.discard()
        return await call_next(request)

    model = ScriptedModel(
        [
            "a premature draft",
            Reply(calls=[call("work", {"label": "x"})]),
            "final answer",
        ],
        chunk_size=4,
    )
    agent = Agent(model, tools=[_counting_tool(counter)], model_middleware=[ask_twice])
    events = await _events(agent)
    discarded = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(e.attempt, e.reason) for e in discarded] == [(1, "middleware")]
    draft = "".join(e.text for e in events if isinstance(e, TextDelta) and e.attempt == 1)
    assert draft == "a premature draft"
    assert counter == Counter({"x": 1})
    final = events[-1]
    assert isinstance(final, RunFinished) and final.result.output == "final answer"
    assert [s.attempt for s in final.result.steps] == [2, 3]


async def test_started_actions_of_a_discarded_attempt_are_carried() -> None:
    """An eager action that started in a discarded attempt runs once and is replayed."""
    counter: Counter[str] = Counter()

    async def reask_once(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        scratch = request.run.scratch(reask_once) if request.run else {}
        response = await call_next(request)
        if not scratch.get("done"):
            scratch["done"] = True
            response.discard()
            return await call_next(request)
        return response

    model = ScriptedModel(
        [
            Reply(calls=[call("work", {"label": "early"}, id="e1")]),
            Reply(calls=[call("work", {"label": "late"}, id="l1")]),
            "done",
        ]
    )
    agent = Agent(model, tools=[_counting_tool(counter)], model_middleware=[reask_once])
    result = await agent.run("go")
    assert counter == Counter({"early": 1, "late": 1})
    first = result.steps[0]
    assert [a.tag for a in first.carried] == ["e1"] and [a.tag for a in first.actions] == ["l1"]
    roles = [m.role for m in model.requests[2].messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]


async def test_unreturned_responses_are_discarded_when_the_chain_returns() -> None:
    """A middleware that keeps the second reply without calling discard() still withdraws
    the first."""

    async def keep_second(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        await call_next(request)
        return await call_next(request)

    agent = Agent(ScriptedModel(["one", "two"]), model_middleware=[keep_second])
    events = await _events(agent)
    assert [e.attempt for e in events if isinstance(e, AttemptDiscarded)] == [1]
    assert isinstance(events[-1], RunFinished) and events[-1].result.output == "two"


async def test_middleware_may_answer_without_calling_the_model() -> None:
    """A synthesised response gets a fresh attempt number and ends the run."""

    async def cached(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        return ModelResponse(parts=(TextPart(text="from cache"),))

    model = ScriptedModel([])
    result = await Agent(model, model_middleware=[cached]).run("x")
    assert result.output == "from cache" and result.steps[0].attempt == 1
    assert model.requests == []


async def test_tool_middleware_wraps_each_action() -> None:
    """Tool middleware sees each call, can rewrite its input and replace its result."""
    seen: list[str] = []

    async def audit(call_: ToolCall, call_next: ToolCallNext) -> ActionResult:
        seen.append(call_.action.tag)
        if call_.action.tag == "blocked":
            return ActionResult(
                tag=call_.action.tag, name=call_.action.name, error="blocked by policy"
            )
        changed = call_.replace(action=_with_input(call_.action, {"label": "rewritten"}))
        return await call_next(changed)

    counter: Counter[str] = Counter()
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("work", {"label": "a"}, id="ok"),
                    call("work", {"label": "b"}, id="blocked"),
                ]
            ),
            "done",
        ]
    )
    agent = Agent(model, tools=[_counting_tool(counter)], tool_middleware=[audit])
    result = await agent.run("go")
    assert sorted(seen) == ["blocked", "ok"]
    assert [a.output or a.error for a in result.steps[0].actions] == [
        "did rewritten",
        "blocked by policy",
    ]
    assert counter == Counter({"rewritten": 1})


async def test_a_failing_tool_middleware_is_that_actions_error() -> None:
    """A bug in a tool middleware becomes the action's error, not a crashed run."""

    async def broken(call_: ToolCall, call_next: ToolCallNext) -> ActionResult:
        raise RuntimeError("oops")

    counter: Counter[str] = Counter()
    model = ScriptedModel([Reply(calls=[call("work", {"label": "a"})]), "fine"])
    agent = Agent(model, tools=[_counting_tool(counter)], tool_middleware=[broken])
    result = await agent.run("go")
    assert result.steps[0].actions[0].error == "tool middleware failed: RuntimeError: oops"
    assert result.output == "fine"


async def test_a_failing_model_middleware_fails_the_run() -> None:
    """A model middleware that raises is a runtime fault: RunFailed, then the error."""

    async def broken(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        raise RuntimeError("middleware bug")

    agent = Agent(ScriptedModel([]), model_middleware=[broken])
    async with agent.stream("x") as run:
        events = [e async for e in run]
    assert [e.type for e in events] == ["run_started", "run_failed"]
    with pytest.raises(RuntimeError, match="middleware bug"):
        run.result  # noqa: B018


def _with_input(action: object, new_input: dict[str, str]) -> object:
    import dataclasses

    return dataclasses.replace(action, input=new_input)  # type: ignore[type-var]
