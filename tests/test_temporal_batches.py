"""How a model activity hands its deltas to the workflow (``_batches.Batches``): what goes by
signal, when, and what waits for the activity's result. The trigger is checked, not wall time:
the batch tick is an hour here, so a batch that waited for it would never come."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentloop.models._types import (
    FinishDelta,
    TextPiece,
    ThoughtPiece,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal import _batches  # noqa: E402

HOUR = 3600.0


@pytest.fixture(autouse=True)
def _slow_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_batches, "BATCH_SECONDS", HOUR)
    monkeypatch.setattr(_batches, "RECHECK_SECONDS", HOUR)


class _Workflow:
    """Where the batches go: each one's deltas, and an event per batch."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.arrived = anyio.Event()

    async def send(self, batch: dict[str, Any]) -> None:
        assert batch["index"] == len(self.batches)
        self.batches.append(batch["deltas"])
        self.arrived.set()

    async def next_batch(self) -> list[Any]:
        with anyio.fail_after(10):
            await self.arrived.wait()
        self.arrived = anyio.Event()
        return self.batches[-1]


def _call(id: str) -> list[Any]:
    return [
        ToolCallStart(id=id, name="work"),
        ToolCallArgsDelta(id=id, text="{}"),
        ToolCallEnd(id=id),
    ]


