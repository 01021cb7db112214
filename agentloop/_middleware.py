"""Middleware: awaitables around each model call and each action (Starlette's shape).

A model middleware is ``async def mw(request, call_next) -> ModelResponse``; it may rewrite the
request, call ``call_next`` zero, one or several times, and replace the response. A tool
middleware is ``async def mw(call, call_next) -> ActionResult`` around one action. The first in
a list is the outermost. Middleware objects are shared by concurrent runs: per-run state goes in
``request.run.scratch(self)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeAlias

from typing_extensions import TypeVar

from ._generic import subscript_callable
from ._steps import Action, ActionResult
from .models._types import ModelRequest, ModelResponse

if TYPE_CHECKING:
    from .models._types import RunContext

ModelCall: TypeAlias = Callable[[ModelRequest], Awaitable[ModelResponse]]
ModelMiddleware: TypeAlias = Callable[[ModelRequest, ModelCall], Awaitable[ModelResponse]]


DepsT = TypeVar("DepsT", default=Any)


@subscript_callable
@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall(Generic[DepsT]):
    """One action on its way to its tool; a tool middleware may ``replace`` it. A middleware
    that takes a ``ToolCall[Deps]`` sees ``call.run.deps`` typed.

    Args:
        action: The action the model asked for.
        run: The run it belongs to.
        step: The number of the step whose reply held it.
        ordinal: How many equal calls (same tool, same arguments) came before it in its
            reply (part of ``ToolContext.idempotency_key``).
    """

    action: Action
    run: RunContext[DepsT]
    step: int
    ordinal: int = 0

    def replace(self, **changes: Any) -> ToolCall[DepsT]:
        """A copy with some fields changed (a middleware rewriting the action's input).

        Args:
            **changes: The fields to change, by name.
        """
        return dataclasses.replace(self, **changes)


ToolCallNext: TypeAlias = Callable[[ToolCall], Awaitable[ActionResult]]
ToolMiddleware: TypeAlias = Callable[[ToolCall, ToolCallNext], Awaitable[ActionResult]]

Req = TypeVar("Req")
Res = TypeVar("Res")


def compose(
    middleware: Sequence[Callable[[Req, Callable[[Req], Awaitable[Res]]], Awaitable[Res]]],
    terminal: Callable[[Req], Awaitable[Res]],
) -> Callable[[Req], Awaitable[Res]]:
    """Fold middleware around ``terminal``; the first in the list ends up outermost."""
    call = terminal
    for mw in reversed(middleware):
        call = _bind(mw, call)
    return call


def _bind(
    mw: Callable[[Req, Callable[[Req], Awaitable[Res]]], Awaitable[Res]],
    call_next: Callable[[Req], Awaitable[Res]],
) -> Callable[[Req], Awaitable[Res]]:
    async def call(request: Req) -> Res:
        return await mw(request, call_next)

    return call
