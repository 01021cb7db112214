"""A dependency newer than the versions ``_transport.CHECKED`` names: what stays on, and the
one warning that says what was turned off.

The 413 read ahead, the bounded error body and the direct read of replies read private
attributes of httpx2 and httpcore2 only, so a newer provider SDK leaves them on. The direct
aiohttp transport reads the SDK's (its credential attributes, the headers it would send): on a
newer SDK it is off, and the first driver to find that warns once, naming the version and what
runs instead. An older version (the floors) is not warned about: it is what CI's
lowest-versions stage proves.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import httpx2
import pytest

from agentloop.models import Message, ModelRequest
from agentloop.models import _transport as transport
from agentloop.models._read_ahead import ReadAheadBackend, read_ahead_on_writes
from agentloop.testing import ProviderServer, ScriptedResponse

from ._provider_helpers import load, make_model

REQUEST = ModelRequest(messages=(Message.user("hi"),))
REPLY = "anthropic/stream_text_ping"


@pytest.fixture
def anthropic_newer(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The installed anthropic SDK, as if released after the range ``CHECKED`` names for it."""
    installed = transport.release(version("anthropic"))
    monkeypatch.setitem(transport.CHECKED, "anthropic", ((0,), installed[:1]))
    monkeypatch.setattr(transport, "_told", set())
    monkeypatch.setattr(transport, "_off", {})
    transport.internals_checked.cache_clear()
    yield version("anthropic")
    transport.internals_checked.cache_clear()


def test_a_newer_sdk_keeps_the_413_read_ahead(anthropic_newer: str) -> None:
    """The read ahead patches httpx2 and httpcore2, not the SDK: a newer SDK keeps it."""
    if not transport.internals_checked(*transport.HTTPX):
        pytest.skip("httpx2 itself is outside CHECKED here")
    client: Any = httpx2.AsyncClient()
    assert read_ahead_on_writes(client) == 1
    assert isinstance(client._transport._pool._network_backend, ReadAheadBackend)  # internal


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the direct transport is asyncio's
async def test_a_newer_sdk_warns_once_what_it_turned_off(
    anthropic_newer: str, server: ProviderServer
) -> None:
    """``transport="aiohttp"`` on a newer SDK sends through the SDK's aiohttp client, and says
    so once (a second driver does not repeat it)."""
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always", transport.UncheckedVersionWarning)
        for _ in range(2):
            server.enqueue(ScriptedResponse.sse(load(REPLY).body))
            async with make_model("anthropic", server.url, transport="aiohttp") as model:
                async with model.stream(REQUEST) as stream:
                    assert [d async for d in stream]
                assert model.transport == "aiohttp-sdk"
    messages = [
        str(w.message)
        for w in told
        if w.category is transport.UncheckedVersionWarning
        and str(w.message).startswith("anthropic ")  # not a newer httpx2 of the machine's
    ]
    assert len(messages) == 1, messages
    assert f"anthropic {anthropic_newer}" in messages[0]
    assert "direct aiohttp transport" in messages[0] and "aiohttp-sdk" in messages[0]
    assert transport.turned_off()["anthropic"] == anthropic_newer


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_older_sdk_is_not_warned_about(
    monkeypatch: pytest.MonkeyPatch, server: ProviderServer
) -> None:
    """Below the checked range (the floors) the SDK path runs as CI proves it, without a word."""
    installed = transport.release(version("anthropic"))
    monkeypatch.setitem(transport.CHECKED, "anthropic", ((installed[0] + 1,), (installed[0] + 2,)))
    monkeypatch.setattr(transport, "_told", set())
    monkeypatch.setattr(transport, "_off", {})
    transport.internals_checked.cache_clear()
    try:
        server.enqueue(ScriptedResponse.sse(load(REPLY).body))
        with warnings.catch_warnings(record=True) as told:
            warnings.simplefilter("always", transport.UncheckedVersionWarning)
            async with make_model("anthropic", server.url, transport="aiohttp") as model:
                async with model.stream(REQUEST) as stream:
                    assert [d async for d in stream]
                assert model.transport == "aiohttp-sdk"
        # Only about anthropic: a newer httpx2 on the machine is told of in its own right.
        assert not [w for w in told if str(w.message).startswith("anthropic ")]
    finally:
        transport.internals_checked.cache_clear()
