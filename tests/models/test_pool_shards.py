"""A large connection pool of the driver's httpx2 client is split into pools of at most
``SHARD_CONNECTIONS`` (``ClientShards``): httpcore2 checks every connection of a pool on each
request and each closed response, so one pool of S connections made S concurrent sessions cost
O(S²) (on trio at S = 1,000, half the CPU of a turn: issue 22)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import pytest

from agentloop.models import Message, ModelRequest
from agentloop.models._transport import (
    HTTPX,
    SHARD_CONNECTIONS,
    ClientShards,
    _bound_error_body,
    internals_checked,
    shard_sizes,
)
from agentloop.testing import EmulatedProvider, ProviderServer

from ._provider_helpers import make_model

REQUEST = ModelRequest(messages=(Message.user("hi"),))


def test_requests_fill_the_clients_in_order_and_the_least_busy_takes_the_rest() -> None:
    made: list[str] = []

    def make(size: int) -> str:
        made.append(f"client {len(made) + 1} of {size}")
        return made[-1]

    shards = ClientShards("client 0", make, [2, 2, 1])
    assert [shards.acquire() for _ in range(2)] == [0, 0]
    assert made == []  # the next client is made only when the ones before are busy
    assert [shards.acquire() for _ in range(3)] == [1, 1, 2]
    assert shards.clients == ["client 0", "client 1 of 2", "client 2 of 1"]
    shards.release(1)
    assert shards.acquire() == 1  # a freed connection before a later client's
    shards.release(0)
    shards.release(2)
    assert shards.acquire() == 0
    assert [shards.acquire() for _ in range(3)] == [2, 2, 0]  # all full: the least busy
    assert len(made) == 2


@pytest.mark.parametrize(
    ("max_connections", "sizes"),
    [
        (None, [None]),
        (10, [10]),
        (64, [64]),
        (65, [33, 32]),
        (150, [50, 50, 50]),
        (1000, [63] * 8 + [62] * 8),
    ],
)
def test_a_pool_larger_than_a_shard_is_split_evenly_and_adds_up(
    max_connections: int | None, sizes: list[int | None]
) -> None:
    assert SHARD_CONNECTIONS == 64
    assert shard_sizes(max_connections) == sizes


def _pool_connections(client: Any) -> int:
    return len(client._client._transport._pool.connections)  # internal: httpcore2's pool


async def test_a_large_pool_is_split_and_a_lone_caller_reuses_one_connection() -> None:
    """150 streams held open at once take three pools of 50 connections (one pool of 150
    before), each client set up as the first (error bodies read in part); afterwards one
    caller's requests, one at a time, reuse one connection; closing the driver closes every
    client."""
    with ProviderServer(EmulatedProvider()) as server:
        model = make_model("openai-chat", server.url, transport="httpx", max_connections=150)
        async with model:
            async with AsyncExitStack() as streams:
                for _ in range(150):
                    await streams.enter_async_context(model.stream(REQUEST))
                clients = model._sender._shards.clients
                assert [_pool_connections(c) for c in clients] == [50, 50, 50]
                hooked = [_bound_error_body in c._client.event_hooks["response"] for c in clients]
                assert hooked == [internals_checked(*HTTPX)] * 3  # as the first (on checked httpx2)
                assert server.stats.max_open_connections == 150
            # Left unread, those connections were closed; one caller's requests take one.
            connections = server.stats.connections
            for _ in range(5):
                async with model.stream(REQUEST) as stream:
                    assert [d async for d in stream]
            assert server.stats.connections == connections + 1
        assert all(c._client.is_closed for c in clients)


async def test_a_small_pool_stays_one_client() -> None:
    with ProviderServer(EmulatedProvider()) as server:
        async with make_model(
            "openai-chat", server.url, transport="httpx", max_connections=8
        ) as model:
            async with model.stream(REQUEST) as stream:
                assert [d async for d in stream]
            assert model._sender._shards is None