async def test_a_seal_is_sent_at_once_not_at_the_next_tick(anyio_backend: str) -> None:
    workflow = _Workflow()
    sender = _batches.Batches(1, workflow.send, streaming=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        sender.add(TextPiece("Looking"))
        assert await workflow.next_batch() == [["TextPiece", {"text": "Looking"}]]
        sender.add(TextPiece(" it up."))  # waits for the tick (an hour)
        await anyio.sleep(0.05)
        assert len(workflow.batches) == 1
        for delta in _call("a"):
            sender.add(delta)
        sealed = await workflow.next_batch()  # the seal cuts the tick short
        assert [d[0] for d in sealed] == [
            "TextPiece",
            "ToolCallStart",
            "ToolCallArgsDelta",
            "ToolCallEnd",
        ]
        sender.add(FinishDelta(reason="tool_calls"))
        await sender.close()
    assert len(workflow.batches) == 2
    assert await sender.rest() == [
        ["FinishDelta", {"reason": "tool_calls", "raw": None, "refusal": None}]
    ]


async def test_without_a_streaming_caller_only_seals_are_signalled(anyio_backend: str) -> None:
    """Text and thoughts wait for the result, merged; a seal goes at once with what came
    before it; the finish does not wait for the workflow to be asked again."""
    workflow = _Workflow()
    asked: list[bool] = []

    async def ask() -> bool:
        asked.append(False)
        return False

    sender = _batches.Batches(1, workflow.send, streaming=False, ask=ask)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        for piece in ("Let", " me", " look."):
            sender.add(TextPiece(piece))
            await anyio.sleep(0.01)
        assert workflow.batches == []
        for delta in _call("a"):
            sender.add(delta)
        sealed = await workflow.next_batch()
        assert sealed[0] == ["TextPiece", {"text": "Let me look."}]
        assert [d[0] for d in sealed[1:]] == ["ToolCallStart", "ToolCallArgsDelta", "ToolCallEnd"]
        sender.add(ThoughtPiece("so"))
        sender.add(ThoughtPiece(" then"))
        await sender.close()
    assert len(workflow.batches) == 1 and asked == [False]
    assert await sender.rest() == [["ThoughtPiece", {"text": "so then"}]]


async def test_a_caller_that_starts_streaming_gets_the_text_from_then_on(
    anyio_backend: str,
) -> None:
    workflow = _Workflow()
    streams = anyio.Event()

    async def ask() -> bool:
        await streams.wait()  # the workflow answers once a caller streams
        return True

    sender = _batches.Batches(1, workflow.send, streaming=False, ask=ask)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        sender.add(TextPiece("held"))
        await anyio.sleep(0.05)
        assert workflow.batches == []
        streams.set()
        assert await workflow.next_batch() == [["TextPiece", {"text": "held"}]]
        await sender.close()
    assert sender.streaming


async def test_a_seal_with_the_finish_rides_with_the_result(anyio_backend: str) -> None:
    """The last call's seal comes with the reply's finish (OpenAI's chat stream seals on
    ``finish_reason``): the result, due now, carries it, rather than a signal of its own."""
    workflow = _Workflow()
    sender = _batches.Batches(1, workflow.send, streaming=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        for delta in [*_call("a"), FinishDelta(reason="tool_calls")]:
            sender.add(delta)
        await sender.close()
    assert workflow.batches == []
    assert [d[0] for d in await sender.rest()][-2:] == ["ToolCallEnd", "FinishDelta"]


async def test_held_text_is_sent_past_its_bound(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_batches, "MAX_HELD", 100)
    workflow = _Workflow()
    sender = _batches.Batches(1, workflow.send, streaming=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        sender.add(TextPiece("x" * 80))
        assert await workflow.next_batch() == [["TextPiece", {"text": "x" * 80}]]
        await sender.close()


async def test_held_text_past_its_bound_cuts_a_slow_batch_short(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Late in a long call the batches are slow (an hour here): text past ``MAX_HELD`` is
    sent at once all the same, so a usage limit's cut comes no later than it did."""
    monkeypatch.setattr(_batches, "MAX_HELD", 100)
    workflow = _Workflow()
    sender = _batches.Batches(1, workflow.send, streaming=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        sender.add(TextPiece("a"))
        assert await workflow.next_batch() == [["TextPiece", {"text": "a"}]]
        sender.add(TextPiece("b" * 40))  # waits for the tick
        await anyio.sleep(0.05)
        assert len(workflow.batches) == 1
        sender.add(TextPiece("c" * 40))
        assert [d[1]["text"] for d in await workflow.next_batch()] == ["b" * 40, "c" * 40]
        await sender.close()


async def test_a_call_goes_quiet_once_its_caller_stops_streaming(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked again while streaming, the workflow says nobody streams now (the caller's lease
    lapsed): the rest of the call's text waits for the result, merged."""
    monkeypatch.setattr(_batches, "RECHECK_SECONDS", 0.01)
    workflow = _Workflow()
    asked = anyio.Event()

    async def ask() -> bool:
        asked.set()
        return False

    sender = _batches.Batches(1, workflow.send, streaming=True, ask=ask)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        with anyio.fail_after(10):
            await asked.wait()
        await anyio.sleep(0.05)
        for piece in ("nobody", " reads"):
            sender.add(TextPiece(piece))
        await anyio.sleep(0.05)
        await sender.close()
    assert workflow.batches == [] and not sender.streaming
    assert await sender.rest() == [["TextPiece", {"text": "nobody reads"}]]


async def test_a_call_sends_at_most_its_budget_and_the_rest_with_its_result(
    anyio_backend: str,
) -> None:
    """2,000 sealed tool calls, each signalled at once (a seal cuts any tick short): the first
    ``MAX_CALL_SIGNALS`` (1,500) by signal, then nothing more, however the call goes on; the
    other calls' deltas come with the result, every one, in order (on main: 2,000 signals)."""
    budget = 1_500  # _batches.MAX_CALL_SIGNALS (checked last: main has no such bound)
    workflow = _Workflow()
    sender = _batches.Batches(1, workflow.send, streaming=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        for i in range(2000):
            for delta in _call(f"c{i}"):
                sender.add(delta)
            if i < budget:
                await workflow.next_batch()
        await anyio.sleep(0.05)
        await sender.close()
    rest = await sender.rest()
    assert len(workflow.batches) == sender.sent == budget
    sent_ids = [d[1]["id"] for batch in workflow.batches for d in batch if d[0] == "ToolCallEnd"]
    held_ids = [d[1]["id"] for d in rest if d[0] == "ToolCallEnd"]
    assert sent_ids + held_ids == [f"c{i}" for i in range(2000)]
    assert [d[0] for d in rest[:3]] == ["ToolCallStart", "ToolCallArgsDelta", "ToolCallEnd"]
    assert _batches.MAX_CALL_SIGNALS == budget
