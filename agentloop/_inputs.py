"""A run's input: text, or a sequence of text, images and files (``Agent.run``'s ``input``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias, cast

from ._errors import UserError
from .models._types import FilePart, ImagePart, InputPart, TextPart

__all__ = ["RunInput", "input_message_parts"]

RunInput: TypeAlias = str | Sequence[str | InputPart]


def input_message_parts(value: object) -> tuple[str, tuple[InputPart, ...] | None]:
    """The input's text (its text parts joined: what sessions and ``RunStarted`` record) and,
    when it holds images or files, all its parts in order (else ``None``)."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, ImagePart | FilePart):
        value = (value,)
    if isinstance(value, bytes | bytearray) or not isinstance(value, Sequence):
        raise UserError(
            "input must be a string or a sequence of strings, TextPart, ImagePart and FilePart, "
            f"not {type(value).__name__}"
        )
    parts: list[InputPart] = []
    items: Sequence[object] = cast("Sequence[object]", value)
    for item in items:
        if isinstance(item, str):
            parts.append(TextPart(text=item))
        elif isinstance(item, TextPart | ImagePart | FilePart):
            parts.append(item)
        else:
            raise UserError(
                "input parts must be strings, TextPart, ImagePart or FilePart, "
                f"not {type(item).__name__}"
            )
    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    if all(isinstance(p, TextPart) for p in parts):
        return text, None
    return text, tuple(parts)
