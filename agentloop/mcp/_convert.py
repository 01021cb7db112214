"""From MCP to agentloop: tool names, argument schemas and validation, and call results.

Nothing here imports ``mcp``: listings and results are read by attribute, so this module (and
``agentloop.mcp``) stays importable without the extra.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, cast

from .. import ToolError, UserError
from ..models import IMAGE_TYPES, ImagePart
from ..tools import Activity, Tool, ToolContext, checked_args_model

logger = logging.getLogger("agentloop.mcp")

MAX_NAME = 64
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]+")
_UNDERSCORES = re.compile(r"_{2,}")
_PREFIX = re.compile(r"^[A-Za-z0-9-][A-Za-z0-9_-]{0,31}$")
_MAX_PROBLEMS = 10


def check_prefix(prefix: str | None) -> str | None:
    if prefix is not None and (not _PREFIX.match(prefix) or prefix.endswith("_")):
        raise UserError(
            f"MCP tool prefix {prefix!r} must be 1-32 characters of [A-Za-z0-9_-], not starting "
            "or ending with '_' (it is joined to each tool name with '_')"
        )
    return prefix


def check_names(kind: str, names: Collection[str] | None) -> frozenset[str] | None:
    """A filter list, refusing a bare string (which would be iterated letter by letter)."""
    if names is None:
        return None
    if isinstance(names, str) or not all(
        isinstance(n, str) for n in cast("Collection[object]", names)
    ):
        raise UserError(f"MCP {kind} must be a collection of tool names, not {names!r}")
    return frozenset(names)


def select(
    server: str, names: Sequence[str], allow: frozenset[str] | None, deny: frozenset[str] | None
) -> list[str]:
    """The server's tool names the filters let through; names in a filter that the server does
    not have are logged (a typo would otherwise hide a tool without a word)."""
    known = set(names)
    for kind, listed in (("allow", allow), ("deny", deny)):
        unknown = sorted((listed or set()) - known)
        if unknown:
            logger.warning(
                "MCP server %r has no tool named %s (listed in %s)",
                server,
                ", ".join(map(repr, unknown)),
                kind,
            )
    return [n for n in names if (allow is None or n in allow) and not (deny and n in deny)]


def agent_names(prefix: str | None, names: Sequence[str]) -> dict[str, str]:
    """Map each server tool name to the name the model sees.

    MCP allows names our providers refuse (dots, slashes, up to 128 characters), so: characters
    outside ``[A-Za-z0-9_-]`` become ``_``, runs of ``_`` become one (``__`` separates a toolkit
    from its activity), the prefix is joined with ``_``, and a name that is too long or that
    collides with another is cut and given a short hash of the server's name to stay unique.
    """
    wanted = {name: _clean(f"{prefix}_{name}" if prefix else name) for name in names}
    counts: dict[str, int] = {}
    for clean in wanted.values():
        counts[clean] = counts.get(clean, 0) + 1
    out: dict[str, str] = {}
    for name, clean in wanted.items():
        if len(clean) > MAX_NAME or counts[clean] > 1:
            digest = hashlib.sha256(name.encode()).hexdigest()[:8]
            clean = f"{clean[: MAX_NAME - 9].rstrip('_')}_{digest}"
        out[name] = clean
    return out


def _clean(name: str) -> str:
    return _UNDERSCORES.sub("_", _NOT_ALLOWED.sub("_", name)).strip("_") or "tool"


def build_tools(
    *,
    server: str,
    listed: Sequence[Any],
    prefix: str | None,
    allow: frozenset[str] | None,
    deny: frozenset[str] | None,
    tool_timeout: float,
    call: Callable[[str, dict[str, Any], ToolContext], Awaitable[Any]],
) -> tuple[Tool, ...]:
    """Our tools for a server's listing (``mcp.types.Tool`` objects): filtered, named, each
    calling ``call(server_name, arguments, context)`` (the context reports the call's
    progress). A tool whose input schema is not a valid JSON
    schema is left out, with a warning (providers would refuse the whole request)."""
    by_name = {t.name: t for t in listed}
    kept = select(server, list(by_name), allow, deny)
    names = agent_names(prefix, kept)
    tools: list[Tool] = []
    for original in kept:
        listing, name = by_name[original], names[original]
        try:
            check = schema_checker(listing.input_schema)
        except ValueError as exc:
            logger.warning(
                "MCP server %r: tool %r is left out: its input schema is invalid: %s",
                server,
                original,
                exc,
            )
            continue
        description = (listing.description or listing.title or "").strip()
        activity = Activity(
            path=None,
            description=description,
            fn=functools.partial(call, original),
            args=checked_args_model(name, check),
            parameters=parameters(listing.input_schema),
            context_param="context",
            is_async=True,
            eager=True,
            timeout=tool_timeout,
        )
        tools.append(Tool(name=name, description=description, activities={None: activity}))
    return tuple(tools)


def parameters(schema: Any) -> dict[str, Any]:
    """The server's input schema as we send it to providers: an object schema with
    ``properties``, without ``$schema`` and without titles (noise for the model). Validation
    uses the server's own schema, not this one."""
    if not isinstance(schema, Mapping):
        return {"type": "object", "properties": {}}
    out: dict[str, Any] = _without_titles({k: v for k, v in schema.items() if k != "$schema"})
    out.setdefault("type", "object")
    if out["type"] == "object" and not isinstance(out.get("properties"), Mapping):
        out["properties"] = {}
    return out


