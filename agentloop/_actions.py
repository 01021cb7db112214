"""Running actions: admission, lookup, argument validation, limits, timeouts, threads, tool
middleware.

Every failure the model can fix becomes an error result on that one action; only cancellation
(and the runtime's own faults) propagate.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import types
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextvars import Context, copy_context
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import anyio
import sniffio
from anyio.abc import TaskGroup

from ._errors import ModelRetry, ToolError
from ._middleware import ToolCall
from ._steps import Action, ActionErrorKind, ActionResult, RunResult, split_images
from ._threads import Job, NoWorkerThread, borrow_nowait
from ._time import fail_after
from .models._types import RunContext, ToolCallPart, ToolSpec
from .tools._context import Asker, ProgressSink, ToolContext, abandon, call_identity
from .tools._limits import ToolLimits, default_thread_limiter, default_tool_limiter
from .tools._schema import MAX_ARGUMENT_DEPTH, nesting_exceeds, strip_nones, text_nesting_exceeds
from .tools._tool import Activity, Tool, check_unique_names

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

    from ._context import Ticket

_TASK_NAME = "agentloop._actions.Executor._execute"  # the name start_soon would work out
BLOCKING_WARNING_SECONDS = 0.1  # an async tool's step longer than this is a warning

logger = logging.getLogger("agentloop")


class Toolbox:
    """The tools of one run, addressable by name and path."""

    __slots__ = ("_tools", "terminal")

    def __init__(self, tools: Sequence[Tool]) -> None:
        check_unique_names(tools)
        self._tools: dict[str, Tool] = {t.name: t for t in tools}
        # The engine's terminal tool call on these tools, under the limits it was made with:
        # made once, it serves every run that shares the toolbox (``_loop``).
        self.terminal: tuple[ToolLimits, Callable[[ToolCall], Awaitable[ActionResult]]] | None
        self.terminal = None

    def __bool__(self) -> bool:
        return bool(self._tools)

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(spec for t in self._tools.values() for spec in t.specs())

    def find(self, name: str, path: str | None) -> tuple[Tool, Activity] | str:
        """The activity, or the error message the model sees."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return f"unknown tool {name!r}; available tools: {known}"
        activity = tool.activity(path)
        if activity is None:
            paths = ", ".join(repr(p) for p in tool.activities if p is not None)
            return f"tool {name!r} has no activity {path!r}; its activities: {paths}"
        return tool, activity

    def is_plain(self, name: str) -> bool:
        """A tool with one unnamed activity (``@tool``), not a toolkit."""
        tool = self._tools.get(name)
        return tool is not None and None in tool.activities

    def is_eager(self, name: str, path: str | None, *, committing: bool = False) -> bool:
        """Whether the action may start as soon as it is sealed. ``committing``: the run
        commits replies, and a tool with side effects waits for its reply's commit."""
        found = self.find(name, path)
        if not isinstance(found, tuple):
            return True
        activity = found[1]
        # A call that may wait for a decision never starts before the reply is settled.
        return (
            activity.eager and not activity.may_wait and not (committing and activity.side_effects)
        )

    def check_arguments(self, name: str, path: str | None, arguments: object) -> str | None:
        """Why ``arguments`` fail the tool's schema (an edited call's), or ``None``."""
        from pydantic import ValidationError

        found = self.find(name, path)
        if isinstance(found, str):
            return found
        activity = found[1]
        if not isinstance(arguments, Mapping):
            return f"arguments must be a JSON object, got: {_clip(str(arguments))}"
        if nesting_exceeds(arguments, MAX_ARGUMENT_DEPTH):
            return _TOO_DEEP
        try:
            activity.args.model_validate(strip_nones(dict(arguments), activity.parameters))
        except ValidationError as exc:
            return _validation_message(exc)
        except RecursionError:
            return _TOO_DEEP
        return None

    def has_side_effects(self, name: str, path: str | None) -> bool:
        found = self.find(name, path)
        return isinstance(found, tuple) and found[1].side_effects


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars``, with a marker the model sees saying how much was cut."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n…[truncated {len(text) - max_chars} characters]"


