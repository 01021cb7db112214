"""The emulated provider: tool arguments made up from each tool's JSON schema (checked with
jsonschema, and by the tools' own pydantic models in real runs over a socket), and scripts of
turns played per conversation, written in Python or as a JSON file."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import pytest
from pydantic import BaseModel, Field

from agentloop import Agent, Message, Toolkit, UserError, activity, tool
from agentloop.goals import GoalToolSet, setup_goal
from agentloop.testing import EmulatedCall, EmulatedProvider, EmulatedTurn, ProviderServer
from agentloop.testing._arguments import arguments_for

from ._provider_helpers import make_model

APIS = ["openai-chat", "openai-responses", "anthropic"]
jsonschema = pytest.importorskip("jsonschema")


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    zip: Annotated[str, Field(pattern=r"^\d{5}$")]
    floor: int | None = None


class Line(BaseModel):
    sku: Annotated[str, Field(min_length=8, max_length=8)]
    quantity: Annotated[int, Field(ge=1, le=5)]
    discount: Annotated[float, Field(gt=0, lt=1)]


CALLS: list[tuple[str, dict[str, Any]]] = []


@tool
async def place_order(
    customer: uuid.UUID,
    deliver_on: datetime.date,
    speed: Literal["standard", "express"],
    color: Color,
    boxes: Annotated[int, Field(multiple_of=5, gt=7)],
    address: Address,
    lines: Annotated[list[Line], Field(min_length=2)],
    labels: set[str],
    note: str | None,
    gift: bool = False,
) -> str:
    """Place an order: an enum, bounded and multiple-of integers, a nested object, an array of
    objects, formats and an optional value."""
    CALLS.append(("place_order", {"speed": speed, "lines": len(lines), "address": address}))
    return f"order placed: {len(lines)} lines to {address.street}"


@tool
def search(query: str, limit: Annotated[int, Field(ge=1, le=50)] = 10) -> list[str]:
    """Search."""
    CALLS.append(("search", {"query": query, "limit": limit}))
    return [f"result for {query}"]


def _goal_schemas() -> list[tuple[str, dict[str, Any]]]:
    tools = anyio.run(GoalToolSet().list_tools, None)  # type: ignore[arg-type]
    return [(t.name, dict(next(t.specs()).parameters)) for t in tools]


HAND_WRITTEN: list[tuple[str, dict[str, Any]]] = [
    ("empty", {"type": "object"}),
    (
        "enum-integer-nested-array",
        {
            "type": "object",
            "properties": {
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "where": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "minLength": 2},
                        "coordinates": {"type": "array", "items": {"type": "number"},
                                        "minItems": 2, "maxItems": 2},
                    },
                    "required": ["city", "coordinates"],
                    "additionalProperties": False,
                },
                "stops": {"type": "array", "minItems": 3, "uniqueItems": True,
                          "items": {"type": "string", "enum": ["a", "b", "c", "d"]}},
            },
            "required": ["unit", "days", "where", "stops"],
            "additionalProperties": False,
        },
    ),
    (
        "combinators-and-refs",
        {
            "type": "object",
            "properties": {
                "version": {"const": "v2"},
                "size": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "step": {"type": "number", "multipleOf": 0.25, "minimum": 3},
                "owner": {"allOf": [{"$ref": "#/$defs/person"},
                                    {"properties": {"role": {"enum": ["admin"]}},
                                     "required": ["role"]}]},
                "tree": {"$ref": "#/$defs/node"},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}],
                         "items": False},
                "maybe": {"type": ["null", "integer"], "maximum": -3},
                "meta": {"type": "object", "minProperties": 2,
                         "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
                "extra": {"type": "object", "additionalProperties": {"type": "integer"},
                          "required": ["anything"]},
                "when": {"type": "string", "format": "date-time"},
                "mail": {"type": "string", "format": "email"},
                "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            },
            "required": ["version", "size", "ratio", "step", "owner", "tree", "pair", "maybe",
                         "meta", "extra", "when", "mail", "code"],
            "$defs": {
                "person": {"type": "object", "properties": {"name": {"type": "string"}},
                           "required": ["name"]},
                "node": {"type": "object",
                         "properties": {"label": {"type": "string"},
                                        "children": {"type": "array",
                                                     "items": {"$ref": "#/$defs/node"}}},
                         "required": ["label", "children"]},
            },
        },
    ),
]  # fmt: skip
SCHEMAS = [
    *HAND_WRITTEN,
    *_goal_schemas(),
    ("place_order", dict(next(place_order.specs()).parameters)),
    ("search", dict(next(search.specs()).parameters)),
]


@pytest.mark.parametrize(("name", "schema"), SCHEMAS, ids=[name for name, _ in SCHEMAS])
@pytest.mark.parametrize("variant", [0, 1])
def test_made_up_arguments_fit_the_schema(name: str, schema: dict[str, Any], variant: int) -> None:
    """Every required property is there, with a value of its type, enum, format and bounds:
    the arguments validate against the schema (formats checked too)."""
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    arguments = arguments_for(schema, variant)
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(arguments)]
    assert problems == [], arguments
    for key in schema.get("required", ()):
        assert key in arguments


def test_two_calls_to_one_tool_get_different_arguments() -> None:
    schema = dict(next(search.specs()).parameters)
    assert arguments_for(schema, 0) == {"query": "first"}
    assert arguments_for(schema, 1) == {"query": "second"}
    update_goal = dict(_goal_schemas())["update_goal"]
    assert [arguments_for(update_goal, v) for v in (0, 1)] == [
        {"status": "complete"},
        {"status": "blocked"},
    ]


@pytest.mark.parametrize("api", APIS)
async def test_an_agent_runs_its_tools_on_made_up_arguments(api: str) -> None:
    """Over a socket, each API: the parallel calls carry arguments the tools' own pydantic
    models accept (before, every call got ``{"query": ...}``: invalid_arguments)."""
    CALLS.clear()
    async with ProviderServer(EmulatedProvider()) as server:
        async with make_model(api, server.url, transport="httpx") as model:
            result = await Agent(model, tools=[place_order, search]).run("order it")
    assert result.error is None
    actions = result.steps[0].actions
    assert [(a.name, a.error_kind) for a in actions] == [("place_order", None), ("search", None)]
    assert actions[0].output == "order placed: 2 lines to first"
    # The two tools run concurrently: find place_order's call by name, not by position.
    (order,) = [arguments for name, arguments in CALLS if name == "place_order"]
    assert order["speed"] == "standard" and order["address"].zip == "12345"
    assert ("search", {"query": "second", "limit": 10}) in CALLS  # optional: left out
    assert result.text is not None and result.text.startswith("Both lookups are done")


@pytest.mark.parametrize("api", APIS)
async def test_the_goal_tools_accept_made_up_arguments(api: str) -> None:
    """A script naming the goal tools without arguments: create_goal gets an objective,
    update_goal a status from its enum; the goal closes and the run answers."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("create_goal")]),
        EmulatedTurn(text="Done checking.", calls=[EmulatedCall("update_goal")]),
        "All done.",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        async with make_model(api, server.url, transport="httpx") as model:
            result = await setup_goal(Agent(model, name="planner")).run("plan")
    assert result.error is None and result.text == "All done."
    outputs = [a.output for step in result.steps for a in step.actions]
    assert [o["message"] for o in outputs] == ["Goal created.", "Goal marked complete."]
    assert outputs[0]["goal"]["objective"] == "first"


