"""The engine's deadline seams keep ``anyio.fail_after``'s meaning: ``fail_after`` without its
generator, and ``task_deadline`` (a model attempt's) without a cancel scope of its own on
asyncio; a model call's two stream deadlines use them: the attempt's, and the silence allowed
between two deltas (``RetryPolicy.idle_timeout``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest

from agentloop import Agent, ModelTimeout, RetryPolicy
from agentloop._time import fail_after, task_deadline
from agentloop.testing import Reply, ScriptedModel

pytestmark = [pytest.mark.anyio, pytest.mark.fake_clock]

Deadline = Callable[[float], AbstractContextManager[Any]]


@pytest.fixture(params=[fail_after, task_deadline], ids=["fail_after", "task_deadline"])
def deadline(request: pytest.FixtureRequest) -> Deadline:
    return cast("Deadline", request.param)


async def test_a_block_past_its_deadline_raises_timeout_error(deadline: Deadline) -> None:
    start = anyio.current_time()
    with pytest.raises(TimeoutError):
        with deadline(0.05):
            await anyio.sleep(5)
    assert anyio.current_time() - start < 5


async def test_a_block_done_in_time_is_left_alone(deadline: Deadline) -> None:
    with deadline(0.1):
        await anyio.sleep(0.01)
    with deadline(0.05):
        pass  # no checkpoint at all
    await anyio.sleep(0.2)  # nothing fires later


async def test_a_fail_after_block_done_in_time_caught_nothing() -> None:
    with fail_after(5) as scope:
        await anyio.sleep(0.01)
    assert not scope.cancelled_caught


async def _fail_within(deadline: Deadline, seconds: float) -> None:
    with deadline(seconds):
        await anyio.lowlevel.checkpoint()
        raise KeyError("mine")


async def test_an_error_in_the_block_is_raised_as_itself(deadline: Deadline) -> None:
    with pytest.raises(KeyError, match="mine"):
        await _fail_within(deadline, 5)


async def test_an_outer_cancellation_stays_cancellation_though_the_deadline_passed(
    deadline: Deadline,
) -> None:
    """Cancelled from outside at the very moment its own deadline passes, the block leaves
    cancelled: the outer scope catches it, and no ``TimeoutError`` replaces it."""
    with anyio.move_on_after(0.05) as outer:
        with deadline(0.05):
            await anyio.sleep(5)
        pytest.fail("the outer cancellation did not propagate")
    assert outer.cancelled_caught


async def test_an_outer_cancellation_after_the_deadline_passed_stays_cancellation(
    deadline: Deadline,
) -> None:
    """The deadline passed, and the block is cancelled from outside before it leaves: the
    cancellation goes on (the outer scope's), and the block's own is consumed."""
    with anyio.CancelScope() as outer:
        with deadline(0.05):
            try:
                await anyio.sleep(5)
            finally:
                outer.cancel()
                await anyio.lowlevel.checkpoint()
        pytest.fail("the outer cancellation did not propagate")
    assert outer.cancelled_caught
    await anyio.lowlevel.checkpoint()  # and no cancellation is left over


async def test_a_cancellation_inside_the_block_is_not_a_timeout(deadline: Deadline) -> None:
    """A scope inside the block cancelled by its own deadline first: the block goes on, and its
    own deadline, later, is a ``TimeoutError``."""
    with pytest.raises(TimeoutError):
        await _inner_then_own(deadline)


async def _inner_then_own(deadline: Deadline) -> None:
    with deadline(0.2):
        with anyio.move_on_after(0.05) as inner:
            await anyio.sleep(5)
        assert inner.cancelled_caught
        await anyio.sleep(5)


async def test_the_deadline_is_taken_when_made_not_when_entered(deadline: Deadline) -> None:
    made = deadline(0.05)
    await anyio.sleep(0.1)
    with pytest.raises(TimeoutError):
        with made:
            await anyio.sleep(5)


def _answer(delay: float) -> ScriptedModel:
    return ScriptedModel([Reply(text="a fine answer, in pieces", chunk_size=4, delay=delay)])


async def test_a_stream_silent_longer_than_its_idle_timeout_ends_in_model_timeout() -> None:
    policy = RetryPolicy(max_attempts=1, idle_timeout=0.1, attempt_timeout=None)
    with pytest.raises(ModelTimeout, match="timed out"):
        await Agent(_answer(delay=0.3), retry=policy).run("hi")


async def test_the_idle_timeout_bounds_each_silence_not_the_whole_stream() -> None:
    """Six deltas 0.05 s apart: 0.3 s in all, each gap under the 0.1 s allowed."""
    policy = RetryPolicy(max_attempts=1, idle_timeout=0.1, attempt_timeout=None)
    result = await Agent(_answer(delay=0.05), retry=policy).run("hi")
    assert result.error is None, result.error
    assert result.output == "a fine answer, in pieces"


async def test_a_shielded_scope_in_the_block_finishes_before_the_deadline_is_raised(
    deadline: Deadline,
) -> None:
    """The deadline passes while the block is inside a shielded scope (a stream closing its
    response): the shielded work finishes, and the deadline is raised after it."""
    finished: list[bool] = []
    with pytest.raises(TimeoutError):
        await _shielded_then_wait(deadline, finished)
    assert finished


async def _shielded_then_wait(deadline: Deadline, finished: list[bool]) -> None:
    with deadline(0.05):
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.1)
            finished.append(True)
        await anyio.sleep(5)


async def test_a_scope_inside_the_block_cancelled_with_the_deadline_still_times_out(
    deadline: Deadline,
) -> None:
    """An inner scope whose deadline is the block's own: the block still ends in
    ``TimeoutError`` (the inner scope catches its own, then the block's fires)."""
    with pytest.raises(TimeoutError):
        await _inner_at_the_same_deadline(deadline)


async def _inner_at_the_same_deadline(deadline: Deadline) -> None:
    with deadline(0.05):
        with anyio.move_on_after(0.05):
            await anyio.sleep(5)
        await anyio.sleep(5)