def _cut(text: str, max_chars: int) -> bool:
    """Whether ``truncate`` already cut ``text`` to ``max_chars``."""
    return text.startswith("\n…[truncated ", max_chars)


def error_result(
    action: Action, kind: ActionErrorKind, message: str, max_chars: int | None = None
) -> ActionResult:
    """An error result; ``max_chars`` truncates the message like an output."""
    if max_chars is not None:
        message = truncate(message, max_chars)
    return ActionResult(
        tag=action.tag,
        name=action.name,
        path=action.path,
        input=action.input,
        error=message,
        error_kind=kind,
        attempt=action.attempt,
    )


class Ordinals:
    """Counts equal calls (same tool, same arguments) of one reply in reply order: a call's
    ordinal is part of its idempotency key, which must not rest on the provider's call id.

    The arguments' digest is taken only for a tool called more than once in the reply: the
    first call of a tool is the first of its equals (most replies call each tool once, and a
    digest is a JSON encoding and a SHA-256 per call)."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        # By tool: its one call so far, or, once it has more, the count of each digest.
        self._seen: dict[tuple[str, str | None], Action | dict[str, int]] = {}

    def next(self, action: Action) -> int:
        tool = (action.name, action.path)
        seen = self._seen.get(tool)
        if seen is None:
            self._seen[tool] = action
            return 0
        if isinstance(seen, Action):
            seen = self._seen[tool] = {_identity(seen): 1}
        key = _identity(action)
        n = seen.get(key, 0)
        seen[key] = n + 1
        return n


def _identity(action: Action) -> str:
    return call_identity(action.name, action.path, action.input)


def action_of(part: ToolCallPart, attempt: int) -> Action:
    """The action for a sealed call; unparsable arguments stay raw text for the error result."""
    arguments: Any = part.arguments
    if part.error is None:
        try:
            decoded = json.loads(part.arguments or "{}")
        except (ValueError, RecursionError):  # too deep for the decoder: stays text too
            pass
        else:
            # Arguments nested deeper than the limit stay text: nothing downstream (schema
            # cleaning, validation, encoding for the store and the events) has to walk them.
            if not nesting_exceeds(decoded, MAX_ARGUMENT_DEPTH):
                arguments = decoded
    return Action(tag=part.id, name=part.name, path=part.path, input=arguments, attempt=attempt)


def refusal(
    pending: PendingAction, *, count: int, limit: int, duplicate: bool, out_of_steps: bool
) -> ActionResult | None:
    """Why an action of a reply does not run, if it does not: the one admission rule, both for
    starting an action the moment it is sealed and for settling the accepted reply. ``count``:
    the action's place in its reply (from 1); ``duplicate``: an earlier action of the reply has
    its tag; ``out_of_steps``: no model call is left to read the results."""
    action = pending.action
    if out_of_steps:
        return error_result(
            action, "not_run", "not run: this was the run's last allowed step (max_steps)"
        )
    if pending.part.error is not None:
        return error_result(action, "invalid_action", pending.part.error)
    if duplicate:
        return error_result(
            action, "duplicate_tag", f"another action of this reply has tag {action.tag!r}"
        )
    if count > limit:
        return error_result(
            action, "too_many_actions", f"more than {limit} actions in one reply; not run"
        )
    return None


SUBAGENT = "__agentloop_subagent__"
"""The attribute of a sub-agent tool's function (``Agent.as_tool``) that holds its agent."""


@dataclass(frozen=True, slots=True)
class SubrunOutput:
    """What a sub-agent tool (``Agent.as_tool``) returns: the action's output is the sub-run's,
    and the action's result keeps the sub-run's whole result (``subrun``)."""

    result: RunResult


