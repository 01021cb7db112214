"""The event channel of a stream: bounded, backpressure, a cancellation point at every read, on
asyncio and trio; and on asyncio its own check of the reader's cancel scopes (which reads
anyio's private task states) decides as anyio's ``checkpoint_if_cancelled`` does."""

from __future__ import annotations

import anyio
import pytest
from anyio import EndOfStream, WouldBlock

from agentloop._channel import EventChannel, _AsyncioCancelCheck


async def test_the_asyncio_fast_path_is_on_for_the_installed_anyio(anyio_backend: str) -> None:
    """The installed anyio has what the check reads (if this fails after an upgrade, the
    channel fell back to anyio's checkpoint: correct, 9 K instructions a read slower)."""
    channel = EventChannel[int](1)
    fast = isinstance(channel._cancelled, _AsyncioCancelCheck)
    assert fast == (anyio_backend == "asyncio")


@pytest.mark.parametrize(
    "case",
    ["none", "own", "outer", "shielded", "shielded-own", "left", "other-task"],
)
async def test_a_buffered_read_is_cancelled_exactly_when_anyio_would_cancel_it(
    case: str, anyio_backend: str
) -> None:
    """Each arrangement of scopes around a read that finds an event buffered, against what
    ``checkpoint_if_cancelled`` decides in the same arrangement."""

    async def decide(read: bool) -> list[str]:
        channel = EventChannel[int](4)
        channel.send_nowait(1)
        seen: list[str] = []

        async def cancelled_point() -> None:
            with anyio.CancelScope() as own:
                own.cancel()
                await point()

        async def point() -> None:
            try:
                if read:
                    assert await channel.receive() == 1
                else:
                    await anyio.lowlevel.checkpoint_if_cancelled()
            except anyio.get_cancelled_exc_class():
                seen.append("cancelled")
                raise
            seen.append("passed")

        with anyio.CancelScope() as outer:
            with anyio.CancelScope(shield=case.startswith("shielded")) as inner:
                if case in ("own", "shielded-own"):
                    inner.cancel()
                elif case in ("outer", "shielded"):
                    outer.cancel()
                elif case == "left":
                    with anyio.CancelScope() as gone:
                        gone.cancel()
                        await anyio.lowlevel.checkpoint_if_cancelled()
                if case == "other-task":
                    await point()  # this task's state is the one cached first
                    channel.send_nowait(1)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(cancelled_point)
                    await point()  # and this task's again, not the other's
                else:
                    await point()
        return seen

    with anyio.fail_after(5):
        assert await decide(True) == await decide(False)


async def test_a_cancelled_reader_gets_no_buffered_event(anyio_backend: str) -> None:
    channel = EventChannel[int](4)
    channel.send_nowait(1)
    channel.send_nowait(2)
    got: list[int] = []
    with anyio.CancelScope() as scope:
        got.append(await channel.receive())
        scope.cancel()
        got.append(await channel.receive())
    assert scope.cancelled_caught and got == [1]
    assert await channel.receive() == 2  # still there for a read outside the scope


async def test_a_waiting_reader_is_woken_by_the_writer_and_by_its_cancellation(
    anyio_backend: str,
) -> None:
    channel = EventChannel[int](4)
    got: list[int] = []

    async def read() -> None:
        got.append(await channel.receive())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            channel.send_nowait(7)
        assert got == [7]
        with anyio.move_on_after(0.05) as scope:
            await channel.receive()  # nothing comes: the wait is cancelled
        assert scope.cancelled_caught
        channel.close()
        with pytest.raises(EndOfStream):
            await channel.receive()


async def test_a_full_channel_holds_its_writer_until_a_read(anyio_backend: str) -> None:
    channel = EventChannel[int](2)
    channel.send_nowait(1)
    channel.send_nowait(2)
    with pytest.raises(WouldBlock):
        channel.send_nowait(3)
    sent: list[int] = []

    async def write() -> None:
        await channel.send(3)
        sent.append(3)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await anyio.wait_all_tasks_blocked()
            assert sent == []  # backpressure: the writer waits for room
            assert await channel.receive() == 1
        assert sent == [3]
        assert [await channel.receive(), await channel.receive()] == [2, 3]
