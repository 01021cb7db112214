"""Images and files as input, a tool that returns an image, and a context window that holds.

Shows: ``Agent.run([...])`` with text, an ``ImagePart`` (bytes, or a URL the provider fetches)
and a ``FilePart`` (a PDF); each API gets them in its own shape (Anthropic ``image`` and
``document`` blocks here). A tool returns an image as an ``ImagePart`` (with text): the model
sees it in the tool result. ``ContextWindow`` bounds each request's prompt; Anthropic cache
breakpoints are placed on their own (``ModelSettings(prompt_caching=False)`` turns them off).
A file type or size the API does not take is a ``UserError`` before anything is sent.

Offline (no ``ANTHROPIC_API_KEY``) it runs against agentloop's emulated provider on a loopback
socket, which checks each request as the API would; with the key set it asks
``claude-sonnet-4-5``.

Run: ``python examples/vision.py``
"""

from __future__ import annotations

import base64
import os
import zlib
from typing import Any

import anyio

from agentloop import Agent, ContextWindow, FilePart, ImagePart, UserError, tool
from agentloop.models.anthropic import AnthropicModel
from agentloop.testing import EmulatedProvider, ProviderServer


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour PNG, made here so the example needs no file."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    rows = b"".join(b"\0" + bytes(rgb) * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


REPORT = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


@tool
async def camera(room: str) -> list[Any]:
    """A snapshot of a room, as an image.

    Args:
        room: the room's name
    """
    return [
        f"snapshot of the {room}",
        ImagePart(data=png(8, 8, (40, 90, 200)), media_type="image/png"),
    ]


def describe(body: dict[str, Any]) -> str:
    """What the first user turn of an Anthropic request holds, block by block."""
    blocks = body["messages"][0]["content"]
    return ", ".join(
        f"{b['type']}({b['source']['type']})" if "source" in b else b["type"] for b in blocks
    )


async def ask(model: AnthropicModel) -> None:
    agent = Agent(
        model,
        instructions="You look at pictures carefully.",
        tools=[camera],
        context_window=ContextWindow(max_tokens=50_000),
    )
    question: list[str | ImagePart | FilePart] = [
        "Compare the chart with the living room's snapshot, and check the report.",
        ImagePart(data=png(16, 16, (200, 30, 30)), media_type="image/png"),
        ImagePart(
            url="https://upload.wikimedia.org/wikipedia/commons/4/47/PNG_transparency_demonstration_1.png"
        ),
        FilePart(data=REPORT, media_type="application/pdf", filename="report.pdf"),
    ]
    async with model:
        result = await agent.run(question)
        print(f"answer: {result.output}")
        for action in result.steps[0].actions:
            print(f"tool {action.name}: {action.output!r} and {len(action.images)} image(s)")
        try:
            tiff = FilePart(data=b"II*\0", media_type="image/tiff", filename="scan.tiff")
            await agent.run(["Read this scan.", tiff], raise_on_error=True)
        except UserError as exc:
            print(f"refused before sending: {exc}")


async def main() -> None:
    if os.environ.get("ANTHROPIC_API_KEY"):
        await ask(AnthropicModel("claude-sonnet-4-5"))
        return
    answer = "The chart is red, the living room is blue, and the report is a one-page PDF."
    async with ProviderServer(EmulatedProvider(answer=answer)) as server:
        await ask(AnthropicModel("emulated", base_url=server.url, api_key="test"))
        first, second = (r.json for r in server.requests)
        print(f"\nthe first request's user turn: {describe(first)}")
        result = next(b for b in second["messages"][-1]["content"] if b["type"] == "tool_result")
        print(f"the camera's result went back as: {[b['type'] for b in result['content']]}")
        print(f"cache breakpoints: system={'cache_control' in first['system'][0]}, "
              f"tools={'cache_control' in first['tools'][-1]}")  # fmt: skip
        print(
            f"the PNG sent was {len(base64.b64decode(first['messages'][0]['content'][1]['source']['data']))} bytes"
        )


if __name__ == "__main__":
    anyio.run(main)
