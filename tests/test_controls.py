"""Run controls: usage limits, fallback models, guardrails, output validators and ModelRetry."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from agentloop import (
    ActionStarted,
    Agent,
    AttemptDiscarded,
    Event,
    FallbackModel,
    GuardrailTripped,
    InputGuardrail,
    ModelBadRequest,
    ModelCallStarted,
    ModelConnectionError,
    ModelOverloaded,
    ModelPrice,
    ModelRetry,
    OutputGuardrail,
    PartialOutput,
    PriceTable,
    RetryPolicy,
    RunContext,
    RunFinished,
    TextDelta,
    ToolCall,
    ToolContext,
    ToolGuardrail,
    Tripwire,
    UsageLimitExceeded,
    UsageLimits,
    UserError,
    tool,
)
from agentloop.models import Message, Model, ModelRequest, TextPiece
from agentloop.models.openai import OpenAIChatModel
from agentloop.testing import (
    EmulatedProvider,
    ProviderServer,
    RecordedRequest,
    Reply,
    ScriptedModel,
    ScriptedResponse,
    call,
    reset_midway,
    server_failed,
)

Handler = Callable[[RecordedRequest], ScriptedResponse]


@pytest.fixture
def served() -> Iterator[Callable[[Handler], Callable[[str], Model]]]:
    """Start a loopback provider with a handler; returns a maker of real OpenAI Chat drivers
    (their own HTTP clients, over the socket) for model names on it."""
    servers: list[ProviderServer] = []
    made: list[Model] = []

    def serve(handler: Handler) -> Callable[[str], Model]:
        server = ProviderServer(handler)
        server.__enter__()
        servers.append(server)

        def model(name: str) -> Model:
            driver = OpenAIChatModel(name, base_url=server.url + "/v1", api_key="k")
            made.append(driver)
            return driver

        return model

    yield serve
    for server in servers:
        server.__exit__(None, None, None)


async def _close(*models: Model) -> None:
    for model in models:
        await model.aclose()


async def _events(agent: Agent[Any, Any], text: str = "go") -> tuple[list[Event], Any]:
    async with agent.stream(text) as run:
        events = [e async for e in run]
    return events, events[-1]


def _finished(events: list[Event]) -> RunFinished:
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last


def _error(events: list[Event]) -> tuple[str, Mapping[str, Any]]:
    """The kind and details of the run's result error."""
    error = _finished(events).result.error
    assert error is not None
    return error.kind, error.details or {}


@tool
async def lookup(ctx: ToolContext, city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny, {ctx.run.usage.requests} calls so far"


# -- usage limits -------------------------------------------------------------------------------


async def test_a_request_limit_ends_the_run_before_the_call_that_would_pass_it() -> None:
    """requests=1: the second model call is never made; the error names the limit and figures."""
    model = ScriptedModel([Reply(calls=[call("lookup", {"city": "Oslo"})]), "done"])
    agent = Agent(model, tools=[lookup], usage_limits=UsageLimits(requests=1))
    result = await agent.run("x")
    assert len(model.requests) == 1
    assert result.error is not None and result.error.kind == "usage_limit_exceeded"
    assert result.error.details == {"limit": "requests", "allowed": 1, "used": 2}
    with pytest.raises(UsageLimitExceeded) as raised:
        result.unwrap()
    assert raised.value.details["limit"] == "requests"


async def test_an_input_limit_is_checked_on_an_estimate_before_the_first_call() -> None:
    """A prompt estimated past input_tokens is never sent."""
    model = ScriptedModel(["never"])
    agent = Agent(model, usage_limits=UsageLimits(input_tokens=10))
    result = await agent.run("word " * 100)
    assert model.requests == []
    assert result.error is not None and result.error.details is not None
    assert result.error.details["limit"] == "input_tokens"


async def test_an_output_limit_cuts_a_reply_mid_stream_and_withdraws_its_draft(
    served: Callable[[Handler], Callable[[str], Model]],
) -> None:
    """A reply that runs past output_tokens (estimated from what streamed) is cut mid-stream
    over a real socket: its deltas are withdrawn (reason ``limit``) and the call still counts."""
    answer = "a long answer " * 40
    model = served(EmulatedProvider(script=[answer], text_chunks=40))("m")
    agent = Agent(model, usage_limits=UsageLimits(output_tokens=20))
    try:
        events, _ = await _events(agent)
    finally:
        await _close(model)
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert 0 < len(streamed) < len(answer)
    discarded = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(e.attempt, e.reason) for e in discarded] == [(1, "limit")]
    result = _finished(events).result
    kind, details = _error(events)
    assert kind == "usage_limit_exceeded" and details["limit"] == "output_tokens"
    assert details["allowed"] == 20 and details["used"] > 20
    assert result.output is None and result.usage.requests == 1


