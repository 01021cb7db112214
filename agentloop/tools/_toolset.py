"""``Toolset``: tools found at run time (MCP servers, goal tools)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..models._types import RunContext
    from ._tool import Tool


@runtime_checkable
class Toolset(Protocol):
    """Provides tools when a run starts.

    ``list_tools`` is called when a run starts. A toolset that needs a per-run resource (a
    connection) may also define ``run_scope(ctx) -> AsyncContextManager``, entered before
    ``list_tools`` and exited when the run ends. A toolset whose tools can change while a run
    goes on (an MCP server that says its tool list changed) may also define
    ``tools_revision(ctx) -> object``: before each model call the run compares it with the
    value it had when the tools were listed, and lists them again when it differs, so that
    the model call sees the new tools.
    """

    async def list_tools(self, ctx: RunContext) -> Sequence[Tool]:
        """The tools a run may use.

        Args:
            ctx: The run that starts.
        """
        ...


def run_scope(toolset: Toolset, ctx: RunContext) -> AbstractAsyncContextManager[Any] | None:
    scope = getattr(toolset, "run_scope", None)
    return scope(ctx) if scope is not None else None


def tools_revision(toolset: Toolset, ctx: RunContext) -> object:
    """The toolset's ``tools_revision(ctx)``, or ``None`` for one whose tools never change."""
    revision = getattr(toolset, "tools_revision", None)
    return revision(ctx) if revision is not None else None
