"""One run's private machinery: its state, its attempts and its event emitter."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, Self, TypeAlias, cast, final

import anyio
from anyio import BrokenResourceError, ClosedResourceError, WouldBlock

import agentloop._events as ev

from ._actions import PendingAction
from ._context import StateView
from ._errors import ToolRetriesExceeded
from ._final import REACT_REMINDER, final_text
from ._instrument import Instrumentation
from ._instrument import resolve as resolve_instrument
from ._steps import ActionResult, RunErrorInfo, Step
from .models._types import (
    DiscardReason,
    FinishReason,
    InputPart,
    Message,
    ModelResponse,
    RunContext,
    Usage,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ._actions import Toolbox
    from ._decisions import Approver, Decision
    from ._errors import RunError
    from ._middleware import ToolCall
    from ._plan import Plan, RunnableAgent
    from ._session_run import Loaded, SessionScope, SessionSpec
    from ._steps import RunResult


class Effects(Protocol):
    """How a run performs its tool calls when they are not the run's own tasks: a durable
    run's workflow makes each one an activity (tool middleware included). The loop's
    decisions stay the same either way; only the effect differs."""

    def tool_call(self, toolbox: Toolbox) -> Callable[[ToolCall], Awaitable[ActionResult]]:
        """The whole tool call (middleware and tool) of the run's actions."""
        ...

    def sub_agent(self, agent: RunnableAgent, tool_name: str) -> tuple[RunnableAgent, Effects]:
        """The agent and effects of a sub-run that the tool ``tool_name`` (``Agent.as_tool``)
        starts: it runs beside its parent, so a durable run's sub-run runs in the workflow
        too, its model and tool calls the workflow's activities."""
        ...


