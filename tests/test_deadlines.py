"""The engine's deadline seam (``agentloop._time.fail_after``) keeps ``anyio.fail_after``'s
meaning without its generator, and a model call's two stream deadlines use it: the attempt's,
and the silence allowed between two deltas (``RetryPolicy.idle_timeout``)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from agentloop import Agent, ModelTimeout, RetryPolicy
from agentloop._time import fail_after
from agentloop.testing import Reply, ScriptedModel

pytestmark = [pytest.mark.anyio, pytest.mark.fake_clock]


async def test_a_block_past_its_deadline_raises_timeout_error() -> None:
    start = anyio.current_time()
    with pytest.raises(TimeoutError):
        with fail_after(0.05):
            await anyio.sleep(5)
    assert anyio.current_time() - start < 5


async def test_a_block_done_in_time_is_left_alone() -> None:
    with fail_after(5) as scope:
        await anyio.sleep(0.01)
    assert not scope.cancelled_caught
    with fail_after(5):
        pass  # no checkpoint at all


async def _fail_within(seconds: float) -> None:
    with fail_after(seconds):
        await anyio.lowlevel.checkpoint()
        raise KeyError("mine")


async def test_an_error_in_the_block_is_raised_as_itself() -> None:
    with pytest.raises(KeyError, match="mine"):
        await _fail_within(5)


async def test_an_outer_cancellation_stays_cancellation_though_the_deadline_passed() -> None:
    """Cancelled from outside at the very moment its own deadline passes, the block leaves
    cancelled: the outer scope catches it, and no ``TimeoutError`` replaces it."""
    with anyio.move_on_after(0.05) as outer:
        with fail_after(0.05):
            await anyio.sleep(5)
        pytest.fail("the outer cancellation did not propagate")
    assert outer.cancelled_caught


async def test_the_deadline_is_taken_when_made_not_when_entered() -> None:
    deadline = fail_after(0.05)
    await anyio.sleep(0.1)
    with pytest.raises(TimeoutError):
        with deadline:
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
