"""Fixtures for the provider-driver tests: one loopback server per session, and the transports.

A test that takes ``transport`` runs on every HTTP path the drivers ship, paired with the event
loops it runs on: the portable httpx2 client on asyncio and trio; on asyncio only, the direct
aiohttp fast path and the SDK's own aiohttp client (used when credentials change per request).
Only these pairs are generated.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentloop.testing._server import ProviderServer

BACKEND_TRANSPORTS = [
    ("asyncio", "httpx"),
    ("trio", "httpx"),
    ("asyncio", "aiohttp"),
    ("asyncio", "aiohttp-sdk"),
]


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A mark, not a direct call: a parametrize mark takes precedence over the fixture's params.
    if "transport" in metafunc.fixturenames:
        metafunc.definition.add_marker(
            pytest.mark.parametrize(
                ("anyio_backend", "transport"),
                BACKEND_TRANSPORTS,
                indirect=["anyio_backend"],
                ids=[f"{backend}-{transport}" for backend, transport in BACKEND_TRANSPORTS],
            )
        )


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
