"""A server's resources and prompts as agentloop values: what ``MCPServer.list_resources``,
``read_resource``, ``list_prompts`` and ``get_prompt`` return.

Like ``_convert``, nothing here imports ``mcp``: the SDK's objects are read by attribute, and
the values returned are ours, so code that reads them does not depend on the SDK's types.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..models import ImagePart, Message, TextPart
from . import _convert


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPResource:
    """A resource a server lists (``resources/list``).

    Args:
        uri: Its URI, for ``read_resource``.
        name: Its name.
        title: A name for people, if it has one.
        description: What it holds.
        mime_type: Its MIME type, if the server says.
    """

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPResourceTemplate:
    """A family of resources a server lists (``resources/templates/list``): fill in the
    template's variables (RFC 6570) to get a URI for ``read_resource``.

    Args:
        uri_template: The URI template (``demo://resource/{id}``).
        name: Its name.
        title: A name for people, if it has one.
        description: What its resources hold.
        mime_type: Their MIME type, if the server says.
    """

    uri_template: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPResourceContents:
    """One part of a resource as read: text, or bytes (a ``blob`` the server sent base64).

    Args:
        uri: The URI of this part.
        mime_type: Its MIME type, if the server says.
        text: Its text (for a text resource).
        data: Its bytes (for a binary resource).
    """

    uri: str
    mime_type: str | None = None
    text: str | None = None
    data: bytes | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPPromptArgument:
    """An argument a prompt takes.

    Args:
        name: Its name.
        description: What it is.
        required: Whether ``get_prompt`` must be given it.
    """

    name: str
    description: str | None = None
    required: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPPrompt:
    """A prompt a server lists (``prompts/list``).

    Args:
        name: Its name, for ``get_prompt``.
        title: A name for people, if it has one.
        description: What it is for.
        arguments: The arguments it takes.
    """

    name: str
    title: str | None = None
    description: str | None = None
    arguments: tuple[MCPPromptArgument, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPPromptMessages:
    """A prompt as a server renders it (``prompts/get``): messages to send a model, as
    agentloop messages (``memory=`` of a run takes them; the last user message's text can be
    a run's input). Text stays text; an image of a type providers take is an ``ImagePart``;
    other content (an embedded resource, audio) is described in text, as in tool results.

    Args:
        description: The server's description of the rendered prompt.
        messages: Its messages, in order (``user`` and ``assistant``).
    """

    description: str | None
    messages: tuple[Message, ...]


def resources(listed: Sequence[Any]) -> list[MCPResource]:
    return [
        MCPResource(
            uri=str(r.uri),
            name=r.name,
            title=r.title,
            description=r.description,
            mime_type=r.mime_type,
        )
        for r in listed
    ]


def templates(listed: Sequence[Any]) -> list[MCPResourceTemplate]:
    return [
        MCPResourceTemplate(
            uri_template=t.uri_template,
            name=t.name,
            title=t.title,
            description=t.description,
            mime_type=t.mime_type,
        )
        for t in listed
    ]


def contents(result: Any) -> list[MCPResourceContents]:
    out: list[MCPResourceContents] = []
    for part in result.contents:
        text = getattr(part, "text", None)
        blob = getattr(part, "blob", None)
        data: bytes | None = None
        if isinstance(blob, str):
            try:
                data = base64.b64decode(blob, validate=True)
            except (ValueError, binascii.Error):
                data = None
        out.append(
            MCPResourceContents(
                uri=str(part.uri),
                mime_type=part.mime_type,
                text=text if isinstance(text, str) else None,
                data=data,
            )
        )
    return out


def prompts(listed: Sequence[Any]) -> list[MCPPrompt]:
    return [
        MCPPrompt(
            name=p.name,
            title=p.title,
            description=p.description,
            arguments=tuple(
                MCPPromptArgument(name=a.name, description=a.description, required=bool(a.required))
                for a in p.arguments or ()
            ),
        )
        for p in listed
    ]


def prompt_messages(result: Any) -> MCPPromptMessages:
    """A rendered prompt's (or a sampling request's) messages as ours: a message's content is
    one block, or (in a sampling request) a list of them."""
    messages: list[Message] = []
    for message in result.messages:
        content = message.content
        blocks: list[Any] = list(content) if isinstance(content, list) else [content]
        parts: list[TextPart | ImagePart] = []
        for block in blocks:
            image = _convert.image(block)
            parts.append(image if image is not None else TextPart(text=_convert.render([block])))
        role: Literal["user", "assistant"] = "assistant" if message.role == "assistant" else "user"
        messages.append(Message(role=role, parts=tuple(parts)))
    return MCPPromptMessages(
        description=getattr(result, "description", None), messages=tuple(messages)
    )