class PendingAction:
    """An action of the run: sealed, maybe started, maybe finished."""

    __slots__ = ("_event", "action", "finished", "ordinal", "part", "result", "started")

    def __init__(self, part: ToolCallPart, action: Action, ordinal: int = 0) -> None:
        self.part = part
        self.action = action
        self.ordinal = ordinal  # equal calls before it in its reply (the idempotency key's)
        self.started = False
        self.finished = False  # the result is in and ``ActionFinished`` has gone out
        self.result: ActionResult | None = None
        # Made only when someone waits before the action has finished: most waits find it
        # finished, and an event per action is a measurable part of a turn.
        self._event: anyio.Event | None = None

    def set_finished(self) -> None:
        self.finished = True
        if self._event is not None:
            self._event.set()

    async def wait_finished(self) -> None:
        """Wait until the action has finished (no checkpoint when it already has)."""
        if not self.finished:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()


T = TypeVar("T")


class RunOwner(Protocol):
    """What the executor needs of its run (``RunCore``)."""

    @property
    def context(self) -> RunContext: ...

    def action_started(self, pending: PendingAction) -> Awaitable[None]:
        """Announce an action as it starts."""
        ...

    def action_finished(self, result: ActionResult) -> Awaitable[None]:
        """Announce an action's result."""
        ...


_Ready = tuple["PendingAction", int, "ActionResult | None", "Ticket | None"]


