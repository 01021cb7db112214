"""Images and files on the wire: each API's content blocks, and the checks that refuse, before
any request is sent, what an API cannot take (a file type, a size) with an error that says so.

Limits are the documented ones: OpenAI takes images of up to 20 MB and PDFs of up to 32 MB;
Anthropic takes images of up to 5 MB and documents (PDF, plain text) of up to 32 MB. Chat
Completions takes a file only as bytes (its ``file`` part has no URL form); Anthropic's plain
text documents are sent as text, so they must be given as bytes.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from .._errors import UserError
from ._types import FilePart, ImagePart, data_url

__all__ = ["Api", "anthropic_block", "chat_block", "check_media", "responses_block"]

Api: TypeAlias = Literal["openai-chat", "openai-responses", "anthropic"]

_MB = 1024 * 1024
_IMAGE_LIMIT: dict[Api, int] = {
    "openai-chat": 20 * _MB,
    "openai-responses": 20 * _MB,
    "anthropic": 5 * _MB,
}
_FILE_LIMIT = 32 * _MB
_FILE_TYPES: dict[Api, frozenset[str]] = {
    "openai-chat": frozenset({"application/pdf"}),
    "openai-responses": frozenset({"application/pdf"}),
    "anthropic": frozenset({"application/pdf", "text/plain"}),
}
_NAMES: dict[Api, str] = {
    "openai-chat": "OpenAI Chat Completions",
    "openai-responses": "OpenAI Responses",
    "anthropic": "Anthropic Messages",
}


def check_media(api: Api, part: ImagePart | FilePart) -> None:
    """Raise ``UserError`` for a part the API cannot take."""
    name = _NAMES[api]
    if isinstance(part, ImagePart):
        size = len(part.data) if part.data is not None else 0
        if size > _IMAGE_LIMIT[api]:
            raise UserError(
                f"{name} takes images of up to {_IMAGE_LIMIT[api] // _MB} MB; this one is "
                f"{size / _MB:.1f} MB"
            )
        return
    if part.media_type not in _FILE_TYPES[api]:
        raise UserError(
            f"{name} does not take files of type {part.media_type!r} "
            f"(it takes {', '.join(sorted(_FILE_TYPES[api]))})"
        )
    if part.data is not None and len(part.data) > _FILE_LIMIT:
        raise UserError(
            f"{name} takes files of up to {_FILE_LIMIT // _MB} MB; "
            f"{part.filename or 'this one'} is {len(part.data) / _MB:.1f} MB"
        )
    if part.url is not None and api == "openai-chat":
        raise UserError(
            "OpenAI Chat Completions takes a file only as bytes, not by URL: give FilePart(data=...)"
        )
    if part.url is not None and part.media_type == "text/plain" and api == "anthropic":
        raise UserError("Anthropic Messages takes a text document only as bytes, not by URL")


def chat_block(part: ImagePart | FilePart) -> dict[str, Any]:
    """A Chat Completions content part: ``image_url`` or ``file``."""
    check_media("openai-chat", part)
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    file: dict[str, Any] = {"file_data": data_url(part)}
    file["filename"] = part.filename or "document.pdf"
    return {"type": "file", "file": file}


def responses_block(part: ImagePart | FilePart) -> dict[str, Any]:
    """A Responses input content item: ``input_image`` or ``input_file``."""
    check_media("openai-responses", part)
    if isinstance(part, ImagePart):
        return {"type": "input_image", "image_url": data_url(part), "detail": "auto"}
    if part.url is not None:
        return {"type": "input_file", "file_url": part.url}
    return {
        "type": "input_file",
        "filename": part.filename or "document.pdf",
        "file_data": data_url(part),
    }


def anthropic_block(part: ImagePart | FilePart) -> dict[str, Any]:
    """An Anthropic content block: ``image`` or ``document``."""
    check_media("anthropic", part)
    source: dict[str, Any]
    if part.url is not None and not part.url.startswith("data:"):
        source = {"type": "url", "url": part.url}
    elif part.data is not None and part.media_type == "text/plain":
        source = {
            "type": "text",
            "media_type": "text/plain",
            "data": part.data.decode(errors="replace"),
        }
    else:
        url = data_url(part)
        media_type, _, payload = url.removeprefix("data:").partition(";base64,")
        source = {"type": "base64", "media_type": media_type, "data": payload}
    if isinstance(part, ImagePart):
        return {"type": "image", "source": source}
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.filename:
        block["title"] = part.filename
    return block
