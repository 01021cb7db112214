"""Closing a reply (``DeltaStream.aclose``) closes the HTTP response even when closing its body
fails first, and says what failed instead of dropping it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping

import pytest

from agentloop.models import Message, ModelRequest
from agentloop.models._openai_chat import ChatDecoder
from agentloop.models._stream import DeltaStream

pytestmark = pytest.mark.anyio


class _Body:
    """A response body whose close fails, as a reset connection's can."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        raise StopAsyncIteration

    async def aclose(self) -> None:
        raise OSError("connection reset while closing")


class _Response:
    def __init__(self) -> None:
        self.closed = False

    @property
    def status(self) -> int:
        return 200

    @property
    def headers(self) -> Mapping[str, str]:
        return {"content-type": "text/event-stream"}

    def chunks(self) -> _Body:
        return _Body()

    async def aclose(self) -> None:
        self.closed = True


async def test_a_failing_body_close_still_closes_the_response_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    response = _Response()

    async def open_response(_owner: object, _: ModelRequest) -> _Response:
        return response

    stream = DeltaStream(
        open_response,  # a RawResponse by shape
        None,
        ModelRequest(messages=(Message.user("hi"),)),
        ChatDecoder(),
        streaming=True,
        provider="openai",
        model="m",
        request_id_header="x-request-id",
    )
    with caplog.at_level(logging.WARNING, logger="agentloop"):
        async with stream:
            pass
    assert response.closed
    assert any("connection reset while closing" in r.getMessage() for r in caplog.records)