class Executor:
    """Runs a run's actions as tasks of the run's task group, within the limits.

    With ``defer``, a started action is held until the run's task would next suspend
    (``flush``, called by ``suspending``), and its task is spawned then: that is when a task
    spawned at once would first run, so nothing starts later. An action still held when the
    run waits for its results runs in the run's own task instead (``run_held``), in a copy of
    the run's context as a task would, and the others held are spawned the moment it first
    suspends. A tool that returns without suspending (most do) so costs no task: a task, its
    cancel scope, its event and their frames are the largest part of a tool call.
    """

    __slots__ = (
        "_call",
        "_core",
        "_exits",
        "_held",
        "_limiter",
        "_limits",
        "_parallel",
        "_run",
        "_tg",
        "toolbox",
    )

    def __init__(
        self,
        *,
        run: RunOwner,
        task_group: TaskGroup,
        toolbox: Toolbox,
        call: Callable[[ToolCall], Awaitable[ActionResult]],
        limits: ToolLimits,
        exits: list[BaseException] | None = None,
        defer: bool = False,
    ) -> None:
        # The run itself, which the executor tells of each action's start and finish (not
        # callbacks bound to it: every run in flight holds its executor), and its view.
        self._core = run
        self._run = run.context
        self._held: list[_Ready] | None = [] if defer else None
        # A KeyboardInterrupt or SystemExit from a tool goes here and cancels the task group;
        # the task group's owner raises it as itself (on asyncio it would otherwise leave
        # through the event loop, past the run).
        self._exits = exits if exits is not None else []
        self._tg = task_group
        self.toolbox = toolbox
        self._call = call
        self._limits = limits
        self._parallel: _Slots | None = None  # made with the first action
        self._limiter: anyio.CapacityLimiter | None = None  # looked up with the first action

    async def start(
        self, pending: PendingAction, *, step: int, error: ActionResult | None = None
    ) -> None:
        """Start the action now (at most once), or settle it with ``error`` without running.
        ``ActionStarted`` goes out here, so the events follow the model's order."""
        if pending.started:
            return
        pending.started = True
        ticket = None
        if error is None:
            found = self.toolbox.find(pending.action.name, pending.action.path)
            if isinstance(found, tuple):
                activity = found[1]
                if activity.serial_key is not None:
                    ticket = self._run.state.serial(activity.serial_key(self._run)).take()
                # ActionStarted (and the result) show the input the tool receives.
                pending.action = cleaned_action(pending.action, activity)
        await self._core.action_started(pending)
        held = self._held
        if held is not None:
            held.append((pending, step, error, ticket))
            return
        # Named here: start_soon would otherwise work out the same name on every call.
        self._tg.start_soon(self._execute, pending, step, error, ticket, name=_TASK_NAME)

    def flush(self) -> None:
        """Spawn the task of every action held (the run's task is about to suspend)."""
        held = self._held
        if not held:
            return
        ready = held.copy()
        held.clear()
        for pending, step, error, ticket in ready:
            self._tg.start_soon(self._execute, pending, step, error, ticket, name=_TASK_NAME)

    def suspending(self, coro: Awaitable[T]) -> Awaitable[T]:
        """``coro``, with the actions held spawned before each of its suspensions, and when it
        raises (a failed model call's actions still run)."""
        if self._held is None:
            return coro
        return cast("Awaitable[T]", _Flushing(coro, self.flush, None))

    async def run_held(self, pendings: Sequence[PendingAction]) -> None:
        """Run those of ``pendings`` still held here, one after the other, in the run's task;
        the first suspension of one spawns every action still held, so none waits for
        another."""
        held = self._held
        if not held:
            return
        for pending in pendings:
            item = next((item for item in held if item[0] is pending), None)
            if item is not None:
                held.remove(item)
                await _Flushing(self._execute(*item), self.flush, copy_context())

    async def _execute(
        self, pending: PendingAction, step: int, error: ActionResult | None, ticket: Ticket | None
    ) -> None:
        try:
            if error is not None:
                result = error
            elif ticket is not None:
                async with ticket:
                    result = await self._invoke(pending, step)
            else:
                result = await self._invoke(pending, step)
        except (KeyboardInterrupt, SystemExit) as exc:
            self._exits.append(exc)
            self._tg.cancel_scope.cancel()
            return
        error_text = result.error
        max_chars = self._limits.max_output_chars
        if (
            error_text is not None
            and len(error_text) > max_chars
            and not _cut(error_text, max_chars)
        ):
            # Whatever made it (a tool, a middleware, a refusal), an error is cut like an output.
            result = dataclasses.replace(result, error=truncate(error_text, max_chars))
        pending.result = result
        try:
            await self._core.action_finished(result)
        finally:
            pending.set_finished()

    async def _invoke(self, pending: PendingAction, step: int) -> ActionResult:
        call = ToolCall(action=pending.action, run=self._run, step=step, ordinal=pending.ordinal)
        limiter = self._limiter
        if limiter is None:  # a run stays on one event loop: look the RunVar up once per run
            limiter = self._limiter = self._limits.tool_limiter or default_tool_limiter()
        parallel = self._parallel
        if parallel is None:
            parallel = self._parallel = _Slots(self._limits.max_parallel_actions)
        if not parallel.take_nowait():
            await parallel.take()
        try:
            await _acquire(limiter, pending)
            try:
                result = await self._call(call)
            except Exception as exc:  # a tool middleware failed: still one action's error
                message = f"tool middleware failed: {type(exc).__name__}: {exc}"
                result = error_result(pending.action, "tool_error", message)
            except anyio.get_cancelled_exc_class() as exc:
                if really_cancelled():
                    raise
                message = f"tool middleware raised {type(exc).__name__} without being cancelled"
                result = error_result(pending.action, "tool_error", message)
            finally:
                limiter.release_on_behalf_of(pending)
        finally:
            parallel.give()
        return result


class _Slots:
    """A run's ``max_parallel_actions``: a count while a slot is free, and a queue only once
    an action waits for one. (A ``CapacityLimiter`` per run, its set of borrowers and its
    ordered dict of waiters, is some 450 bytes held by every run in flight.) First come,
    first served: a slot given back goes to the longest waiter."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, total: int) -> None:
        self._free = total
        self._waiters: deque[anyio.Event] | None = None

    def take_nowait(self) -> bool:
        """Take a free slot, if there is one nobody waits for (no checkpoint)."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Wait for a slot: ``give`` hands it over by setting the waiter's event."""
        event = anyio.Event()
        waiters = self._waiters
        if waiters is None:
            waiters = self._waiters = deque()
        waiters.append(event)
        try:
            await event.wait()
        except BaseException:
            if event.is_set():
                self.give()  # handed a slot as it was cancelled: the next waiter has it
            else:
                waiters.remove(event)
            raise

    def give(self) -> None:
        waiters = self._waiters
        if waiters:
            waiters.popleft().set()
        else:
            self._free += 1


