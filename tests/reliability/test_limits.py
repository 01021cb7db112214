"""Every limit is bounded and tested. Where each one is tested:

==========================================  =================================================
limit                                       test
==========================================  =================================================
actions per step (max_actions_per_step)     tests/test_concurrency.py::
                                            test_actions_beyond_the_per_step_limit_are_not_run
actions of a run at once                    tests/test_concurrency.py::
(max_parallel_actions)                      test_per_step_parallelism_is_bounded
process-wide tool limiter (tool_limiter=)   here: test_a_shared_tool_limiter_bounds_all_runs
default per-loop tool limiter               here: test_the_default_tool_limiter_is_shared_per_loop
sync-tool threads (thread_limiter=)         here: test_a_shared_thread_limiter_bounds_sync_tools;
                                            tests/test_concurrency.py (abandoned threads)
max_steps                                   tests/test_loop.py::
                                            test_max_steps_ends_with_an_error_result
per-run deadline (Agent(deadline=))         tests/test_loop.py::test_the_run_deadline_fails_the_run
                                            (fake clock); here against a provider that hangs
model-call deadline, attempt and idle       tests/test_retry.py::
timeouts, retry attempts (RetryPolicy)      test_the_model_call_deadline_bounds_attempts_and_waits,
                                            test_retries_are_bounded
maximum reply size (max_reply_chars)        tests/test_loop.py::test_reply_too_large_is_a_result_error;
                                            test_malformed_wire.py::test_a_huge_reply_is_cut_off_early
every field, wire bytes, documents, error   test_stream_bounds.py (tracemalloc peaks; a gzip bomb
bodies, loop stalls (bounds of one reply)   with a heartbeat task)
default attempt cap, read and connect       test_provider_responses.py::
timeouts                                    test_a_dripping_provider_times_out_with_the_default_policy
maximum tool output (max_output_chars)      tests/test_tools.py::
                                            test_oversized_tool_output_is_truncated_with_a_marker;
                                            here through a real driver
event buffer (event_buffer)                 tests/test_events.py::
                                            test_a_slow_consumer_applies_backpressure;
                                            here: memory held, measured with tracemalloc
memory of earlier runs (Memory)             tests/test_session_runs.py::
                                            test_memory_token_budget_drops_the_oldest_runs
==========================================  =================================================
"""

from __future__ import annotations

import json
import threading
import time
import tracemalloc

import anyio
import pytest

import agentloop._run
from agentloop import Agent, RunDeadlineExceeded, ToolLimits, tool
from agentloop.testing import (
    Chunk,
    EmulatedProvider,
    ProviderServer,
    RecordedRequest,
    Reply,
    ScriptedModel,
    ScriptedResponse,
    call,
)
from agentloop.tools._limits import DEFAULT_TOOL_CONCURRENCY, default_tool_limiter

from ._support import make_model


