"""OpenTelemetry spans for runs, model calls and actions, after the GenAI semantic conventions.

Off unless asked (``Agent(instrument=...)``; a sub-agent's run inherits its parent's unless its own
agent says otherwise); while off, a run pays one attribute check and opentelemetry is never
imported. When on, the span wrappers are composed
once per run, around the model call and outside the tool middleware, so no per-delta work is
added. Parents are set explicitly: actions start while the model call streams, yet their spans
are children of the run's span, and a sub-agent's run span is a child of its action's span.
Prompts, replies, tool arguments and results are recorded only with ``include_content=True``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Generator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio

import agentloop.models._types as mt

from ._instrument import Instrumentation

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ._middleware import ModelCall, ToolCall, ToolCallNext, ToolMiddleware
    from ._run import Launch, RunCore
    from ._steps import ActionResult, RunResult

logger = logging.getLogger("agentloop")


# -- spans ------------------------------------------------------------------------------------


@contextmanager
def _current(span: Span) -> Generator[None, None, None]:
    """Make ``span`` current for the block (tool code and HTTP client spans nest under it)."""
    from opentelemetry import trace

    with trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            yield
        except Exception as exc:
            _fail(span, type(exc).__name__, str(exc), exc)
            raise
        except BaseException:
            span.set_attribute("agentloop.cancelled", True)
            raise


def _fail(span: Span, kind: str, message: str, exc: BaseException | None = None) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, message))
    if exc is not None:
        span.record_exception(exc)


def _child_of(run: RunCore) -> Any:
    from opentelemetry import trace

    return trace.set_span_in_context(run.span) if run.span is not None else None


def _instrument(run: RunCore) -> Instrumentation:
    """The run's instrumentation; the loop makes spans only for runs that have one."""
    if run.instrument is None:
        raise RuntimeError(f"run {run.run_id} is not traced")
    return run.instrument


async def traced_run(launch: Launch, body: Callable[[Launch], Awaitable[RunResult]]) -> RunResult:
    """The run's ``invoke_agent`` span, a child of the caller's current span."""
    from opentelemetry.trace import SpanKind

    instrument = launch.instrument
    if instrument is None:
        raise RuntimeError(f"run {launch.run_id} is not traced")
    model = launch.agent.resolved_model()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": launch.agent.name,
        "gen_ai.provider.name": model.provider,
        "gen_ai.request.model": model.name,
        "agentloop.branch": launch.branch,
    }
    if launch.parent is not None:
        attributes["agentloop.parent_run_id"] = launch.parent.run_id
    if instrument.include_content:
        attributes["gen_ai.input.messages"] = _json([_text_message("user", launch.user_input)])
    span = instrument.tracer().start_span(
        f"invoke_agent {launch.agent.name}", kind=SpanKind.INTERNAL, attributes=attributes
    )
    if span.is_recording():
        launch.span = span
    else:
        # No SDK installed, or sampled out: the run's calls and actions would make spans
        # nobody records, so they make none (the run's span is still current for user code).
        launch.instrument = None
    with _current(span):
        try:
            result = await body(launch)
        finally:
            # Set at the end, from the run as started: resuming, a session run is the recorded
            # one. (A run whose session could not be opened never started.)
            run = launch.run
            span.set_attribute("gen_ai.agent.id", launch.run_id if run is None else run.run_id)
            if run is not None and run.session_id is not None:
                span.set_attribute("gen_ai.conversation.id", run.session_id)
            span.set_attribute("agentloop.steps", 0 if run is None else len(run.steps))
            _usage_attributes(span, mt.Usage() if run is None else run.usage)
        if result.error is not None:
            _fail(span, result.error.kind, result.error.message)
        if instrument.include_content and result.text is not None:
            span.set_attribute(
                "gen_ai.output.messages", _json([_text_message("assistant", result.text)])
            )
        return result