class _Flushing:
    """Awaits a coroutine (in ``context``, if given) and calls ``flush`` before each of its
    suspensions and when it raises (cancelled, or failed). An iterator object, not a
    generator: every run in flight holds one around its model call, and a generator's frame
    is several times its size."""

    __slots__ = ("_context", "_coro", "_flush")

    def __init__(
        self, coro: Awaitable[Any], flush: Callable[[], None], context: Context | None
    ) -> None:
        # A coroutine is stepped as it is; any other awaitable (a middleware's) by its iterator.
        self._coro: Any = coro if isinstance(coro, types.CoroutineType) else coro.__await__()
        self._flush = flush
        self._context = context

    def __await__(self) -> _Flushing:
        return self

    def __iter__(self) -> _Flushing:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        context = self._context
        try:
            if context is None:
                yielded = self._coro.send(value)
            else:
                yielded = context.run(self._coro.send, value)
        except StopIteration:
            raise
        except BaseException:
            # What was sent (trio's outcome of a cancelled wait, holding the exception) is
            # not kept by this frame, which the exception's traceback holds: no cycle.
            del value
            self._flush()
            raise
        self._flush()
        return yielded

    def throw(self, *exc: Any) -> Any:
        """A cancellation (or the like) thrown in: the coroutine's to handle."""
        context = self._context
        try:
            if context is None:
                yielded = self._coro.throw(*exc)
            else:
                yielded = context.run(self._coro.throw, *exc)
        except StopIteration:
            raise
        except BaseException:
            del exc  # as in ``send``
            self._flush()
            raise
        self._flush()
        return yielded

    def close(self) -> None:
        self._coro.close()


async def _acquire(limiter: anyio.CapacityLimiter, borrower: object) -> None:
    """Take a token without a scheduling round trip when one is free."""
    if not borrow_nowait(limiter, borrower):
        await limiter.acquire_on_behalf_of(borrower)


def make_terminal(
    toolbox: Toolbox,
    limits: ToolLimits,
    progress: ProgressSink | None = None,
    asker: Asker | None = None,
) -> Callable[[ToolCall], Awaitable[ActionResult]]:
    """The innermost tool call: validate, invoke, and turn failures into error results.
    ``progress`` receives what tools report with ``ToolContext.report_progress`` (the run
    streams it as events; without it, reports are dropped); ``asker`` answers
    ``ToolContext.ask_approver``."""
    return functools.partial(_invoke_tool, toolbox, limits, progress, asker)


