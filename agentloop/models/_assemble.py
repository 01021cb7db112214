"""Assemble a reply's deltas into a ``ModelResponse``, in linear time.

A call whose id an earlier call of the reply already has (some compatible servers number every
call ``call_0``) gets an id of its own (``call_0-2``): ``add`` returns the delta with it, so the
runtime, the reply's parts and the next request all name the calls apart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from ._types import (
    CitationDelta,
    FinishDelta,
    FinishReason,
    ModelDelta,
    ModelResponse,
    Part,
    ProviderBlock,
    TextPart,
    TextPiece,
    ThoughtDone,
    ThoughtPart,
    ThoughtPiece,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    Usage,
    UsageDelta,
    split_wire_tool_name,
)


class _Call:
    __slots__ = ("args", "arguments", "id", "name", "part", "slot")

    def __init__(self, id: str, name: str, slot: int) -> None:
        self.id = id
        self.name = name
        self.slot = slot
        self.args: list[str] = []
        self.arguments: str | None = None
        self.part: ToolCallPart | None = None  # the sealed part, made once


_NO_CALLS: dict[str, Any] = {}  # never written: a builder makes its own with its first call


class ResponseBuilder:
    """Collects deltas into parts. Each piece of text is copied once, when its part closes.

    Args:
        provider: The provider whose reasoning this is (set on ``ThoughtPart.provider``).
    """

    __slots__ = (
        "_buffer",
        "_by_id",
        "_calls",
        "_citations",
        "_open_kind",
        "_parts",
        "_provider",
        "finish_reason",
        "refusal",
        "usage",
    )

    def __init__(self, *, provider: str | None = None) -> None:
        self._provider = provider
        self._parts: list[Part | None] = []
        self._open_kind: str | None = None
        self._buffer: list[str] = []
        self._citations: list[Mapping[str, Any]] = []
        # By the id on the wire (its latest call), and by the call's own id; the shared empty
        # dict until the first call (a reply of text alone needs neither).
        self._calls: dict[str, _Call] = _NO_CALLS
        self._by_id: dict[str, _Call] = _NO_CALLS
        self.usage: Usage | None = None
        self.finish_reason: FinishReason | None = None
        self.refusal: str | None = None

    def add(self, delta: ModelDelta) -> ModelDelta:
        """Take the next delta of the stream; return it, with the call's own id if the wire's
        was a duplicate (see the module's docstring).

        Args:
            delta: The delta.
        """
        match delta:
            case TextPiece(text=text):
                self._open("text")
                self._buffer.append(text)
            case ThoughtPiece(text=text):
                self._open("thought")
                self._buffer.append(text)
            case ThoughtDone():
                self._open("thought")
                self._close(signature=delta.signature, redacted=delta.redacted, id=delta.id)
            case ToolCallStart(id=id, name=name):
                self._close()
                if self._by_id is _NO_CALLS:
                    self._calls, self._by_id = {}, {}
                own = id if id not in self._by_id else self._fresh(id)
                call = self._calls[id] = self._by_id[own] = _Call(own, name, len(self._parts))
                self._parts.append(None)
                if own != id:
                    return ToolCallStart(id=own, name=name)
            case ToolCallArgsDelta(id=id, text=text):
                call = self._wire_call(id)
                call.args.append(text)
                if call.id != id:
                    return ToolCallArgsDelta(id=call.id, text=text)
            case ToolCallEnd(id=id, arguments=arguments):
                call = self._wire_call(id)
                call.arguments = arguments if arguments is not None else "".join(call.args)
                call.part = None
                if call.id != id:
                    return ToolCallEnd(id=call.id, arguments=arguments)
            case ProviderBlock(part=part):
                self._close()
                self._parts.append(part)
            case CitationDelta(data=data):
                self._citations.append(data)
            case UsageDelta(usage=usage):
                self.usage = usage
            case FinishDelta():
                self.finish_reason = delta.reason
                if delta.refusal is not None:
                    self.refusal = delta.refusal
        return delta

    def sealed_call(self, id: str) -> ToolCallPart:
        """The finished part for a sealed call (the runtime starts it right away).

        Args:
            id: The call's id.
        """
        call = self._call(id)
        if call.part is not None:
            return call.part
        name, path = split_wire_tool_name(call.name)
        arguments = call.arguments if call.arguments is not None else "".join(call.args)
        part = ToolCallPart(id=call.id, name=name, path=path, arguments=arguments or "{}")
        if call.arguments is not None:
            # Sealed: its arguments are final. ``build`` then returns the very part the runtime
            # started the action with (no second object, and an identity check in the loop).
            call.part = part
        return part

    def build(self, **fields: Any) -> ModelResponse:
        """The response so far. Calls the stream never sealed keep the arguments seen.

        Args:
            **fields: Fields of the ``ModelResponse`` besides its parts (usage, finish reason).
        """
        self._close()
        by_slot = {call.slot: call.id for call in self._by_id.values()}
        parts: tuple[Part, ...] = tuple(
            self.sealed_call(by_slot[i]) if part is None else part
            for i, part in enumerate(self._parts)
        )
        finish = self.finish_reason
        if finish is None:
            finish = "tool_calls" if self._calls else "stop"
        return ModelResponse(
            parts=parts,
            usage=self.usage,
            finish_reason=finish,
            refusal=self.refusal,
            **fields,
        )

    def _call(self, id: str) -> _Call:
        try:
            return self._by_id[id]
        except KeyError:
            raise ValueError(f"tool call {id!r} was never started") from None

    def _wire_call(self, id: str) -> _Call:
        try:
            return self._calls[id]
        except KeyError:
            raise ValueError(f"tool call {id!r} was never started") from None

    def _fresh(self, id: str) -> str:
        """An id no call of this reply has, made from a duplicate ``id``."""
        n = 2
        while f"{id}-{n}" in self._by_id:
            n += 1
        return f"{id}-{n}"

    def _open(self, kind: str) -> None:
        if self._open_kind != kind:
            self._close()
            self._open_kind = kind

    def _close(
        self, *, signature: str | None = None, redacted: bool = False, id: str | None = None
    ) -> None:
        kind, self._open_kind = self._open_kind, None
        if kind is None:
            return
        text = "".join(self._buffer)
        self._buffer.clear()
        if kind == "text":
            if text or self._citations:
                self._parts.append(TextPart(text=text, citations=tuple(self._citations)))
            self._citations.clear()
        elif text or signature is not None or redacted:
            self._parts.append(
                ThoughtPart(
                    text=text,
                    signature=signature,
                    redacted=redacted,
                    id=id,
                    provider=self._provider,
                )
            )


async def collect(
    deltas: AsyncIterator[ModelDelta], *, provider: str | None = None
) -> ModelResponse:
    """Drain a delta stream into a response (for tests and non-streaming callers).

    Args:
        deltas: The stream.
        provider: As for ``ResponseBuilder``.
    """
    builder = ResponseBuilder(provider=provider)
    async for delta in deltas:
        builder.add(delta)
    return builder.build()
