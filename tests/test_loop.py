"""The step loop: prompts, replay, errors as values, limits, reflection and structured output."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from agentloop import (
    Agent,
    MaxStepsExceeded,
    Message,
    OutputInvalid,
    Plain,
    RunErrorInfo,
    RunResult,
    ToolError,
    UserError,
    tool,
)
from agentloop.models import (
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    _registry,
    register_provider,
)
from agentloop.testing import FunctionModel, Reply, ScriptedModel, ScriptError, call


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def boom() -> str:
    """Always fails."""
    raise ValueError("kaboom")


@tool
async def refuse() -> str:
    """Fails with a message for the model."""
    raise ToolError("not allowed today")


@tool(timeout=0.5)
async def slow() -> str:
    """Takes too long."""
    await anyio.sleep(60)
    return "never"


async def test_prompt_order_puts_memory_right_after_the_system_message() -> None:
    """System message first, memory at index 1, then the input."""
    model = ScriptedModel(["ok"])
    memory = [Message.user("earlier question"), Message.assistant("earlier answer")]
    agent = Agent(model, instructions="Be brief.")
    await agent.run("now", memory=memory)
    messages = model.requests[0].messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0].text == "Be brief."
    assert messages[1].text == "earlier question"
    assert messages[2].text == "earlier answer"
    assert messages[3].text == "now"


async def test_memory_goes_first_without_a_system_message() -> None:
    """Without a system message, memory sits at index 0."""
    model = ScriptedModel(["ok"])
    await Agent(model).run("now", memory=[Message.user("before")])
    assert [m.text for m in model.requests[0].messages] == ["before", "now"]


async def test_instructions_are_a_template_and_input_is_data() -> None:
    """Instructions render their variables; template syntax in the input stays text."""
    model = ScriptedModel(["ok"])
    agent = Agent(model, instructions="You help {{ user }}.", variables={"user": "Ada"})
    await agent.run("{{ 7*7 }} {% if true %}x{% endif %}", variables={"user": "Grace"})
    messages = model.requests[0].messages
    assert messages[0].text == "You help Grace."
    assert messages[1].text == "{{ 7*7 }} {% if true %}x{% endif %}"


async def test_plain_instructions_are_never_rendered() -> None:
    """``Plain`` text reaches the model as written, braces, comments and all."""
    model = ScriptedModel(["ok"])
    text = "Reply with {{ user.name }} left as it is; {# is not a comment here. {% raw"
    agent = Agent(model, instructions=Plain(text), variables={"user": "Ada"})
    await agent.run("hi", variables={"user": "Grace"})
    assert model.requests[0].messages[0].text == text
    assert agent.replace(max_steps=3).render_instructions({}) == text


async def test_template_mistakes_in_instructions_say_what_to_do() -> None:
    """A template that does not parse fails when the agent is made; one whose variable no one
    gives fails its run. Both errors name the instructions and the way out (``Plain``)."""
    with pytest.raises(UserError, match=r"instructions: template syntax error.*Plain") as made:
        Agent(ScriptedModel([]), instructions="Use {# for comments")
    assert made.value.__cause__ is None and made.value.__suppress_context__
    agent = Agent(ScriptedModel([]), instructions="Hello {{ user.name }}.")
    with pytest.raises(UserError, match=r"instructions: .*'user' is undefined.*Plain"):
        await agent.run("hi")
    assert agent.render_instructions({"user": {"name": "Ada"}}) == "Hello Ada."


async def test_three_step_tool_conversation_replays_every_step() -> None:
    """Two action steps then an answer; each request replays all earlier steps."""
    model = ScriptedModel(
        [
            Reply(text="first", calls=[call("add", {"a": 1, "b": 2})]),
            Reply(text="second", calls=[call("add", {"a": 3, "b": 4})]),
            "3 and 7",
        ]
    )
    result = await Agent(model, tools=[add]).run("add things")
    assert result.ok and result.output == "3 and 7"
    assert [s.thought for s in result.steps] == ["first", "second", ""]
    assert [[a.output for a in s.actions] for s in result.steps] == [[3], [7], []]
    assert result.steps[-1].answer == "3 and 7"
    last = model.requests[2].messages
    assert [m.role for m in last] == ["user", "assistant", "tool", "assistant", "tool"]
    assert isinstance(last[2].parts[0], ToolResultPart) and last[2].parts[0].content == "3"
    assert isinstance(last[4].parts[0], ToolResultPart) and last[4].parts[0].content == "7"
    assert result.usage.requests == 3


async def test_results_are_replayed_in_the_models_order() -> None:
    """The slower first action's result still comes first."""

    @tool
    async def wait(seconds: float, label: str) -> str:
        """A test tool."""
        await anyio.sleep(seconds)
        return label

    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("wait", {"seconds": 0.05, "label": "first"}, id="c1"),
                    call("wait", {"seconds": 0.0, "label": "second"}, id="c2"),
                ]
            ),
            "done",
        ]
    )
    result = await Agent(model, tools=[wait]).run("go")
    assert [a.output for a in result.steps[0].actions] == ["first", "second"]
    tool_message = model.requests[1].messages[-1]
    assert [p.id for p in tool_message.parts if isinstance(p, ToolResultPart)] == ["c1", "c2"]


