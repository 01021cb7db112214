"""One model call: stream an attempt into events and a ``ModelResponse``, starting each action
the moment it is sealed; retry failed attempts below all middleware."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING

import anyio

import agentloop._events as ev
import agentloop.models._types as mt

from . import _react_parser as rp
from ._actions import Ordinals, PendingAction, action_of, refusal
from ._errors import ModelError, ModelTimeout, ReplyTooLarge, UsageLimitExceeded
from ._output import PartialParser
from ._steps import RunErrorInfo
from ._time import fail_after, task_deadline
from ._tracing import attempt_failed, stream_failed_after_start
from .models._assemble import ResponseBuilder
from .models._fallback import FallbackModel

_NO_CALLS: dict[str, tuple[int, str]] = {}  # never written: an attempt's own from its first call

# Keys of ReAct text pieces other than answers (an answer's key is its section, from 0).
_TEXT = -2
_THOUGHT = -1

if TYPE_CHECKING:
    from ._actions import Executor
    from ._run import AttemptRecord, RunCore
    from .models._base import Model
    from .models._types import DiscardReason


class ModelTerminal:
    """The innermost model call of one run (``call_model`` on its run and executor): a slotted
    object, not a ``functools.partial``, which with its tuple and dict is four times the size
    (every run in flight holds one)."""

    __slots__ = ("executor", "run")

    def __init__(self, run: RunCore, executor: Executor) -> None:
        self.run = run
        self.executor = executor

    def __call__(self, request: mt.ModelRequest) -> Awaitable[mt.ModelResponse]:
        return call_model(self.run, self.executor, request)


async def call_model(
    run: RunCore, executor: Executor, request: mt.ModelRequest
) -> mt.ModelResponse:
    """The innermost model call: attempts with retries, bounded by the policy's deadline.

    A failed attempt is discarded (``AttemptDiscarded(reason="retry")``, sent at once) only when
    another attempt follows, after the policy's wait. A plain loop: the policy (tenacity's
    strategies) is consulted only after a failure, so a waiting run holds no retry machinery.
    With a ``FallbackModel``, a model the policy gives up on hands over to the next one (its
    attempts counted afresh: each model gets the policy's, the fallback none of its own), on
    the errors it falls back on. Usage limits are checked before each attempt, while it
    streams, and after it."""
    plan = run.plan
    policy = plan.retry
    chain = plan.model
    fallback = chain if isinstance(chain, FallbackModel) else None
    models = fallback.models if fallback is not None else (chain,)
    limits = plan.usage_limits
    try:
        with fail_after(policy.deadline):
            index = 0
            number = 1
            while True:
                if limits is not None:
                    exceeded = limits.before_call(run.usage, request.messages)
                    if exceeded is not None:
                        raise exceeded
                attempt = _Attempt(run, executor, request, models[index])
                try:
                    # The attempt streams here, not in a coroutine of its own: every run in
                    # flight holds this frame while its reply streams.
                    record = attempt.record
                    model = attempt.model
                    await run.emit(
                        ev.ModelCallStarted, attempt=record.n, step=len(run.steps), model=model.name
                    )
                    try:
                        with task_deadline(policy.attempt_timeout):
                            async with model.stream(request) as deltas:
                                iterator = deltas.__aiter__()
                                idle = policy.idle_timeout
                                timing = run.instrument is not None  # to the first chunk
                                while True:
                                    try:
                                        if idle is None:
                                            delta = await iterator.__anext__()
                                        else:
                                            with fail_after(idle):
                                                delta = await iterator.__anext__()
                                    except StopAsyncIteration:
                                        break
                                    if timing:
                                        record.first_delta_at = anyio.current_time()
                                        timing = False
                                    if attempt.parser is not None and isinstance(
                                        delta, mt.TextPiece
                                    ):
                                        attempt.count(delta.text)
                                        await attempt.react_events(attempt.parser.feed(delta.text))
                                        if attempt.cut:
                                            break  # leaving the context closes the response
                                    else:
                                        todo = attempt.native(delta)
                                        if todo is not None:
                                            await todo
                        if attempt.parser is not None or attempt.partial is not None:
                            await attempt.finish_text()
                    except TimeoutError:
                        timeout = ModelTimeout(
                            "the model stream timed out", model=model.name, provider=model.provider
                        )
                        response = await attempt.failed(timeout)
                    except ModelError as exc:
                        response = await attempt.failed(exc)
                    except UsageLimitExceeded:
                        await attempt.account(None)  # cut mid-stream: the call still counts
                        raise
                    else:
                        response = attempt.build()
                        await attempt.account(response)
                except ModelError as exc:
                    wait = policy.next_wait(exc, number)
                    if wait is None:
                        if fallback is None or index + 1 == len(models):
                            raise
                        if not fallback.falls_back(exc):
                            raise
                        await _discard_failed(run, attempt, exc, 0.0, "fallback")
                        index, number = index + 1, 1
                        continue
                    await _discard_failed(run, attempt, exc, wait, "retry")
                    await anyio.sleep(wait)
                    number += 1
                    continue
                if limits is not None:
                    exceeded = limits.after_call(run.usage, run.usage_by_model)
                    if exceeded is not None:
                        raise exceeded
                return response
    except TimeoutError:
        raise ModelTimeout(
            f"model call deadline of {policy.deadline:g}s exceeded",
            model=run.plan.model.name,
            provider=run.plan.model.provider,
        ) from None


async def _discard_failed(
    run: RunCore, failed: _Attempt, error: ModelError, wait: float, reason: DiscardReason
) -> None:
    attempt_failed(run, failed.record.n, error)
    why = RunErrorInfo(kind=type(error).__name__, message=str(error))
    run.discard(failed.record.n, reason, error=why, retry_in=wait)
    await run.flush_discards()


class _Attempt:
    """Streams one attempt; collects its parts and seals its actions."""

    __slots__ = (
        "builder",
        "calls",
        "cap",
        "chars",
        "cut",
        "executor",
        "limit_chars",
        "model",
        "ordinals",
        "parser",
        "partial",
        "partial_section",
        "pieces",
        "record",
        "request",
        "run",
        "tags",
    )

    def __init__(
        self, run: RunCore, executor: Executor, request: mt.ModelRequest, model: Model
    ) -> None:
        self.run = run
        self.executor = executor
        self.request = request
        self.model = model
        self.record: AttemptRecord = run.open_attempt()
        self.builder = ResponseBuilder(provider=model.provider)
        limits = run.plan.usage_limits
        # The characters the reply may stream before an output limit is passed (estimated).
        self.limit_chars = limits.streamed_chars(run.usage) if limits is not None else None
        # The first of the two caps a delta checks (``_count``): one comparison per delta.
        caps = [c for c in (run.plan.max_reply_chars, self.limit_chars) if c is not None]
        self.cap = min(caps) if caps else sys.maxsize
        typed = run.plan.typed_output
        # A structured answer streams as partial outputs (to a caller who streams events).
        self.partial = PartialParser(typed) if typed is not None and run.emitting else None
        self.partial_section = 0
        self.parser = rp.ReactParser() if request.tool_mode == "react" else None
        # Native call id -> (index, tool name): the shared empty dict until the first call.
        self.calls: dict[str, tuple[int, str]] = _NO_CALLS
        self.tags: set[str] | None = None  # the sealed calls' ids, made with the first
        self.ordinals = Ordinals()  # equal calls so far, for their idempotency keys
        # ReAct text in reply order: (key, chunks) with key _TEXT, _THOUGHT or an answer section
        self.pieces: list[tuple[int, list[str]]] = []
        self.chars = 0
        self.cut = False

    async def finish_text(self) -> None:
        """The reply ended: what the ReAct parser still holds, and the last partial output."""
        if self.parser is not None and not self.cut:
            await self.react_events(self.parser.close())
        if self.partial is not None:
            await self._partial("", final=True)

    def native(self, delta: mt.ModelDelta) -> Awaitable[None] | None:
        """Take one native delta; return what must be awaited next (the event to send, the
        action to start), if anything. Not a coroutine: most deltas of a run that streams no
        events need nothing awaited, and a coroutine per delta is measurable."""
        run, n = self.run, self.record.n
        delta = self.builder.add(delta)  # a duplicate call id comes back as the call's own
        match delta:
            case mt.TextPiece(text=text):
                self.count(text)
                if self.partial is not None:
                    return self._text_and_partial(text)
                if run.emitter.active:
                    return run.emit(ev.TextDelta, attempt=n, text=text)
            case mt.ThoughtPiece(text=text):
                self.count(text)
                if run.emitter.active:
                    return run.emit(ev.ThoughtDelta, attempt=n, text=text)
            case mt.ToolCallStart(id=id, name=name):
                if self.calls is _NO_CALLS:
                    self.calls = {}
                self.calls[id] = (len(self.calls), mt.split_wire_tool_name(name)[0])
                self.record.streamed = True
                if run.emitter.active:
                    index, tool_name = self.calls[id]
                    return run.emit(
                        ev.ActionArgsDelta, attempt=n, index=index, tag=id, name=tool_name, text=""
                    )
            case mt.ToolCallArgsDelta(id=id, text=text):
                self.count(text)
                if run.emitter.active:
                    index, tool_name = self.calls.get(id) or (-1, "")
                    return run.emit(
                        ev.ActionArgsDelta,
                        attempt=n,
                        index=index,
                        tag=id,
                        name=tool_name,
                        text=text,
                    )
            case mt.ToolCallEnd(id=id):
                return self._seal(self.builder.sealed_call(id))
            case mt.ProviderBlock(part=part):
                self.record.streamed = True
                if run.emitter.active:
                    return run.emit(ev.ProviderEvent, attempt=n, part=part)
            case _:
                pass
        return None

    async def react_events(self, events: list[rp.ReactEvent]) -> None:
        run, n = self.run, self.record.n
        for event in events:
            match event:
                case rp.TextPiece(text=text):
                    self._piece(_TEXT, text)
                    if run.emitter.active:
                        await run.emit(ev.TextDelta, attempt=n, text=text)
                case rp.ThoughtPiece(text=text):
                    self._piece(_THOUGHT, text)
                    if run.emitter.active:
                        await run.emit(ev.ThoughtDelta, attempt=n, text=text)
                case rp.AnswerPiece(text=text, section=section):
                    self._piece(section, text)
                    if run.emitter.active:
                        await run.emit(ev.AnswerDelta, attempt=n, text=text, section=section)
                    if self.partial is not None:
                        if section != self.partial_section:  # a new answer replaces the last
                            self.partial = PartialParser(self.partial.output)
                            self.partial_section = section
                        await self._partial(text)
                case rp.ActionPiece(index=index, text=text):
                    self.record.streamed = True
                    if run.emitter.active:
                        await run.emit(ev.ActionArgsDelta, attempt=n, index=index, text=text)
                case rp.ActionParsed():
                    # A plain tool's path is its own name in ReAct; natively it has none.
                    plain = self.executor.toolbox.is_plain(event.name)
                    path = None if plain and event.path in ("", event.name) else event.path
                    await self._seal(
                        mt.ToolCallPart(
                            id=event.tag,
                            name=event.name,
                            path=path,
                            arguments=json.dumps(event.input, ensure_ascii=False),
                        )
                    )
                case rp.ActionInvalid():
                    await self._seal(
                        mt.ToolCallPart(
                            id=event.tag or f"action-{event.index}",
                            name=event.name or "",
                            path=event.path,
                            arguments=event.raw,
                            error=f"invalid action: {event.error}",
                        )
                    )
                case rp.StreamCut():
                    self.cut = True

    async def _text_and_partial(self, text: str) -> None:
        await self.run.emit(ev.TextDelta, attempt=self.record.n, text=text)
        await self._partial(text)

    async def _partial(self, text: str, *, final: bool = False) -> None:
        """Feed the structured answer's parser; send the partial output it makes, if any."""
        partial = self.partial
        if partial is None or (self.parser is None and self.calls):
            return  # text beside native tool calls is not the answer
        ready, value = partial.feed(text, final=final)
        if ready:
            await self.run.emit(ev.PartialOutput, attempt=self.record.n, output=value)

    def _piece(self, key: int, text: str) -> None:
        self.record.streamed = True
        pieces = self.pieces
        if pieces and pieces[-1][0] == key:
            pieces[-1][1].append(text)
        else:
            pieces.append((key, [text]))

    async def _seal(self, part: mt.ToolCallPart) -> None:
        """An action is complete in the stream: start it now unless it must wait."""
        record = self.record
        record.streamed = True
        action = action_of(part, record.n)
        pending = PendingAction(part, action, self.ordinals.next(action))
        record.actions.append(pending)
        tags = self.tags
        if tags is None:
            tags = self.tags = set()
        duplicate = part.id in tags
        tags.add(part.id)
        run = self.run
        refused = refusal(
            pending,
            count=len(record.actions),
            limit=run.plan.tool_limits.max_actions_per_step,
            duplicate=duplicate,
            out_of_steps=run.last_step and run.plan.reflect_on_tool_use,
        )
        if refused is None and self.executor.toolbox.is_eager(
            part.name, part.path, committing=run.session is not None
        ):
            await self.executor.start(pending, step=len(run.steps))

    def count(self, text: str) -> None:
        self.record.streamed = True
        self.chars += len(text)
        if self.chars <= self.cap:
            return
        limit = self.run.plan.max_reply_chars
        if limit is not None and self.chars > limit:
            raise ReplyTooLarge(f"the reply exceeded {limit} characters")
        budget = self.limit_chars
        if budget is not None and self.chars > budget:
            limits = self.run.plan.usage_limits
            if limits is not None:
                raise limits.while_streaming(self.run.usage, self.chars)

    def build(self, **fields: object) -> mt.ModelResponse:
        response = self.builder.build(
            attempt=self.record.n,
            model_name=self.model.name,
            _attempts=self.run,
            **fields,
        )
        if self.parser is None:
            return response
        # ReAct: the reply's text was parsed into thought, answer and actions.
        parts: list[mt.Part] = [p for p in response.parts if isinstance(p, mt.ThoughtPart)]
        # The last answer section is the answer (as Griptape's ``answer_matches[-1]``); all other
        # text, earlier answers included, is the thought, in reply order so nothing is lost.
        pieces = self.pieces
        last = next((i for i in range(len(pieces) - 1, -1, -1) if pieces[i][0] >= 0), None)
        has_actions = bool(self.record.actions)
        has_thought = any(kind == _THOUGHT and "".join(c).strip() for kind, c in pieces)
        if last is not None or has_actions or has_thought:
            thought = _join(p for i, p in enumerate(pieces) if i != last)
            text = "".join(pieces[last][1]) if last is not None else ""
        else:  # plain text, no header: the reply's text (its answer)
            thought, text = "", _join(pieces)
        if thought:
            parts.append(mt.ThoughtPart(text=thought))
        if text:
            parts.append(mt.TextPart(text=text))
        parts.extend(p.part for p in self.record.actions)
        finish: mt.FinishReason = response.finish_reason
        if self.cut:
            finish = "cut"
        elif has_actions and finish == "stop":
            finish = "tool_calls"
        return response.replace(
            parts=tuple(parts),
            finish_reason=finish,
            usage=None if self.cut else response.usage,
        )

    async def failed(self, error: ModelError) -> mt.ModelResponse:
        """A stream failed. With an action already started, its sealed actions become the step
        (never retried blind); otherwise the error goes to the retry layer."""
        if self.record.started_any():
            # Kept, not retried; but said: logged, traced, and on the attempt's event.
            stream_failed_after_start(self.run, self.record.n, error)
            await self.account(None, error)
            return self.build(partial=True).replace(finish_reason="error")
        await self.account(None)
        raise error

    async def account(
        self, response: mt.ModelResponse | None, error: ModelError | None = None
    ) -> None:
        usage = response.usage if response is not None else None
        counted = mt.UNKNOWN_USAGE if usage is None else _one_request(usage)
        if error is not None:  # a failed stream whose reply was kept: counted, never silent
            counted = dataclasses.replace(counted, stream_errors=1)
        model = self.model
        self.run.count_usage(f"{model.provider}:{model.name}", counted)
        if self.run.emitting:
            await self.run.emit(
                ev.ModelCallFinished,
                attempt=self.record.n,
                finish_reason=response.finish_reason if response is not None else "error",
                usage=usage,
                error=None
                if error is None
                else RunErrorInfo(kind=type(error).__name__, message=str(error)),
            )


def _join(pieces: Iterable[tuple[int, list[str]]]) -> str:
    """Join ReAct text pieces with one newline. The parser already starts a thought (or outside
    text) piece with one when an earlier piece of its kind was emitted: it is not doubled."""
    out: list[str] = []
    for _, chunks in pieces:
        text = "".join(chunks)
        if not text.strip():
            continue
        if not out:
            text = text.removeprefix("\n")
        elif not text.startswith("\n"):
            out.append("\n")
        out.append(text)
    return "".join(out)


def _one_request(usage: mt.Usage) -> mt.Usage:
    return (
        usage
        if usage.requests == 1
        else mt.Usage(
            requests=1,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            unknown=usage.unknown,
            stream_errors=usage.stream_errors,
        )
    )
