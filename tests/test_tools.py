"""Tools: schemas from signatures, docstrings, toolkits, context injection and naming rules."""

from __future__ import annotations

import logging
import threading
import warnings
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel

from agentloop import (
    Agent,
    AgentLoopWarning,
    ToolContext,
    Toolkit,
    UserError,
    activity,
    tool,
)
from agentloop.testing import Reply, ScriptedModel, call
from agentloop.tools._schema import strip_nones


class Point(BaseModel):
    x: int
    y: int = 0


def test_schema_comes_from_the_signature_and_docstring() -> None:
    """Types, defaults and Google-style argument docs become the JSON schema."""

    @tool
    def move(point: Point, dx: int, label: str = "p") -> Point:
        """Move a point.

        Args:
            point: the point to move
            dx: how far to move it,
                in units
        """
        return Point(x=point.x + dx, y=point.y)

    spec = next(move.specs())
    assert spec.name == "move" and spec.description == "Move a point."
    props = spec.parameters["properties"]
    assert props["dx"] == {"type": "integer", "description": "how far to move it, in units"}
    assert props["label"]["default"] == "p"
    assert spec.parameters["required"] == ["point", "dx"]
    assert spec.parameters["additionalProperties"] is False
    assert "title" not in str(spec.parameters)


def test_sphinx_docstrings_are_understood() -> None:
    """`:param x:` lines describe parameters."""

    @tool
    def f(x: int) -> int:
        """Do it.

        :param x: the input
        """
        return x

    assert next(f.specs()).parameters["properties"]["x"]["description"] == "the input"


def test_a_signature_that_cannot_be_a_schema_names_the_parameter() -> None:
    """*args, positional-only and unsupported types raise UserError naming the parameter."""

    with pytest.raises(UserError, match="'rest'"):

        @tool
        def star(*rest: int) -> None: ...

    with pytest.raises(UserError, match="'lock'"):

        @tool
        def locked(name: str, lock: threading.Lock) -> None: ...

    with pytest.raises(UserError, match="positional-only"):

        @tool
        def positional(a: int, /) -> None: ...


def test_tool_names_must_be_provider_safe() -> None:
    """Names are [A-Za-z0-9_-], at most 64 characters, without the '__' separator."""
    with pytest.raises(UserError, match="must be 1-64"):
        tool(name="has space")(lambda: None)
    with pytest.raises(UserError, match="must be 1-64"):
        tool(name="a__b")(lambda: None)


def test_duplicate_tool_names_fail_at_agent_construction() -> None:
    """Two tools with one name are a UserError when the Agent is built."""

    @tool(name="same")
    def one() -> None:
        """A test tool."""

    @tool(name="same")
    def two() -> None:
        """A test tool."""

    with pytest.raises(UserError, match="duplicate tool names: same"):
        Agent(ScriptedModel([]), tools=[one, two])


class Calculator(Toolkit):
    """Arithmetic on integers."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    @activity
    async def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b + self.offset

    @activity(name="neg", description="Negate a number.")
    def negate(self, a: int) -> int:
        return -a


def test_toolkit_is_one_tool_with_several_activities() -> None:
    """Each @activity is a path; native names are name__path."""
    calc = Calculator().tool
    assert calc.name == "calculator"
    assert calc.description == "Arithmetic on integers."
    assert sorted(s.name for s in calc.specs()) == ["calculator__add", "calculator__neg"]
    assert calc.activity("neg") is not None and calc.activity("nope") is None


async def test_toolkit_activities_run_natively_and_in_react() -> None:
    """A toolkit's activities are addressed by name__path natively and name+path in ReAct."""
    for native in (True, False):
        model = ScriptedModel(
            [
                Reply(
                    calls=[
                        call("calculator", {"a": 1, "b": 2}, path="add"),
                        call("calculator", {"a": 5}, path="neg"),
                        call("calculator", {}, path="missing"),
                    ]
                ),
                "done",
            ],
            native_tools=native,
        )
        result = await Agent(model, tools=[Calculator(offset=10)]).run("go")
        outputs = [a.output if a.output is not None else a.error for a in result.steps[0].actions]
        assert outputs[:2] == [13, -5]
        assert "has no activity 'missing'" in str(outputs[2])