async def test_a_cost_limit_is_checked_on_the_providers_counts_after_a_call() -> None:
    """After a call whose priced usage passes cost, the run ends before its next call."""
    prices = PriceTable({"test:scripted": ModelPrice(input=1_000_000, output=0)})
    model = ScriptedModel([Reply(calls=[call("lookup", {"city": "Oslo"})]), "done"])
    agent = Agent(model, tools=[lookup], usage_limits=UsageLimits(cost=1, prices=prices))
    result = await agent.run("a question long enough to cost more than one unit")
    assert len(model.requests) == 1
    assert result.error is not None and result.error.details is not None
    assert result.error.details["limit"] == "cost" and result.error.details["used"] > 1


async def test_a_tool_call_limit_runs_no_call_past_it() -> None:
    """tool_calls=1 with two calls in one reply: one runs, the other is not run, and the run
    ends with the limit once the step is done."""
    ran: list[str] = []

    @tool
    async def visit(city: str) -> str:
        """Visit a city."""
        ran.append(city)
        return "visited"

    model = ScriptedModel(
        [Reply(calls=[call("visit", {"city": "A"}), call("visit", {"city": "B"})]), "done"]
    )
    agent = Agent(model, tools=[visit], usage_limits=UsageLimits(tool_calls=1))
    result = await agent.run("x")
    assert len(ran) == 1 and len(model.requests) == 1
    assert result.error is not None and result.error.details is not None
    assert result.error.details == {"limit": "tool_calls", "allowed": 1, "used": 2}
    assert [a.error_kind for a in result.steps[0].actions].count("not_run") == 1


async def test_tools_and_middleware_see_the_runs_usage_so_far() -> None:
    """RunContext.usage counts the calls made so far (a tool reads it through its context)."""
    model = ScriptedModel([Reply(calls=[call("lookup", {"city": "Oslo"})]), "done"])
    result = await Agent(model, tools=[lookup]).run("x")
    assert result.steps[0].actions[0].output == "Oslo: sunny, 1 calls so far"


def test_usage_limits_are_checked_when_made() -> None:
    """A cost limit without prices, or a negative limit, is a UserError."""
    with pytest.raises(Exception, match="prices"):
        UsageLimits(cost=Decimal("0.5"))
    with pytest.raises(UserError, match=r"UsageLimits\.requests must be a whole number, 0 or more"):
        UsageLimits(requests=-1)


# -- fallback models ----------------------------------------------------------------------------


def _by_model(answer: Callable[[str, RecordedRequest], ScriptedResponse]) -> Handler:
    def handler(request: RecordedRequest) -> ScriptedResponse:
        return answer(request.json["model"], request)

    return handler


