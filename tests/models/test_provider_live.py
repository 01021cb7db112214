"""Real-key smoke tests: one tool turn and one answer against the real APIs.

Skipped unless the provider's key is set; each opts out of the suite's remote-model block for
itself only. Run them with::

    OPENAI_API_KEY=... ANTHROPIC_API_KEY=... .venv/bin/pytest -m live tests/models/test_provider_live.py

``AGENTLOOP_LIVE_OPENAI_MODEL`` / ``AGENTLOOP_LIVE_ANTHROPIC_MODEL`` pick the models.
"""

from __future__ import annotations

import os

import pytest

from agentloop.models import (
    Message,
    ModelRequest,
    ModelSettings,
    ResponseBuilder,
    ToolResultPart,
    ToolSpec,
)
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

pytestmark = pytest.mark.live

ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)

OPENAI = os.environ.get("AGENTLOOP_LIVE_OPENAI_MODEL", "gpt-4o-mini")
ANTHROPIC = os.environ.get("AGENTLOOP_LIVE_ANTHROPIC_MODEL", "claude-haiku-4-5")


@pytest.fixture(params=["openai", "openai-responses", "anthropic"])
def live_model(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    key = "ANTHROPIC_API_KEY" if request.param == "anthropic" else "OPENAI_API_KEY"
    if not os.environ.get(key):
        pytest.skip(f"{key} is not set")
    monkeypatch.delenv("AGENTLOOP_BLOCK_REMOTE_MODELS", raising=False)  # this test only
    if request.param == "anthropic":
        return AnthropicModel(ANTHROPIC)
    if request.param == "openai":
        return OpenAIChatModel(OPENAI)
    return OpenAIResponsesModel(OPENAI)


async def test_live_tool_turn_then_answer(live_model: object) -> None:
    """The real API asks for the tool, then answers with its result; usage is reported."""
    model = live_model
    assert isinstance(model, OpenAIChatModel | OpenAIResponsesModel | AnthropicModel)
    messages = [Message.user("Use the add tool to add 20 and 22, then tell me the result.")]
    settings = ModelSettings(max_tokens=300)
    async with model:
        builder = ResponseBuilder(provider=model.provider)
        request = ModelRequest(messages=tuple(messages), tools=(ADD,), settings=settings)
        async with model.stream(request) as stream:
            async for delta in stream:
                builder.add(delta)
        first = builder.build()
        assert first.tool_calls and first.tool_calls[0].name == "add"
        assert first.usage is not None and first.usage.input_tokens > 0
        results = tuple(
            ToolResultPart(id=c.id, name=c.name, content="42") for c in first.tool_calls
        )
        messages += [
            Message(role="assistant", parts=first.parts),
            Message(role="tool", parts=results),
        ]
        builder = ResponseBuilder(provider=model.provider)
        async with model.stream(request.replace(messages=tuple(messages))) as stream:
            async for delta in stream:
                builder.add(delta)
        second = builder.build()
    assert "42" in second.text
    assert second.finish_reason == "stop"
