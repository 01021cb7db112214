"""Agents are generic in their deps and output; results and streams carry the output type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_type

from pydantic import BaseModel

from agentloop import Agent, Event, RunResult, RunStream


class Trip(BaseModel):
    city: str
    days: int


@dataclass
class Deps:
    api_key: str


def inference() -> None:
    # Without output_type the answer is text; without deps_type a run takes any deps.
    assert_type(Agent("openai:gpt-4o-mini"), Agent[Any, str])
    assert_type(Agent("openai:gpt-4o-mini", output_type=None), Agent[Any, str])
    assert_type(Agent("openai:gpt-4o-mini", output_type=Trip), Agent[Any, Trip])
    assert_type(Agent("openai:gpt-4o-mini", deps_type=Deps), Agent[Deps, str])
    assert_type(
        Agent("openai:gpt-4o-mini", output_type=list[Trip], deps_type=Deps),
        Agent[Deps, list[Trip]],
    )
    # reflect_on_tool_use=False answers with the actions' results: annotated, as documented.
    raw: Agent[None, list[Any]] = Agent("openai:gpt-4o-mini", reflect_on_tool_use=False)
    assert_type(raw, Agent[None, list[Any]])


def replace(agent: Agent[Deps, Trip]) -> None:
    assert_type(agent.replace(max_steps=3), Agent[Deps, Trip])
    assert_type(agent.replace(output_type=int), Agent[Deps, int])
    assert_type(agent.replace(deps_type=str), Agent[str, Trip])
    assert_type(agent.replace(output_type=int, deps_type=str), Agent[str, int])


async def results(agent: Agent[Deps, Trip], text_agent: Agent[Any, str]) -> None:
    result = await agent.run("plan a trip", deps=Deps(api_key="k"))
    assert_type(result, RunResult[Trip])
    # A run that ended with an error has no output: None, not the text that failed.
    assert_type(result.output, Trip | None)
    assert_type(result.unwrap(), Trip)
    assert_type(result.text, str | None)
    assert_type(await agent.run("again"), RunResult[Trip])  # deps may be left out
    assert_type(await agent.resume(session="s", deps=Deps(api_key="k")), RunResult[Trip])
    assert_type(agent.run_sync("plan"), RunResult[Trip])
    assert_type((await text_agent.run("hi", deps=object())).unwrap(), str)


async def streams(agent: Agent[Deps, Trip]) -> None:
    stream = agent.stream("plan", deps=Deps(api_key="k"))
    assert_type(stream, RunStream[Trip])
    async with stream as run:
        assert_type(run, RunStream[Trip])
        async for event in run:
            assert_type(event, Event)
        assert_type(run.result, RunResult[Trip])
        assert_type(run.result.output, Trip | None)
    assert_type(await stream.get_result(), RunResult[Trip])
    assert_type(agent.stream_resume(session="s"), RunStream[Trip])
    async with agent as same:
        assert_type(same, Agent[Deps, Trip])


async def wrong_uses(agent: Agent[Deps, Trip]) -> None:
    result = await agent.run("plan", deps=Deps(api_key="k"))
    wrong: int = result.output  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    unwrapped: int = result.unwrap()  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    maybe: Trip = result.output  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    await agent.run("plan", deps="not Deps")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    await agent.resume(session="s", deps=1)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    agent.stream("plan", deps=[])  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    Agent("openai:gpt-4o-mini", output_type="Trip")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    del wrong, unwrapped, maybe