@pytest.mark.fake_clock
async def test_each_error_kind_is_fed_back_and_the_run_recovers() -> None:
    """Unknown tool, bad arguments, a raising tool, ToolError and a timeout are results."""
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("nope", {}, id="u"),
                    call("add", {"a": "x", "b": 1}, id="v"),
                    call("add", "{not json", id="j"),
                    call("boom", {}, id="b"),
                    call("refuse", {}, id="r"),
                    call("slow", {}, id="t"),
                    call("add", {"a": 1, "b": 1, "c": 5}, id="e"),
                ]
            ),
            "recovered",
        ]
    )
    result = await Agent(model, tools=[add, boom, refuse, slow]).run("try")
    kinds = {a.tag: a.error_kind for a in result.steps[0].actions}
    assert kinds == {
        "u": "unknown_tool",
        "v": "invalid_arguments",
        "j": "invalid_arguments",
        "b": "tool_error",
        "r": "tool_error",
        "t": "timeout",
        "e": "invalid_arguments",
    }
    errors = {a.tag: a.error for a in result.steps[0].actions}
    assert "unknown tool 'nope'" in (errors["u"] or "")
    assert errors["b"] == "ValueError: kaboom"
    assert errors["r"] == "not allowed today"
    assert "timed out after 0.5s" in (errors["t"] or "")
    replayed = model.requests[1].messages[-1].parts
    assert all(isinstance(p, ToolResultPart) and p.is_error for p in replayed)
    assert result.output == "recovered"


async def test_none_is_stripped_from_fields_that_are_not_nullable() -> None:
    """A null for a defaulted field means 'leave it out'; a nullable field keeps its None."""
    seen: list[tuple[int, str | None]] = []

    @tool
    async def pick(
        n: int = 3, label: str | None = "x", items: list[int | None] | None = None
    ) -> str:
        """A test tool."""
        seen.append((n, label))
        return f"{n} {label} {items}"

    model = ScriptedModel(
        [Reply(calls=[call("pick", {"n": None, "label": None, "items": [1, None]})]), "ok"]
    )
    result = await Agent(model, tools=[pick]).run("go")
    assert seen == [(3, None)]
    assert result.steps[0].actions[0].output == "3 None [1, None]"


async def test_max_steps_ends_with_an_error_result() -> None:
    """The loop stops at max_steps with an explicit error, or raises on request. The reply of
    the last allowed call has its actions refused: the model would never see their results."""
    script = [Reply(calls=[call("add", {"a": 1, "b": 1})]) for _ in range(2)]
    result = await Agent(ScriptedModel(script), tools=[add], max_steps=2).run("loop")
    assert result.error is not None and result.error.kind == "max_steps_exceeded"
    assert "max_steps=2" in result.error.message and result.output is None
    assert len(result.steps) == 2
    agent = Agent(ScriptedModel(list(script)), tools=[add], max_steps=2)
    with pytest.raises(MaxStepsExceeded) as info:
        await agent.run("loop", raise_on_error=True)
    assert info.value.result.steps[0].actions[0].output == 2
    assert info.value.result.steps[-1].actions[0].error_kind == "not_run"