async def test_context_is_injected_and_hidden_from_the_model() -> None:
    """A ToolContext parameter is filled by the runtime and absent from the schema."""
    seen: dict[str, Any] = {}

    @tool
    async def whoami(ctx: ToolContext, note: str) -> str:
        """A test tool."""
        seen.update(run_id=ctx.run_id, branch=ctx.branch, key=ctx.idempotency_key, deps=ctx.deps)
        ctx.state["last_note"] = note
        return "ok"

    assert list(next(whoami.specs()).parameters["properties"]) == ["note"]
    model = ScriptedModel([Reply(calls=[call("whoami", {"note": "hi"}, id="t1")]), "done"])
    result = await Agent(model, tools=[whoami], name="bot").run("go", deps={"db": 1})
    assert seen["branch"] == "bot" and seen["deps"] == {"db": 1}
    assert seen["key"] == f"-:{result.run_id}:0:t1"
    assert result.state == {"last_note": "hi"}


class Deps(BaseModel):
    db: int


async def test_a_context_typed_with_its_deps_is_injected_too() -> None:
    """``ToolContext[Deps]`` (a string until resolved, here) is the injected context."""
    seen: list[Deps] = []

    @tool
    async def lookup(ctx: ToolContext[Deps], key: str) -> str:
        """Look a key up in the deps' database."""
        seen.append(ctx.deps)
        return f"{key}={ctx.deps.db}"

    assert list(next(lookup.specs()).parameters["properties"]) == ["key"]
    model = ScriptedModel([Reply(calls=[call("lookup", {"key": "a"})]), "done"])
    agent = Agent(model, tools=[lookup], deps_type=Deps)
    result = await agent.run("go", deps=Deps(db=7))
    assert seen == [Deps(db=7)] and result.steps[0].actions[0].output == "a=7"


async def test_results_may_be_text_or_any_json_value() -> None:
    """Strings stay text; models, lists and dicts become JSON values."""

    @tool
    def values(kind: str) -> Any:
        """A value of the given kind."""
        return {"text": "plain", "model": Point(x=1), "list": [1, {"a": None}]}[kind]

    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("values", {"kind": "text"}),
                    call("values", {"kind": "model"}),
                    call("values", {"kind": "list"}),
                ]
            ),
            "done",
        ]
    )
    result = await Agent(model, tools=[values]).run("go")
    assert [a.output for a in result.steps[0].actions] == [
        "plain",
        {"x": 1, "y": 0},
        [1, {"a": None}],
    ]
    assert result.steps[0].actions[2].content == '[1, {"a": null}]'


async def test_oversized_tool_output_is_truncated_with_a_marker() -> None:
    """Tool output past the limit is cut, and the cut is visible to the model."""
    from agentloop import ToolLimits

    @tool
    def big() -> str:
        """A test tool."""
        return "x" * 500

    model = ScriptedModel([Reply(calls=[call("big", {})]), "done"])
    agent = Agent(model, tools=[big], tool_limits=ToolLimits(max_output_chars=100))
    result = await agent.run("go")
    output = result.steps[0].actions[0].output
    assert output.startswith("x" * 100) and output.endswith("…[truncated 400 characters]")


def test_strip_nones_only_touches_non_nullable_object_fields() -> None:
    """Nested objects are cleaned; lists and nullable fields are left alone."""
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "c": {"$ref": "#/$defs/Inner"},
            "d": {"type": "array", "items": {"type": "integer"}},
        },
        "$defs": {"Inner": {"type": "object", "properties": {"x": {"type": "string"}}}},
    }
    value = {"a": None, "b": None, "c": {"x": None, "u": None}, "d": [None], "e": None, "f": 1}
    assert strip_nones(value, schema) == {"b": None, "c": {}, "d": [None], "f": 1}