def traced_model_call(run: RunCore, call: ModelCall) -> ModelCall:
    """A ``chat`` span per model call: the attempts and retries below the middleware."""
    from opentelemetry.trace import SpanKind

    instrument = _instrument(run)
    tracer = instrument.tracer()
    model = run.agent.resolved_model()

    async def traced(request: mt.ModelRequest) -> mt.ModelResponse:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": model.provider,
            "gen_ai.request.model": model.name,
            "gen_ai.request.stream": True,
            "agentloop.step": len(run.steps),
            "agentloop.tool_mode": request.tool_mode,
        }
        settings = request.settings
        for key, value in (
            ("gen_ai.request.max_tokens", settings.max_tokens),
            ("gen_ai.request.temperature", settings.temperature),
            ("gen_ai.request.top_p", settings.top_p),
            ("gen_ai.request.seed", settings.seed),
        ):
            if value is not None:
                attributes[key] = value
        if request.stop:
            attributes["gen_ai.request.stop_sequences"] = list(request.stop)
        if instrument.include_content:
            attributes["gen_ai.input.messages"] = _json([_message(m) for m in request.messages])
        span = tracer.start_span(
            f"chat {model.name}",
            context=_child_of(run),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        opened = run.attempt_count
        started = anyio.current_time()
        with _current(span):
            try:
                response = await call(request)
            finally:
                attempts = run.attempt_count - opened
                span.set_attribute("agentloop.attempts", attempts)
                span.set_attribute("agentloop.retries", max(attempts - 1, 0))
            record = run.attempts.get(response.attempt) if response.attempt is not None else None
            if record is not None and record.first_delta_at is not None:
                span.set_attribute(
                    "gen_ai.response.time_to_first_chunk", record.first_delta_at - started
                )
            if response.attempt is not None:
                span.set_attribute("agentloop.attempt", response.attempt)
            if response.model_name:
                span.set_attribute("gen_ai.response.model", response.model_name)
            span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
            if response.usage is not None:
                _usage_attributes(span, response.usage)
            if instrument.include_content:
                reply = _json([_message_parts("assistant", response.parts)])
                span.set_attribute("gen_ai.output.messages", reply)
                logger.debug("run %s: model reply %s", run.run_id, reply)
            return response

    return traced


def attempt_failed(run: RunCore, attempt: int, error: BaseException) -> None:
    """A retryable attempt failed and another follows: an event on the model call's span."""
    logger.info("run %s: model call attempt %d failed, retrying: %s", run.run_id, attempt, error)
    if run.instrument is None:
        return
    from opentelemetry import trace

    trace.get_current_span().add_event(
        "agentloop.attempt_failed",
        {"agentloop.attempt": attempt, "error.type": type(error).__name__, "message": str(error)},
    )


def stream_failed_after_start(run: RunCore, attempt: int, error: BaseException) -> None:
    """A stream failed after actions of its reply had started: the reply so far is kept (a
    retry could run them twice), and the error is a warning and an event on the call's span."""
    logger.warning(
        "run %s: the model stream of attempt %d failed after actions of its reply had "
        "started; the reply so far is kept as the step, not retried: %s",
        run.run_id,
        attempt,
        error,
    )
    if run.instrument is None:
        return
    from opentelemetry import trace

    trace.get_current_span().add_event(
        "agentloop.stream_failed_after_start",
        {"agentloop.attempt": attempt, "error.type": type(error).__name__, "message": str(error)},
    )


def tool_span(run: RunCore) -> ToolMiddleware:
    """An ``execute_tool`` span per action, outside the user's tool middleware."""
    from opentelemetry.trace import SpanKind

    instrument = _instrument(run)
    tracer = instrument.tracer()

    async def traced(call: ToolCall, call_next: ToolCallNext) -> ActionResult:
        action = call.action
        name = mt.wire_tool_name(action.name, action.path)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": action.tag,
            "gen_ai.tool.type": "function",
            "agentloop.step": call.step,
            "agentloop.attempt": action.attempt,
        }
        if instrument.include_content:
            attributes["gen_ai.tool.call.arguments"] = _json(action.input)
        span = tracer.start_span(
            f"execute_tool {name}",
            context=_child_of(run),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        with _current(span):
            result = await call_next(call)
            if result.is_error:
                _fail(span, result.error_kind or "tool_error", result.error or "")
            if instrument.include_content:
                span.set_attribute("gen_ai.tool.call.result", result.content)
            return result

    return traced


def _usage_attributes(span: Span, usage: mt.Usage) -> None:
    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if usage.cache_read_tokens:
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
    if usage.cache_write_tokens:
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)
    if usage.reasoning_tokens:
        span.set_attribute("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens)
    if usage.unknown:
        span.set_attribute("agentloop.usage.unknown_requests", usage.unknown)
    if usage.stream_errors:
        span.set_attribute("agentloop.usage.stream_errors", usage.stream_errors)


# -- content (opt-in) ---------------------------------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _text_message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _message(message: mt.Message) -> dict[str, Any]:
    return _message_parts(message.role, message.parts)


def _message_parts(role: str, parts: tuple[mt.Part, ...]) -> dict[str, Any]:
    """A message in the GenAI conventions' JSON shape (role and typed parts)."""
    out: list[Mapping[str, Any]] = []
    for part in parts:
        match part:
            case mt.TextPart(text=text):
                out.append({"type": "text", "content": text})
            case mt.ThoughtPart(text=text):
                out.append({"type": "reasoning", "content": text})
            case mt.ToolCallPart(id=id, arguments=arguments):
                name = mt.wire_tool_name(part.name, part.path)
                out.append({"type": "tool_call", "id": id, "name": name, "arguments": arguments})
            case mt.ToolResultPart(id=id, content=content):
                out.append({"type": "tool_call_response", "id": id, "response": content})
            case _:
                out.append({"type": part.kind})
    return {"role": role, "parts": out}