async def _invoke_tool(
    toolbox: Toolbox,
    limits: ToolLimits,
    progress: ProgressSink | None,
    asker: Asker | None,
    call: ToolCall,
) -> ActionResult:
    # pydantic is loaded by now (the tool's argument model is pydantic), so this is a lookup;
    # importing it here keeps it out of ``import agentloop``.
    from pydantic import ValidationError

    action = call.action
    found = toolbox.find(action.name, action.path)
    if isinstance(found, str):
        return error_result(action, "unknown_tool", found)
    tool, activity = found
    arguments = action.input
    if not isinstance(arguments, Mapping):
        if isinstance(arguments, str) and text_nesting_exceeds(arguments, MAX_ARGUMENT_DEPTH):
            return error_result(action, "invalid_arguments", _TOO_DEEP)
        return error_result(
            action,
            "invalid_arguments",
            f"arguments must be a JSON object, got: {_clip(str(arguments))}",
        )
    if nesting_exceeds(arguments, MAX_ARGUMENT_DEPTH):  # a middleware may have rewritten them
        return error_result(action, "invalid_arguments", _TOO_DEEP)
    try:
        args = activity.args.model_validate(strip_nones(dict(arguments), activity.parameters))
    except ValidationError as exc:
        if activity.on_invalid is not None:  # the tool answers its own schema violations
            return _success(action, activity.on_invalid(exc), limits.max_output_chars)
        return error_result(action, "invalid_arguments", _validation_message(exc))
    except RecursionError:
        return error_result(action, "invalid_arguments", _TOO_DEEP)
    ctx = ToolContext(
        run=call.run,
        action=action,
        step=call.step,
        ordinal=call.ordinal,
        progress=progress,
        asker=asker,
    )
    kwargs = _call_kwargs(activity, args, ctx)
    name = tool.name if action.path is None else f"{tool.name}.{action.path}"
    max_chars = limits.max_output_chars
    try:
        if activity.is_async:
            with fail_after(activity.timeout):
                start = anyio.current_time() if activity.timeout is not None else 0.0
                value, busy = await _stepped(activity.fn(**kwargs), name)
                if busy > _LATE_CHECK_SECONDS:
                    late = _late(activity.timeout, start)
                    if late is not None:
                        return error_result(action, "timeout", late)
        else:
            value = await _in_thread(name, activity, kwargs, ctx, limits)
    except TimeoutError as exc:
        if activity.timeout is None:  # the tool's own timeout, not ours
            return error_result(action, "tool_error", f"TimeoutError: {exc}", max_chars)
        message = f"timed out after {activity.timeout:g}s"
        if isinstance(exc, _WaitedForThread):
            message += " waiting for a free worker thread"
        return error_result(action, "timeout", message)
    except NoWorkerThread as exc:
        return error_result(action, "tool_error", str(exc), max_chars)
    except ToolError as exc:
        return error_result(action, "tool_error", str(exc), max_chars)
    except ModelRetry as exc:
        return error_result(action, "retry", exc.message, max_chars)
    except Exception as exc:
        return error_result(action, "tool_error", f"{type(exc).__name__}: {exc}", max_chars)
    except anyio.get_cancelled_exc_class() as exc:
        if really_cancelled():
            raise
        message = f"the tool raised {type(exc).__name__} without being cancelled"
        return error_result(action, "tool_error", message)
    if isinstance(value, SubrunOutput):
        return dataclasses.replace(
            _success(action, value.result.output, max_chars), subrun=value.result
        )
    return _success(action, value, max_chars)


_TOO_DEEP = f"invalid arguments: nested more than {MAX_ARGUMENT_DEPTH} levels deep"
_LATE_CHECK_SECONDS = 0.001  # below this an async tool cannot have overrun a deadline by much


def really_cancelled() -> bool:
    """Whether the current task is being cancelled: a cancelled exception raised when this is
    false came from the tool itself (or a library it called), not from anyone cancelling."""
    if anyio.current_effective_deadline() == -math.inf:  # a cancel scope of ours, or trio's
        return True
    if sniffio.current_async_library() == "asyncio":  # the host's task.cancel()/timeout()
        import asyncio

        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0
    return False


def cleaned_action(action: Action, activity: Activity) -> Action:
    """The action with the input its tool receives: nulls stripped as ``strip_nones`` says."""
    arguments = action.input
    if not isinstance(arguments, dict) or nesting_exceeds(arguments, MAX_ARGUMENT_DEPTH):
        return action
    cleaned = strip_nones(arguments, activity.parameters)
    return action if cleaned == arguments else dataclasses.replace(action, input=cleaned)


def _late(timeout: float | None, start: float) -> str | None:
    """Why an async tool's value came too late, if it did: it blocked the event loop past its
    timeout or an enclosing deadline (the run's), so no cancellation could reach it."""
    now = anyio.current_time()
    if timeout is not None and now - start >= timeout:
        return f"timed out after {timeout:g}s (the tool blocked the event loop; output discarded)"
    if now >= anyio.current_effective_deadline():
        return "a deadline passed while the tool blocked the event loop; its output was discarded"
    return None


