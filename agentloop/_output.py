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