def _without_titles(node: Any) -> Any:
    """``title`` annotations removed at every level (a property named ``title`` stays)."""
    if isinstance(node, dict):
        return {
            k: _without_titles(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def schema_checker(schema: Mapping[str, Any]) -> Callable[[Any], list[tuple[tuple[Any, ...], str]]]:
    """A function that lists where arguments break ``schema`` (empty when they fit).

    Raises ``ValueError`` when ``schema`` is not a valid JSON schema. A ``$ref`` that cannot be
    resolved locally is left to the server to check.
    """
    from jsonschema import Draft202012Validator, validators  # type: ignore[import-untyped]
    from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(dict(schema))  # (its stubs want a dict)
    except SchemaError as exc:
        raise ValueError(exc.message) from None
    validator = cls(schema)

    def check(arguments: Any) -> list[tuple[tuple[Any, ...], str]]:
        from referencing.exceptions import Unresolvable

        try:
            errors = sorted(
                validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.absolute_path]
            )
        except Unresolvable:
            return []
        return [(tuple(e.absolute_path), _clip(e.message)) for e in errors[:_MAX_PROBLEMS]]

    return check


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def output(server: str, tool: str, result: Any) -> Any:
    """A ``CallToolResult`` as our result: structured content when the server gave it (and the
    blocks are only its text rendering), else the blocks as text, with images, audio and
    binary resources described; images (of a type providers take) also come back as
    ``ImagePart`` values, after the text. ``isError`` raises ``ToolError``: an error result the model
    sees."""
    blocks: Sequence[Any] = result.content or ()
    if result.is_error:
        text = render(blocks)
        raise ToolError(text or f"the MCP tool {tool!r} of {server!r} reported an error")
    structured = result.structured_content
    if structured is not None and all(getattr(b, "type", None) == "text" for b in blocks):
        return structured
    images = [found for found in map(image, blocks) if found is not None]
    if images:  # the model sees them where its API takes images in a tool result
        return [render(blocks), *images]
    return render(blocks)


def image(block: Any) -> ImagePart | None:
    if getattr(block, "type", None) != "image" or block.mime_type not in IMAGE_TYPES:
        return None
    try:
        data = base64.b64decode(block.data, validate=True)
    except ValueError:
        return None
    return ImagePart(data=data, media_type=block.mime_type)


def render(blocks: Iterable[Any]) -> str:
    """Content blocks as one text, blank lines between them."""
    return "\n\n".join(_block(b) for b in blocks)


def _block(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_size(block.data)}]"
    if kind == "resource_link":
        about = f" ({block.mime_type})" if block.mime_type else ""
        description = f": {block.description}" if block.description else ""
        return f"[resource link: {block.name} <{block.uri}>{about}{description}]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource <{resource.uri}>]\n{text}"
        mime = resource.mime_type or "binary"
        return f"[resource <{resource.uri}>: {mime}, {_size(getattr(resource, 'blob', ''))}]"
    dumped = block.model_dump(mode="json") if hasattr(block, "model_dump") else block
    return f"[{kind or 'unknown'} content: {_clip(json.dumps(dumped, default=str))}]"


def _size(base64_data: str) -> str:
    n = len(base64_data) * 3 // 4 - base64_data[-2:].count("=")
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} kB"