def test_strip_nones_keeps_undeclared_nulls_where_the_object_admits_other_keys() -> None:
    """A null for an undeclared key is dropped, unless additionalProperties admits it."""
    schema = {
        "type": "object",
        "properties": {"open": {"$ref": "#/$defs/Open"}, "typed": {"$ref": "#/$defs/Typed"}},
        "additionalProperties": False,
        "$defs": {
            "Open": {"type": "object", "properties": {}, "additionalProperties": True},
            "Typed": {
                "type": "object",
                "properties": {},
                "additionalProperties": {"type": "integer"},
            },
        },
    }
    value = {"open": {"u": None}, "typed": {"u": None}, "gone": None}
    assert strip_nones(value, schema) == {"open": {"u": None}, "typed": {"u": None}}


def test_plain_tools_stay_callable() -> None:
    """A decorated function can still be called directly (for unit tests)."""

    @tool
    def plus(a: int, b: int) -> int:
        """A test tool."""
        return a + b

    assert plus(a=1, b=2) == 3


def test_a_tools_specs_are_made_once() -> None:
    """Every call of ``specs()`` gives the same ``ToolSpec`` objects (drivers cache their JSON by
    identity, so tools are encoded once per driver, not once per run)."""

    class Kit(Toolkit):
        """Two activities."""

        @activity
        async def one(self) -> int:
            """One."""
            return 1

        @activity
        async def two(self) -> int:
            """Two."""
            return 2

    kit = Kit().tool
    assert [id(s) for s in kit.specs()] == [id(s) for s in kit.specs()]
    assert [s.name for s in kit.specs()] == ["kit__one", "kit__two"]


async def test_an_activity_can_answer_its_own_invalid_arguments() -> None:
    """make_activity(on_invalid=...): a validation failure becomes the tool's own (successful)
    answer; valid arguments, the schema, sync tools and direct calls are unchanged."""
    from pydantic import ValidationError

    from agentloop.tools._tool import Tool, make_activity

    seen: list[ValidationError] = []

    def on_invalid(exc: ValidationError) -> dict[str, Any]:
        seen.append(exc)
        return {"error": f"bad: {exc.error_count()}"}

    def build(fn: Any) -> Tool:
        act = make_activity(
            fn,
            tool_name=fn.__name__,
            path=None,
            description=None,
            eager=True,
            timeout=None,
            on_invalid=on_invalid,
        )
        return Tool(name=fn.__name__, description=act.description, activities={None: act})

    async def double(ctx: ToolContext, n: int) -> int:
        """Double n."""
        assert ctx.action.name == "double"
        return 2 * n

    def triple(n: int) -> int:
        """Triple n."""
        return 3 * n

    tools = [build(double), build(triple)]
    assert next(tools[0].specs()).parameters["required"] == ["n"]
    assert next(tools[0].specs()).parameters["properties"]["n"]["type"] == "integer"
    fake = SimpleNamespace(action=SimpleNamespace(name="double"))
    assert await tools[0](fake, n=2) == 4 and tools[1](n=2) == 6  # direct calls
    script: list[Any] = [
        Reply(calls=[call("double", {"n": 2}, id="a"), call("double", {"n": "x"}, id="b")]),
        Reply(calls=[call("triple", {}, id="c"), call("triple", {"n": 1, "m": 2}, id="d")]),
        "ok",
    ]
    result = await Agent(ScriptedModel(script), tools=tools).run("go")
    outs = [a.output for step in result.steps[:2] for a in step.actions]
    assert outs == [4, {"error": "bad: 1"}, {"error": "bad: 1"}, {"error": "bad: 1"}]
    assert not any(a.is_error for step in result.steps for a in step.actions)
    # (the sync tool's two answers come from worker threads, in either order)
    assert sorted(e.errors()[0]["type"] for e in seen) == [
        "extra_forbidden",
        "int_parsing",
        "missing",
    ]


