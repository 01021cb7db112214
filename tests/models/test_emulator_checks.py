"""The emulated provider refuses, with a 400 in the API's own error shape, what each API
documents it refuses: a tool result without its call, a call left without its result, content
parts of the wrong shape, image types the API does not take, too many cache breakpoints. Over
the real drivers, a refused request is a ``ModelBadRequest``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop import ModelBadRequest
from agentloop.models import Message, ModelRequest, ToolResultPart
from agentloop.testing import EmulatedProvider, ProviderServer, RecordedRequest
from agentloop.testing._checks import request_problem

from ._provider_helpers import make_model

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("chat", {"messages": [{"role": "user", "content": "hi"},
                           {"role": "tool", "tool_call_id": "c9", "content": "x"}]},
     "must be a response to a preceding message with 'tool_calls'"),
    ("chat", {"messages": [{"role": "assistant", "content": None, "tool_calls": [CALL]},
                           {"role": "user", "content": "hi"}]},
     "must be followed by tool messages responding to each 'tool_call_id' (missing: c1)"),
    ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url",
                                                         "image_url": {"url": "data:image/bmp;base64,AA"}}]}]},
     "image type 'image/bmp' is not supported"),
    ("chat", {"messages": [{"role": "user", "content": [{"type": "input_image"}]}]},
     "invalid content part 'input_image'"),
    ("responses", {"input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}]},
     "No tool call found for function call output with call_id 'c1'"),
    ("responses", {"input": [{"role": "user", "content": [{"type": "input_file", "file_data": "x"}]}]},
     "input_file with file_data needs a filename"),
    ("anthropic", {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]},
     "each tool_use must have a tool_result block in the next message"),
    ("anthropic", {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "and"},
                                     {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]},
     "tool_result blocks must come first"),
    ("anthropic", {"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "text/csv", "data": "AA"}}]}]},
     "media_type 'text/csv' not supported"),
    ("anthropic", {"system": [{"type": "text", "text": "s", "cache_control": {}}] * 3,
                   "messages": [{"role": "user", "content": [
                       {"type": "text", "text": "a", "cache_control": {}},
                       {"type": "text", "text": "b", "cache_control": {}}]}]},
     "A maximum of 4 blocks with cache_control may be provided. Found 5."),
]  # fmt: skip
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


@pytest.mark.parametrize(("api", "body", "message"), BAD, ids=lambda v: "")
def test_what_the_api_refuses_is_a_400(api: str, body: dict[str, Any], message: str) -> None:
    problem = request_problem(api, body)
    assert problem is not None and message in problem
    request = RecordedRequest(
        method="POST", path=PATHS[api], headers={}, body=json.dumps(body).encode()
    )
    response = EmulatedProvider()(request)
    assert response.status == 400
    assert EmulatedProvider(check_requests=False)(request).status == 200


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_an_orphaned_tool_result_is_a_bad_request_over_the_driver(api: str) -> None:
    """A history whose tool result lost its call (what a careless trim would send) fails as
    the real API fails it: ``ModelBadRequest``, with the API's message."""
    orphan = Message(role="tool", parts=(ToolResultPart(id="gone", name="f", content="x"),))
    request = ModelRequest(messages=(Message.user("hi"), orphan))
    async with ProviderServer(EmulatedProvider()) as server:
        async with make_model(api, server.url) as model:
            with pytest.raises(ModelBadRequest) as raised:
                async with model.stream(request) as stream:
                    [d async for d in stream]
    assert raised.value.status == 400