async def test_a_fallback_model_answers_after_the_first_exhausts_its_retries(
    served: Callable[[Handler], Callable[[str], Model]],
) -> None:
    """Over real sockets: the first model (503, overloaded) gets exactly the policy's attempts,
    then the second answers; events name the model of each attempt."""
    emulated = EmulatedProvider(script=["from the backup"])
    asked: list[str] = []

    def answer(name: str, request: RecordedRequest) -> ScriptedResponse:
        asked.append(name)
        return server_failed(status=503) if name == "primary" else emulated(request)

    make = served(_by_model(answer))
    primary, backup = make("primary"), make("backup")
    policy = RetryPolicy(max_attempts=2, initial_wait=0.001, jitter=0)
    agent = Agent(FallbackModel(primary, backup), retry=policy)
    try:
        events, _ = await _events(agent)
    finally:
        await _close(primary, backup)
    assert asked == ["primary", "primary", "backup"]  # no retry multiplication
    started = [e.model for e in events if isinstance(e, ModelCallStarted)]
    assert started == ["primary", "primary", "backup"]
    reasons = [e.reason for e in events if isinstance(e, AttemptDiscarded)]
    assert reasons == ["retry", "fallback"]
    result = _finished(events).result
    assert result.output == "from the backup"
    assert set(result.usage_by_model) == {"openai:primary", "openai:backup"}


async def test_a_fallback_after_a_partial_stream_withdraws_the_draft(
    served: Callable[[Handler], Callable[[str], Model]],
) -> None:
    """The first model's stream breaks after some text (a reset socket): that draft is
    withdrawn (reason ``fallback``) and the second model's answer is the run's."""
    first = EmulatedProvider(script=["the first model's long draft " * 8], text_chunks=8)
    second = EmulatedProvider(script=["the backup's answer"])

    def answer(name: str, request: RecordedRequest) -> ScriptedResponse:
        if name == "primary":
            return reset_midway(first(request), at=0.6)
        return second(request)

    make = served(_by_model(answer))
    primary, backup = make("primary"), make("backup")
    agent = Agent(FallbackModel(primary, backup), retry=RetryPolicy(max_attempts=1))
    try:
        events, _ = await _events(agent)
    finally:
        await _close(primary, backup)
    first_text = [e for e in events if isinstance(e, TextDelta) and e.attempt == 1]
    assert first_text, "the first model streamed part of its draft"
    discarded = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(e.attempt, e.reason) for e in discarded] == [(1, "fallback")]
    assert discarded[0].error is not None
    assert discarded[0].error.kind == "ModelConnectionError"
    assert events.index(discarded[0]) < events.index(
        next(e for e in events if isinstance(e, TextDelta) and e.attempt == 2)
    )
    assert _finished(events).result.output == "the backup's answer"


async def test_errors_outside_fallback_on_fail_the_call() -> None:
    """A 400 is not a reason to fall back: the run fails with it, the backup never asked."""
    backup = ScriptedModel(["never"], name="backup")
    primary = ScriptedModel([ModelBadRequest("bad", status=400)], name="primary")
    with pytest.raises(ModelBadRequest):
        await Agent(FallbackModel(primary, backup)).run("x")
    assert backup.requests == []


async def test_fallback_on_is_the_users_choice() -> None:
    """fallback_on=(ModelBadRequest,) falls back on a 400 too."""
    backup = ScriptedModel(["backup"], name="backup")
    primary = ScriptedModel([ModelBadRequest("bad", status=400)], name="primary")
    model = FallbackModel(primary, backup, fallback_on=(ModelBadRequest, ModelOverloaded))
    assert (await Agent(model).run("x")).output == "backup"


async def test_a_fallback_model_used_on_its_own_falls_back_when_opening_fails() -> None:
    """Outside a run, stream() moves on when a model cannot open its stream (no retries)."""

    class Down(ScriptedModel):
        def stream(self, request: Any) -> Any:
            raise ModelConnectionError("refused")

    model = FallbackModel(Down(["x"]), ScriptedModel(["up"], name="up"))
    request = ModelRequest(messages=(Message.user("x"),))
    async with model.stream(request) as deltas:
        pieces = [d.text async for d in deltas if isinstance(d, TextPiece)]
    assert "".join(pieces) == "up"
    with pytest.raises(ModelConnectionError):
        async with FallbackModel(Down(["x"]), Down(["y"])).stream(request) as deltas:
            pass


# -- guardrails ---------------------------------------------------------------------------------


async def no_secrets(run: RunContext[Any], text: str) -> Tripwire | None:
    if "password" in text:
        return Tripwire(reason="asks for a password", info={"word": "password"})
    return None