async def test_a_tool_may_answer_arguments_that_break_its_schema_itself() -> None:
    """``tool(on_invalid=...)``: its value is the action's output, and the function never runs."""
    ran: list[int] = []

    @tool(on_invalid=lambda exc: {"error": f"{exc.error_count()} bad argument(s)"})
    async def square(x: int) -> int:
        """Square a number."""
        ran.append(x)
        return x * x

    model = ScriptedModel(
        [Reply(calls=[call("square", {"x": "many"}), call("square", {"x": 3})]), "ok"]
    )
    result = await Agent(model, tools=[square]).run("go")
    first, second = result.steps[0].actions
    assert (first.is_error, first.output) == (False, {"error": "1 bad argument(s)"})
    assert (second.is_error, second.output) == (False, 9)
    assert ran == [3]


async def test_calls_with_one_serial_key_run_one_at_a_time() -> None:
    """``tool(serial_key=...)``: calls whose key is equal never overlap, in the model's order."""
    active: list[int] = []
    order: list[int] = []

    @tool(serial_key=lambda ctx: "one")
    async def work(n: int) -> int:
        """Do some work."""
        active.append(n)
        assert len(active) == 1, active
        await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
        order.append(n)
        active.remove(n)
        return n

    model = ScriptedModel([Reply(calls=[call("work", {"n": i}) for i in range(4)]), "ok"])
    result = await Agent(model, tools=[work]).run("go")
    assert [a.output for a in result.steps[0].actions] == [0, 1, 2, 3]
    assert order == [0, 1, 2, 3]


def test_a_tool_without_a_description_warns_where_it_is_defined() -> None:
    """No docstring and no description=: the model would see a bare name. The warning points at
    the developer's line, not into agentloop."""
    with pytest.warns(AgentLoopWarning, match="tool 'vague' has no description") as seen:

        @tool
        def vague(x: int) -> int:
            return x

    assert len(seen) == 1 and seen[0].filename == __file__
    assert vague.description == ""


def test_a_parameter_without_a_type_warns_naming_it() -> None:
    """An unannotated parameter is any JSON value, unvalidated: the warning names it."""
    with pytest.warns(AgentLoopWarning, match="parameter 'where' has no type annotation") as seen:

        @tool
        def lookup(where, limit: int = 3) -> str:
            """Look something up."""
            return f"{where}:{limit}"

    assert [str(w.message).count("'where'") for w in seen] == [1]
    assert seen[0].filename == __file__
    assert next(lookup.specs()).parameters["properties"]["where"] == {}


def test_toolkit_activities_and_plain_functions_warn_when_the_agent_is_made() -> None:
    """Activities and functions made tools by ``Agent(tools=...)`` are checked there."""

    class Desk(Toolkit):
        """A desk."""

        @activity
        def book(self, room: str) -> str:
            return room

    def shout(text):
        return text.upper()

    with pytest.warns(AgentLoopWarning) as seen:
        Agent(ScriptedModel([]), tools=[Desk(), shout])
    messages = sorted(str(w.message) for w in seen)
    assert [m.split(":")[0] for m in messages] == [
        "tool 'desk.book' has no description",
        "tool 'shout' has no description",
        "tool 'shout'",
    ]
    assert "parameter 'text'" in messages[2]
    assert {w.filename for w in seen} == {__file__}


def test_a_described_and_typed_tool_does_not_warn() -> None:
    """A docstring, or description=, and annotated parameters: nothing to say. The context
    parameter needs no annotation of its own to be told apart (it has one)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @tool(description="Ping a host.")
        def ping(host: str) -> str:
            return host

        @tool
        async def note(ctx: ToolContext, text: str) -> str:
            """Keep a note."""
            return text

    assert ping.description == "Ping a host." and note.description == "Keep a note."


async def test_a_result_that_is_not_json_is_logged_with_the_tools_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The model gets an error result; the developer a warning naming the tool."""

    @tool
    def handle() -> Any:
        """Return something that is not JSON."""
        return threading.Lock()

    caplog.set_level(logging.WARNING, logger="agentloop")
    model = ScriptedModel([Reply(calls=[call("handle", {})]), "done"])
    result = await Agent(model, tools=[handle]).run("go")
    action = result.steps[0].actions[0]
    assert action.is_error and action.error_kind == "tool_error"
    assert "not JSON" in (action.error or "")
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert "'handle'" in warned[0].getMessage() and "JSON" in warned[0].getMessage()
