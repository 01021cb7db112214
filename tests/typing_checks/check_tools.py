"""Tools keep their signature for direct calls; tool and middleware contexts type ``deps``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, assert_type

from agentloop import (
    Action,
    ActionResult,
    Agent,
    Approve,
    Decision,
    Deny,
    Edit,
    ExternalResult,
    ModelCall,
    ModelMiddleware,
    ModelRequest,
    ModelResponse,
    PendingCall,
    RunContext,
    RunResult,
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


def over_100(action: Action, ctx: RunContext) -> bool:
    return bool(action.input["amount"] > 100)


async def needs_a_manager(action: Action, ctx: RunContext) -> bool:
    return True


@tool(requires_approval=over_100)
async def refund(order: str, amount: int) -> str:
    """Refund an order."""
    return order


@tool(requires_approval=needs_a_manager)
def wipe(disk: str) -> None:
    """Wipe a disk."""


@tool(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay."""
    return str(amount)


async def approval_tools_keep_their_signature() -> None:
    assert_type(await refund("A-1", 5), str)
    assert_type(wipe("sda"), None)
    assert_type(await pay(5), str)
    await refund("A-1", "5")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


async def approver(call: PendingCall, ctx: RunContext) -> Approve | Deny | Edit | None:
    return Approve() if call.kind == "approval" else None


async def agents_take_an_approver_and_decisions() -> None:
    agent = Agent("openai:gpt-4o-mini", tools=[refund], approver=approver, approval_timeout=60)
    decisions: dict[str, Decision] = {"a": Approve(), "b": Deny("no"), "c": Edit({"x": 1})}
    decisions["d"] = ExternalResult(output={"title": "x"})
    result = await agent.resume(resume_state={}, decisions=decisions)
    assert_type(result, RunResult[str])
    assert_type(result.pending, tuple[PendingCall, ...])
    assert_type(result.resume_state, dict[str, Any] | None)
