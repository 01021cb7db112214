"""How a tool activity hands its progress reports to the workflow (``_progress``): batched,
bounded, only while a caller streams, and the last ones before the activity's result. The
trigger is checked, not wall time: the interval is an hour here unless a test says."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal import _progress  # noqa: E402

HOUR = 3600.0


class _Workflow:
    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.arrived = anyio.Event()

    async def send(self, batch: dict[str, Any]) -> None:
        assert (batch["run"], batch["call"]) == ("r", 7)
        self.batches.append(batch["reports"])
        self.arrived.set()

    async def next_batch(self) -> list[Any]:
        with anyio.fail_after(10):
            await self.arrived.wait()
        self.arrived = anyio.Event()
        return self.batches[-1]


async def _report(sender: _progress.ProgressSender, n: float, total: float | None = 3.0) -> None:
    await sender.report(None, None, n, total, f"item {n:g}")


async def test_the_first_report_goes_at_once_and_the_rest_at_the_close(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_progress, "PROGRESS_SECONDS", HOUR)
    workflow = _Workflow()
    sender = _progress.ProgressSender(7, "r", workflow.send, streaming=True, ask=None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        await _report(sender, 1)
        assert await workflow.next_batch() == [[1.0, 3.0, "item 1"]]
        await _report(sender, 2)
        await _report(sender, 3)
        await anyio.sleep(0.05)
        assert len(workflow.batches) == 1  # the next waits its turn (an hour)
        await sender.close()  # the tool returned: its last reports go now
    assert workflow.batches == [
        [[1.0, 3.0, "item 1"]],
        [[2.0, 3.0, "item 2"], [3.0, 3.0, "item 3"]],
    ]


async def test_a_burst_keeps_the_latest_and_a_call_sends_a_bounded_number(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """5,000 reports as fast as they come, no interval: at most ``MAX_PROGRESS_SIGNALS``
    signals of at most ``MAX_REPORTS`` each, the latest; past the bound, reports are dropped;
    messages are cut, and non-finite numbers never go."""
    monkeypatch.setattr(_progress, "PROGRESS_SECONDS", 0.0)
    workflow = _Workflow()
    sender = _progress.ProgressSender(7, "r", workflow.send, streaming=True, ask=None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        await sender.report(None, None, float("nan"), None, None)
        await sender.report(None, None, 0.5, float("inf"), "x" * 5000)
        for i in range(1, 5001):
            await _report(sender, i, 5000.0)
            if i % 3 == 0:
                await anyio.lowlevel.checkpoint()
        await sender.close()
    reports = [r for batch in workflow.batches for r in batch]
    assert len(workflow.batches) == _progress.MAX_PROGRESS_SIGNALS
    assert all(len(batch) <= _progress.MAX_REPORTS for batch in workflow.batches)
    assert reports[0] == [0.5, None, "x" * _progress.MAX_MESSAGE_CHARS]
    progress = [r[0] for r in reports[1:]]
    assert progress == sorted(progress) and progress[-1] < 5000  # the rest dropped


async def test_reports_go_only_while_a_caller_streams(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody streams: the reports are dropped, and the workflow asked at most once a second;
    once a caller streams, the next report goes."""
    monkeypatch.setattr(_progress, "PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(_progress, "RECHECK_SECONDS", 0.2)
    answers = [False]
    asked: list[bool] = []

    async def ask() -> bool | None:
        asked.append(answers[-1])
        return answers[-1]

    workflow = _Workflow()
    sender = _progress.ProgressSender(7, "r", workflow.send, streaming=False, ask=ask)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run)
        for i in range(1, 11):
            await _report(sender, i, 20.0)
            await anyio.sleep(0.001)
        assert workflow.batches == [] and asked == [False]
        answers.append(True)
        await anyio.sleep(0.25)
        await _report(sender, 11, 20.0)
        assert await workflow.next_batch() == [[11.0, 20.0, "item 11"]]
        await sender.close()
    assert asked == [False, True]
