"""ReAct text mode in the loop: the template, cutting hallucinated responses, bad actions."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import pytest

from agentloop import Agent, AnswerDelta, RunFinished, UserError, event_from_json, tool
from agentloop.testing import Reply, ScriptedModel


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def raw(text: str, chunk_size: int = 7) -> Reply:
    """A reply streamed exactly as written (no ReAct framing added by the scripted model)."""
    return Reply(
        timeline=[(0.0, text[i : i + chunk_size]) for i in range(0, len(text), chunk_size)]
    )


def react_model(*texts: str, chunk_size: int = 7) -> ScriptedModel:
    return ScriptedModel([raw(t, chunk_size) for t in texts], native_tools=False)


async def test_auto_mode_picks_react_for_models_without_tool_calling() -> None:
    """tool_mode='auto' teaches the text protocol when the model has no native tools."""
    model = react_model("Answer: hi")
    result = await Agent(model, tools=[lookup]).run("x")
    request = model.requests[0]
    assert request.tool_mode == "react" and request.tools == ()
    system = request.system or ""
    assert "Thought:" in system and "Actions:" in system and "<|Response|>" in system
    assert '"name": {"const": "lookup"}' in system and '"minItems": 1' in system
    assert "ToolContext" not in system
    assert result.output == "hi"


async def test_a_hallucinated_response_cuts_the_stream_and_usage_is_unknown() -> None:
    """Text after the model's own <|Response|> is ignored; the cut attempt's usage is unknown."""
    closed: list[bool] = []

    class Closing(ScriptedModel):
        async def _deltas(self, reply: Any, request: Any) -> Any:
            try:
                async with aclosing(super()._deltas(reply, request)) as inner:
                    async for delta in inner:
                        yield delta
            finally:
                closed.append(True)

    reply = (
        'Thought: look\nActions: [{"tag": "a", "name": "lookup", "path": "lookup", '
        '"input": {"key": "k"}}]\n<|Response|>: {"tag": "a", "output": "FAKE"}\nAnswer: fake'
    )
    model = Closing([raw(reply, 5), raw("Answer: K")], native_tools=False)
    result = await Agent(model, tools=[lookup]).run("x")
    first = result.steps[0]
    assert first.finish_reason == "cut" and first.usage is None
    assert [a.output for a in first.actions] == ["K"]
    assert result.output == "K"
    assert result.usage.unknown == 1 and result.usage.requests == 2
    assert closed == [True, True]
    replayed = model.requests[1].messages[-1].text
    assert "FAKE" not in replayed and '"output": "K"' in replayed


async def test_malformed_actions_are_error_results_and_good_ones_still_run() -> None:
    """Bad JSON, a missing field and an unknown tool each get an error result."""
    reply = (
        "Thought: several\nActions: ["
        '{"tag": "ok", "name": "lookup", "path": "lookup", "input": {"key": "a"}}, '
        '{"tag": "bad", "name": "lookup", "path": "lookup", "input": {"key": }}, '
        '{"tag": "nopath", "name": "lookup", "input": {}}, '
        '{"tag": "ghost", "name": "ghost", "path": "ghost", "input": {}}]'
    )
    model = react_model(reply, "Answer: recovered")
    result = await Agent(model, tools=[lookup]).run("x")
    actions = {a.tag: a for a in result.steps[0].actions}
    assert actions["ok"].output == "A"
    kinds = {tag: a.error_kind for tag, a in actions.items() if tag != "ok"}
    assert list(kinds.values()) == ["invalid_action", "invalid_action", "unknown_tool"]
    assert result.output == "recovered"
    replayed = model.requests[1].messages[-1].text
    assert "unknown tool 'ghost'" in replayed


async def test_a_reply_that_ends_inside_the_array_still_runs_the_finished_actions() -> None:
    """The unfinished action gets an error result; the finished one runs."""
    reply = (
        'Actions: [{"tag": "done", "name": "lookup", "path": "lookup", "input": {"key": "z"}}, '
        '{"tag": "cut", "name": "lookup", "path": "look'
    )
    model = react_model(reply, "Answer: ok")
    result = await Agent(model, tools=[lookup]).run("x")
    first = result.steps[0].actions
    assert first[0].output == "Z"
    assert first[1].error_kind == "invalid_action"


async def test_a_reply_without_headers_is_the_answer() -> None:
    """Plain text with no format at all ends the run, as in the seed."""
    result = await Agent(react_model("Just text, no format."), tools=[lookup]).run("x")
    assert result.output == "Just text, no format."


async def test_answer_deltas_stream_as_answer_events() -> None:
    """The Answer: section streams as AnswerDelta events."""
    agent = Agent(react_model("Thought: easy\nAnswer: forty-two", chunk_size=3), tools=[lookup])
    async with agent.stream("x") as run:
        events = [e async for e in run]
    answer = "".join(getattr(e, "text", "") for e in events if e.type == "answer_delta")
    thought = "".join(getattr(e, "text", "") for e in events if e.type == "thought_delta")
    assert (thought, answer) == ("easy", "forty-two")
    assert isinstance(events[-1], RunFinished) and events[-1].result.output == "forty-two"


async def test_the_react_template_can_be_replaced() -> None:
    """A custom template (sandboxed jinja2) replaces the built-in teaching text."""
    template = "Use tools: {% for t in tools %}{{ t.name }} {% endfor %}schema={{ actions_schema }}"
    model = react_model("Answer: ok")
    await Agent(model, tools=[lookup], react_template=template).run("x")
    assert (model.requests[0].system or "").startswith("Use tools: lookup schema={")


def test_templates_are_sandboxed() -> None:
    """A template that reaches for Python internals is refused."""
    agent = Agent(
        ScriptedModel([]),
        instructions="{{ ''.__class__.__mro__[1].__subclasses__() }}",
    )
    with pytest.raises(UserError, match=r"sandbox|unsafe|template"):
        agent.render_instructions({})


async def test_native_mode_sends_schemas_and_no_stop_sequence() -> None:
    """Forcing native mode on a model that could do ReAct sends tools, not text rules."""
    model = ScriptedModel(["ok"])
    await Agent(model, tools=[lookup], tool_mode="native").run("x")
    assert model.requests[0].tool_mode == "native" and model.requests[0].stop == ()
    assert [t.name for t in model.requests[0].tools] == ["lookup"]


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
async def test_actions_mid_line_run(chunk_size: int) -> None:
    """``Thought: ... Actions: [...]`` on one line runs the action (issue 13, point 1)."""
    reply = (
        'Thought: I will add. Actions: [{"tag":"a","name":"add","path":"","input":{"a":1,"b":2}}]'
    )
    model = react_model(reply, "Thought: done. Answer: 3", chunk_size=chunk_size)
    result = await Agent(model, tools=[add]).run("1+2?")
    first = result.steps[0]
    assert [(a.name, a.output) for a in first.actions] == [("add", 3)]
    assert first.thought == "I will add."
    assert result.output == "3"
    assert result.steps[-1].thought == "done."


async def test_a_reply_wrapped_in_a_fence_runs_its_actions() -> None:
    """A whole reply in a code fence is parsed as if unfenced (issue 13, point 2)."""
    reply = (
        "```text\nThought: I will add.\nActions:\n"
        '[{"tag": "a", "name": "add", "path": "add", "input": {"a": 2, "b": 2}}]\n```\n'
    )
    model = react_model(reply, "```\nAnswer: 4\n```")
    result = await Agent(model, tools=[add]).run("2+2?")
    assert [(a.name, a.output) for a in result.steps[0].actions] == [("add", 4)]
    assert result.steps[0].thought == "I will add."
    assert result.output == "4"


async def test_the_last_answer_section_is_the_output() -> None:
    """Several ``Answer:`` sections: the last is the output, the earlier ones go to the thought
    in reply order; ``AnswerDelta.section`` tells them apart and survives JSON (point 4)."""
    reply = "Thought: a\nAnswer: first\nThought: b\nAnswer: second\nsecond line"
    agent = Agent(react_model(reply, chunk_size=4), tools=[add])
    async with agent.stream("x") as run:
        events = [e async for e in run]
    answers = [e for e in events if isinstance(e, AnswerDelta)]
    by_section: dict[int, str] = {}
    for e in answers:
        by_section[e.section] = by_section.get(e.section, "") + e.text
        assert event_from_json(e.to_json()) == e
    assert by_section == {0: "first", 1: "second\nsecond line"}
    assert isinstance(events[-1], RunFinished)
    result = events[-1].result
    assert result.output == "second\nsecond line"
    assert result.steps[0].thought == "a\nfirst\nb"


@pytest.mark.parametrize(
    ("reply", "thought"),
    [
        ("Let me think.\nThought: x\nAnswer: y", "Let me think.\nx"),
        ("Let me think.\n\nThought: x\nThought: z\nAnswer: y", "Let me think.\nx\nz"),
        ("Thought: t\nActions: [ADD] note\nThought: u", "t\nnote\nu"),
        # With actions, the loop adds the answer to the thought and asks again.
        (
            "pre\nThought: a\nActions: [ADD] post\nmore post\nAnswer: y",
            "pre\na\npost\nmore post\ny",
        ),
        ("pre\nActions: [ADD]\nThought: a\nActions: [] post", "pre\na\npost"),
    ],
)
async def test_thought_pieces_are_joined_in_reply_order(reply: str, thought: str) -> None:
    """Text before the first header, thoughts and text after an array form the thought in reply
    order, one newline between pieces (point 5)."""
    action = '[{"tag": "a", "name": "add", "path": "add", "input": {"a": 1, "b": 1}}]'
    replies = [reply.replace("[ADD]", action)]
    if "ADD" in reply:  # actions run, so the model is asked again
        replies.append("Answer: done")
    result = await Agent(react_model(*replies), tools=[add]).run("x")
    assert result.steps[0].thought == thought
    assert result.output == ("done" if "ADD" in reply else "y")