class Gauge:
    """Counts what is running now and the peak."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


def _one_action_agent(tools: list[object], **kwargs: object) -> Agent:
    model = ScriptedModel([Reply(calls=[call("work", {})]), "done"])
    return Agent(model, tools=tools, **kwargs)  # type: ignore[arg-type]


async def test_a_shared_tool_limiter_bounds_all_runs() -> None:
    """One ToolLimits(tool_limiter=...) bounds the actions of every run and agent using it."""
    gauge = Gauge()

    @tool
    async def work() -> str:
        """A test tool."""
        with gauge:
            await anyio.sleep(0.01)
        return "ok"

    limiter = anyio.CapacityLimiter(3)
    limits = ToolLimits(tool_limiter=limiter)
    outputs: list[str] = []

    async def one() -> None:
        agent = _one_action_agent([work], tool_limits=limits)
        outputs.append((await agent.run("go")).unwrap())

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(one)
    assert outputs == ["done"] * 20
    assert gauge.peak == 3
    assert limiter.borrowed_tokens == 0


async def test_the_default_tool_limiter_is_shared_per_loop() -> None:
    """Without tool_limiter=, all runs on one event loop share one limiter of
    DEFAULT_TOOL_CONCURRENCY tokens; another event loop has its own."""
    gauge = Gauge()
    release = anyio.Event()
    n = DEFAULT_TOOL_CONCURRENCY + 44

    @tool
    async def work() -> str:
        """A test tool."""
        with gauge:
            await release.wait()
        return "ok"

    limiter = default_tool_limiter()
    waiting = n - DEFAULT_TOOL_CONCURRENCY
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(_one_action_agent([work]).run, "go")
        with anyio.fail_after(10):
            while (  # noqa: ASYNC110 - polling the limiter's statistics, not waiting on a task
                gauge.now < DEFAULT_TOOL_CONCURRENCY or limiter.statistics().tasks_waiting < waiting
            ):
                await anyio.sleep(0.005)
        assert gauge.now == DEFAULT_TOOL_CONCURRENCY
        assert limiter.borrowed_tokens == DEFAULT_TOOL_CONCURRENCY
        release.set()
    assert gauge.peak == DEFAULT_TOOL_CONCURRENCY
    other = await anyio.to_thread.run_sync(lambda: anyio.run(_limiter_id))
    assert other != id(limiter)


async def _limiter_id() -> int:
    return id(default_tool_limiter())


async def test_a_shared_thread_limiter_bounds_sync_tools() -> None:
    """Sync tools of many runs share ToolLimits(thread_limiter=...): at most its tokens of
    worker threads at once."""
    gauge = Gauge()

    @tool
    def work() -> str:
        """A test tool."""
        with gauge:
            time.sleep(0.01)
        return "ok"

    limits = ToolLimits(thread_limiter=anyio.CapacityLimiter(2))
    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(_one_action_agent([work], tool_limits=limits).run, "go")
    assert gauge.peak == 2


async def test_the_run_deadline_stops_a_provider_that_hangs() -> None:
    """Agent(deadline=...) ends a run whose provider stream never finishes: the run fails
    with RunDeadlineExceeded and the HTTP response is closed (the server sees the client go)."""
    emulated = EmulatedProvider()

    def hang_after_the_first(request: RecordedRequest) -> ScriptedResponse:
        if len(server.requests) == 1:  # a first, normal call: the client is made and warm
            return emulated(request)
        return ScriptedResponse.sse([Chunk(b": keep-alive\n\n"), Chunk(b"", 30.0)])

    async with ProviderServer(hang_after_the_first) as server:
        async with make_model("openai-chat", server.url) as model:
            assert (await Agent(model).run("warm up")).error is None
            with pytest.raises(RunDeadlineExceeded):
                await Agent(model, deadline=0.5).run("go")
        left = await anyio.to_thread.run_sync(
            server.wait_until, lambda s: s.client_closed == 1, 5.0
        )
        assert left, server.stats


async def test_oversized_tool_output_reaches_the_provider_truncated() -> None:
    """A tool's 1 MB output goes to the provider cut to max_output_chars, with the marker."""

    @tool
    async def weather(query: str) -> str:
        """The weather."""
        return "rain " * 200_000

    @tool
    async def clock(query: str) -> str:
        """The time."""
        return "noon"

    async with ProviderServer(EmulatedProvider()) as server:
        async with make_model("anthropic", server.url) as model:
            limits = ToolLimits(max_output_chars=1000)
            agent = Agent(model, tools=[weather, clock], tool_limits=limits)
            result = await agent.run("go")
        second = server.requests[1]
    assert result.error is None
    assert len(second.body) < 10_000
    assert "…[truncated 999000 characters]" in json.dumps(second.json, ensure_ascii=False)


# -- the event buffer: memory held by a slow consumer --------------------------------------------


def _held_events() -> tuple[int, int]:
    """Events alive now (the blocks of the line of the run's emitter that makes them: the
    line with the most) and the bytes of everything that emitter module holds."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, agentloop._run.__file__)]
    )
    stats = snapshot.statistics("lineno")
    return max((s.count for s in stats), default=0), sum(s.size for s in stats)


async def _held_by_slow_consumer(buffer: int, deltas: int) -> tuple[int, int]:
    """Stream a reply of ``deltas`` one-character deltas to a consumer that pauses every 500
    events; return the most events (and their bytes) held at a pause."""
    agent = Agent(ScriptedModel(["y" * deltas], chunk_size=1), event_buffer=buffer)
    most_events = most_bytes = 0
    tracemalloc.start()
    try:
        async with agent.stream("go") as run:
            seen = 0
            async for _ in run:
                seen += 1
                if seen % 500 == 0:
                    await anyio.sleep(0.001)  # the run gets ahead of us, as far as it may
                    count, size = _held_events()
                    most_events, most_bytes = max(most_events, count), max(most_bytes, size)
        assert run.result.output == "y" * deltas
    finally:
        tracemalloc.stop()
    return most_events, most_bytes


async def test_a_slow_consumer_holds_no_more_than_the_buffer() -> None:
    """With a slow consumer, a long streamed run holds at most event_buffer events (plus the
    one in hand and the one being sent), and the memory held stays a small fraction of what an
    unbounded buffer would hold for the same run."""
    await _held_by_slow_consumer(16, 10)  # warm up: first-use allocations are not events
    bounded_events, bounded_bytes = await _held_by_slow_consumer(16, 3000)
    unbounded_events, unbounded_bytes = await _held_by_slow_consumer(100_000, 3000)
    assert unbounded_events > 1000  # the measurement sees buffered events
    assert bounded_events <= 16 + 4, bounded_events
    per_event = unbounded_bytes / unbounded_events
    assert bounded_bytes <= (16 + 4) * per_event + 4096, (bounded_bytes, per_event)
