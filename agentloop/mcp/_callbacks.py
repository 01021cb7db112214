"""A server's requests of the client: sampling (``sampling/createMessage``: the server asks
for a model's reply) and elicitation (``elicitation/create``: it asks the user for input),
answered by callbacks the caller gives ``MCPServer(sampling=..., elicitation=...)``.

The SDK declares each capability only when its callback is given, so a server (like
server-everything) offers the tools that need them only then. A callback that raises
answers the server with an error, which the server's tool reports as it sees fit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ..models import Message
from ..tools import ToolContext
from ._resources import prompt_messages

logger = logging.getLogger("agentloop.mcp")


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPSamplingRequest:
    """A server asks for a model's reply (``sampling/createMessage``).

    Args:
        server: The server's name (``MCPServer.name``).
        messages: The conversation to reply to, as agentloop messages.
        system: The system prompt the server asks for, if any.
        max_tokens: The most tokens the reply may have.
        temperature: The temperature the server asks for, if any.
        stop: Stop sequences the server asks for.
    """

    server: str
    messages: tuple[Message, ...]
    system: str | None = None
    max_tokens: int
    temperature: float | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPSamplingReply:
    """The reply to a sampling request (a plain ``str`` is a reply with the defaults).

    Args:
        text: The reply's text.
        model: The name of the model that wrote it (the server sees it).
        stop_reason: Why it ended: ``endTurn``, ``stopSequence`` or ``maxTokens``.
    """

    text: str
    model: str = "agentloop"
    stop_reason: Literal["endTurn", "stopSequence", "maxTokens"] = "endTurn"


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPElicitation:
    """A server asks the user for input (``elicitation/create``): a form (``schema``, a flat
    JSON schema of the fields it wants) or a page to open (``url``).

    Args:
        server: The server's name (``MCPServer.name``).
        message: What the server tells the user.
        schema: The fields wanted, for a form (``mode == "form"``).
        url: The page to open, for ``mode == "url"``.
        mode: ``form`` or ``url``.
    """

    server: str
    message: str
    schema: Mapping[str, Any] | None = None
    url: str | None = None
    mode: Literal["form", "url"] = "form"


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPElicitationReply:
    """The user's answer: ``accept`` (with the form's ``content``), ``decline`` or ``cancel``.
    An elicitation callback may also return a mapping (accepted, with that content) or
    ``None`` (declined).

    Args:
        action: ``accept``, ``decline`` or ``cancel``.
        content: The form's values, when accepted.
    """

    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None = None


Sampler: TypeAlias = Callable[[MCPSamplingRequest], Awaitable["str | MCPSamplingReply"]]
"""``MCPServer(sampling=...)``: answers a server's sampling request with a reply's text."""

Elicitor: TypeAlias = Callable[
    [MCPElicitation], Awaitable["MCPElicitationReply | Mapping[str, Any] | None"]
]
"""``MCPServer(elicitation=...)``: answers a server's elicitation (accept, decline, cancel)."""


def sampling_callback(server: str, sampler: Sampler) -> Any:
    """The SDK's ``sampling_callback`` for ``sampler``."""

    async def answer(context: Any, params: Any) -> Any:
        from mcp.types import INTERNAL_ERROR, CreateMessageResult, ErrorData, TextContent

        request = MCPSamplingRequest(
            server=server,
            messages=prompt_messages(params).messages,
            system=params.system_prompt,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            stop=tuple(params.stop_sequences or ()),
        )
        try:
            reply = await sampler(request)
        except Exception as exc:
            logger.warning("MCP server %r: the sampling callback failed: %r", server, exc)
            return ErrorData(code=INTERNAL_ERROR, message=f"sampling failed: {exc}")
        if isinstance(reply, str):
            reply = MCPSamplingReply(text=reply)
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=reply.text),
            model=reply.model,
            stop_reason=reply.stop_reason,
        )

    return answer


def approver_elicitor(server: str, calls: Callable[[], Sequence[ToolContext]]) -> Elicitor:
    """An elicitor that asks the approver of the run whose call the server is in
    (``MCPServer(elicitation="approver")``): ``Edit(arguments)`` accepts with those values,
    ``Approve()`` accepts with none, ``Deny`` declines. With no decision (no approver, or an
    undecided one) the server hears ``cancel`` and the run waits on the elicitation as a
    pending call; resumed with the decision, the call runs again and its elicitation gets it.
    The server's request names no call, so it is the one call in flight on the connection;
    with several (or none), it is declined, with a warning."""

    async def ask(asked: MCPElicitation) -> MCPElicitationReply:
        from .. import Approve, Edit

        running = calls()
        if len(running) != 1:
            logger.warning(
                "MCP server %r elicits with %d calls in flight: it cannot be told which run "
                "to ask, so it is declined",
                server,
                len(running),
            )
            return MCPElicitationReply(action="decline")
        about: dict[str, Any] = {"elicitation": asked.message, "mode": asked.mode}
        if asked.schema is not None:
            about["schema"] = dict(asked.schema)
        if asked.url is not None:
            about["url"] = asked.url
        decision = await running[0].ask_approver(about)
        if isinstance(decision, Edit):
            return MCPElicitationReply(action="accept", content=dict(decision.arguments))
        if isinstance(decision, Approve):
            return MCPElicitationReply(action="accept", content={})
        return MCPElicitationReply(action="cancel" if decision is None else "decline")

    return ask


def elicitation_callback(server: str, elicitor: Elicitor) -> Any:
    """The SDK's ``elicitation_callback`` for ``elicitor``."""

    async def answer(context: Any, params: Any) -> Any:
        from mcp.types import INTERNAL_ERROR, ElicitResult, ErrorData

        mode: Literal["form", "url"] = "url" if getattr(params, "mode", "form") == "url" else "form"
        asked = MCPElicitation(
            server=server,
            message=params.message,
            schema=getattr(params, "requested_schema", None),
            url=getattr(params, "url", None),
            mode=mode,
        )
        try:
            reply = await elicitor(asked)
        except Exception as exc:
            logger.warning("MCP server %r: the elicitation callback failed: %r", server, exc)
            return ErrorData(code=INTERNAL_ERROR, message=f"elicitation failed: {exc}")
        if reply is None:
            reply = MCPElicitationReply(action="decline")
        elif not isinstance(reply, MCPElicitationReply):
            reply = MCPElicitationReply(action="accept", content=reply)
        content = dict(reply.content) if reply.content is not None else None
        return ElicitResult(action=reply.action, content=content)

    return answer
