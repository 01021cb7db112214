"""Malformed model output never hangs a run or escapes as an exception.

Whatever the model sends — random text, broken or deeply nested JSON, huge replies, odd unicode,
garbage tool calls — the run ends within ``max_steps`` with an answer or an error result.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import Agent, ModelRequest, tool
from agentloop.testing import FunctionModel, Reply, ScriptedCall

MAX_STEPS = 4


@tool
async def echo(value: str = "") -> str:
    """Echo a value."""
    return value


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# Text that looks like ReAct, JSON, markers and junk, mixed with arbitrary unicode.
fragments = st.sampled_from(
    [
        "Thought:",
        "Actions:",
        "Action:",
        "Answer:",
        "<|Response|>",
        "Observation:",
        "```json\n",
        "```",
        "[",
        "]",
        "{",
        "}",
        '"',
        "\\",
        ",",
        ":",
        "\n",
        '{"tag": "t", "name": "echo", "path": "echo", "input": {"value": "v"}}',
        '{"tag": 1, "name": null}',
        '"input": {"value": ',
        "\u0000",
        "\ud7ff",
        "\U0001f600",
        "\u202e",
        nested(200),
    ]
)
replies = st.lists(st.one_of(fragments, st.text(max_size=20)), max_size=40).map("".join)
call_args = st.one_of(
    st.text(max_size=30),
    st.just(nested(500)),
    st.dictionaries(st.text(max_size=5), st.recursive(st.none() | st.integers(), st.lists)),
    st.just('{"value": 5}'),
    st.just('{"value": "x", "extra": 1}'),
)
calls = st.lists(
    st.builds(
        ScriptedCall,
        name=st.sampled_from(["echo", "ghost", "", "echo__nope", "x" * 70]),
        args=call_args.map(lambda a: a if isinstance(a, str) else json.dumps(a)),
        id=st.text(min_size=1, max_size=8),
    ),
    max_size=4,
)


async def _run(agent: Agent) -> Any:
    with anyio.fail_after(20):
        return await agent.run("go")


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(replies, min_size=1, max_size=MAX_STEPS))
async def test_react_garbage_ends_within_max_steps(texts: list[str]) -> None:
    """Any ReAct text ends the run with an answer or an error result, never a hang."""
    queue = list(texts)

    def reply(request: ModelRequest) -> Reply:
        text = queue.pop(0) if queue else "Answer: done"
        return Reply(timeline=[(0.0, text)])

    agent = Agent(FunctionModel(reply, native_tools=False), tools=[echo], max_steps=MAX_STEPS)
    result = await _run(agent)
    assert len(result.steps) <= MAX_STEPS
    assert result.error is not None or isinstance(result.output, str)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(st.tuples(replies, calls), min_size=1, max_size=MAX_STEPS))
async def test_native_garbage_ends_within_max_steps(
    script: list[tuple[str, list[ScriptedCall]]],
) -> None:
    """Random text and broken tool calls end the run within max_steps, never a crash."""
    queue = list(script)

    def reply(request: ModelRequest) -> Reply:
        if not queue:
            return Reply(text="done")
        text, scripted = queue.pop(0)
        unique = [
            ScriptedCall(name=c.name, args=c.args, id=f"{i}-{c.id}") for i, c in enumerate(scripted)
        ]
        return Reply(text=text, calls=unique)

    agent = Agent(FunctionModel(reply), tools=[echo], max_steps=MAX_STEPS)
    result = await _run(agent)
    assert len(result.steps) <= MAX_STEPS
    for step in result.steps:
        for action in step.actions:
            assert action.is_error or action.name == "echo"


async def test_a_huge_reply_is_refused_without_buffering_it_all() -> None:
    """A reply past max_reply_chars ends the run with reply_too_large."""
    sent = 0

    def reply(request: ModelRequest) -> Reply:
        return Reply(text="x" * 2_000_000, chunk_size=10_000)

    class Counting(FunctionModel):
        async def _deltas(self, reply: Any, request: Any) -> Any:
            nonlocal sent
            async with aclosing(super()._deltas(reply, request)) as inner:
                async for delta in inner:
                    sent += 1
                    yield delta

    agent = Agent(Counting(reply), max_reply_chars=50_000)
    result = await _run(agent)
    assert result.error is not None and result.error.kind == "reply_too_large"
    assert sent <= 10
