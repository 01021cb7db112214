"""Agents for the evals tests: deterministic functions of the request, safe to share between
concurrent cases (a ScriptedModel's script would be consumed in whatever order cases run)."""

from __future__ import annotations

from typing import Any

import anyio

from agentloop import Agent, ModelRequest, tool
from agentloop.testing import FunctionModel, Reply, call


def last_user(request: ModelRequest) -> str:
    return next(m.text for m in reversed(request.messages) if m.role == "user")


def tool_rounds(request: ModelRequest) -> int:
    """Tool results seen since the last user message."""
    n = 0
    for m in reversed(request.messages):
        if m.role == "user":
            break
        n += m.role == "tool"
    return n


@tool
async def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    await anyio.sleep(0.02 if city == "Paris" else 0.0)  # Paris finishes last
    return f"sunny in {city}"


@tool
def clock() -> str:
    """The time."""
    return "noon"


def weather_reply(request: ModelRequest) -> Reply | str:
    """Two parallel weather calls (Paris, then Rome: Paris finishes last), then the answer;
    "boom" raises, "slow" hangs, "time" calls the clock."""
    text = last_user(request)
    if "boom" in text:
        raise RuntimeError("the model broke")
    if tool_rounds(request):
        return f"Paris and Rome are sunny ({text})"
    if "time" in text:
        return Reply(calls=[call("clock")])
    if "slow" in text:
        return Reply(text="...", delay=3600)
    if "weather" in text:
        return Reply(calls=[call("weather", {"city": "Paris"}), call("weather", {"city": "Rome"})])
    return f"echo: {text}"


def weather_agent(**options: Any) -> Agent[Any, str]:
    return Agent(FunctionModel(weather_reply), tools=[weather, clock], name="weather", **options)
