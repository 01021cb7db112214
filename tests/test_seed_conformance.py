"""Where the loop meets the seeds: replies with neither actions nor an answer (Griptape returns
the raw text), premature finals judged by content (tRPC's ``_is_premature_final``), and
``max_steps`` checked before a step's actions run (Griptape's ``max_subtasks``)."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import Agent, MaxStepsExceeded, ToolContext, tool
from agentloop.goals import setup_goal
from agentloop.testing import Reply, ScriptedModel, call

invocations: list[str] = []


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    invocations.append(f"add {a} {b}")
    return a + b


def raw(text: str, chunk_size: int = 5) -> Reply:
    """A ReAct reply streamed exactly as written."""
    return Reply(
        timeline=[(0.0, text[i : i + chunk_size]) for i in range(0, len(text), chunk_size)]
    )


def react(*replies: Reply | str) -> ScriptedModel:
    return ScriptedModel([raw(r) if isinstance(r, str) else r for r in replies], native_tools=False)


ADD = '[{"tag": "t1", "name": "add", "path": "add", "input": {"a": 1, "b": 2}}]'


# -- 3. neither actions nor an answer -------------------------------------------------------------


async def test_a_thought_only_reply_gets_a_format_reminder_then_counts_as_the_answer() -> None:
    """The first thought-only reply is asked again, with a reminder naming the format; the
    second one's visible text is the answer. Such a model never runs to max_steps."""
    model = react("Thought: the answer is 42", "Thought: I said it: 42")
    result = await Agent(model, tools=[add], max_steps=5).run("q")
    assert result.error is None
    assert result.output == "I said it: 42"
    reminder = model.requests[1].messages[-1].text
    assert "Actions:" in reminder and "Answer:" in reminder
    assert len(result.steps) == 2 and result.steps[0].feedback == reminder


async def test_a_thought_with_unlabelled_text_counts_as_the_answer_after_the_reminder() -> None:
    """Text before any header and a Thought are both visible text, headers removed."""
    model = react("Let me see.\nThought: hmm", "Let me see.\nThought: it is 7.\nSeven it is.")
    result = await Agent(model, tools=[add]).run("q")
    assert result.error is None
    assert isinstance(result.output, str)
    assert "Thought:" not in result.output
    assert result.output == "Let me see.\nit is 7.\nSeven it is."


async def test_on_the_last_allowed_call_a_thought_only_reply_is_the_answer() -> None:
    """With one model call left there is no room for a reminder: the text is the answer."""
    model = react(f"Thought: add\nActions: {ADD}", "Thought: it is 3")
    result = await Agent(model, tools=[add], max_steps=2).run("q")
    assert result.error is None and result.output == "it is 3"


async def test_native_replies_with_only_reasoning_still_keep_going() -> None:
    """Provider reasoning is not visible text: the native loop asks again as before."""
    model = ScriptedModel([Reply(thought="hmm"), Reply(thought="hmm"), "done"])
    result = await Agent(model, tools=[add]).run("q")
    assert result.output == "done" and len(result.steps) == 3


# -- 7. premature finals by content ---------------------------------------------------------------


def _goal_agent(model: ScriptedModel, **kw: Any) -> Agent:
    return setup_goal(Agent(model, tools=[add], **kw))


CREATE = call("create_goal", {"objective": "add 1 and 2"}, id="g1")
COMPLETE = call("update_goal", {"status": "complete"}, id="g2")


async def test_a_text_reply_with_finish_reason_tool_calls_is_a_premature_final() -> None:
    """Some servers send finish_reason='tool_calls' with no tool call: still a final answer."""
    model = ScriptedModel(
        [
            Reply(calls=[CREATE]),
            Reply(text="done early", finish="tool_calls"),
            Reply(calls=[COMPLETE]),
            Reply(text="3", finish="tool_calls"),
        ]
    )
    result = await _goal_agent(model).run("q")
    assert result.output == "3"
    nudge = model.requests[2].messages[-1].text
    assert "still active" in nudge


async def test_the_reply_that_would_end_a_react_run_after_a_reminder_is_premature() -> None:
    """The loop's own test decides: a thought-only reply after the format reminder would be the
    answer, so goal enforcement intercepts it too."""
    create = (
        'Actions: [{"tag": "g", "name": "create_goal", "path": "create_goal", '
        '"input": {"objective": "add"}}]'
    )
    complete = (
        'Actions: [{"tag": "u", "name": "update_goal", "path": "update_goal", '
        '"input": {"status": "complete"}}]'
    )
    model = react(create, "Thought: hmm", "Thought: hmm", complete, "Answer: 3")
    result = await _goal_agent(model).run("q")
    assert result.output == "3"
    assert "still active" in model.requests[3].messages[-1].text


# -- 10. max_steps before actions -----------------------------------------------------------------


async def test_actions_of_the_last_allowed_call_never_run() -> None:
    """max_steps=3: the tools of the first two replies run; the third reply's do not, not even
    eagerly, and the run ends with max_steps_exceeded."""
    invocations.clear()
    script = [Reply(calls=[call("add", {"a": i, "b": 0})]) for i in range(3)]
    result = await Agent(ScriptedModel(script), tools=[add], max_steps=3).run("loop")
    assert result.error is not None and result.error.kind == "max_steps_exceeded"
    assert invocations == ["add 0 0", "add 1 0"]
    assert len(result.steps) == 3
    last = result.steps[-1].actions[0]
    assert last.is_error and last.error_kind == "not_run"


async def test_the_last_allowed_call_knows_it_is_the_last() -> None:
    """Middleware and tools can see it: ``RunContext.last_step``."""
    seen: list[tuple[int, bool]] = []

    async def spy(request: Any, call_next: Any) -> Any:
        seen.append((request.run.step, request.run.last_step))
        return await call_next(request)

    script = [Reply(calls=[call("add", {"a": i, "b": 0})]) for i in range(2)] + ["ok"]
    result = await Agent(
        ScriptedModel(script), tools=[add], max_steps=3, model_middleware=[spy]
    ).run("loop")
    assert result.output == "ok"
    assert seen == [(0, False), (1, False), (2, True)]


async def test_the_last_step_raises_with_its_actions_unrun() -> None:
    invocations.clear()
    agent = Agent(
        ScriptedModel([Reply(calls=[call("add", {"a": 5, "b": 5})])]), tools=[add], max_steps=1
    )
    with pytest.raises(MaxStepsExceeded) as info:
        await agent.run("x", raise_on_error=True)
    assert info.value.result.steps[0].actions[0].error_kind == "not_run"
    assert invocations == []


async def test_without_reflection_the_only_step_still_runs_its_actions() -> None:
    """reflect_on_tool_use=False: the action step is the run's end, so its actions run."""
    invocations.clear()
    model = ScriptedModel([Reply(calls=[call("add", {"a": 2, "b": 2})])])
    agent: Agent[Any, list[Any]] = Agent(model, tools=[add], max_steps=1, reflect_on_tool_use=False)
    result = await agent.run("x")
    assert result.output == [4] and invocations == ["add 2 2"]


async def test_a_tool_context_sees_the_step() -> None:
    steps: list[int] = []

    @tool
    async def probe(ctx: ToolContext) -> str:
        """Probe."""
        steps.append(ctx.step)
        return "ok"

    model = ScriptedModel([Reply(calls=[call("probe")]), "done"])
    await Agent(model, tools=[probe], max_steps=2).run("x")
    assert steps == [0]