async def test_a_reply_with_neither_actions_nor_text_is_asked_again() -> None:
    """An empty reply gets 'keep going' and counts as a step."""
    model = ScriptedModel([Reply(thought="hmm"), "answer"])
    result = await Agent(model).run("q")
    assert result.output == "answer"
    assert len(result.steps) == 2 and result.steps[0].feedback
    assert model.requests[1].messages[-1].text.startswith("Please keep going")


async def test_reflect_on_tool_use_off_returns_the_first_action_results() -> None:
    """Without reflection the run ends after the first action step, outputs in model order."""
    model = ScriptedModel([Reply(calls=[call("add", {"a": 2, "b": 2}), call("boom", {})])])
    agent: Agent[Any, list[Any]] = Agent(model, tools=[add, boom], reflect_on_tool_use=False)
    result = await agent.run("go")
    assert result.output == [4, "ValueError: kaboom"]
    assert len(model.requests) == 1


def test_reflect_off_with_output_type_is_a_user_error() -> None:
    """The two settings contradict each other."""
    with pytest.raises(UserError, match="reflect_on_tool_use=False"):
        Agent(ScriptedModel([]), reflect_on_tool_use=False, output_type=int)


def test_an_output_type_pydantic_cannot_use_fails_when_the_agent_is_made() -> None:
    """A type with no JSON schema is a UserError naming it, not a pydantic traceback."""

    class Handle:
        def __init__(self, fd: int) -> None:
            self.fd = fd

    with pytest.raises(UserError, match=r"output_type=.*Handle.* cannot be an answer's type") as e:
        Agent(ScriptedModel([]), output_type=Handle)
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert "arbitrary_types_allowed" not in str(e.value)


def test_a_model_string_of_the_wrong_form_fails_when_the_agent_is_made() -> None:
    """'gpt-4o' is not 'provider:model': the agent is not made."""
    for spec in ("gpt-4o", "openai:", ":gpt-4o"):
        with pytest.raises(UserError, match="not of the form 'provider:model'"):
            Agent(spec)


def test_an_unknown_provider_fails_when_the_agent_is_made() -> None:
    """A typo in the provider (``"opnai:gpt-4o"``) is a ``UserError`` where the agent is made,
    naming the provider meant, not a traceback at the first run. A provider registered before
    the agent is made is found."""
    with pytest.raises(UserError, match=r"unknown model provider 'opnai'.*did you mean 'openai'"):
        Agent("opnai:gpt-4o")
    with pytest.raises(UserError, match="unknown model provider 'later'"):
        Agent("later:m")
    register_provider("later", lambda name: ScriptedModel([], name=name))
    try:
        assert Agent("later:m").resolved_model().name == "m"
    finally:
        del _registry._PROVIDERS["later"]


async def test_run_sync_inside_an_event_loop_says_to_await_run() -> None:
    """run_sync starts a loop of its own: from async code it is a UserError, at once."""
    agent = Agent(ScriptedModel([]))
    with pytest.raises(UserError, match=r"use `await agent\.run\(\.\.\.\)`"):
        agent.run_sync("hi")


class Weather(BaseModel):
    city: str
    celsius: float


async def test_structured_output_is_validated() -> None:
    """A valid JSON answer (even fenced) becomes the typed output."""
    model = ScriptedModel(['```json\n{"city": "Paris", "celsius": 21.5}\n```'])
    result = await Agent(model, output_type=Weather).run("weather?")
    assert result.output == Weather(city="Paris", celsius=21.5)
    assert "JSON schema" in (model.requests[0].messages[0].text or "")


