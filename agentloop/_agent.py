"""``Agent``: immutable configuration, and the three ways to run it."""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast, final

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from . import _events as ev
from ._actions import SubrunOutput
from ._context import StateView
from ._errors import RunCancelled, ToolError, UserError
from ._instrument import Instrumentation
from ._instrument import coerce as coerce_instrument
from ._loop import execute, raise_for_result, strip_fence
from ._middleware import ModelMiddleware, ToolMiddleware
from ._prompt import Ruleset, compile_template, render, system_message
from ._retry import RetryPolicy
from ._run import Emitter, Launch, run_of
from ._session_run import Memory, SessionSpec, unfinished_runs
from ._steps import RunResult
from .models._base import Model
from .models._registry import resolve_model
from .models._types import Message, ModelSettings, OutputSchema, ToolMode
from .tools._context import ToolContext
from .tools._limits import ToolLimits
from .tools._tool import Tool, Toolkit, check_unique_names, tool
from .tools._toolset import Toolset

if TYPE_CHECKING:
    import jinja2
    from pydantic import TypeAdapter

    from .sessions import RunRecord, SessionStore

_AGENT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSET: Any = object()
_SYSTEM_CACHE_SIZE = 64


@final
class Agent:
    """An agent: a model, tools and instructions. Immutable and safe to share between any
    number of concurrent runs; ``replace(...)`` returns a changed copy.

    ``model`` is a ``Model`` or a ``"provider:model"`` string (resolved on first use).
    ``instructions`` is a jinja2 template (sandboxed) rendered with ``variables``.
    ``tool_mode`` is ``"native"`` (provider tool calling), ``"react"`` (the
    ``Thought:/Actions:/Answer:`` text protocol) or ``"auto"`` (native when the model supports
    it). With ``reflect_on_tool_use=False`` the run ends after the first action step and its
    output is the actions' results. ``instrument`` traces runs with OpenTelemetry (``True`` or
    an ``Instrumentation``; ``None`` inherits a parent run's; ``False`` opts out).
    """

    __slots__ = (
        "_config",
        "_instructions",
        "_model",
        "_output_adapter",
        "_system_cache",
        "deadline",
        "event_buffer",
        "instrument",
        "lease_ttl",
        "max_reply_chars",
        "max_steps",
        "memory",
        "model_middleware",
        "name",
        "output_schema",
        "output_type",
        "react_template",
        "reflect_on_tool_use",
        "retry",
        "rulesets",
        "settings",
        "store",
        "tool_limits",
        "tool_middleware",
        "tool_mode",
        "tools",
        "toolsets",
        "variables",
    )
    _config: dict[str, Any]
    _instructions: jinja2.Template | None
    _model: Model | str
    _output_adapter: TypeAdapter[Any] | None
    _system_cache: dict[tuple[Any, ...], Message | None]
    deadline: float | None
    event_buffer: int
    instrument: Instrumentation | Literal[False] | None
    lease_ttl: float
    max_reply_chars: int | None
    max_steps: int
    memory: Memory
    model_middleware: tuple[ModelMiddleware, ...]
    name: str
    output_schema: OutputSchema | None
    output_type: type[Any] | None
    react_template: str | None
    reflect_on_tool_use: bool
    retry: RetryPolicy
    rulesets: tuple[Ruleset, ...]
    settings: ModelSettings
    store: SessionStore | None
    tool_limits: ToolLimits
    tool_middleware: tuple[ToolMiddleware, ...]
    tool_mode: Literal["native", "react", "auto"]
    tools: tuple[Tool, ...]
    toolsets: tuple[Toolset, ...]
    variables: dict[str, Any]

    def __init__(
        self,
        model: Model | str,
        *,
        name: str = "agent",
        instructions: str | None = None,
        tools: Sequence[Tool | Toolkit | Toolset | Callable[..., Any]] = (),
        rulesets: Sequence[Ruleset] | Mapping[str, Sequence[str]] = (),
        output_type: type[Any] | None = None,
        max_steps: int = 20,
        reflect_on_tool_use: bool = True,
        tool_mode: Literal["native", "react", "auto"] = "auto",
        model_middleware: Sequence[ModelMiddleware] = (),
        tool_middleware: Sequence[ToolMiddleware] = (),
        settings: ModelSettings | None = None,
        retry: RetryPolicy | None = None,
        deadline: float | None = None,
        tool_limits: ToolLimits | None = None,
        max_reply_chars: int | None = 1_000_000,
        event_buffer: int = 128,
        react_template: str | None = None,
        variables: Mapping[str, Any] | None = None,
        store: SessionStore | None = None,
        memory: Memory | None = None,
        lease_ttl: float = 30.0,
        instrument: Instrumentation | bool | None = None,
    ) -> None:
        config = dict(locals())
        del config["self"]
        set_ = functools.partial(object.__setattr__, self)
        set_("_config", config)
        if not isinstance(model, Model | str):
            raise UserError(f"model must be a Model or a 'provider:model' string, not {model!r}")
        set_("_model", model)
        if not _AGENT_NAME.match(name):
            raise UserError(
                f"agent name {name!r} must be 1-64 characters of [A-Za-z0-9_-] "
                "(it names the run's branch; '.' separates sub-agents)"
            )
        set_("name", name)
        if max_steps < 1:
            raise UserError("max_steps must be at least 1")
        if tool_mode not in ("native", "react", "auto"):
            raise UserError(f"tool_mode must be 'native', 'react' or 'auto', not {tool_mode!r}")
        if event_buffer < 1:
            raise UserError("event_buffer must be at least 1")
        if output_type is str:
            output_type = None
        if not reflect_on_tool_use and output_type is not None:
            raise UserError(
                "reflect_on_tool_use=False returns the actions' results as the output, so it "
                "cannot be combined with output_type"
            )
        if not reflect_on_tool_use and any(
            getattr(mw, "requires_reflection", False) for mw in model_middleware
        ):
            raise UserError(
                "reflect_on_tool_use=False ends the run after the first action step, so it "
                "cannot be combined with goal enforcement"
            )
        plain_tools: list[Tool] = []
        toolsets: list[Toolset] = []
        for item in tools:
            if isinstance(item, Tool):
                plain_tools.append(item)
            elif isinstance(item, Toolkit):
                plain_tools.append(item.tool)
            elif isinstance(item, Toolset):
                toolsets.append(item)
            elif callable(item):
                plain_tools.append(tool(item))
            else:
                raise UserError(f"not a tool, toolkit or toolset: {item!r}")
        check_unique_names(plain_tools)
        set_("tools", tuple(plain_tools))
        set_("toolsets", tuple(toolsets))
        if isinstance(rulesets, Mapping):
            rules = tuple(Ruleset(name=k, rules=tuple(v)) for k, v in rulesets.items())
        else:
            rules = tuple(rulesets)
        set_("rulesets", rules)
        set_("_instructions", compile_template(instructions) if instructions else None)
        set_("output_type", output_type)
        if output_type is not None:
            from pydantic import TypeAdapter  # imported only for agents with an output type

            adapter: TypeAdapter[Any] | None = TypeAdapter(output_type)
            schema = OutputSchema(
                name=getattr(output_type, "__name__", "output"),
                json_schema=adapter.json_schema() if adapter is not None else {},
            )
        else:
            adapter, schema = None, None
        set_("_output_adapter", adapter)
        set_("output_schema", schema)
        set_("max_steps", max_steps)
        set_("reflect_on_tool_use", reflect_on_tool_use)
        set_("tool_mode", tool_mode)
        set_("model_middleware", tuple(model_middleware))
        set_("tool_middleware", tuple(tool_middleware))
        set_("settings", settings or ModelSettings())
        set_("retry", retry or RetryPolicy())
        set_("deadline", deadline)
        set_("tool_limits", tool_limits or ToolLimits())
        set_("max_reply_chars", max_reply_chars)
        set_("event_buffer", event_buffer)
        set_("react_template", react_template)
        if react_template:
            compile_template(react_template)
        set_("variables", dict(variables or {}))
        set_("store", store)
        set_("memory", memory or Memory())
        if lease_ttl <= 0:
            raise UserError("lease_ttl must be positive")
        set_("lease_ttl", lease_ttl)
        set_("instrument", coerce_instrument(instrument))
        set_("_system_cache", {})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Agent is immutable; use agent.replace({name}=...)")

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self._model!r}, tools={[t.name for t in self.tools]})"

    def replace(self, **changes: Any) -> Agent:
        """A new agent with some settings changed."""
        unknown = set(changes) - set(self._config)
        if unknown:
            raise UserError(f"unknown Agent settings: {', '.join(sorted(unknown))}")
        config = {**self._config, **changes}
        model = config.pop("model")
        return Agent(model, **config)

    # -- resolved settings ----------------------------------------------------------------------

    @property
    def model(self) -> Model:
        """The model, resolved from its string on first use."""
        model = self._model
        if isinstance(model, str):
            model = resolve_model(model)
            object.__setattr__(self, "_model", model)
        return model

    async def aclose(self) -> None:
        """Close the model this agent made from a ``"provider:model"`` string (its HTTP
        client). A model passed in as an object belongs to the caller, who closes it. The agent
        stays usable: the next run makes a fresh model."""
        model, spec = self._model, self._config["model"]
        if isinstance(spec, str) and isinstance(model, Model):
            object.__setattr__(self, "_model", spec)
            await model.aclose()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def effective_tool_mode(self, has_tools: bool) -> ToolMode:
        if self.tool_mode == "auto":
            return "native" if self.model.profile.native_tools or not has_tools else "react"
        return self.tool_mode

    def render_instructions(self, variables: Mapping[str, Any]) -> str | None:
        if self._instructions is None:
            return None
        return render(self._instructions, {**self.variables, **variables})

    def system_message(
        self,
        instructions: str | None,
        tools: Sequence[Tool],
        tool_mode: ToolMode,
        teach_output: bool,
    ) -> Message | None:
        """The system message of a run, rendered once per distinct set of inputs.

        Runs of one agent mostly share it: reusing the same ``Message`` object saves the
        template render, and lets the driver reuse the JSON it encoded for it (a ReAct system
        prompt with its tool schemas runs to kilobytes). Only the built-in templates are
        cached; a custom ``react_template`` is rendered on every run, as it may not be pure.
        """
        key = (instructions, tuple(tools), tool_mode, teach_output)
        cache = self._system_cache
        cacheable = self.react_template is None or tool_mode != "react"
        if cacheable and key in cache:
            return cache[key]
        schema = self.output_schema
        message = system_message(
            instructions=instructions,
            rulesets=self.rulesets,
            tools=tools,
            tool_mode=tool_mode,
            reflect=self.reflect_on_tool_use,
            output_schema=schema.json_schema if teach_output and schema is not None else None,
            react_template=self.react_template,
        )
        if cacheable:
            if len(cache) >= _SYSTEM_CACHE_SIZE:  # runs with ever-new instructions or tools
                cache.clear()
            cache[key] = message
        return message

    def parse_output(self, text: str) -> Any:
        """The typed output of an answer (raises ``pydantic.ValidationError``)."""
        if self._output_adapter is None:
            return text
        return self._output_adapter.validate_json(strip_fence(text))

    # -- running --------------------------------------------------------------------------------

    def _launch(
        self,
        user_input: str,
        emitter: Emitter,
        *,
        memory: Sequence[Message] = (),
        variables: Mapping[str, Any] | None = None,
        deps: Any = None,
        state: Mapping[str, Any] | None = None,
        session: str | None = None,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        resume: bool = False,
        run_key: str | None = None,
    ) -> Launch:
        if not isinstance(user_input, str):
            raise UserError(f"input must be a string, not {type(user_input).__name__}")
        spec = None
        if session is not None:
            store = store or self.store
            if store is None:
                raise UserError(
                    f"session={session!r} needs a store: Agent(store=...) or run(store=...)"
                )
            if state is not None:
                raise UserError("state= is for runs without a session; a session has its own")
            if run_key is not None and not run_key:
                raise UserError("run_key must be a non-empty string")
            spec = SessionSpec(
                store=store,
                session_id=session,
                wait=wait_for_session,
                resume=resume,
                run_key=run_key,
            )
        elif resume:
            raise UserError("resume needs session=... (and a store)")
        elif run_key is not None:
            raise UserError("run_key needs session=... (and a store): runs are keyed per session")
        return Launch(
            agent=self,
            run_id=uuid.uuid4().hex,
            user_input=user_input,
            branch=self.name,
            emitter=emitter,
            state=StateView(state),
            deps=deps,
            variables=variables,
            memory=memory,
            session_spec=spec,
        )

    async def run(
        self,
        input: str,
        *,
        session: str | None = None,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        memory: Sequence[Message] = (),
        variables: Mapping[str, Any] | None = None,
        deps: Any = None,
        state: Mapping[str, Any] | None = None,
        raise_on_error: bool = False,
        run_key: str | None = None,
    ) -> RunResult:
        """Run to the end and return the result.

        With ``session=`` the run loads that session's state and conversation memory from the
        store, holds its lease (another run meanwhile gets ``SessionBusy``, or waits up to
        ``wait_for_session`` seconds), and commits every completed step.

        ``run_key`` makes the submission idempotent within the session: a key seen before
        returns that run's stored result if it finished, or resumes it if not; it never runs
        twice. (A keyed run reads the session's whole history to find its key.)

        A result that ends without a usable answer (step limit, invalid output, refusal, …) has
        ``result.error`` set, or raises the matching ``RunError`` with ``raise_on_error=True``.
        A model failure after retries, the run's deadline and runtime faults raise.
        """
        launch = self._launch(
            input,
            Emitter(None),
            session=session,
            store=store,
            wait_for_session=wait_for_session,
            memory=memory,
            variables=variables,
            deps=deps,
            state=state,
            run_key=run_key,
        )
        return await _to_end(launch, raise_on_error)

    def stream(
        self,
        input: str,
        *,
        session: str | None = None,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        memory: Sequence[Message] = (),
        variables: Mapping[str, Any] | None = None,
        deps: Any = None,
        state: Mapping[str, Any] | None = None,
        raise_on_error: bool = False,
        run_key: str | None = None,
    ) -> RunStream:
        """Run while streaming events: ``async with agent.stream(x) as run: async for e in run``.

        The events go through a bounded buffer (``event_buffer``): a slow consumer slows the
        run. Leaving the block early cancels the run cleanly. Options as for ``run``.
        """
        return RunStream(
            functools.partial(
                self._launch,
                input,
                session=session,
                store=store,
                wait_for_session=wait_for_session,
                memory=memory,
                variables=variables,
                deps=deps,
                state=state,
                run_key=run_key,
            ),
            buffer=self.event_buffer,
            raise_on_error=raise_on_error,
        )

    async def resume(
        self,
        *,
        session: str,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        deps: Any = None,
        raise_on_error: bool = False,
    ) -> RunResult:
        """Finish the session's last unfinished run (its process died, it was cancelled or hit
        its deadline) from its last committed step. Committed actions do not run again; the
        step that was in flight does: from its committed reply when it has one (same tags and
        idempotency keys), else by asking the model again. An expired lease is taken over; a
        live one is ``SessionBusy`` unless ``wait_for_session`` gives it time to expire. With
        no unfinished run it raises ``NothingToResume``."""
        launch = self._launch(
            "",
            Emitter(None),
            session=session,
            store=store,
            wait_for_session=wait_for_session,
            deps=deps,
            resume=True,
        )
        return await _to_end(launch, raise_on_error)

    async def unfinished_run(
        self, *, session: str, store: SessionStore | None = None
    ) -> RunRecord | None:
        """The session's last run that never finished (what ``resume`` would pick up), or
        ``None``. It reads the session without taking its lease."""
        store = store or self.store
        if store is None:
            raise UserError(f"session={session!r} needs a store: Agent(store=...) or store=...")
        found = await store.get(session, history_limit=self.memory.max_runs + 1)
        if found is None:
            return None
        unfinished = unfinished_runs(found)
        return unfinished[-1] if unfinished else None

    def stream_resume(
        self,
        *,
        session: str,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        deps: Any = None,
        raise_on_error: bool = False,
    ) -> RunStream:
        """``resume``, streamed."""
        return RunStream(
            functools.partial(
                self._launch,
                "",
                session=session,
                store=store,
                wait_for_session=wait_for_session,
                deps=deps,
                resume=True,
            ),
            buffer=self.event_buffer,
            raise_on_error=raise_on_error,
        )

    def as_tool(self, *, name: str | None = None, description: str | None = None) -> Tool:
        """This agent as a tool of another: each call is a sub-run on the branch
        ``<parent>.<name>`` (``#<tag>`` added when calls of it overlap), with its own steps,
        limits and goal budget, sharing the parent's session state and lease. Its events reach
        the caller's stream; its steps are kept in the action's result (``subrun``) and its
        usage is added to the parent's."""
        child = self
        tool_name = name or self.name
        doc = description or f"Delegate a task to the {self.name!r} agent and get its answer."

        async def delegate(ctx: ToolContext, task: str) -> Any:
            parent = run_of(ctx.run)
            busy = parent.scratch.setdefault(id(child), {"running": 0})
            branch = f"{parent.branch}.{tool_name}"
            if busy["running"]:
                branch = f"{branch}#{ctx.action.tag}"
            busy["running"] += 1
            sub = Launch(
                agent=child,
                run_id=uuid.uuid4().hex,
                user_input=task,
                branch=branch,
                emitter=parent.emitter,
                state=parent.state,
                parent=parent,
                session_id=parent.session_id,
                deps=parent.deps,
            )
            try:
                result = await execute(sub)
            finally:
                busy["running"] -= 1
                if sub.run is not None:
                    parent.absorb(sub.run)
            if result.error is not None:
                raise ToolError(f"the {tool_name} agent failed: {result.error.message}")
            return SubrunOutput(result)

        delegate.__doc__ = f"""{doc}

        Args:
            task: what the {tool_name} agent should do, with everything it needs to know
        """
        return tool(name=tool_name, description=doc)(delegate)

    def run_sync(
        self,
        input: str,
        *,
        backend: Literal["asyncio", "trio"] = "asyncio",
        **kwargs: Any,
    ) -> RunResult:
        """``run`` for scripts: starts an event loop (do not call from async code), and closes
        the model's client (made on that loop) before the loop ends."""

        async def run_and_close() -> RunResult:
            try:
                return await self.run(input, **kwargs)
            finally:
                with anyio.CancelScope(shield=True):
                    await self.aclose()

        return anyio.run(run_and_close, backend=backend)


