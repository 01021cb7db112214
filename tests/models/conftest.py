"""Fixtures for the provider-driver tests: one loopback server per session, and the transports.

A test that takes ``transport`` runs on every HTTP path the drivers ship: the portable httpx2
client on asyncio and trio; on asyncio, the direct aiohttp fast path and the SDK's own aiohttp
client (used when credentials change per request). The trio/aiohttp pairings are deselected, not
skipped: they do not exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.testing._server import ProviderServer

_HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def provider_server() -> Iterator[ProviderServer]:
    with ProviderServer() as server:
        yield server


@pytest.fixture
def server(provider_server: ProviderServer) -> Iterator[ProviderServer]:
    """The shared server, with its script and recorded requests cleared for this test."""
    provider_server.clear()
    yield provider_server
    provider_server.clear()


@pytest.fixture(params=["httpx", "aiohttp", "aiohttp-sdk"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _backend(item: pytest.Item) -> Any:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    backend = callspec.params.get("anyio_backend")
    return backend[0] if isinstance(backend, tuple) else backend


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if (
            callspec is not None
            and _HERE in Path(str(item.path)).resolve().parents
            and str(callspec.params.get("transport", "")).startswith("aiohttp")
            and _backend(item) == "trio"
        ):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