class TravelDesk(Toolkit):
    """Trains."""

    @activity
    async def train(self, origin: str, destination: str) -> str:
        """The fastest train."""
        return f"{origin}→{destination}"


@pytest.mark.parametrize("api", APIS)
async def test_a_script_plays_from_its_start_in_each_conversation(api: str) -> None:
    """Two conversations at once each play the whole script: given arguments, a toolkit
    activity, made-up arguments, and raw text that is not JSON (an invalid_arguments result);
    a conversation that outlives the script gets a text saying so."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(
            text="Checking.",
            calls=[
                EmulatedCall("search", {"query": "trains", "limit": 3}),
                EmulatedCall("travel_desk", {"origin": "Oslo", "destination": "Bergen"}, "train"),
                EmulatedCall("travel_desk", path="train"),
                EmulatedCall("search", '{"query": "tra'),
            ],
        ),
        "Take the 8:00 train.",
    ]
    results: list[Any] = []
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        async with make_model(api, server.url, transport="httpx") as model:
            agent = Agent(model, tools=[search, TravelDesk()])

            async def converse() -> None:
                results.append(await agent.run("how do I get to Bergen?"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(converse)
                tg.start_soon(converse)
            earlier = [Message.user("hi"), Message.assistant("Hello."), Message.user("Bergen?")]
            earlier.append(Message.assistant("By train."))  # two replies: the script is over
            continued = await agent.run("and back?", memory=earlier)
    for result in results:
        assert result.error is None and result.text == "Take the 8:00 train."
        actions = result.steps[0].actions
        assert [a.output for a in actions[:3]] == [
            ["result for trains"],
            "Oslo→Bergen",
            "third→third",  # made up: the third call of its reply
        ]
        assert actions[3].error_kind == "invalid_arguments"
    assert continued.text == "The emulated provider's script has no more turns."


@pytest.mark.parametrize("api", APIS)
async def test_in_react_mode_the_calls_are_written_as_actions(api: str) -> None:
    """A request without tools (ReAct mode) gets the turn's calls as an ``Actions:`` line."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(text="Thought: search first.", calls=[EmulatedCall("search", {"query": "q"})]),
        "Answer: found it.",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        async with make_model(api, server.url, transport="httpx") as model:
            result = await Agent(model, tools=[search], tool_mode="react").run("find")
        first = server.requests[0].json
    assert "tools" not in first
    assert result.error is None and result.text == "found it."
    assert [(a.name, a.output) for a in result.steps[0].actions] == [("search", ["result for q"])]


