"""Running actions: lookup, argument validation, limits, timeouts, threads, tool middleware.

Every failure the model can fix becomes an error result on that one action; only cancellation
(and the runtime's own faults) propagate.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.abc import TaskGroup
from anyio.lowlevel import RunVar

from .._errors import ToolError, UserError
from .._middleware import ToolCall
from .._steps import Action, ActionErrorKind, ActionResult
from .._time import fail_after
from ..models._types import ToolCallPart, ToolSpec
from ._context import ToolContext
from ._schema import strip_nones
from ._tool import Activity, Tool

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

    from .._context import RunContext, Ticket

DEFAULT_TOOL_CONCURRENCY = 256
_TASK_NAME = "agentloop.tools._executor.Executor._execute"  # what start_soon used to name it
DEFAULT_THREAD_CONCURRENCY = 32

_tool_limiter: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_tool_limiter")
_thread_limiter: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_thread_limiter")


def default_tool_limiter() -> anyio.CapacityLimiter:
    """The process-wide (per event loop) limit on actions running at once."""
    try:
        return _tool_limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(DEFAULT_TOOL_CONCURRENCY)
        _tool_limiter.set(limiter)
        return limiter


def default_thread_limiter() -> anyio.CapacityLimiter:
    """The per event loop limit on worker threads running sync tools."""
    try:
        return _thread_limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(DEFAULT_THREAD_CONCURRENCY)
        _thread_limiter.set(limiter)
        return limiter


class Toolbox:
    """The tools of one run, addressable by name and path."""

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise UserError(f"two tools are named {t.name!r}; tool names must be unique")
            self._tools[t.name] = t

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
        return activity.eager and not (committing and activity.side_effects)

    def has_side_effects(self, name: str, path: str | None) -> bool:
        found = self.find(name, path)
        return isinstance(found, tuple) and found[1].side_effects


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolLimits:
    max_actions_per_step: int = 64
    max_parallel_actions: int = 16
    max_output_chars: int = 100_000
    tool_limiter: anyio.CapacityLimiter | None = None
    thread_limiter: anyio.CapacityLimiter | None = None


def error_result(action: Action, kind: ActionErrorKind, message: str) -> ActionResult:
    return ActionResult(
        tag=action.tag,
        name=action.name,
        path=action.path,
        input=action.input,
        error=message,
        error_kind=kind,
        attempt=action.attempt,
    )


def action_of(part: ToolCallPart, attempt: int) -> Action:
    """The action for a sealed call; unparsable arguments stay raw text for the error result."""
    arguments: Any = part.arguments
    if part.error is None:
        try:
            arguments = json.loads(part.arguments or "{}")
        except ValueError:
            pass
    return Action(tag=part.id, name=part.name, path=part.path, input=arguments, attempt=attempt)


class PendingAction:
    """An action of the run: sealed, maybe started, maybe finished."""

    __slots__ = ("_event", "action", "finished", "part", "result", "started")

    def __init__(self, part: ToolCallPart, action: Action) -> None:
        self.part = part
        self.action = action
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


class Executor:
    """Runs a run's actions as tasks of the run's task group, within the limits."""

    def __init__(
        self,
        *,
        run: RunContext,
        task_group: TaskGroup,
        toolbox: Toolbox,
        call: Callable[[ToolCall], Awaitable[ActionResult]],
        limits: ToolLimits,
        on_start: Callable[[PendingAction], Awaitable[None]],
        on_finish: Callable[[ActionResult], Awaitable[None]],
    ) -> None:
        self._run = run
        self._tg = task_group
        self.toolbox = toolbox
        self._call = call
        self._limits = limits
        self._parallel: anyio.CapacityLimiter | None = None  # made with the first action
        self._limiter: anyio.CapacityLimiter | None = None  # looked up with the first action
        self._on_start = on_start
        self._on_finish = on_finish

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
            if isinstance(found, tuple) and found[1].serial_key is not None:
                ticket = self._run.state.serial(found[1].serial_key(self._run)).take()
        await self._on_start(pending)
        # create_task with a name: start_soon would work out the same name on every call.
        self._tg.create_task(self._execute(pending, step, error, ticket), name=_TASK_NAME)

    async def _execute(
        self, pending: PendingAction, step: int, error: ActionResult | None, ticket: Ticket | None
    ) -> None:
        if error is not None:
            result = error
        elif ticket is not None:
            async with ticket:
                result = await self._invoke(pending, step)
        else:
            result = await self._invoke(pending, step)
        pending.result = result
        try:
            await self._on_finish(result)
        finally:
            pending.set_finished()

    async def _invoke(self, pending: PendingAction, step: int) -> ActionResult:
        call = ToolCall(action=pending.action, run=self._run, step=step)
        limiter = self._limiter
        if limiter is None:  # a run stays on one event loop: look the RunVar up once per run
            limiter = self._limiter = self._limits.tool_limiter or default_tool_limiter()
        parallel = self._parallel
        if parallel is None:
            parallel = self._parallel = anyio.CapacityLimiter(self._limits.max_parallel_actions)
        await _acquire(parallel, pending)
        try:
            await _acquire(limiter, pending)
            try:
                result = await self._call(call)
            except Exception as exc:  # a tool middleware failed: still one action's error
                message = f"tool middleware failed: {type(exc).__name__}: {exc}"
                result = error_result(pending.action, "tool_error", message)
            finally:
                limiter.release_on_behalf_of(pending)
        finally:
            parallel.release_on_behalf_of(pending)
        return result


async def _acquire(limiter: anyio.CapacityLimiter, borrower: object) -> None:
    """Take a token without a scheduling round trip when one is free."""
    try:
        limiter.acquire_on_behalf_of_nowait(borrower)
        return
    except anyio.WouldBlock:
        pass
    # Wait outside the except block: waiting inside it would keep the WouldBlock and its
    # traceback alive for as long as the action waits for a token.
    await limiter.acquire_on_behalf_of(borrower)


def make_terminal(
    toolbox: Toolbox, limits: ToolLimits
) -> Callable[[ToolCall], Awaitable[ActionResult]]:
    """The innermost tool call: validate, invoke, and turn failures into error results."""
    return functools.partial(_invoke_tool, toolbox, limits)


async def _invoke_tool(toolbox: Toolbox, limits: ToolLimits, call: ToolCall) -> ActionResult:
    # pydantic is loaded by now (the tool's argument model is pydantic), so this is a lookup;
    # importing it here keeps it out of ``import agentloop``.
    from pydantic import ValidationError

    action = call.action
    found = toolbox.find(action.name, action.path)
    if isinstance(found, str):
        return error_result(action, "unknown_tool", found)
    _, activity = found
    if not isinstance(action.input, Mapping):
        return error_result(
            action,
            "invalid_arguments",
            f"arguments must be a JSON object, got: {_clip(str(action.input))}",
        )
    try:
        args = activity.args.model_validate(strip_nones(dict(action.input), activity.parameters))
    except ValidationError as exc:
        if activity.on_invalid is not None:  # the tool answers its own schema violations
            return _success(action, activity.on_invalid(exc), limits.max_output_chars)
        return error_result(action, "invalid_arguments", _validation_message(exc))
    ctx = ToolContext(run=call.run, action=action, step=call.step)
    kwargs = _call_kwargs(activity, args, ctx)
    try:
        if activity.is_async:
            with fail_after(activity.timeout):
                value = await activity.fn(**kwargs)
        else:
            value = await _in_thread(activity, kwargs, ctx, limits)
    except TimeoutError as exc:
        if activity.timeout is None:  # the tool's own timeout, not ours
            return error_result(action, "tool_error", f"TimeoutError: {exc}")
        return error_result(action, "timeout", f"timed out after {activity.timeout:g}s")
    except ToolError as exc:
        return error_result(action, "tool_error", str(exc))
    except Exception as exc:
        return error_result(action, "tool_error", f"{type(exc).__name__}: {exc}")
    result = _success(action, value, limits.max_output_chars)
    if ctx._subrun is not None:
        result = dataclasses.replace(result, subrun=ctx._subrun)
    return result


def _call_kwargs(activity: Activity, args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
    kwargs = {name: getattr(args, name) for name in type(args).model_fields}
    if activity.context_param is not None:
        kwargs[activity.context_param] = ctx
    return kwargs


async def _in_thread(
    activity: Activity, kwargs: dict[str, Any], ctx: ToolContext, limits: ToolLimits
) -> Any:
    """Run a sync tool in a worker thread. On cancel or timeout the thread is abandoned: the
    waiting task returns at once, the tool's state becomes read-only, and the thread keeps its
    limiter token until it really ends."""
    limiter = limits.thread_limiter or default_thread_limiter()
    borrower = object()
    await limiter.acquire_on_behalf_of(borrower)

    def target() -> Any:
        try:
            return activity.fn(**kwargs)
        finally:
            try:
                anyio.from_thread.run_sync(limiter.release_on_behalf_of, borrower)
            except Exception:  # the event loop is gone; so is the limiter
                pass

    try:
        with fail_after(activity.timeout):
            return await anyio.to_thread.run_sync(
                target, abandon_on_cancel=True, limiter=_unlimited()
            )
    except BaseException:
        ctx._abandoned = True
        raise


_unlimited_threads: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_unlimited_threads")


def _unlimited() -> anyio.CapacityLimiter:
    # The thread limiter above already bounds sync tools; this one only bypasses anyio's default.
    try:
        return _unlimited_threads.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(1_000_000)
        _unlimited_threads.set(limiter)
        return limiter


def _success(action: Action, value: Any, max_chars: int) -> ActionResult:
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
                return error_result(
                    action, "tool_error", f"the tool returned a value that is not JSON: {exc}"
                )
    result = ActionResult(
        tag=action.tag,
        name=action.name,
        path=action.path,
        input=action.input,
        output=value,
        attempt=action.attempt,
    )
    content = result.content
    if len(content) > max_chars:
        cut = len(content) - max_chars
        truncated = f"{content[:max_chars]}\n…[truncated {cut} characters]"
        result = ActionResult(
            tag=action.tag,
            name=action.name,
            path=action.path,
            input=action.input,
            output=truncated,
            attempt=action.attempt,
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
