"""Many callers on one durable run (issue 35, point 0): every attached caller sees every
event, in order, however many there are and however long the run idles before it goes on."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentloop import Agent, Approve, tool
from agentloop import _events as ev
from agentloop.testing import Reply, ScriptedModel, call
from tests.support.temporal import import_temporal

import_temporal()

from agentloop.temporal import TemporalAgent, _durable  # noqa: E402
from tests.test_temporal_hostile import _payer  # noqa: E402
from tests.test_temporal_waiting import _queue, _until_waiting, ran, serving  # noqa: E402

pytestmark = pytest.mark.temporal

CALLERS = 100
IDLE_POLLS = 8  # empty queries 0.1 s apart (0.8 s) before a caller polls less often
IDLE = 2.5  # past them: every caller then polls at the idle pace for a while


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's SDK is asyncio-only


@pytest.fixture(autouse=True)
def _idle_sooner(monkeypatch: pytest.MonkeyPatch) -> None:
    """The callers turn idle after ``IDLE_POLLS`` empty queries, not 20 (2 s): the runs idle
    past that in ``IDLE`` seconds rather than 8, with the same polls at either pace."""
    monkeypatch.setattr(_durable, "IDLE_POLLS", IDLE_POLLS)


@tool
async def pause(seconds: float) -> str:
    """Wait a while, as a slow tool does.

    Args:
        seconds: How long.
    """
    await anyio.sleep(seconds)
    return "back"


async def _follow_all(durable: TemporalAgent[Any], client: Any, run_id: str) -> dict[int, Any]:
    """What each of ``CALLERS`` callers attached to the run read: its seqs, or its error."""
    seen: dict[int, Any] = {}

    async def follow(n: int) -> None:
        seqs: list[int] = []
        try:
            async for event in durable.attach(client, run_id):
                seqs.append(event.seq)
                last = event
        except Exception as exc:
            seen[n] = exc
            return
        seen[n] = seqs if isinstance(last, ev.RunFinished) else f"ended with {last.type}"

    async with anyio.create_task_group() as tg:
        for n in range(CALLERS):
            tg.start_soon(follow, n)
    return seen


def _wrong(seen: dict[int, Any]) -> dict[int, Any]:
    last = max(max(s) for s in seen.values() if isinstance(s, list))
    return {n: s for n, s in seen.items() if s != list(range(1, last + 1))}


async def test_a_hundred_callers_attached_through_a_slow_tool_each_see_every_event(
    temporal_target: str,
) -> None:
    """100 callers attach while the run is idle in a tool of ``IDLE`` seconds; after it, the run goes on for
    a few steps and ends. Each caller reads every event, in order, with no gap and none
    failing (the fastest reader's ack must not close the run under the others)."""
    model = ScriptedModel(
        [
            Reply(calls=[call("pause", {"seconds": IDLE}, id="p")]),
            Reply(text="one", calls=[call("pause", {"seconds": 0}, id="q")]),
            Reply(text="two", calls=[call("pause", {"seconds": 0}, id="r")]),
            "done",
        ]
    )
    durable = TemporalAgent(Agent(model, name="crowd-slow", tools=[pause]), task_queue=_queue())
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "go")
        with anyio.fail_after(IDLE + 60):
            seen = await _follow_all(durable, client, run.run_id)
            result = await run.result()
    assert result.output == "done"
    wrong = _wrong(seen)
    assert wrong == {}, f"{len(wrong)} of {CALLERS} callers went wrong: {list(wrong.items())[:3]}"


async def test_a_hundred_attached_callers_each_see_every_event_in_order(
    temporal_target: str,
) -> None:
    """100 callers attach to a run that waits, idle for ``IDLE`` seconds, then is decided: each
    one reads every event from the first to the terminal one, in order, with no gap and no
    failure."""
    ran.clear()
    durable = _payer("crowd")
    async with serving(temporal_target, durable) as client:
        run = await durable.start(client, "pay")
        await _until_waiting(run)
        seen: dict[int, list[int]] = {}
        failed: dict[int, BaseException] = {}

        async def follow(n: int) -> None:
            events: list[Any] = []
            try:
                async for event in durable.attach(client, run.run_id):
                    events.append(event)
            except Exception as exc:
                failed[n] = exc
            seen[n] = [e.seq for e in events]
            if events and not isinstance(events[-1], ev.RunFinished):
                failed[n] = AssertionError(f"ended with {events[-1].type}")

        with anyio.fail_after(IDLE + 60):
            async with anyio.create_task_group() as tg:
                for n in range(CALLERS):
                    tg.start_soon(follow, n)
                await anyio.sleep(IDLE)
                await run.decide({"pay": Approve()})
            result = await run.result()
    assert result.output == "done" and ran == {"transfer:5:bob": 1}
    assert failed == {}
    last = max(max(s) for s in seen.values())
    gaps = {n: s for n, s in seen.items() if s != list(range(1, last + 1))}
    assert gaps == {}, f"{len(gaps)} of {CALLERS} callers missed events: {list(gaps.items())[:3]}"
