"""The agent the web tests serve: ReAct on the emulated provider over a loopback socket. It sets a
goal and checks the weather (tools start mid-reply), closes the goal, and answers; its first
answer is withdrawn by a reviewing middleware and written again (a struck-through draft)."""

from __future__ import annotations

from typing import Any

import anyio

from agentloop import Agent, Message, ModelCall, tool
from agentloop.goals import setup_goal
from agentloop.models import ModelRequest, ModelResponse
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import SessionStore
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    RecordedRequest,
    ScriptedResponse,
)
from agentloop.tools import ToolContext

REVIEW = "Please double-check that answer."
THOUGHT = "I will set myself a goal, then check the weather in Paris."
DRAFT = "Paris, probably."
FINAL = "Go to Paris: 21°C and sunny."


@tool(requires_approval=True)
async def transfer(amount: int, to: str) -> str:
    """Send money (the approval the protocol tests decide).

    Args:
        amount: how much
        to: to whom
    """
    return f"sent {amount} to {to}"


@tool
async def crunch(n: int, context: ToolContext) -> str:
    """Crunch ``n`` items, reporting progress after each (the protocols' progress tests).

    Args:
        n: how many items
    """
    for i in range(1, n + 1):
        await context.report_progress(i, n, f"item {i}")
    return f"crunched {n}"


@tool
async def get_weather(city: str) -> dict[str, Any]:
    """The weekend forecast for a city.

    Args:
        city: the city's English name
    """
    await anyio.sleep(0.05)
    return {"city": city, "celsius": 21, "sky": "sunny"}


def _script(answer: str) -> list[EmulatedTurn | str]:
    return [
        EmulatedTurn(
            text=f"Thought: {THOUGHT}\n",
            calls=[
                EmulatedCall("create_goal", {"objective": "Pick a city for the weekend"}),
                EmulatedCall("get_weather", {"city": "Paris"}),
            ],
        ),
        EmulatedTurn(
            text="Thought: The weather is known; the goal is met.\n",
            calls=[EmulatedCall("update_goal", {"status": "complete"})],
        ),
        f"Thought: Time to answer.\nAnswer: {answer}",
    ]


class DemoProvider:
    """The emulated provider: a draft answer at first, the final one after the review."""

    def __init__(self, *, final: str = FINAL, chunk_delay: float = 0.01) -> None:
        self.draft = EmulatedProvider(script=_script(DRAFT), chunk_delay=chunk_delay)
        self.reviewed = EmulatedProvider(script=_script(final), chunk_delay=chunk_delay)

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        body = request.json if isinstance(request.json, dict) else {}
        messages = body.get("messages") or [{}]
        reviewed = REVIEW in str(messages[-1].get("content", ""))
        return (self.reviewed if reviewed else self.draft)(request)


async def review_once(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
    """Withdraw the run's first final answer and ask for it again."""
    response = await call_next(request)
    run = request.run
    if run is None or not run.is_final_answer(response):
        return response
    scratch = run.scratch(review_once)
    if scratch.get("reviewed"):
        return response
    scratch["reviewed"] = True
    response.discard()
    return await call_next(request.with_message(Message.user(REVIEW)))


def demo_agent(provider_url: str, *, store: SessionStore | None = None) -> Agent[Any, Any]:
    model = OpenAIChatModel("emulated", base_url=provider_url + "/v1", api_key="test-key")
    agent: Agent[Any, Any] = Agent(
        model,
        name="web",
        tools=[get_weather],
        tool_mode="react",
        model_middleware=[review_once],
        store=store,
    )
    return setup_goal(agent)