async def test_invalid_structured_output_is_sent_back_and_fixed() -> None:
    """Validation errors go back to the model, which fixes its answer."""
    model = ScriptedModel(['{"city": "Paris"}', '{"city": "Paris", "celsius": 3}'])
    result = await Agent(model, output_type=Weather).run("weather?")
    assert result.output == Weather(city="Paris", celsius=3)
    feedback = model.requests[1].messages[-1].text
    assert "celsius" in feedback and "Field required" in feedback


async def test_structured_output_that_never_validates_is_an_output_error() -> None:
    """Out of steps with an invalid answer: OutputInvalid, not a generic limit."""
    model = ScriptedModel(["nope", "still nope"])
    agent = Agent(model, output_type=Weather, max_steps=2)
    with pytest.raises(OutputInvalid):
        await agent.run("weather?", raise_on_error=True)


async def test_an_unsatisfiable_output_type_gives_up_after_output_retries() -> None:
    """An answer that never matches ``output_type`` is asked for again ``output_retries`` times
    (default 1), not until ``max_steps``: then ``output_invalid``, with the last validation
    error."""
    replies: list[int] = []

    def never_json(request: ModelRequest) -> str:
        replies.append(len(replies))
        return f"sunny, reply {len(replies)}"

    result = await Agent(FunctionModel(never_json), output_type=Weather).run("weather?")
    assert result.error is not None and result.error.kind == "output_invalid"
    assert len(replies) == 2  # the answer, and one retry
    assert "output_retries=1" in result.error.message
    assert "(answer)" in result.error.message or "Invalid JSON" in result.error.message
    assert result.text == "sunny, reply 2" and result.output is None

    replies.clear()
    agent = Agent(FunctionModel(never_json), output_type=Weather, output_retries=3, max_steps=20)
    result = await agent.run("weather?")
    assert result.error is not None and result.error.kind == "output_invalid"
    assert len(replies) == 4


async def test_an_answer_that_never_validates_is_not_the_output() -> None:
    """A failed structured output leaves no value of the wrong type in ``output``: it is None
    and the model's last text stays in ``text``; ``unwrap`` raises the matching error."""
    model = ScriptedModel(["nope", "again text"])
    result = await Agent(model, output_type=Weather, max_steps=2).run("weather?")
    assert result.error is not None and result.error.kind == "output_invalid"
    assert result.output is None and result.text == "again text"
    with pytest.raises(OutputInvalid) as info:
        result.unwrap()
    assert info.value.result is result


async def test_unwrap_returns_the_typed_output_of_a_run_with_an_answer() -> None:
    model = ScriptedModel(['{"city": "Oslo", "celsius": -2}'])
    result = await Agent(model, output_type=Weather).run("weather?")
    assert result.unwrap() == Weather(city="Oslo", celsius=-2)


def test_a_result_cannot_have_both_an_error_and_an_output() -> None:
    error = RunErrorInfo(kind="output_invalid", message="no")
    with pytest.raises(ValueError, match="has no output"):
        RunResult(run_id="r", agent="a", branch="a", output="text", text="text", error=error)


async def test_scripted_model_fails_loudly_when_over_consumed() -> None:
    """Asking once more than scripted is an error, not a silent default."""
    model = ScriptedModel([Reply(calls=[call("add", {"a": 1, "b": 1})])])
    with pytest.raises(ScriptError, match="only 1 replies"):
        await Agent(model, tools=[add]).run("go")


def test_scripted_model_fails_loudly_when_under_consumed() -> None:
    """Leftover replies fail the test that scripted them."""
    with pytest.raises(ScriptError, match="never requested"), ScriptedModel(["a", "b"]):
        pass


async def test_native_request_carries_tool_schemas() -> None:
    """Native mode sends one schema per tool and teaches no text format."""
    model = ScriptedModel(["ok"])
    await Agent(model, tools=[add], instructions="hi").run("x")
    request = model.requests[0]
    assert request.tool_mode == "native" and request.stop == ()
    assert [t.name for t in request.tools] == ["add"]
    assert request.tools[0].parameters["required"] == ["a", "b"]
    assert "Actions:" not in (request.system or "")


