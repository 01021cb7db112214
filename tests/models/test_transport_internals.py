"""The SDK internals ``models/_transport.py`` reads, checked on the installed versions.

The direct sender, the direct read of a response's transport stream and the bounded error body
use private attributes of httpx2 and of the SDK clients, and only on the versions in
``_transport.CHECKED``; elsewhere the SDK's own path runs (a newer version says so once,
``tests/models/test_newer_releases.py``). These tests fail loudly when a pin in
``.ci/constraints.txt`` leaves those versions or an attribute changes, instead of the speed (or
the credential check) quietly going away. The lowest-versions and newest-releases CI stages
install versions outside ``CHECKED``: there the path those allow is what runs and is tested,
and these tests skip.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pytest

from agentloop.models import Message, ModelRequest
from agentloop.models import _transport as transport
from agentloop.testing import ProviderServer, ScriptedResponse
from tests.support.floors import running_the_pins

from ._provider_helpers import direct_paths_only, load, make_model

REQUEST = ModelRequest(messages=(Message.user("hi"),))
REPLY = "anthropic/stream_text_ping"


def test_the_pinned_versions_are_the_checked_ones() -> None:
    """A pin moved past ``CHECKED`` (``.ci/constraints.txt``) fails here: check the attributes
    the tests below read on the new version, then widen the range (else the SDK path runs,
    slower). Other versions (the floors, the newest releases) run whichever path their
    versions allow, and the tests assert the one that ran (``check_transport``)."""
    if not running_the_pins(transport.CHECKED):
        pytest.skip("not the versions .ci/constraints.txt pins: the path they allow runs")
    found = {dist: version(dist) for dist in transport.CHECKED}
    assert transport.internals_checked(), (
        f"installed {found}, internals checked on {transport.CHECKED}"
    )


@direct_paths_only
def test_the_sdk_clients_keep_the_attributes_read() -> None:
    """The HTTP client (for the error-body hook) and every credential attribute
    ``direct_eligible`` reads exist on the SDK clients, and a key provider is seen as one."""
    import anthropic  # here, not at the top: seconds of CPU for every worker that collects this
    import openai

    clients: list[Any] = [
        openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:1"),
        anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:1"),
    ]
    for client in clients:
        assert isinstance(client._client.event_hooks, dict)
        assert isinstance(client.auth_headers, dict) and client.auth_headers
        assert transport.direct_eligible(client)
    internal = [name for name in transport.DYNAMIC_CREDENTIALS if name.startswith("_")]
    assert all(hasattr(clients[0], name) for name in internal)

    async def key() -> str:
        return "k"

    rotating = openai.AsyncOpenAI(api_key=key, base_url="http://127.0.0.1:1")
    assert not transport.direct_eligible(rotating)


@direct_paths_only
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("kind", ["httpx", "aiohttp-sdk"])
async def test_a_response_exposes_its_transport_stream(kind: str, server: ProviderServer) -> None:
    """Through the SDK (its httpx2 transport, or its aiohttp adapter) a response's body is read
    from the transport stream itself, not through ``aiter_raw()``."""
    server.enqueue(ScriptedResponse.sse(load(REPLY).body))
    async with make_model("anthropic", server.url, transport=kind) as model:
        async with model.stream(REQUEST) as stream:
            raw = stream._response
            assert model.transport == kind
            assert transport._transport_chunks(raw._response) is not None
            assert [d async for d in stream]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_unchecked_versions_take_the_sdk_path(
    monkeypatch: pytest.MonkeyPatch, server: ProviderServer
) -> None:
    """On a version not in ``CHECKED`` nothing internal is read: ``transport="aiohttp"`` sends
    through the SDK's aiohttp client, whose body is read through ``aiter_raw()``."""
    monkeypatch.setattr(transport, "internals_checked", lambda *dists: False)
    # An unchecked anthropic also stops the direct path that needs no SDK client (_sdk_free).
    monkeypatch.setitem(transport.CHECKED, "anthropic", ((0,), (0,)))
    monkeypatch.setattr(transport, "_told", {"anthropic"})  # told once already
    server.enqueue(ScriptedResponse.sse(load(REPLY).body))
    async with make_model("anthropic", server.url, transport="aiohttp") as model:
        async with model.stream(REQUEST) as stream:
            raw = stream._response
            assert transport._transport_chunks(raw._response) is None
            assert [d async for d in stream]
        assert model.transport == "aiohttp-sdk"