@types.coroutine
def _stepped(coro: Any, name: str) -> Generator[Any, Any, tuple[Any, float]]:
    """Await ``coro`` step by step, timing each step (a stretch without an await). Returns its
    value and the time its steps took; a step longer than ``BLOCKING_WARNING_SECONDS`` (the
    tool blocked the event loop) is logged as a warning naming the tool."""
    if not isinstance(coro, types.CoroutineType):  # an awaitable that is not a coroutine
        return (yield from coro.__await__()), 0.0
    send, throw = coro.send, coro.throw
    busy = longest = 0.0
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            began = perf_counter()
            try:
                yielded = send(value) if error is None else throw(error)
            except StopIteration as stop:
                return stop.value, busy + (perf_counter() - began)
            finally:
                took = perf_counter() - began
                busy += took
                if took > longest:
                    longest = took
            value = error = None
            try:
                value = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation: the tool's to handle
                error = exc
    finally:
        error = None
        if longest > BLOCKING_WARNING_SECONDS:
            logger.warning(
                "async tool %r blocked the event loop for %.3fs in one step; run blocking code "
                "in a plain def tool (a worker thread) or with anyio.to_thread.run_sync",
                name,
                longest,
            )


def _call_kwargs(activity: Activity, args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
    kwargs = {name: getattr(args, name) for name in type(args).model_fields}
    if activity.context_param is not None:
        kwargs[activity.context_param] = ctx
    return kwargs


async def _in_thread(
    name: str, activity: Activity, kwargs: dict[str, Any], ctx: ToolContext, limits: ToolLimits
) -> Any:
    """Run a sync tool in a daemon worker thread (see ``_threads``).

    The tool's timeout covers its wait for a worker thread. On cancel or timeout the thread is
    abandoned: the waiting task returns at once, the tool's state becomes read-only, the thread
    keeps its limiter token until it really ends, and a warning names the tool. When every token
    is held by an abandoned thread, the call is an error result at once (``NoWorkerThread``)."""
    job = Job(name, activity.fn, kwargs, limits.thread_limiter or default_thread_limiter())
    try:
        with fail_after(activity.timeout):
            await job.take_token()
            job.start()
            await job.done.wait()
    except BaseException as exc:
        abandon(ctx)
        if not job.started:
            job.fn = job.kwargs = None
            if isinstance(exc, TimeoutError):
                raise _WaitedForThread() from None
            raise
        if isinstance(exc, TimeoutError):
            job.abandon(f"timed out after {activity.timeout:g}s")
        else:
            job.abandon("was cancelled")
        raise
    return job.outcome()


class _WaitedForThread(TimeoutError):
    """The tool's timeout passed while it waited for a worker thread."""


def success_result(action: Action, value: Any, max_chars: int) -> ActionResult:
    """A result with ``value`` as its output (made JSON, truncated like a tool's)."""
    return _success(action, value, max_chars)


def _success(action: Action, value: Any, max_chars: int) -> ActionResult:
    value, images = split_images(value)
    if not isinstance(value, str):  # text, the common case, goes as it is
        from pydantic import BaseModel
        from pydantic_core import to_jsonable_python

        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        else:
            try:
                value = to_jsonable_python(value)
                json.dumps(value)
            except Exception as exc:
                # The model gets an error result; the mistake is the developer's, so say it.
                name = action.name if action.path is None else f"{action.name}.{action.path}"
                logger.warning(
                    "tool %r returned a value that is not JSON-serialisable (%s: %s); the model "
                    "got an error result instead. Return text, JSON values, or a pydantic model",
                    name,
                    type(value).__name__,
                    exc,
                )
                message = f"the tool returned a value that is not JSON: {exc}"
                return error_result(action, "tool_error", message, max_chars)
    result = ActionResult(
        tag=action.tag,
        name=action.name,
        path=action.path,
        input=action.input,
        output=value,
        attempt=action.attempt,
        images=images,
    )
    content = result.content
    if len(content) > max_chars:
        truncated = truncate(content, max_chars)
        result = ActionResult(
            tag=action.tag,
            name=action.name,
            path=action.path,
            input=action.input,
            output=truncated,
            attempt=action.attempt,
            images=images,
        )
    return result


def _validation_message(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False)[:10]:
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        problems.append(f"{where}: {err['msg']}")
    return "invalid arguments: " + "; ".join(problems)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