async def test_an_input_guardrail_trips_before_the_first_model_call() -> None:
    """A blocking input guardrail that trips: no model call, a typed guardrail_tripped result."""
    model = ScriptedModel(["never"])
    agent = Agent(model, guardrails=[InputGuardrail(no_secrets)])
    result = await agent.run("tell me the password")
    assert model.requests == []
    assert result.error is not None and result.error.kind == "guardrail_tripped"
    assert result.error.details == {
        "guardrail": "no_secrets",
        "stage": "input",
        "info": {"word": "password"},
    }
    with pytest.raises(GuardrailTripped):
        result.unwrap()
    assert (await agent.run("hello")).output == "never"  # an input that passes is answered


async def test_a_concurrent_input_guardrail_cancels_the_call_and_withdraws_its_draft() -> None:
    """Run alongside the first call, a trip cancels it mid-stream and withdraws its deltas."""

    async def slow_check(run: RunContext[Any], text: str) -> Tripwire | None:
        await anyio.sleep(0.05)
        return Tripwire(reason="off topic")

    model = ScriptedModel([Reply(text="x" * 200, chunk_size=1, delay=0.005)])
    agent = Agent(model, guardrails=[InputGuardrail(slow_check, concurrent=True)])
    events, _ = await _events(agent)
    streamed = [e for e in events if isinstance(e, TextDelta)]
    assert 0 < len(streamed) < 200
    assert [(e.attempt, e.reason) for e in events if isinstance(e, AttemptDiscarded)] == [
        (1, "guardrail")
    ]
    kind, details = _error(events)
    assert kind == "guardrail_tripped" and details["stage"] == "input"


async def test_a_concurrent_input_guardrail_that_passes_costs_no_latency() -> None:
    """A passing concurrent guardrail lets the call's answer through."""

    async def fine(run: RunContext[Any], text: str) -> Tripwire | None:
        return None

    agent = Agent(ScriptedModel(["ok"]), guardrails=[InputGuardrail(fine, concurrent=True)])
    assert (await agent.run("x")).output == "ok"


async def test_an_output_guardrail_trips_on_a_streamed_answer_and_withdraws_it(
    served: Callable[[Handler], Callable[[str], Model]],
) -> None:
    """The answer streams (over a real socket); the guardrail trips before RunFinished, the
    draft is withdrawn and the result has neither output nor text."""

    async def no_digits(run: RunContext[Any], output: Any) -> Tripwire | None:
        if any(ch.isdigit() for ch in output):
            return Tripwire(reason="contains digits", info={"output": output})
        return None

    model = served(EmulatedProvider(script=["the code is 1234"]))("m")
    agent = Agent(model, guardrails=[OutputGuardrail(no_digits)])
    try:
        events, _ = await _events(agent)
    finally:
        await _close(model)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "the code is 1234"
    discarded = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(e.attempt, e.reason) for e in discarded] == [(1, "guardrail")]
    result = _finished(events).result
    assert result.output is None and result.text is None
    kind, details = _error(events)
    assert kind == "guardrail_tripped" and details["info"] == {"output": "the code is 1234"}


async def test_tool_guardrails_check_a_call_before_it_runs_and_its_result_after() -> None:
    """A call tripped before it runs never runs; a result tripped after ends the run too."""
    ran: list[str] = []

    @tool
    async def transfer(amount: int) -> str:
        """Move money."""
        ran.append(str(amount))
        return f"moved {amount}"

    async def at_most_100(call: ToolCall[Any]) -> Tripwire | None:
        amount = call.action.input["amount"]
        return Tripwire(reason="too much", info={"amount": amount}) if amount > 100 else None

    model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 500})]), "done"])
    guard = ToolGuardrail(before=at_most_100, tools=("transfer",))
    result = await Agent(model, tools=[transfer], guardrails=[guard]).run("x")
    assert ran == [] and len(model.requests) == 1
    assert result.error is not None and result.error.details is not None
    assert result.error.details["stage"] == "tool_call"
    assert result.error.details["guardrail"] == "at_most_100"

    async def no_moves(call: ToolCall[Any], result: Any) -> Tripwire | None:
        return Tripwire(reason="leaks") if "moved" in str(result.output) else None

    model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 5})]), "done"])
    result = await Agent(model, tools=[transfer], guardrails=[ToolGuardrail(after=no_moves)]).run(
        "x"
    )
    assert ran == ["5"] and result.error is not None and result.error.details is not None
    assert result.error.details["stage"] == "tool_result"
    assert result.steps[0].actions[0].output is None  # the model never saw it


