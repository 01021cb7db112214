"""OpenTelemetry spans: the tree of a run, content only when opted in, errors and cancellation."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracer, NoOpTracerProvider, StatusCode

from agentloop import (
    Agent,
    Instrumentation,
    ModelCall,
    ModelRateLimited,
    ModelRequest,
    ModelResponse,
    RetryPolicy,
    ToolError,
    tool,
)
from agentloop.testing import Reply, ScriptedModel, call

CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}
SECRETS = ("PLAN-A-TRIP-TO-OSLO", "FJORD-ARGUMENT", "FJORD-RESULT", "FINAL-ANSWER-TEXT")


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def _both_tools() -> list[Any]:
    """Two tools that finish only once both have started: the run's actions must overlap."""
    started = {"weather": anyio.Event(), "train": anyio.Event()}

    async def meet(me: str, other: str) -> None:
        started[me].set()
        with anyio.fail_after(5):
            await started[other].wait()

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        await meet("weather", "train")
        return "FJORD-RESULT sunny"

    @tool
    async def train(city: str) -> str:
        """Trains to a city."""
        await meet("train", "weather")
        return "2 hours"

    return [weather, train]


def _planner(provider: TracerProvider, *, content: bool = False) -> Agent:
    """A parent whose first call is rate limited once, then runs two concurrent actions and a
    sub-agent with one action of its own."""
    child = Agent(
        ScriptedModel([Reply(calls=[call("lookup", {"text": "Bergen"}, id="c")]), "rainy"]),
        name="scout",
        tools=[lookup],
    )
    parent_model = ScriptedModel(
        [
            ModelRateLimited("slow down", status=429, retry_after=0.0),
            Reply(
                calls=[
                    call("weather", {"city": "FJORD-ARGUMENT"}, id="w"),
                    call("train", {"city": "Oslo"}, id="t"),
                ]
            ),
            Reply(calls=[call("scout", {"task": "check Bergen"}, id="s")]),
            "FINAL-ANSWER-TEXT",
        ]
    )
    return Agent(
        parent_model,
        name="planner",
        tools=[*_both_tools(), child.as_tool()],
        retry=RetryPolicy(initial_wait=0.0, jitter=0.0),
        instrument=Instrumentation(tracer_provider=provider, include_content=content),
    )


