"""Events: one terminal event, ordered seq numbers, and a JSON round trip for every type."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from agentloop import Agent, Event, RunFinished, event_from_json, tool
from agentloop._events import EVENT_TYPES
from agentloop._steps import ActionResult, PendingCall, RunErrorInfo, RunResult, Step
from agentloop.models import ProviderPart, TextPart, ThoughtPart, ToolCallPart, Usage
from agentloop.testing import Reply, ScriptedModel, call


@tool
async def double(x: int) -> dict[str, int]:
    """Double a number."""
    return {"value": 2 * x}


def _sample(cls: type[Any]) -> Any:
    """An instance of an event class with every field filled."""
    step = Step(
        index=0,
        attempt=1,
        thought="t",
        actions=(ActionResult(tag="a", name="double", input={"x": 1}, output={"value": 2}),),
        parts=(
            ThoughtPart(text="why", signature="sig", provider="anthropic"),
            TextPart(text="t"),
            ToolCallPart(id="a", name="double", arguments='{"x": 1}'),
        ),
        usage=Usage(requests=1, input_tokens=3, output_tokens=4),
    )
    values: dict[str, Any] = {
        "run_id": "r1",
        "parent_run_id": "p0",
        "branch": "agent.child",
        "seq": 7,
        "agent": "agent",
        "input": "hi",
        "attempt": 2,
        "step": step,
        "model": "m",
        "finish_reason": "stop",
        "usage": Usage(requests=1, input_tokens=1),
        "text": "x",
        "section": 1,
        "index": 0,
        "tag": "a",
        "name": "double",
        "path": None,
        "part": ProviderPart(provider="anthropic", type="web_search_tool_result", data={"k": [1]}),
        "result": RunResult(run_id="r1", agent="agent", branch="agent", output="ok", steps=(step,)),
        "reason": "goal",
        "error": RunErrorInfo(kind="ModelError", message="boom"),
        "retry_in": 0.5,
        "progress": 2.0,
        "total": 5.0,
        "message": "halfway",
        "call": PendingCall(id="a", tag="a", name="double", input={"x": 1}, branch="agent"),
        "decision": "edit",
        "by": "resume",
        "arguments": {"x": 3},
        "elided_results": 3,
        "summarized_steps": 2,
        "tokens_before": 1200,
        "tokens_after": 700,
        "max_tokens": 1000,
        "output": {"name": "Oslo", "districts": ["a"]},
    }
    fields = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name != "type"}
    if cls.__name__ == "ActionFinished":
        fields["result"] = step.actions[0]
    if cls.__name__ in ("ModelCallStarted", "ContextTrimmed"):
        fields["step"] = 3
    if cls.__name__ == "RunWaiting":
        waiting = dataclasses.replace(step, pending=(values["call"],))
        fields["result"] = RunResult(
            run_id="r1",
            agent="agent",
            branch="agent",
            steps=(step,),
            pending=(values["call"],),
            resume_state={"version": 1, "reply": {"index": 1, "pending": [waiting.index]}},
        )
    return cls(**fields)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_every_event_type_round_trips_through_json(cls: type[Any]) -> None:
    """to_json then from_json gives back an equal event of the same type."""
    event = _sample(cls)
    text = event.to_json()
    assert f'"type":"{event.type}"' in text
    again = event_from_json(text)
    assert type(again) is cls and again == event


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_an_event_is_serialised_by_its_own_class_not_through_the_union(
    cls: type[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the union of every event, pydantic-core's dispatch cost nearly as much again as
    writing the event (a run's result: 123 K instructions, 70 K by its class). The JSON is the
    union's, byte for byte."""
    from agentloop import _events

    event = _sample(cls)
    expected = _events._adapter().dump_json(event).decode()

    def refused() -> Any:
        raise AssertionError("serialised through the union")

    monkeypatch.setattr(_events, "_adapter", refused)
    assert event.to_json() == expected


def test_a_result_with_an_error_round_trips_without_output() -> None:
    """A run's error result has no output through JSON too; JSON that gives both is refused."""
    error = RunErrorInfo(kind="output_invalid", message="never validated")
    result = RunResult(run_id="r1", agent="agent", branch="agent", text="again", error=error)
    event = RunFinished(run_id="r1", branch="agent", seq=3, result=result)
    again = event_from_json(event.to_json())
    assert isinstance(again, RunFinished) and again == event and again.result.output is None
    both = event.to_json().replace('"output":null', '"output":"again"')
    with pytest.raises(ValidationError, match="has no output"):
        event_from_json(both)


async def _run_events(agent: Agent) -> list[Event]:
    async with agent.stream("go") as run:
        return [event async for event in run]


async def test_a_run_has_exactly_one_terminal_event_and_ordered_seq() -> None:
    """seq counts up from 1 with no gaps, and the last event is the only terminal one."""
    model = ScriptedModel(
        [Reply(text="thinking", calls=[call("double", {"x": 2})]), "4"], chunk_size=2
    )
    events = await _run_events(Agent(model, tools=[double]))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    terminal = [e for e in events if e.type in ("run_finished", "run_failed")]
    assert terminal == [events[-1]] and events[-1].type == "run_finished"
    assert {e.run_id for e in events} == {events[0].run_id}
    assert all(e.branch == "agent" for e in events)


async def test_real_run_events_round_trip() -> None:
    """Every event of a ReAct run with tools survives JSON."""
    model = ScriptedModel(
        [Reply(text="thinking", calls=[call("double", {"x": 2})]), "4"],
        chunk_size=3,
        native_tools=False,
    )
    events = await _run_events(Agent(model, tools=[double]))
    types = {e.type for e in events}
    assert {"thought_delta", "answer_delta", "action_started", "action_finished"} <= types
    for event in events:
        assert event_from_json(event.to_json()) == event