def test_a_script_file_is_read_with_clear_errors(tmp_path: Path) -> None:
    """The JSON form: turns as texts or objects, calls as names or objects. A mistake names
    the file and the turn."""
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            [
                {"text": "Looking.", "calls": ["search", {"name": "travel_desk", "path": "train",
                                                          "arguments": {"origin": "A"}}]},
                "Done.",
            ]
        )
    )  # fmt: skip
    provider = EmulatedProvider.from_script_file(path)
    assert provider._script == [  # the parsed turns
        EmulatedTurn(
            text="Looking.",
            calls=(EmulatedCall("search"), EmulatedCall("travel_desk", {"origin": "A"}, "train")),
        ),
        EmulatedTurn(text="Done."),
    ]
    bad = {
        '{"turns": []}': "must be a JSON list of turns",
        '["ok", 3]': "turn 2: a turn is a text or an object, not 3",
        '[{"text": "x", "call": []}]': "turn 1: unknown key 'call'",
        '[{"calls": [{"name": "s", "args": {}}]}]': "turn 1: calls[0]: unknown key 'args'",
        '[{"calls": [{"arguments": {}}]}]': "calls[0]: a call needs a name",
        '[{"calls": [{"name": "s", "arguments": [1]}]}]': "arguments must be an object or",
        "[": "is not JSON",
    }
    for text, message in bad.items():
        path.write_text(text)
        with pytest.raises(UserError, match=r"script .*script\.json") as caught:
            EmulatedProvider.from_script_file(path)
        assert message in str(caught.value), text
    with pytest.raises(UserError, match="cannot read the script"):
        EmulatedProvider.from_script_file(tmp_path / "missing.json")


@pytest.mark.parametrize("api", APIS)
async def test_a_session_continues_the_script_across_its_runs(api: str) -> None:
    """A session's later run remembers only the earlier runs' inputs and answers, not their tool
    calls; the script still goes on from where the last run left it, not from turn 1."""
    from agentloop.sessions import open_store

    script: list[EmulatedTurn | str] = [
        EmulatedTurn(text="Looking.", calls=[EmulatedCall("search", {"query": "first"})]),
        "Answer one.",
        EmulatedTurn(calls=[EmulatedCall("search", {"query": "second"})]),
        "Answer two.",
        "Answer three.",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        async with (
            open_store("memory://") as store,
            make_model(api, server.url, transport="httpx") as model,
        ):
            agent = Agent(model, tools=[search], store=store)
            runs = [await agent.run(prompt, session="s") for prompt in ("one", "two", "three")]
    assert [r.text for r in runs] == ["Answer one.", "Answer two.", "Answer three."]
    assert [a.output for a in runs[1].steps[0].actions] == [["result for second"]]