@tool
async def lookup(text: str) -> str:
    """Look something up."""
    return text


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_the_span_tree_of_a_run_with_concurrent_actions_a_retry_and_a_sub_agent(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """invoke_agent → chat (per model call) and execute_tool (per action); the sub-agent's
    invoke_agent hangs under its action; everything under the caller's own span."""
    agent = _planner(provider)
    outer_tracer = provider.get_tracer("test")
    with outer_tracer.start_as_current_span("request") as outer:
        result = await agent.run("PLAN-A-TRIP-TO-OSLO")
    assert result.output == "FINAL-ANSWER-TEXT"
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1

    (root,) = _by_name(spans, "invoke_agent planner")
    assert _parent_of(root) == outer.get_span_context().span_id
    assert _attrs(root)["gen_ai.operation.name"] == "invoke_agent"
    assert _attrs(root)["gen_ai.agent.id"] == result.run_id
    assert _attrs(root)["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    assert root.status.status_code == StatusCode.UNSET

    chats = sorted(_by_name(spans, "chat scripted"), key=lambda s: s.start_time or 0)
    parent_chats = [s for s in chats if _parent_of(s) == root.context.span_id]
    assert len(parent_chats) == 3  # the rate-limited call and its retry are one model call
    retried = parent_chats[0]
    assert _attrs(retried)["agentloop.retries"] == 1
    assert _attrs(retried)["agentloop.attempts"] == 2
    assert _attrs(retried)["agentloop.attempt"] == 2
    assert [e.name for e in retried.events] == ["agentloop.attempt_failed"]
    assert retried.events[0].attributes == {
        "agentloop.attempt": 1,
        "error.type": "ModelRateLimited",
        "message": "slow down (status=429)",
    }
    for chat in parent_chats:
        assert _attrs(chat)["gen_ai.operation.name"] == "chat"
        assert _attrs(chat)["gen_ai.response.time_to_first_chunk"] >= 0
        assert _attrs(chat)["gen_ai.usage.output_tokens"] > 0
    assert sum(_attrs(s)["gen_ai.usage.input_tokens"] for s in chats) == (result.usage.input_tokens)

    tools = {
        _attrs(s)["gen_ai.tool.call.id"]: s for s in spans if s.name.startswith("execute_tool")
    }
    assert set(tools) == {"w", "t", "s", "c"}
    weather, train = tools["w"], tools["t"]
    for span in (weather, train, tools["s"]):
        assert _parent_of(span) == root.context.span_id
    # The two actions ran at the same time: each started before the other ended.
    w_start, w_end, t_start, t_end = (
        t or 0 for t in (weather.start_time, weather.end_time, train.start_time, train.end_time)
    )
    assert w_start < t_end and t_start < w_end

    (sub,) = _by_name(spans, "invoke_agent scout")
    assert _parent_of(sub) == tools["s"].context.span_id
    assert _attrs(sub)["agentloop.branch"] == "planner.scout"
    sub_chats = [s for s in chats if _parent_of(s) == sub.context.span_id]
    assert len(sub_chats) == 2
    assert _parent_of(tools["c"]) == sub.context.span_id


async def test_content_is_absent_unless_opted_in(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Neither the input, tool arguments, results nor the answer reach any span by default."""
    await _planner(provider).run("PLAN-A-TRIP-TO-OSLO")
    spans = exporter.get_finished_spans()
    assert spans
    for span in spans:
        attributes = dict(span.attributes or {})
        assert not CONTENT_KEYS & set(attributes), span.name
        values = [str(v) for v in attributes.values()]
        values += [str(v) for e in span.events for v in (e.attributes or {}).values()]
        for secret in SECRETS:
            assert not any(secret in v for v in values), (span.name, secret)


async def test_content_is_recorded_when_opted_in(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    await _planner(provider, content=True).run("PLAN-A-TRIP-TO-OSLO")
    spans = exporter.get_finished_spans()
    (root,) = _by_name(spans, "invoke_agent planner")
    assert "PLAN-A-TRIP-TO-OSLO" in str(_attrs(root)["gen_ai.input.messages"])
    assert "FINAL-ANSWER-TEXT" in str(_attrs(root)["gen_ai.output.messages"])
    weather = next(s for s in spans if (s.attributes or {}).get("gen_ai.tool.call.id") == "w")
    assert "FJORD-ARGUMENT" in str(_attrs(weather)["gen_ai.tool.call.arguments"])
    assert "FJORD-RESULT" in str(_attrs(weather)["gen_ai.tool.call.result"])
    chat_inputs = [str((s.attributes or {}).get("gen_ai.input.messages")) for s in spans]
    assert any("PLAN-A-TRIP-TO-OSLO" in v for v in chat_inputs)


async def test_errors_mark_spans(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    """A failing tool's span and a run that runs out of steps have error status and type."""

    @tool
    async def broken() -> str:
        """Fails."""
        raise ToolError("out of order")

    model = ScriptedModel([Reply(calls=[call("broken", {})]) for _ in range(2)])
    agent = Agent(
        model, tools=[broken], max_steps=2, instrument=Instrumentation(tracer_provider=provider)
    )
    result = await agent.run("x")
    assert result.error is not None
    spans = exporter.get_finished_spans()
    (action,) = _by_name(spans, "execute_tool broken")
    assert action.status.status_code == StatusCode.ERROR
    assert _attrs(action)["error.type"] == "tool_error"
    (run,) = _by_name(spans, "invoke_agent agent")
    assert run.status.status_code == StatusCode.ERROR
    assert _attrs(run)["error.type"] == "max_steps_exceeded"


async def test_a_cancelled_run_ends_its_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    started = anyio.Event()

    @tool
    async def forever() -> str:
        """Never returns."""
        started.set()
        await anyio.sleep_forever()
        return ""

    model = ScriptedModel([Reply(calls=[call("forever", {})])])
    agent = Agent(model, tools=[forever], instrument=Instrumentation(tracer_provider=provider))
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run, "x")
        await started.wait()
        tg.cancel_scope.cancel()
    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} == {
        "invoke_agent agent",
        "chat scripted",
        "execute_tool forever",
    }
    for name in ("invoke_agent agent", "execute_tool forever"):
        (span,) = _by_name(spans, name)
        assert _attrs(span)["agentloop.cancelled"] is True


async def test_no_spans_unless_asked(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """An agent without ``instrument`` makes no spans; ``instrument=`` turns it on for that
    agent, and ``instrument=False`` keeps a sub-agent out of its traced parent's trace."""
    model = ScriptedModel(["a", "b", "c"])
    agent = Agent(model)
    await agent.run("x")
    assert exporter.get_finished_spans() == ()
    await agent.replace(instrument=Instrumentation(tracer_provider=provider)).run("x")
    await agent.replace(instrument=False).run("x")
    assert [s.name for s in exporter.get_finished_spans()] == [
        "chat scripted",
        "invoke_agent agent",
    ]
    exporter.clear()
    quiet = Agent(ScriptedModel(["inner"]), name="quiet", instrument=False)
    parent = Agent(
        ScriptedModel([Reply(calls=[call("quiet", {"task": "t"}, id="q")]), "done"]),
        tools=[quiet.as_tool()],
        instrument=Instrumentation(tracer_provider=provider),
    )
    await parent.run("x")
    assert sorted(s.name for s in exporter.get_finished_spans()) == [
        "chat scripted",
        "chat scripted",
        "execute_tool quiet",
        "invoke_agent agent",
    ]


_GLOBAL_EXPORTER = InMemorySpanExporter()


async def test_the_global_tracer_provider_is_the_default() -> None:
    """``instrument=True`` uses the provider the application installed globally (set once per
    process, so both backends' variants share it)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        global_provider = TracerProvider()
        global_provider.add_span_processor(SimpleSpanProcessor(_GLOBAL_EXPORTER))
        trace.set_tracer_provider(global_provider)
    _GLOBAL_EXPORTER.clear()
    await Agent(ScriptedModel(["a"]), name="globally", instrument=True).run("x")
    names = [s.name for s in _GLOBAL_EXPORTER.get_finished_spans()]
    assert names == ["chat scripted", "invoke_agent globally"]


# -- logging ------------------------------------------------------------------------------------


async def test_debug_logs_carry_ids_and_no_content_unless_asked(
    provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentloop")
    result = await _planner(provider).run("PLAN-A-TRIP-TO-OSLO")
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("agentloop")]
    assert f"run {result.run_id} started: agent planner, branch planner" in messages
    assert any("model call attempt 1 failed, retrying: slow down" in m for m in messages)
    assert any(m.startswith(f"run {result.run_id} finished: 3 steps") for m in messages)
    assert not [m for m in messages for s in SECRETS if s in m]

    caplog.clear()
    await _planner(provider, content=True).run("PLAN-A-TRIP-TO-OSLO")
    assert "FINAL-ANSWER-TEXT" in caplog.text


def test_the_library_is_silent_without_logging_configured(tmp_path: Path) -> None:
    """No handler configured: a run with a retry and a failing tool writes nothing to stderr."""
    script = tmp_path / "quiet.py"
    script.write_text(
        textwrap.dedent(
            """
            from agentloop import Agent, ModelRateLimited, RetryPolicy, ToolError, tool
            from agentloop.testing import Reply, ScriptedModel, call

            @tool
            def broken() -> str:
                "Always fails."
                raise ToolError("no")

            model = ScriptedModel(
                [ModelRateLimited("slow", retry_after=0.0), Reply(calls=[call("broken", {})]), "ok"]
            )
            agent = Agent(model, tools=[broken], retry=RetryPolicy(initial_wait=0.0, jitter=0.0))
            print(agent.run_sync("x").output)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


async def test_a_run_nobody_records_makes_no_further_spans() -> None:
    """With a provider whose spans do not record (no SDK, or sampled out) a run starts its own
    span only: its model calls and actions cost no span each."""
    started: list[str] = []

    class CountingTracer(NoOpTracer):
        def start_span(self, name: str, *args: Any, **kwargs: Any) -> Any:
            started.append(name)
            return super().start_span(name, *args, **kwargs)

    class CountingProvider(NoOpTracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> NoOpTracer:
            return CountingTracer()

    model = ScriptedModel([Reply(calls=[call("lookup", {"text": "a"})]), "done"])
    agent = Agent(
        model, tools=[lookup], instrument=Instrumentation(tracer_provider=CountingProvider())
    )
    assert (await agent.run("x")).output == "done"
    assert started == ["invoke_agent agent"]


async def test_a_discarded_draft_is_an_event_on_the_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A middleware that withdraws a reply and asks again (as goal enforcement does): two chat
    spans, and the discard on the run's span with its attempt and reason."""

    async def second_opinion(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        first = await call_next(request)
        if first.text == "draft":
            first.discard("goal")
            return await call_next(request)
        return first

    agent = Agent(
        ScriptedModel(["draft", "final"]),
        model_middleware=[second_opinion],
        instrument=Instrumentation(tracer_provider=provider),
    )
    assert (await agent.run("x")).output == "final"
    spans = exporter.get_finished_spans()
    assert len(_by_name(spans, "chat scripted")) == 2
    (run,) = _by_name(spans, "invoke_agent agent")
    assert [(e.name, dict(e.attributes or {})) for e in run.events] == [
        ("agentloop.attempt_discarded", {"agentloop.attempt": 1, "reason": "goal"})
    ]
