"""Decisions on calls a run waits for: approvals of tools that need one, and the results of
external tools (which run on the caller's side).

A run whose step holds such a call does not block a task while a person thinks: it commits the
call as pending and ends this invocation waiting (``RunWaiting``). The decisions, passed to
``Agent.resume``, start the next invocation; a live ``Agent(approver=...)`` decides at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from ._steps import Action, PendingCall
    from .models._types import RunContext


@dataclass(frozen=True, kw_only=True, slots=True)
class Approve:
    """Run the call as the model made it. (Every decision's ``kind`` names its class.)"""

    kind: Literal["approve"] = field(default="approve", init=False)


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call: the model gets an error result (``error_kind="denied"``) carrying
    ``reason``.

    Args:
        reason: Why, for the model (and the ``ActionDecided`` event).
    """

    reason: str = "the call was denied"
    kind: Literal["deny"] = field(default="deny", init=False)


@dataclass(frozen=True, slots=True)
class Edit:
    """Run the call with other arguments, validated like the model's own: arguments that fail
    the tool's schema are a ``UserError`` on resume, and nothing is lost (from a live approver,
    the model gets the ``invalid_arguments`` error result, as for its own arguments).

    Args:
        arguments: The arguments the tool runs with instead.
    """

    arguments: Mapping[str, Any]
    kind: Literal["edit"] = field(default="edit", init=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class ExternalResult:
    """The result of an external tool's call (``Tool.external``), which the caller ran: its
    ``output`` (text or a JSON value), or an ``error`` message the model sees.

    Args:
        output: What the call returned.
        error: Why it failed, instead of an output.
    """

    output: Any = None
    error: str | None = None
    kind: Literal["result"] = field(default="result", init=False)


Decision: TypeAlias = Approve | Deny | Edit | ExternalResult
"""How a pending call is decided: ``Approve()``, ``Deny(reason)``, ``Edit(arguments)``, or an
external tool's ``ExternalResult(output=...)``."""

Approver: TypeAlias = Callable[
    ["PendingCall", "RunContext"], Awaitable[Approve | Deny | Edit | None]
]
"""``Agent(approver=...)``: decides a call that needs approval while the run goes on. ``None``
leaves the call pending (the run waits for ``resume``)."""

ApprovalRule: TypeAlias = Callable[["Action", "RunContext"], bool | Awaitable[bool]]
"""``@tool(requires_approval=...)`` as a predicate on the call: whether it needs approval."""