async def _to_end(launch: Launch, raise_on_error: bool) -> RunResult:
    result = await execute(launch)
    if raise_on_error:
        raise_for_result(result)
    return result


@final
class RunStream:
    """A streamed run: iterate it for events, then read ``result``. Use it as an async context
    manager; ``cancel(reason)`` stops the run from any task."""

    def __init__(
        self, launch: Callable[[Emitter], Launch], *, buffer: int, raise_on_error: bool
    ) -> None:
        self._launch = launch
        self._buffer = buffer
        self._raise_on_error = raise_on_error
        self._scope = anyio.CancelScope()
        self._receive: MemoryObjectReceiveStream[ev.Event] | None = None
        self._tg: TaskGroup | None = None
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._cancel_reason: str | None = None
        self._done = False
        self.run_id: str | None = None

    async def __aenter__(self) -> RunStream:
        send, receive = anyio.create_memory_object_stream[ev.Event](self._buffer)
        launch = self._launch(Emitter(send))
        self.run_id = launch.run_id
        self._receive = receive
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._drive, launch, send)
        return self

    async def _drive(self, launch: Launch, send: MemoryObjectSendStream[ev.Event]) -> None:
        async with send:
            with self._scope:
                try:
                    self._result = await execute(launch)
                except Exception as exc:
                    self._error = exc
            if self._scope.cancelled_caught:
                self._error = RunCancelled(self._cancel_reason or "cancelled")
            self._done = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if not self._done:
            self._cancel_reason = self._cancel_reason or "the caller left the stream"
            self._scope.cancel()
        if self._tg is None or self._receive is None:
            raise RuntimeError("RunStream left without being entered")
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._receive.close()

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> ev.Event:
        if self._receive is None:
            raise UserError("use the stream as `async with agent.stream(...) as run:`")
        receive = self._receive
        try:
            # Buffered events are taken without a scheduling round trip each (the run emits
            # them in bursts); the check keeps this a cancellation point all the same.
            await anyio.lowlevel.checkpoint_if_cancelled()
            return receive.receive_nowait()
        except anyio.WouldBlock:
            pass
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        try:
            return await receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run: its tools and model stream are cancelled; ``result`` raises
        ``RunCancelled(reason)``."""
        if not self._done:
            self._cancel_reason = reason
            self._scope.cancel()

    @property
    def done(self) -> bool:
        return self._done

    @property
    def result(self) -> RunResult:
        """The run's result, once its events have been consumed. Raises what the run raised."""
        if not self._done:
            raise UserError("the run has not finished: iterate its events first")
        if self._error is not None:
            raise self._error
        result = cast("RunResult", self._result)
        if self._raise_on_error:
            raise_for_result(result)
        return result

    async def get_result(self) -> RunResult:
        """Consume the remaining events and return ``result``."""
        async for _ in self:
            pass
        return self.result
