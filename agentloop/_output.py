"""A typed answer: the schema the model is taught, and the parse its answer must pass."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import UserError
from .models._types import OutputSchema

if TYPE_CHECKING:
    from pydantic import TypeAdapter

_FENCE = re.compile(r"^\s*```[\w-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Output:
    """An ``output_type`` other than ``str``, made once per agent (its adapter and schema)."""

    schema: OutputSchema
    adapter: TypeAdapter[Any]

    @classmethod
    def of(cls, output_type: type[Any] | None) -> Output | None:
        """``None`` for a plain-text answer (no ``output_type``, or ``str``)."""
        if output_type is None or output_type is str:
            return None
        from pydantic import TypeAdapter  # imported only for agents with an output type
        from pydantic.errors import PydanticUserError

        try:
            adapter: TypeAdapter[Any] = TypeAdapter(output_type)
            json_schema = adapter.json_schema()
        except (PydanticUserError, TypeError) as exc:
            # pydantic's first sentence says what failed; its advice (arbitrary types) is not ours
            text = str(exc).strip()
            reason = text.split(". ")[0].splitlines()[0] if text else type(exc).__name__
            raise UserError(
                f"output_type={output_type!r} cannot be an answer's type: pydantic makes no "
                f"JSON schema of it ({reason}). Use a pydantic model, a dataclass, a TypedDict "
                "or a type such as list[str], made of JSON-compatible fields"
            ) from None
        name = getattr(output_type, "__name__", "output")
        return cls(OutputSchema(name=name, json_schema=json_schema), adapter)


def parse_output(output: Output | None, text: str) -> Any:
    """The typed output of an answer (raises ``pydantic.ValidationError``); plain text as is."""
    if output is None:
        return text
    return output.adapter.validate_json(strip_fence(text))


def strip_fence(text: str) -> str:
    """The answer without the Markdown code fence models like to wrap JSON in."""
    match = _FENCE.match(text)
    return match.group(1) if match else text.strip()


_MIN_GROWTH = 64  # characters an answer grows by before it is parsed again


class PartialParser:
    """Parses a structured answer as it streams, into partial validated outputs: again only
    once it grew by a quarter (at least ``_MIN_GROWTH`` characters), so that the work on a
    reply of n characters stays O(n)."""

    __slots__ = ("_chunks", "_last", "_length", "_parsed_at", "output")

    def __init__(self, output: Output) -> None:
        self.output = output
        self._chunks: list[str] = []
        self._length = 0
        self._parsed_at = 0
        self._last: Any = None

    def feed(self, text: str, *, final: bool = False) -> tuple[bool, Any]:
        """Add streamed text; ``(True, value)`` when a new partial output is ready."""
        if text:
            self._chunks.append(text)
            self._length += len(text)
        grown = self._length - self._parsed_at
        if not final and grown < max(_MIN_GROWTH, self._parsed_at // 4):
            return False, None
        if not grown:
            return False, None
        self._parsed_at = self._length
        joined = "".join(self._chunks)
        self._chunks = [joined]
        value = self._parse(joined)
        if value is None or value == self._last:
            return False, None
        self._last = value
        return True, value

    def _parse(self, text: str) -> Any:
        from pydantic import ValidationError

        body = text.lstrip()
        if body.startswith("```"):  # a fence still open: its first line is not JSON
            body = body.partition("\n")[2]
            body = body.removesuffix("```").rstrip().removesuffix("```")
        if not body:
            return None
        try:
            return self.output.adapter.validate_json(
                body, experimental_allow_partial="trailing-strings"
            )
        except (ValidationError, ValueError):
            return None  # not yet an object of the type (a required field still missing)