async def test_react_and_native_runs_of_one_task_agree() -> None:
    """The same scripted task gives the same steps and answer in both modes."""

    def script() -> list[Reply | str]:
        return [
            Reply(text="add first", calls=[call("add", {"a": 1, "b": 2}, id="c1")]),
            Reply(text="then more", calls=[call("add", {"a": 3, "b": 4}, id="c2")]),
            Reply(text="3 then 7"),
        ]

    results = []
    for mode in ("native", "react"):
        model = ScriptedModel(script(), chunk_size=5)
        results.append(await Agent(model, tools=[add], tool_mode=mode).run("sum"))
    native, react = results

    def shape(result: object) -> object:
        steps = result.steps  # type: ignore[attr-defined]
        return [
            (s.thought, s.answer, [(a.tag, a.name, a.input, a.output) for a in s.actions])
            for s in steps
        ]

    assert shape(native) == shape(react)
    assert native.output == react.output == "3 then 7"


async def test_react_replay_labels_results_with_their_tags() -> None:
    """ReAct replays the actions as text and every result under its tag."""
    model = ScriptedModel(
        [
            Reply(
                text="t", calls=[call("add", {"a": 1, "b": 2}, id="x1"), call("nope", {}, id="x2")]
            ),
            "ok",
        ],
        native_tools=False,
    )
    await Agent(model, tools=[add]).run("go")
    second = model.requests[1]
    assert second.tool_mode == "react" and second.stop == ("<|Response|>",)
    assistant, results = second.messages[-2], second.messages[-1]
    assert assistant.text.startswith("Thought: t\nActions: [")
    lines = results.text.splitlines()
    assert lines[0] == "<|Response|>:"
    assert json.loads(lines[1]) == {"tag": "x1", "output": 3}
    assert json.loads(lines[2])["tag"] == "x2" and "unknown tool" in json.loads(lines[2])["error"]


async def test_native_replay_pairs_every_call_with_a_result() -> None:
    """The assistant turn holds the calls, the tool turn one result per call."""
    model = ScriptedModel([Reply(text="t", calls=[call("add", {"a": 1, "b": 2}, id="k")]), "ok"])
    await Agent(model, tools=[add]).run("go")
    assistant, results = model.requests[1].messages[-2:]
    assert assistant.parts[0] == TextPart(text="t")
    assert isinstance(assistant.parts[1], ToolCallPart) and assistant.parts[1].id == "k"
    assert results.role == "tool" and results.parts[0] == ToolResultPart(
        id="k", name="add", content="3"
    )


async def test_refusal_is_an_outcome_not_an_answer() -> None:
    """A refusal ends the run with the 'refused' error and the refusal text."""
    model = ScriptedModel([Reply(text="I can't help with that.", finish="refusal")])
    result = await Agent(model).run("bad")
    assert result.error is not None and result.error.kind == "refused"
    assert result.text == "I can't help with that." and result.output is None


async def test_truncated_reply_is_not_silently_an_answer() -> None:
    """A reply cut by the token limit ends with the 'truncated' error."""
    model = ScriptedModel([Reply(text="The answer is", finish="length")])
    result = await Agent(model).run("q")
    assert result.error is not None and result.error.kind == "truncated"
    assert result.text == "The answer is" and result.output is None


async def test_reply_too_large_is_a_result_error() -> None:
    """A reply longer than max_reply_chars ends the run without waiting for the rest."""
    model = ScriptedModel([Reply(text="x" * 1000)], chunk_size=10)
    result = await Agent(model, max_reply_chars=100).run("q")
    assert result.error is not None and result.error.kind == "reply_too_large"


@pytest.mark.fake_clock
async def test_the_run_deadline_fails_the_run(fake_time: bool, timescale: float) -> None:
    """Agent(deadline=...) ends a run that takes too long with RunDeadlineExceeded."""
    from agentloop import RunDeadlineExceeded

    @tool
    async def forever() -> str:
        """A test tool."""
        await anyio.sleep(3600)
        return "never"

    model = ScriptedModel([Reply(calls=[call("forever", {})]), "unused"])
    agent = Agent(model, tools=[forever], deadline=5.0 * timescale)
    start = anyio.current_time()
    async with agent.stream("go") as run:
        events = [e async for e in run]
    assert events[-1].type == "run_failed"
    with pytest.raises(RunDeadlineExceeded):
        run.result  # noqa: B018
    if fake_time:
        assert anyio.current_time() - start == pytest.approx(5.0)