async def test_sync_guardrail_checks_are_accepted_like_sync_middleware() -> None:
    """A plain ``def`` check works at every stage, as a plain ``def`` middleware does: it is
    called on the event loop and its ``Tripwire`` or ``None`` is used as it is."""
    seen: list[str] = []

    def input_check(run: RunContext[Any], text: str) -> Tripwire | None:
        seen.append("input")
        return Tripwire(reason="no") if "stop" in text else None

    def output_check(run: RunContext[Any], output: Any) -> Tripwire | None:
        seen.append("output")
        return Tripwire(reason="digits") if any(c.isdigit() for c in str(output)) else None

    def before(call: ToolCall[Any]) -> Tripwire | None:
        seen.append("before")
        return None

    def after(call: ToolCall[Any], result: Any) -> Tripwire | None:
        seen.append("after")
        return None

    @tool
    async def ping() -> str:
        """Ping."""
        return "pong"

    guardrails: list[InputGuardrail | OutputGuardrail | ToolGuardrail] = [
        InputGuardrail(input_check),
        InputGuardrail(input_check, concurrent=True, name="concurrent"),
        OutputGuardrail(output_check),
        ToolGuardrail(before=before, after=after),
    ]
    model = ScriptedModel([Reply(calls=[call("ping")]), "all fine"])
    result = await Agent(model, tools=[ping], guardrails=guardrails).run("go")
    assert result.error is None and result.output == "all fine"
    assert sorted(seen) == ["after", "before", "input", "input", "output"]
    result = await Agent(ScriptedModel(["1234"]), guardrails=guardrails).run("go")
    assert result.error is not None and result.error.details is not None
    assert result.error.details["stage"] == "output"
    result = await Agent(ScriptedModel(["never"]), guardrails=guardrails).run("stop")
    assert result.error is not None and result.error.kind == "guardrail_tripped"


def test_a_guardrail_check_that_is_not_callable_is_refused_where_declared() -> None:
    with pytest.raises(UserError, match=r"must be a function \(async def or def\), not"):
        OutputGuardrail("not a function")  # type: ignore[arg-type]


# -- output validators and ModelRetry -----------------------------------------------------------


async def test_an_output_validator_feeds_its_reason_back_to_the_model() -> None:
    """ModelRetry from a validator asks again with its reason; the next answer is taken."""

    async def polite(run: RunContext[Any], output: Any) -> Any:
        if "please" not in output:
            raise ModelRetry("say please")
        return output.upper()

    model = ScriptedModel(["give it", "please give it"])
    result = await Agent(model, output_validators=[polite]).run("x")
    assert result.output == "PLEASE GIVE IT"
    assert "say please" in str(model.requests[1].messages[-1])


async def test_output_validators_have_their_own_retry_budget() -> None:
    """Past output_retries the run ends with output_invalid, well before max_steps."""

    async def never(run: RunContext[Any], output: Any) -> Any:
        raise ModelRetry("no")

    model = ScriptedModel(["a", "b", "c", "d"])
    result = await Agent(model, output_validators=[never], output_retries=2).run("x")
    assert result.error is not None and result.error.kind == "output_invalid"
    assert len(model.requests) == 3