async def test_a_slow_consumer_applies_backpressure() -> None:
    """With a buffer of 1 the run waits for the consumer instead of buffering everything."""
    import anyio

    model = ScriptedModel(["x" * 200], chunk_size=1)
    agent = Agent(model, event_buffer=1)
    produced_while_paused = 0
    async with agent.stream("go") as run:
        first = await run.__anext__()
        assert first.type == "run_started"
        await anyio.sleep(0.05)
        # The run could only get one event ahead while we slept.
        before = model.requests and len(model.requests)
        rest = [e async for e in run]
        produced_while_paused = rest[0].seq
        assert before
    assert produced_while_paused == 2
    assert run.result.output == "x" * 200


async def test_a_cancelled_consumer_reads_no_further_buffered_event() -> None:
    """Reading an event is a cancellation point even when events wait in the buffer: a consumer
    whose scope is cancelled gets no further event."""
    import anyio

    model = ScriptedModel(["x" * 50], chunk_size=1)
    async with Agent(model).stream("go") as run:
        seen: list[str] = []
        with anyio.CancelScope() as scope:
            async for event in run:
                seen.append(event.type)
                if event.type == "text_delta":
                    await anyio.sleep(0.01)  # let the run fill the buffer
                    scope.cancel()
        assert scope.cancelled_caught
        assert seen[-1] == "text_delta" and seen.count("text_delta") == 1
        assert [e.type async for e in run][-1] == "run_finished"


async def test_a_consumer_cancelled_while_it_waits_for_an_event_stops_waiting() -> None:
    """A read that finds nothing buffered waits, and the wait is its cancellation point: a
    consumer that cancelled its own scope stops at its next read, not when the run next
    sends (here never: the model call hangs)."""
    import anyio

    from agentloop.testing import FunctionModel

    async def hang(request: object) -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.fail_after(5):
        async with Agent(FunctionModel(hang)).stream("go") as run:
            seen: list[str] = []
            with anyio.CancelScope() as scope:
                async for event in run:
                    seen.append(event.type)
                    if event.type == "model_call_started":
                        scope.cancel()
            assert scope.cancelled_caught
            assert seen[-1] == "model_call_started"


async def test_a_refused_session_run_starts_and_fails_like_any_run() -> None:
    """A run refused its session (SessionBusy) still begins with RunStarted and ends with its
    one terminal RunFailed, so a consumer sees the same shape for every run."""
    import anyio

    from agentloop import RunFailed, RunStarted, SessionBusy
    from agentloop.sessions import InMemoryStore

    async with InMemoryStore() as store:
        await store.create("held")
        await store.acquire_lease("held", owner="another-run", ttl=60)
        agent = Agent(ScriptedModel(["never"]), store=store)
        events: list[Event] = []
        with anyio.fail_after(10):
            async with agent.stream("hello", session="held") as run:
                events = [event async for event in run]
        with pytest.raises(SessionBusy):
            run.result  # noqa: B018 - reading it raises
    assert [type(e) for e in events] == [RunStarted, RunFailed]
    started, failed = events
    assert isinstance(started, RunStarted) and isinstance(failed, RunFailed)
    assert (started.input, started.run_id, started.seq) == ("hello", failed.run_id, 1)
    assert failed.error.kind == "SessionBusy" and failed.seq == 2


async def test_event_from_json_restores_a_typed_output() -> None:
    """JSON holds a typed answer as a dict; given the output type, event_from_json restores it
    (a pydantic model or a dataclass), and the event is equal to the one the run streamed."""
    from pydantic import BaseModel

    from agentloop import RunFinished

    class Trip(BaseModel):
        city: str
        days: int

    @dataclasses.dataclass
    class Stay:
        hotel: str

    cases: list[tuple[type[Any], str, Any, dict[str, Any]]] = [
        (
            Trip,
            '{"city": "Paris", "days": 3}',
            Trip(city="Paris", days=3),
            {"city": "Paris", "days": 3},
        ),
        (Stay, '{"hotel": "Ritz"}', Stay(hotel="Ritz"), {"hotel": "Ritz"}),
    ]
    for output_type, answer, value, data in cases:
        events = await _run_events(Agent(ScriptedModel([answer]), output_type=output_type))
        finished = events[-1]
        assert isinstance(finished, RunFinished) and finished.result.output == value
        text = finished.to_json()
        as_data = event_from_json(text)
        assert isinstance(as_data, RunFinished) and as_data.result.output == data
        typed = event_from_json(text, output_type=output_type)
        assert isinstance(typed, RunFinished) and typed == finished
        assert type(typed.result.output) is output_type
        assert RunFinished.from_json(text, output_type=output_type) == finished
        # Other events are untouched by the output type.
        assert event_from_json(events[0].to_json(), output_type=output_type) == events[0]


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_the_emitters_event_builder_makes_the_events_the_classes_make(cls: type[Any]) -> None:
    """The emitter sets an event's slots itself (faster than a frozen dataclass's
    ``__init__``): the event is equal to the class's own, defaults included, and as immutable;
    a missing or unknown field is refused as the class refuses it."""
    from agentloop._run import _event_builder

    expected = _sample(cls)
    common = ("run_id", "parent_run_id", "branch", "seq", "agent")
    values = {f.name: getattr(expected, f.name) for f in dataclasses.fields(cls)}
    head = [values.pop(name) for name in common]
    build: Any = _event_builder(cls)
    made = build(*head, values)
    assert made == expected and type(made) is cls
    del values["type"]  # a default
    assert build(*head, values) == expected
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.seq = 2
    with pytest.raises(TypeError):
        build(*head, {**values, "unknown": 1})
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in common
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if required:
        with pytest.raises(TypeError):
            build(*head, {k: v for k, v in values.items() if k != required[0]})