async def test_runs_share_their_system_message_and_a_run_its_user_message() -> None:
    """The system message is rendered once for runs with the same instructions (the same object
    reaches the model, so a driver encodes it once); a run's steps share one user message."""
    model = ScriptedModel([Reply(calls=[call("add", {"a": 1, "b": 2})]), "3", "again", "other"])
    agent = Agent(model, tools=[add], instructions="You help {{ user }}.", tool_mode="native")
    await agent.run("sum", variables={"user": "Ada"})
    await agent.run("again", variables={"user": "Ada"})
    await agent.run("other", variables={"user": "Grace"})
    first, second, third, fourth = (r.messages for r in model.requests)
    assert first[0] is second[0] is third[0]
    assert fourth[0] is not first[0] and fourth[0].text == "You help Grace."
    assert first[1] is second[1]  # the user message, in both steps of the first run
    assert third[1].text == "again"


async def test_a_custom_react_template_is_rendered_on_every_run() -> None:
    """An author's ReAct template may not be pure, so its system message is never reused."""
    model = ScriptedModel(["Answer: one", "Answer: two"])
    template = "Tools: {% for t in tools %}{{ t.name }} {% endfor %}"
    agent = Agent(model, tools=[add], tool_mode="react", react_template=template)
    await agent.run("a")
    await agent.run("b")
    first, second = (r.messages[0] for r in model.requests)
    assert first is not second
    assert first.text == second.text and "Tools: add" in first.text


@pytest.mark.parametrize(
    "instructions", [None, "", "Be brief.", "  Keep {{ name }} as is.\n\n", "a\n\nb  \n"]
)
def test_a_system_message_of_instructions_alone_is_the_templates(instructions: str | None) -> None:
    """Instructions alone skip the system template (and importing jinja2): the text is the one
    the template renders."""
    from agentloop._prompt import _builtin, render, system_message

    message = system_message(
        instructions=instructions,
        rulesets=(),
        tools=(),
        tool_mode="native",
        reflect=False,
        output_schema=None,
        react_template=None,
    )
    variables = {
        "instructions": instructions or "",
        "rulesets": (),
        "react": "",
        "output_schema": "",
    }
    expected = render(_builtin("system.j2"), variables).strip()
    assert (message.text if message is not None else "") == expected


@pytest.mark.parametrize(
    "source",
    ["Be brief.", "a\n\nb  \n", "a\r\nb\rc\n", "trailing\n\n", "\n", "  x  ", "{ not a tag }"],
)
def test_instructions_without_template_syntax_render_as_jinja2_would(source: str) -> None:
    """Text with no ``{{``, ``{%`` or ``{#`` is kept as the sandbox would render it, without
    compiling it (or importing jinja2 when the agent is made)."""
    from agentloop._prompt import compile_template, render, untemplated

    assert untemplated(source) == render(compile_template(source), {})
    assert untemplated("Keep {{ name }}") is None and untemplated("{# note #}") is None
    assert Agent(ScriptedModel([]), instructions=source).render_instructions({}) == untemplated(
        source
    )


def test_an_agent_made_with_its_model_and_tools_renders_its_system_message_when_made() -> None:
    """A service builds its agent at start-up: the ReAct templates are compiled, and the first
    run's system message rendered, then, not during the first request."""
    model = ScriptedModel(["Answer: one"])
    agent = Agent(model, instructions="Be brief.", tools=[add], tool_mode="react")
    (made,) = agent._derived.system_messages.values()
    assert made is not None and "Be brief." in made.text and "add" in made.text
    agent.run_sync("a")
    assert model.requests[0].messages[0] is made