async def test_a_tool_raising_model_retry_is_asked_again_within_its_budget() -> None:
    """The model sees the reason as the action's error, and calls again; past the tool's
    budget (ToolLimits.max_retries) the run ends with tool_retries_exceeded."""
    from agentloop import ToolLimits

    @tool
    async def pick(n: int) -> str:
        """Pick a number."""
        if n != 7:
            raise ModelRetry("pick 7")
        return "right"

    model = ScriptedModel(
        [
            Reply(calls=[call("pick", {"n": 1})]),
            Reply(calls=[call("pick", {"n": 7})]),
            "done",
        ]
    )
    result = await Agent(model, tools=[pick]).run("x")
    first = result.steps[0].actions[0]
    assert first.error_kind == "retry" and first.error == "pick 7"
    assert result.output == "done"

    model = ScriptedModel([Reply(calls=[call("pick", {"n": i})]) for i in range(5)])
    agent = Agent(model, tools=[pick], tool_limits=ToolLimits(max_retries=1))
    result = await agent.run("x")
    assert result.error is not None and result.error.kind == "tool_retries_exceeded"
    assert len(model.requests) == 2


async def test_started_actions_show_in_events_when_a_limit_ends_the_run() -> None:
    """The action that ran before the limit is in the events (never withdrawn)."""
    model = ScriptedModel([Reply(calls=[call("lookup", {"city": "Oslo"})]), "done"])
    events, _ = await _events(Agent(model, tools=[lookup], usage_limits=UsageLimits(requests=1)))
    assert any(isinstance(e, ActionStarted) for e in events)
    assert _error(events)[0] == "usage_limit_exceeded"


# -- streaming structured output ----------------------------------------------------------------


class City(BaseModel):
    name: str
    population: int = 0
    districts: list[str] = []


async def test_a_structured_answer_streams_as_partial_validated_outputs(
    served: Callable[[Handler], Callable[[str], Model]],
) -> None:
    """Over a real socket: as the JSON answer streams, PartialOutput events carry objects of
    the output type as far as they have formed, ending with the whole answer."""
    districts = [f"district number {i}" for i in range(30)]
    answer = City(name="Oslo", population=700000, districts=districts).model_dump_json()
    model = served(EmulatedProvider(script=[answer], text_chunks=60))("m")
    try:
        events, _ = await _events(Agent(model, output_type=City))
    finally:
        await _close(model)
    partials = [e.output for e in events if isinstance(e, PartialOutput)]
    assert all(isinstance(p, City) for p in partials)
    assert 3 <= len(partials) < 60  # parsed as it grows, not on every delta
    sizes = [len(p.districts) for p in partials]
    assert sizes == sorted(sizes) and sizes[0] < len(districts)
    assert partials[-1] == _finished(events).result.output
    text_at = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert text_at < events.index(next(e for e in events if isinstance(e, PartialOutput)))


async def test_a_plain_text_agent_sends_no_partial_outputs() -> None:
    """Without output_type there is nothing to parse."""
    events, _ = await _events(Agent(ScriptedModel(['{"name": "Oslo"}'])))
    assert not any(isinstance(e, PartialOutput) for e in events)


async def test_a_model_error_beside_a_concurrent_input_guardrail_is_raised_as_itself() -> None:
    """A call that fails while a concurrent guardrail still runs fails the run with its own
    error (not an exception group), and the check is cancelled."""

    async def slow(run: RunContext[Any], text: str) -> Tripwire | None:
        await anyio.sleep(30)
        return None

    model = ScriptedModel([ModelBadRequest("bad field", status=400)])
    agent = Agent(model, guardrails=[InputGuardrail(slow, concurrent=True)])
    with anyio.fail_after(10), pytest.raises(ModelBadRequest):
        await agent.run("x")


async def test_a_tools_own_retries_override_the_agents_budget() -> None:
    """@tool(retries=0): the first ModelRetry already ends the run; others keep the default."""

    @tool(retries=0)
    async def strict(n: int) -> str:
        """Accepts nothing."""
        raise ModelRetry("no")

    model = ScriptedModel([Reply(calls=[call("strict", {"n": 1})]), "never"])
    result = await Agent(model, tools=[strict]).run("x")
    assert result.error is not None and result.error.kind == "tool_retries_exceeded"
    assert len(model.requests) == 1
    with pytest.raises(UserError):
        tool(retries=-1)
