"""Tools keep their signature for direct calls; tool and middleware contexts type ``deps``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, assert_type

from agentloop import (
    ActionResult,
    Agent,
    ModelCall,
    ModelMiddleware,
    ModelRequest,
    ModelResponse,
    RunContext,
    Tool,
    ToolCall,
    ToolCallNext,
    ToolContext,
    ToolMiddleware,
    tool,
)


@dataclass
class Deps:
    rate: float


@tool
def convert(amount: float, currency: str = "EUR") -> str:
    """Convert an amount."""
    return f"{amount} {currency}"


@tool(name="fetch", timeout=5.0, side_effects=True)
async def fetch_rate(ctx: ToolContext[Deps], currency: str) -> float:
    """The rate of a currency."""
    assert_type(ctx.deps, Deps)
    assert_type(ctx.run, RunContext[Deps])
    assert_type(ctx.run.deps, Deps)
    return ctx.deps.rate


@tool
async def untyped(ctx: ToolContext, x: int) -> int:
    assert_type(ctx.deps, Any)
    return x


async def direct_calls(context: ToolContext[Deps]) -> None:
    as_tool: Tool[..., str] = convert
    assert_type(convert(1.5), str)
    assert_type(convert(2, currency="USD"), str)
    assert_type(await fetch_rate(context, "USD"), float)
    convert("1.5")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    convert(1.5, unit="kg")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    wrong: int = convert(1.5)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    await fetch_rate(context)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    del wrong, as_tool


def agents_take_typed_tools() -> None:
    Agent("openai:gpt-4o-mini", tools=[convert, fetch_rate, untyped], deps_type=Deps)


async def tool_middleware(call: ToolCall[Deps], call_next: ToolCallNext) -> ActionResult:
    assert_type(call.run.deps, Deps)
    return await call_next(call.replace(step=call.step))


async def model_middleware(request: ModelRequest[Deps], call_next: ModelCall) -> ModelResponse:
    if request.run is not None:
        assert_type(request.run.deps, Deps)
    assert_type(request.with_system("be brief"), ModelRequest[Deps])
    return await call_next(request)


async def wrong_deps(call: ToolCall[Deps]) -> None:
    rate: str = call.run.deps.rate  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    del rate


def middleware_fits_the_agent() -> None:
    tools_mw: list[ToolMiddleware] = [tool_middleware]
    model_mw: list[ModelMiddleware] = [model_middleware]
    Agent(
        "openai:gpt-4o-mini",
        deps_type=Deps,
        tool_middleware=tools_mw,
        model_middleware=model_mw,
    )
    checker: Callable[[ToolCall[Deps], ToolCallNext], Awaitable[ActionResult]] = tool_middleware
    del checker
