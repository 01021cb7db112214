"""What a process keeps of the closed runs' replies (``_closed.ClosedReads``): one query in
flight per question however many callers ask it at once, a failed query asked again by a
caller that waited for it, and the least recently used replies dropped past the bound."""

from __future__ import annotations

from typing import Any

import anyio

from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal import _closed  # noqa: E402


async def test_callers_asking_at_once_share_one_query(anyio_backend: str) -> None:
    reads = _closed.ClosedReads()
    sent: list[int] = []
    go = anyio.Event()

    async def send() -> dict[str, Any]:
        sent.append(1)
        await go.wait()
        return {"events": ["e"], "end": False}

    replies: list[Any] = []

    async def caller() -> None:
        replies.append(await reads.ask("w", "r", "q", 0, send))

    async with anyio.create_task_group() as tg:
        for _ in range(30):
            tg.start_soon(caller)
        await anyio.sleep(0.05)
        go.set()
    assert len(sent) == 1 and replies == [{"events": ["e"], "end": False}] * 30
    assert await reads.ask("w", "r", "q", 0, send) == replies[0] and len(sent) == 1
    await reads.ask("w", "r", "q", 5, send)  # another question: asked
    assert len(sent) == 2


async def test_a_failed_query_is_asked_again_by_one_who_waited(anyio_backend: str) -> None:
    reads = _closed.ClosedReads()
    attempts: list[int] = []

    async def send() -> str:
        attempts.append(1)
        await anyio.sleep(0.02)
        if len(attempts) == 1:
            raise RuntimeError("the worker was busy")
        return "ok"

    outcomes: list[str] = []

    async def caller() -> None:
        try:
            outcomes.append(await reads.ask("w", "r", "q", 0, send))
        except RuntimeError:
            outcomes.append("failed")

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(caller)
    assert sorted(outcomes) == ["failed", "ok", "ok", "ok", "ok"] and len(attempts) == 2


async def test_the_least_recently_used_replies_go_past_the_bound(anyio_backend: str) -> None:
    reads = _closed.ClosedReads(max_bytes=2500)
    sent: list[int] = []

    def replying(n: int) -> Any:
        async def send() -> str:
            sent.append(n)
            return "x" * 1000

        return send

    for n in (1, 2, 1, 3, 1, 2):  # 1 is used again each time; 2 is the oldest when 3 comes
        await reads.ask("w", "r", "q", n, replying(n))
    assert sent == [1, 2, 3, 2]
    await reads.ask("w", "r", "q", 0, replying(0))
    assert sent[-1] == 0