class _Done:
    """An awaitable that is already done: awaiting it neither suspends nor makes a frame."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        yield from ()  # done at once


DONE: Awaitable[None] = _Done()


class EventSink(Protocol):
    """Where a run's events go: a ``MemoryObjectSendStream``, or a stream's ``EventChannel``."""

    def send_nowait(self, item: ev.Event) -> None: ...

    async def send(self, item: ev.Event) -> None: ...


class Emitter:
    """Numbers events (one counter per root run) and sends them to the caller's stream.

    The fast path is a synchronous ``send_nowait``; when the buffer is full, senders queue
    behind a lock so that events arrive in ``seq`` order and a slow consumer slows the run
    (backpressure) instead of growing a buffer.
    """

    __slots__ = ("_lock", "_send", "_seq", "_waiting", "active")

    def __init__(self, send: EventSink | None, *, seq: int = 0) -> None:
        self._send = send
        self.active = send is not None  # an attribute, not a property: read on every delta
        self._seq = seq  # the last seq sent (a durable run that continued as new goes on)
        self._waiting = 0
        self._lock: anyio.Lock | None = None  # made when the buffer first fills

    def emit(self, run: RunCore, cls: type[ev.Event], fields: dict[str, Any]) -> Awaitable[None]:
        """Send the event; await what this returns. It is already done (no coroutine, no
        frame) unless the buffer is full: events are the hottest path of a streamed run."""
        send = self._send
        if send is None:
            return DONE
        if not self._waiting:
            self._seq += 1  # as ``_make``, inline: this is every event's path
            build = _EVENT_BUILDERS.get(cls) or _event_builder(cls)
            event = build(
                run.run_id, run.parent_run_id, run.branch, self._seq, run.agent.name, fields
            )
            try:
                send.send_nowait(event)
                return DONE
            except WouldBlock:
                pass
            except (BrokenResourceError, ClosedResourceError):
                self._send = None
                self.active = False
                return DONE
            return self._emit_waiting(send, run, cls, fields, event)
        return self._emit_waiting(send, run, cls, fields, None)

    async def _emit_waiting(
        self,
        send: EventSink,
        run: RunCore,
        cls: type[ev.Event],
        fields: dict[str, Any],
        event: ev.Event | None,
    ) -> None:
        """The buffer is full: queue behind earlier senders (events keep their ``seq`` order)."""
        self._waiting += 1
        try:
            if self._lock is None:
                self._lock = anyio.Lock()
            async with self._lock:
                if event is None:
                    event = self._make(run, cls, fields)
                try:
                    await send.send(event)
                except (BrokenResourceError, ClosedResourceError):
                    self._send = None
                    self.active = False
        finally:
            self._waiting -= 1

    def _make(self, run: RunCore, cls: type[ev.Event], fields: dict[str, Any]) -> ev.Event:
        self._seq += 1
        build = _EVENT_BUILDERS.get(cls) or _event_builder(cls)
        return build(run.run_id, run.parent_run_id, run.branch, self._seq, run.agent.name, fields)


# The emitter of every run whose events go nowhere (``Agent.run``): with no sink it keeps no
# state (``emit`` returns at once, nothing counts), so one serves all.
SILENT = Emitter(None)


_EventBuilder: TypeAlias = Callable[[str, "str | None", str, int, str, dict[str, Any]], ev.Event]
_COMMON_FIELDS = ("run_id", "parent_run_id", "branch", "seq", "agent")
_EVENT_BUILDERS: dict[type[Any], _EventBuilder] = {}


def _event_builder(cls: type[ev.Event]) -> _EventBuilder:
    """Makes ``cls`` events, equal to ``cls(**fields)``, in a fraction of the time: a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, and a streamed
    turn makes about a dozen events. This is a function written for ``cls`` (compiled once)
    that sets the slots directly, each field by name: no loop over the fields per event (the
    events are immutable all the same)."""
    given = _COMMON_FIELDS  # the builder's own arguments
    others = frozenset(f.name for f in dataclasses.fields(cls)) - set(given)
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls, "known": others}
    lines = [
        "def build(run_id, parent_run_id, branch, seq, agent, fields):",
        "    event = new(cls)",
        "    try:",
    ]
    for i, f in enumerate(dataclasses.fields(cls)):
        scope[f"set{i}"] = getattr(cls, f.name).__set__
        if f.name in given:
            value = f.name
        elif f.default is not dataclasses.MISSING:
            scope[f"default{i}"] = f.default
            value = f"fields.get({f.name!r}, default{i})"
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"factory{i}"] = f.default_factory
            value = f"fields[{f.name!r}] if {f.name!r} in fields else factory{i}()"
        else:
            value = f"fields[{f.name!r}]"
        lines.append(f"        set{i}(event, {value})")
    lines += [
        "    except KeyError as missing:",
        f"        raise TypeError(f'{cls.__name__} needs {{missing}}') from None",
        "    if not fields.keys() <= known:",
        f"        raise TypeError(f'{cls.__name__} has no field among {{sorted(fields)}}')",
        "    return event",
    ]
    exec(compile("\n".join(lines), f"<{cls.__name__} builder>", "exec"), scope)
    build: _EventBuilder = scope["build"]
    _EVENT_BUILDERS[cls] = build
    return build


class _NoEntries(dict[Any, Any]):
    """The one empty dict every run starts with for what most runs never hold (questions
    asked, answers, sub-runs to resume, scratch space, retries, decisions): a dozen empty
    dicts are most of a KiB per run in flight. It refuses every write; a run writes to a
    dict of its own, made then."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        _refuse()

    def __delitem__(self, key: Any) -> None:
        _refuse()

    def setdefault(self, key: Any, default: Any = None, /) -> Any:
        _refuse()

    def update(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    def popitem(self) -> tuple[Any, Any]:
        _refuse()

    def __ior__(self, other: Any) -> Self:  # type: ignore[misc]
        _refuse()


def _refuse() -> NoReturn:
    raise TypeError("NO_ENTRIES is shared by every run: write to a dict of the run's own")


NO_ENTRIES: dict[Any, Any] = _NoEntries()


class AttemptRecord:
    """One opening of a provider stream, and the actions it sealed (in order)."""

    __slots__ = ("actions", "discarded", "first_delta_at", "n", "streamed")

    def __init__(self, n: int) -> None:
        self.n = n
        self.streamed = False
        self.discarded = False
        self.actions: list[PendingAction] = []
        self.first_delta_at: float | None = None  # measured only when the run is traced

    def started_any(self) -> bool:
        return any(p.started for p in self.actions)


@dataclass(kw_only=True, slots=True)
class Launch:
    """A run as asked for, before it starts. The run is built from it once, when it starts:
    a session run once its session is loaded, as that decides who the run is (resuming, the
    unfinished run's id, input and steps)."""

    agent: RunnableAgent
    run_id: str
    user_input: str
    branch: str
    emitter: Emitter
    state: StateView
    parent: RunCore | None = None
    session_id: str | None = None
    deps: Any = None
    variables: Mapping[str, Any] | None = None
    memory: Sequence[Message] = ()
    session_spec: SessionSpec | None = None
    # Resuming a waiting run without a session (its resume_state, or a sub-run's): what it
    # continues from; and the decisions a resume brings, by pending call id.
    loaded: Loaded | None = None
    decisions: Mapping[str, Decision] | None = None
    # The input's parts when it held images or files (``None`` for text: ``user_input``).
    input_parts: tuple[InputPart, ...] | None = None
    call_prefix: str = ""  # a sub-run's pending call ids start with its parent's tag and "/"
    effects: Effects | None = None  # None: tools run as the run's own tasks
    instrument: Instrumentation | None = field(init=False)
    span: Span | None = None  # the run's span, when it is traced
    run: RunCore | None = None  # the run, once started

    def __post_init__(self) -> None:
        parent = self.parent
        self.instrument = resolve_instrument(
            self.agent.instrumentation, parent.instrument if parent is not None else None
        )

    def start(self, session: SessionScope | None = None) -> RunCore:
        """Build the run (with what its session loaded, if it has one)."""
        self.run = RunCore(self, session)
        return self.run


class RunCore:
    """Everything one run (or sub-run) owns. ``RunView`` is its public, read-only face, and it
    is the ``AttemptLog`` of the responses it streams. Slotted: a service holds thousands of
    runs at once, and an instance dict of some forty attributes is over a KiB each."""

    __slots__ = (
        "_attempt_count",
        "_context",
        "_pending_discards",
        "agent",
        "answers",
        "approval_timeout",
        "approver",
        "asked",
        "attempts",
        "branch",
        "call_prefix",
        "committed_attempt",
        "committed_reply",
        "decisions",
        "deps",
        "effects",
        "emitter",
        "entry_agent",
        "entry_branch",
        "handed",
        "input_parts",
        "instrument",
        "memory",
        "output_retries",
        "parent_run_id",
        "plan",
        "replayed",
        "resumed",
        "root_run_id",
        "run_id",
        "scratch",
        "session",
        "session_id",
        "span",
        "state",
        "steps",
        "stopped",
        "subrun_resumes",
        "tool_calls",
        "tool_retries",
        "tool_revisions",
        "toolbox",
        "usage_by_model",
        "user_input",
        "variables",
        "waiting_step",
    )

    def __init__(self, launch: Launch, session: SessionScope | None = None) -> None:
        agent = launch.agent
        parent = launch.parent
        self.agent = agent
        self.entry_agent = agent  # the agent the run started with (a handoff changes ``agent``)
        self.entry_branch = launch.branch
        self.run_id = launch.run_id if session is None else session.run_id
        self.parent_run_id = parent.run_id if parent is not None else None
        self.root_run_id: str = parent.root_run_id if parent is not None else self.run_id
        self.user_input = launch.user_input
        self.input_parts = launch.input_parts
        self.branch = launch.branch
        self.emitter = launch.emitter
        self.state = launch.state
        self.session_id = launch.session_id
        self.deps = launch.deps
        self.variables: Mapping[str, Any] = (
            dict(launch.variables) if launch.variables else NO_ENTRIES
        )
        self.memory = tuple(launch.memory)
        self.session = session
        self.effects = launch.effects
        self.resumed = False
        # Resumed after a handoff (between steps: ``Counts.agent``; in a wait:
        # ``Loaded.handed``): the agent handed over to, and the first step its prompt replays.
        self.handed: tuple[str, int] | None = None
        self.committed_reply: Step | None = None  # resuming: the step in flight's reply
        self.committed_attempt: int | None = None  # that reply's attempt, once taken
        # Resuming a waiting run: its step in flight (results so far, pending calls), and the
        # decisions on those calls, by id (each taken once).
        self.waiting_step: Step | None = None
        self.decisions: dict[str, Decision] = (
            dict(launch.decisions) if launch.decisions else NO_ENTRIES
        )
        self.call_prefix = launch.call_prefix
        self.approver: Approver | None = agent.approver
        self.approval_timeout: float | None = agent.approval_timeout
        if self.approver is None and parent is not None:  # a sub-run asks its parent's
            self.approver = parent.approver
            self.approval_timeout = parent.approval_timeout
        # Questions a running call asked with no live approver (its action's tag → what it
        # asked): the call waits on them. Resuming, the answers for the calls that run again.
        self.asked: dict[str, Any] = NO_ENTRIES
        self.answers: dict[str, Decision] = NO_ENTRIES
        # A waiting sub-run to resume, by the tag of the parent's action that runs it.
        self.subrun_resumes: dict[str, tuple[RunResult, dict[str, Decision]]] = NO_ENTRIES
        self.plan: Plan  # set by the loop once the tools are known
        self.steps: list[Step] = []
        self.replayed: list[tuple[Message, ...]] = []
        self.usage_by_model: dict[str, Usage] = {}
        self.scratch: dict[int, dict[str, Any]] = NO_ENTRIES
        # Held weakly: a view holds its run, and a run holding its view back would make every
        # run (and all it reached) cyclic garbage, freed only by the collector's passes.
        self._context: weakref.ref[RunView] | None = None
        self.instrument: Instrumentation | None = launch.instrument
        self.span: Span | None = launch.span
        self._attempt_count = 0
        self.attempts: dict[int, AttemptRecord] = {}
        self._pending_discards: list[dict[str, Any]] | None = None  # made on need
        # Controls (``_controls``): why the run must stop once its step's actions are done,
        # the tool calls made, each tool's ``ModelRetry`` count, the answers rejected.
        self.stopped: RunError | None = None
        self.tool_calls = 0
        self.tool_retries: dict[str, int] = NO_ENTRIES
        self.output_retries = 0
        self.toolbox: Toolbox | None = None  # the run's tools, under its agent (``_loop``)
        # Each toolset's ``tools_revision`` when its tools were last listed (``_loop``).
        self.tool_revisions: dict[int, object] = NO_ENTRIES
        loaded = session.loaded if session is not None else launch.loaded
        if session is not None:
            self.session_id = session.session_id
        if loaded is not None:  # state and memory from the session (resuming, the run so far)
            if launch.loaded is not None:
                self.run_id = loaded.run_id or self.run_id
            self.state = loaded.state
            self.memory = (*loaded.memory, *self.memory)
            if loaded.run_id is not None:
                self.resumed = True
                self.user_input = loaded.user_input or ""
                self.input_parts = loaded.input_parts
                self.steps = list(loaded.steps)
                self.handed = loaded.handed
                self.committed_reply = loaded.reply
                known = [*self.steps, *([loaded.reply] if loaded.reply is not None else [])]
                self._attempt_count = max((s.attempt for s in known), default=0)
                if loaded.counts is not None:  # a durable run continued as new, between steps
                    self.usage_by_model = dict(loaded.counts.usage_by_model)
                    self.tool_calls = loaded.counts.tool_calls
                    self.tool_retries = dict(loaded.counts.tool_retries)
                    self.output_retries = loaded.counts.output_retries
                    if loaded.counts.agent is not None:
                        self.handed = (loaded.counts.agent, loaded.counts.replay_from)

    def own_scratch(self) -> dict[int, dict[str, Any]]:
        """The run's scratch space, made when first written."""
        if self.scratch is NO_ENTRIES:
            self.scratch = {}
        return self.scratch

    @property
    def last_step(self) -> bool:
        """The step in progress makes the last model call the run may make."""
        return len(self.steps) + 1 >= self.agent.max_steps

    def accepts_thought(self) -> bool:
        """ReAct: a reply with neither actions nor an answer is the answer now, because the
        previous one was already reminded of the format, or no model call is left."""
        if self.plan.tool_mode != "react":
            return False
        steps = self.steps
        return self.last_step or (bool(steps) and steps[-1].feedback == REACT_REMINDER)

    # -- events --------------------------------------------------------------------------------

    @property
    def context(self) -> RunContext:
        """The run's ``RunContext``: one view while anyone holds it."""
        view = self._context() if self._context is not None else None
        if view is None:
            view = RunView(self)
            self._context = weakref.ref(view)
        return view

    @property
    def emitting(self) -> bool:
        return self.emitter.active

    def emit(self, cls: type[ev.Event], **fields: Any) -> Awaitable[None]:
        """Send an event (``AttemptDiscarded`` events pending go first); await the result."""
        if self._pending_discards:
            return self._emit_after_discards(cls, fields)
        return self.emitter.emit(self, cls, fields)

    async def _emit_after_discards(self, cls: type[ev.Event], fields: dict[str, Any]) -> None:
        await self.flush_discards()
        await self.emitter.emit(self, cls, fields)

    async def action_started(self, pending: PendingAction) -> None:
        """Emit ``ActionStarted`` (the executor's, as it starts an action)."""
        if self.emitter.active:
            action = pending.action
            await self.emit(
                ev.ActionStarted,
                attempt=action.attempt,
                tag=action.tag,
                name=action.name,
                path=action.path,
                input=action.input,
            )

    def action_finished(self, result: ActionResult) -> Awaitable[None]:
        """Emit ``ActionFinished`` (the executor's, as an action finishes); count a ``ModelRetry``
        against its tool's budget."""
        if result.error_kind == "retry":
            self._count_retry(result)
        return self.emit(ev.ActionFinished, result=result)

    def _count_retry(self, result: ActionResult) -> None:
        """One more ``ModelRetry`` of ``result``'s tool: past ``ToolLimits.max_retries`` the
        run stops with ``tool_retries_exceeded``."""
        used = self.tool_retries.get(result.name, 0) + 1
        if self.tool_retries is NO_ENTRIES:
            self.tool_retries = {}
        self.tool_retries[result.name] = used
        budget = self.plan.tool_limits.max_retries
        found = self.toolbox.find(result.name, result.path) if self.toolbox is not None else None
        if isinstance(found, tuple) and found[1].retries is not None:
            budget = found[1].retries  # the tool's own
        if used > budget:
            self.stop(
                ToolRetriesExceeded(
                    f"tool {result.name!r} asked the model to retry more than "
                    f"max_retries={budget} times: {result.error}",
                    details={"tool": result.name, "max_retries": budget},
                )
            )

    async def flush_discards(self) -> None:
        pending, self._pending_discards = self._pending_discards, None
        for fields in pending or ():
            await self.emitter.emit(self, ev.AttemptDiscarded, fields)

    def stop(self, error: RunError) -> None:
        """End the run with ``error`` once the step in progress is done (the first one wins)."""
        if self.stopped is None:
            self.stopped = error

    # -- usage ---------------------------------------------------------------------------------

    @property
    def usage(self) -> Usage:
        """Every model call of the run and its sub-runs (read once, at the end)."""
        return sum(self.usage_by_model.values(), Usage())

    def count_usage(self, model: str, usage: Usage) -> None:
        """Add one model call's usage (``model`` is ``"provider:name"``)."""
        by_model = self.usage_by_model
        known = by_model.get(model)
        by_model[model] = usage if known is None else known + usage

    def absorb(self, sub: RunCore) -> None:
        """A sub-run ended: its usage is part of this run's."""
        for model, usage in sub.usage_by_model.items():
            self.count_usage(model, usage)

    # -- attempts ------------------------------------------------------------------------------

    def take_committed_reply(self) -> ModelResponse | None:
        """Resuming: the committed reply of the step in flight, once (never asked again)."""
        reply, self.committed_reply = self.committed_reply, None
        if reply is None or reply.index != len(self.steps):
            return None
        if reply.pending:
            self.waiting_step = reply
        self.attempts[reply.attempt] = AttemptRecord(reply.attempt)
        self.committed_attempt = reply.attempt
        return ModelResponse(
            parts=reply.parts,
            usage=reply.usage,
            finish_reason=cast("FinishReason", reply.finish_reason),
            attempt=reply.attempt,
        )

    def open_attempt(self) -> AttemptRecord:
        self._attempt_count += 1
        record = AttemptRecord(self._attempt_count)
        self.attempts[record.n] = record
        return record

    @property
    def attempt_count(self) -> int:
        return self._attempt_count

    def fresh_attempt_number(self) -> int:
        """A number for a response a middleware made up (it never streamed)."""
        self._attempt_count += 1
        return self._attempt_count

    def discard(
        self,
        attempt: int,
        reason: DiscardReason,
        *,
        error: RunErrorInfo | None = None,
        retry_in: float | None = None,
    ) -> None:
        """Mark an attempt discarded; ``AttemptDiscarded`` goes out before the next event (a
        failed attempt retried says why, and after how long)."""
        record = self.attempts.get(attempt)
        if record is None or record.discarded:
            return
        record.discarded = True
        if self.span is not None:
            self.span.add_event(
                "agentloop.attempt_discarded", {"agentloop.attempt": attempt, "reason": reason}
            )
        if self._pending_discards is None:
            self._pending_discards = []
        fields: dict[str, Any] = {"attempt": attempt, "reason": reason}
        if error is not None:
            fields["error"] = error
            fields["retry_in"] = retry_in
        self._pending_discards.append(fields)


@final
class RunView(RunContext):
    """The ``RunContext`` of a ``RunCore``: what middleware and tools see of it, read-only."""

    __slots__ = ("__weakref__", "_run")

    def __init__(self, run: RunCore) -> None:
        self._run = run

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def parent_run_id(self) -> str | None:
        return self._run.parent_run_id

    @property
    def root_run_id(self) -> str:
        return self._run.root_run_id

    @property
    def agent_name(self) -> str:
        return self._run.agent.name

    @property
    def branch(self) -> str:
        return self._run.branch

    @property
    def session_id(self) -> str | None:
        return self._run.session_id

    @property
    def state(self) -> StateView:
        return self._run.state

    @property
    def step(self) -> int:
        return len(self._run.steps)

    @property
    def max_steps(self) -> int:
        return self._run.agent.max_steps

    @property
    def last_step(self) -> bool:
        return self._run.last_step

    def is_final_answer(self, response: ModelResponse) -> bool:
        return final_text(response, accept_thought=self._run.accepts_thought()) is not None

    @property
    def deps(self) -> Any:
        return self._run.deps

    @property
    def usage(self) -> Usage:
        return self._run.usage

    @property
    def tool_calls(self) -> int:
        return self._run.tool_calls

    @property
    def variables(self) -> Mapping[str, Any]:
        return self._run.variables

    def scratch(self, owner: object) -> dict[str, Any]:
        return self._run.own_scratch().setdefault(id(owner), {})

    def __repr__(self) -> str:
        return f"RunContext(run_id={self.run_id!r}, branch={self.branch!r})"


def run_of(context: RunContext) -> RunCore:
    """The run behind a ``RunContext`` the engine handed out: the seam through which a
    sub-agent tool (``Agent.as_tool``) starts its sub-run under the run that called it."""
    if not isinstance(context, RunView):
        raise TypeError(f"not the context of a run of this runtime: {context!r}")
    return context._run  # pyright: ignore[reportPrivateUsage]  # the engine's seam: hidden from users
