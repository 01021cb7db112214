"""``Agent``: immutable configuration, and the three ways to run it."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, cast, final, overload

import anyio
import sniffio
from anyio.abc import TaskGroup
from typing_extensions import TypeVar

import agentloop._events as ev

from ._actions import SUBAGENT, SubrunOutput, Toolbox
from ._channel import EventChannel
from ._context import StateView
from ._errors import RunCancelled, ToolError, UserError, as_given
from ._generic import subscript_callable
from ._guardrails import Guardrail, OutputValidator, check_guardrails
from ._handoff import Handoff, handoff_of, transferred
from ._inputs import RunInput, input_message_parts
from ._instrument import Instrumentation
from ._instrument import coerce as coerce_instrument
from ._loop import execute, shed
from ._middleware import ModelMiddleware, ToolMiddleware
from ._output import Output, parse_output
from ._plan import Stages, plan_run
from ._prompt import Plain, Ruleset, compile_template, render, system_message, untemplated
from ._retry import RetryPolicy
from ._run import SILENT, Emitter, EventSink, Launch, run_of
from ._session_run import Memory, SessionSpec, check_stored_input, unfinished_runs
from ._steps import RunResult
from ._time import new_id
from ._usage_limits import UsageLimits
from ._waiting import decode_state
from ._window import ContextWindow
from .models._base import Model
from .models._registry import check_model_string, resolve_model
from .models._types import Message, ModelSettings, OutputSchema, ToolMode
from .tools._context import ToolContext
from .tools._limits import ToolLimits
from .tools._tool import Tool, Toolkit, check_unique_names, tool
from .tools._toolset import Toolset

if TYPE_CHECKING:
    import jinja2

    from ._decisions import Approver, Decision
    from ._plan import RunnableAgent
    from .sessions import RunRecord, SessionStore

# An agent without ``deps_type`` takes any deps; without ``output_type`` it answers in text.
DepsT = TypeVar("DepsT", default=Any)
OutputT = TypeVar("OutputT", default=str)
NewDepsT = TypeVar("NewDepsT")
NewOutputT = TypeVar("NewOutputT")

_AGENT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SYSTEM_CACHE_SIZE = 64


@final
@subscript_callable
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Agent(Generic[DepsT, OutputT]):
    """An agent: a model, tools and instructions. Immutable and safe to share between any
    number of concurrent runs; ``replace(...)`` returns a changed copy. Its attributes are its
    settings as given (validated when the agent is made).

    For type checkers an ``Agent[DepsT, OutputT]`` is generic in the ``deps`` its runs take
    (``deps_type``; any, when not given) and the type of its results' ``output``
    (``output_type``; ``str`` when not given). With ``reflect_on_tool_use=False`` the output
    is a list of the actions' results: annotate such an agent as ``Agent[Any, list[Any]]``.

    Args:
        model: A ``Model``, or a ``"provider:model"`` string (its form and its registered
            provider checked when the agent is made, the model made on first use,
            ``resolved_model()``); ``aclose`` (and ``async with agent``) closes it, either
            way.
        name: Names the agent's runs and their branch (1-64 of ``[A-Za-z0-9_-]``).
        instructions: The system instructions: a sandboxed jinja2 template, rendered with
            ``variables`` and each run's own; ``Plain(text)`` is text, never rendered.
        tools: Tools (``@tool`` functions, ``Tool``), ``Toolkit`` objects, plain functions
            (made tools) and ``Toolset`` objects (tools found when a run starts).
        rulesets: Named lists of rules added to the system message.
        output_type: The type of the answer (validated with pydantic, re-asked on a
            validation error); ``None`` or ``str`` for text.
        deps_type: The type of the ``deps=`` a run takes (what ``ToolContext.deps`` and
            ``RunContext.deps`` are): for type checkers only; not checked at run time.
        max_steps: The most model calls a run makes; the last one knows it is the last.
        reflect_on_tool_use: ``False`` ends the run after its first action step, with the
            actions' results as the output.
        tool_mode: ``"native"`` (provider tool calling), ``"react"`` (the
            ``Thought:/Actions:/Answer:`` text protocol) or ``"auto"`` (native when the model
            supports it).
        model_middleware: Around each model call, the first outermost.
        tool_middleware: Around each action, the first outermost.
        settings: Sampling settings sent with every request.
        retry: How model calls are retried (below all middleware).
        deadline: Seconds a whole run may take (``RunDeadlineExceeded``).
        tool_limits: Concurrency, output size and per-step action limits of tools.
        max_reply_chars: The largest reply a run accepts (``reply_too_large``); it also bounds
            what the drivers buffer.
        event_buffer: Events a stream holds for a slow consumer before the run waits.
        react_template: A jinja2 template replacing the built-in ReAct system prompt.
        variables: Template variables for ``instructions``.
        store: The session store of runs given a ``session=``.
        memory: How much of a session's earlier runs each run replays.
        lease_ttl: Seconds a run's session lease lasts; it is renewed every third of that.
        instrument: OpenTelemetry tracing: ``True`` or an ``Instrumentation``; ``None``
            inherits a parent run's; ``False`` opts out.
        approver: ``async (call, run_context) -> Approve() | Deny(reason) | Edit(arguments)
            | None``: decides calls that need approval while the run goes on (``None`` leaves
            the call pending: the run waits). A sub-agent without one asks its parent's.
        approval_timeout: Seconds the approver may take; then the call is denied, the
            reason recorded (``None``: no limit).
        context_window: Bounds each request's prompt in tokens over a long run: older tool
            results elided, then older steps summarised (``ContextWindow``); ``None``
            replays every step.
        usage_limits: Limits on a run's tokens, requests, tool calls and cost
            (``usage_limit_exceeded``).
        guardrails: ``InputGuardrail``, ``OutputGuardrail`` and ``ToolGuardrail`` checks; a
            trip ends the run with ``guardrail_tripped``.
        output_validators: ``async (run_context, output) -> output`` checks of the answer, in
            order; ``ModelRetry(reason)`` asks the model again with the reason.
        output_retries: How often an answer may be asked for again in one run, when it does
            not validate into ``output_type`` or an output validator rejects it (1: two
            answers in all); one more ends the run with ``output_invalid``.
        handoffs: Agents this one may hand the conversation over to (``Agent``, ``Handoff``,
            or the name of an agent the run reaches through handoffs); the model sees each as
            a ``transfer_to_<agent>`` tool. The run goes on under the other agent, and a
            session remembers it for its next run.
    """

    model: Model | str
    _: KW_ONLY
    name: str = "agent"
    instructions: str | None = None
    tools: Sequence[Tool | Toolkit | Toolset | Callable[..., Any]] = ()
    rulesets: Sequence[Ruleset] | Mapping[str, Sequence[str]] = ()
    output_type: type[OutputT] | None = None
    deps_type: type[DepsT] | None = None
    max_steps: int = 20
    reflect_on_tool_use: bool = True
    tool_mode: Literal["native", "react", "auto"] = "auto"
    model_middleware: Sequence[ModelMiddleware] = ()
    tool_middleware: Sequence[ToolMiddleware] = ()
    settings: ModelSettings = field(default_factory=ModelSettings)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    deadline: float | None = None
    tool_limits: ToolLimits = field(default_factory=ToolLimits)
    max_reply_chars: int | None = 1_000_000
    event_buffer: int = 128
    react_template: str | None = None
    variables: Mapping[str, Any] | None = None
    store: SessionStore | None = None
    memory: Memory = field(default_factory=Memory)
    lease_ttl: float = 30.0
    instrument: Instrumentation | bool | None = None
    approver: Approver | None = None
    approval_timeout: float | None = 300.0
    context_window: ContextWindow | None = None
    usage_limits: UsageLimits | None = None
    guardrails: Sequence[Guardrail] = ()
    output_validators: Sequence[OutputValidator] = ()
    output_retries: int = 1
    handoffs: Sequence[Agent[Any, Any] | Handoff | str] = ()
    _derived: _Derived = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(as_given(self.model), Model | str):
            raise UserError(
                f"model must be a Model or a 'provider:model' string, not {self.model!r}"
            )
        if isinstance(self.model, str):
            # The form and the provider now (a typo fails here); the model itself, with its
            # client, when first used.
            check_model_string(self.model)
        if not _AGENT_NAME.match(self.name):
            raise UserError(
                f"agent name {self.name!r} must be 1-64 characters of [A-Za-z0-9_-] "
                "(it names the run's branch; '.' separates sub-agents)"
            )
        if self.max_steps < 1:
            raise UserError("max_steps must be at least 1")
        if self.tool_mode not in ("native", "react", "auto"):
            raise UserError(
                f"tool_mode must be 'native', 'react' or 'auto', not {self.tool_mode!r}"
            )
        if self.event_buffer < 1:
            raise UserError("event_buffer must be at least 1")
        if not self.reflect_on_tool_use and self.output_type not in (None, str):
            raise UserError(
                "reflect_on_tool_use=False returns the actions' results as the output, so it "
                "cannot be combined with output_type"
            )
        if not self.reflect_on_tool_use and any(
            getattr(mw, "requires_reflection", False) for mw in self.model_middleware
        ):
            raise UserError(
                "reflect_on_tool_use=False ends the run after the first action step, so it "
                "cannot be combined with goal enforcement"
            )
        if self.lease_ttl <= 0:
            raise UserError("lease_ttl must be positive")
        if self.approval_timeout is not None and self.approval_timeout <= 0:
            raise UserError("approval_timeout must be positive (or None: no limit)")
        if self.usage_limits is not None and not isinstance(
            as_given(self.usage_limits), UsageLimits
        ):
            raise UserError(f"usage_limits must be a UsageLimits, not {self.usage_limits!r}")
        object.__setattr__(self, "guardrails", check_guardrails(self.guardrails))
        object.__setattr__(self, "output_validators", tuple(self.output_validators))
        if not all(callable(v) for v in self.output_validators):
            raise UserError("output_validators must be async functions (run_context, output)")
        if self.output_retries < 0:
            raise UserError("output_retries must not be negative")
        if self.approver is not None and not callable(self.approver):
            raise UserError(f"approver must be an async function, not {self.approver!r}")
        # The one write to a frozen field: what the agent derives from its settings.
        object.__setattr__(self, "_derived", _Derived(self))
        self._prepare_first_run()

    def _prepare_first_run(self) -> None:
        """Plan now a run without variables (its system message rendered, the templates it
        needs compiled, its tool specs made), when the agent says what it is: a service builds
        its agent at start-up, and its first request should not pay for this."""
        derived = self._derived
        if derived.toolsets or not isinstance(self.model, Model):
            return  # the tools, or the model, are known only when a run starts
        if not (derived.instructions is None or isinstance(derived.instructions, str)):
            return  # a template: rendered with each run's variables
        plan_run(self, Toolbox(derived.tools), {})

    def __repr__(self) -> str:
        tools = [t.name for t in self._derived.tools]
        return f"Agent(name={self.name!r}, model={self.model!r}, tools={tools})"

    @overload
    def replace(
        self, *, output_type: type[NewOutputT], deps_type: type[NewDepsT], **changes: Any
    ) -> Agent[NewDepsT, NewOutputT]: ...

    @overload
    def replace(
        self, *, output_type: type[NewOutputT], **changes: Any
    ) -> Agent[DepsT, NewOutputT]: ...

    @overload
    def replace(self, *, deps_type: type[NewDepsT], **changes: Any) -> Agent[NewDepsT, OutputT]: ...

    @overload
    def replace(self, **changes: Any) -> Agent[DepsT, OutputT]: ...

    def replace(self, **changes: Any) -> Agent[Any, Any]:
        """A new agent with some settings changed (validated as a new agent's). To type
        checkers a new ``output_type`` or ``deps_type`` changes the agent's type (going back
        to ``None`` does not: annotate the new agent).

        Args:
            **changes: Settings by name, as for ``Agent``.
        """
        unknown = set(changes) - _SETTINGS
        if unknown:
            raise UserError(f"unknown Agent settings: {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    # -- derived from the settings --------------------------------------------------------------

    @property
    def static_tools(self) -> tuple[Tool, ...]:
        """The tools among ``tools`` as ``Tool`` objects (functions and toolkits made tools);
        a toolset's tools are listed when a run starts."""
        return self._derived.tools

    @property
    def handoff_targets(self) -> tuple[Handoff, ...]:
        """``handoffs`` as ``Handoff`` values (an agent or a name is one with the defaults)."""
        return self._derived.handoffs

    @property
    def stages(self) -> Stages:
        """The optional stages its runs go through (the features it has on), and its plans."""
        return self._derived.stages

    @property
    def toolsets(self) -> tuple[Toolset, ...]:
        """The toolsets among ``tools`` (their tools are listed when a run starts)."""
        return self._derived.toolsets

    @property
    def typed_output(self) -> Output | None:
        """``output_type``'s schema and validator; ``None`` for a plain-text answer."""
        return self._derived.output

    @property
    def output_schema(self) -> OutputSchema | None:
        """The JSON schema of ``output_type``; ``None`` for a plain-text answer."""
        output = self._derived.output
        return output.schema if output is not None else None

    @property
    def instrumentation(self) -> Instrumentation | Literal[False] | None:
        """What ``instrument`` stands for: ``True`` is an ``Instrumentation`` of this agent's
        own; ``None`` inherits a parent run's (else ``instrument_all``'s); ``False`` never traces."""
        return self._derived.instrumentation

    def resolved_model(self) -> Model:
        """The model, resolved from its string on first use (and kept until ``aclose``)."""
        derived = self._derived
        if derived.model is None:
            derived.model = resolve_model(self.model)
        return derived.model

    async def aclose(self) -> None:
        """Close the agent's model (its HTTP clients), whether made from a
        ``"provider:model"`` string or passed in as an object, and those of the agents it runs
        as tools (``as_tool``). The agent stays usable: the next run makes a fresh model from
        a string, and a model object opens new clients when used again (a model shared by
        several agents is closed by the first to close: close it once its runs are done)."""
        derived = self._derived
        model, derived.model = derived.model, None
        derived.stages.plans.clear()  # they hold the model
        if model is None and not isinstance(self.model, str):
            model = self.model  # given, never used: closing it is harmless
        try:
            if model is not None:
                await model.aclose()
        finally:
            for child in derived.subagents:
                await child.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def effective_tool_mode(self, has_tools: bool) -> ToolMode:
        """The tool mode a run uses: ``tool_mode``, with ``"auto"`` decided by the model.

        Args:
            has_tools: Whether the run has tools (a run without any is native).
        """
        if self.tool_mode == "auto":
            native = self.resolved_model().profile.native_tools
            return "native" if native or not has_tools else "react"
        return self.tool_mode

    def render_instructions(self, variables: Mapping[str, Any]) -> str | None:
        """The instructions rendered for a run, or ``None`` without instructions.

        Args:
            variables: The run's template variables, over the agent's own.
        """
        template = self._derived.instructions
        if template is None or isinstance(template, str):
            return template
        try:
            return render(template, {**(self.variables or {}), **variables})
        except UserError as exc:
            raise UserError(
                f"instructions: {exc} (variables come from Agent(variables=...) and "
                f"run(variables=...)); {_PLAIN_HINT}"
            ) from None

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

        Args:
            instructions: The rendered instructions.
            tools: The run's tools.
            tool_mode: ``"native"`` or ``"react"``.
            teach_output: Put the output schema in the prompt (a model without native
                structured output).
        """
        key = (instructions, tuple(tools), tool_mode, teach_output)
        cache = self._derived.system_messages
        cacheable = self.react_template is None or tool_mode != "react"
        if cacheable and key in cache:
            return cache[key]
        schema = self.output_schema
        message = system_message(
            instructions=instructions,
            rulesets=self._derived.rulesets,
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
        """The typed output of an answer (raises ``pydantic.ValidationError``).

        Args:
            text: The answer's text.
        """
        return parse_output(self._derived.output, text)

    # -- running --------------------------------------------------------------------------------

    def _launch(
        self,
        user_input: RunInput,
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
        decisions: Mapping[str, Decision] | None = None,
        resume_state: Mapping[str, Any] | None = None,
    ) -> Launch:
        text, input_parts = input_message_parts(user_input)
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
            check_stored_input(input_parts)
            spec = SessionSpec(
                store=store,
                session_id=session,
                wait=wait_for_session,
                resume=resume,
                run_key=run_key,
            )
        if decisions is not None and not isinstance(as_given(decisions), Mapping):
            raise UserError("decisions must be a mapping of pending call ids to decisions")
        loaded = None
        if resume_state is not None:
            if session is not None:
                raise UserError(
                    "resume_state is for a run without a session; a session keeps its own"
                )
            loaded = decode_state(resume_state, agent=self.name)
        elif session is None and resume:
            raise UserError(
                "resume needs session=... (and a store), or the resume_state of a waiting run"
            )
        elif session is None and run_key is not None:
            raise UserError("run_key needs session=... (and a store): runs are keyed per session")
        return Launch(
            agent=self,
            run_id=new_id(),
            user_input=text,
            input_parts=input_parts,
            branch=self.name,
            emitter=emitter,
            state=StateView(state),
            deps=deps,
            variables=variables,
            memory=memory,
            session_spec=spec,
            loaded=loaded,
            decisions=decisions,
        )

    async def run(
        self,
        input: RunInput,
        *,
        session: str | None = None,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        memory: Sequence[Message] = (),
        variables: Mapping[str, Any] | None = None,
        deps: DepsT | None = None,
        state: Mapping[str, Any] | None = None,
        raise_on_error: bool = False,
        run_key: str | None = None,
    ) -> RunResult[OutputT]:
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

        Args:
            input: The user's message: text, or a sequence of text, images and files.
            session: The session this run continues (needs a store).
            store: The session store, instead of the agent's ``store``.
            wait_for_session: Seconds to wait for a session another run holds (``None``:
                ``SessionBusy`` at once).
            memory: Messages replayed before the input, for a run without a session.
            variables: Template variables for the instructions, over the agent's own.
            deps: Anything the tools and middleware need (``ToolContext.deps``).
            state: The starting state of a run without a session.
            raise_on_error: Raise the matching ``RunError`` instead of setting
                ``result.error``.
            run_key: Makes the submission idempotent within the session: a key seen before
                returns that run's result, or resumes it.
        """
        # The launch is not kept here: the run drops it once started.
        running = execute(
            self._launch(
                input,
                SILENT,
                session=session,
                store=store,
                wait_for_session=wait_for_session,
                memory=memory,
                variables=variables,
                deps=deps,
                state=state,
                run_key=run_key,
            )
        )
        try:
            result = await running
        except anyio.get_cancelled_exc_class() as exc:
            shed(exc)  # the caller's task keeps neither this run's frames nor the run
            raise
        return _checked(result, raise_on_error)

    async def _run_into(
        self,
        sink: EventSink,
        input: RunInput,
        *,
        session: str | None,
        store: SessionStore | None,
        resume: bool,
        decisions: Mapping[str, Decision] | None,
    ) -> RunResult:
        """A run (or a resume) in the caller's task, its events sent straight to ``sink``: the
        seam of a driver that keeps its own log of them (the web hub), with no stream, channel
        or task of ``stream``'s between the run and the sink."""
        launch = self._launch(
            input, Emitter(sink), session=session, store=store, resume=resume, decisions=decisions
        )
        return await execute(launch)

    def stream(
        self,
        input: RunInput,
        *,
        session: str | None = None,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        memory: Sequence[Message] = (),
        variables: Mapping[str, Any] | None = None,
        deps: DepsT | None = None,
        state: Mapping[str, Any] | None = None,
        raise_on_error: bool = False,
        run_key: str | None = None,
    ) -> RunStream[OutputT]:
        """Run while streaming events: ``async with agent.stream(x) as run: async for e in run``.

        The events go through a bounded buffer (``event_buffer``): a slow consumer slows the
        run. Leaving the block early cancels the run cleanly. Options as for ``run``.

        Args:
            input: The user's message: text, or a sequence of text, images and files.
            session: The session this run continues (needs a store).
            store: The session store, instead of the agent's ``store``.
            wait_for_session: Seconds to wait for a session another run holds (``None``:
                ``SessionBusy`` at once).
            memory: Messages replayed before the input, for a run without a session.
            variables: Template variables for the instructions, over the agent's own.
            deps: Anything the tools and middleware need (``ToolContext.deps``).
            state: The starting state of a run without a session.
            raise_on_error: Raise the matching ``RunError`` instead of setting
                ``result.error``.
            run_key: Makes the submission idempotent within the session: a key seen before
                returns that run's result, or resumes it.
        """
        return RunStream[OutputT](
            lambda emitter: self._launch(
                input,
                emitter,
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
        session: str | None = None,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        deps: DepsT | None = None,
        raise_on_error: bool = False,
        decisions: Mapping[str, Decision] | None = None,
        resume_state: Mapping[str, Any] | None = None,
    ) -> RunResult[OutputT]:
        """Finish the session's last unfinished run (its process died, it was cancelled or hit
        its deadline) from its last committed step. Committed actions do not run again; the
        step that was in flight does: from its committed reply when it has one (same tags and
        idempotency keys), else by asking the model again. An expired lease is taken over; a
        live one is ``SessionBusy`` unless ``wait_for_session`` gives it time to expire. With
        no unfinished run it raises ``NothingToResume``.

        A run that waits on decisions (``result.pending``) goes on with ``decisions``, one per
        pending call by its ``id``: approved and edited calls run, denied ones become error
        results carrying the reason, external tools' results are taken as given, and the model
        is called again. The step's actions that ran before it waited never run again. A
        decision for an unknown call, a missing one, or an edit that fails the tool's schema is
        a ``UserError`` raised before anything runs, and the run still waits. A run without a
        session resumes from its ``result.resume_state`` instead of ``session=``.

        Args:
            session: The session whose last unfinished run to finish.
            store: The session store, instead of the agent's ``store``.
            wait_for_session: Seconds to wait for the lease of a run that still holds it.
            deps: Anything the tools and middleware need (``ToolContext.deps``).
            raise_on_error: Raise the matching ``RunError`` instead of setting
                ``result.error``.
            decisions: The decisions on a waiting run's pending calls, by ``PendingCall.id``.
            resume_state: A waiting run's ``result.resume_state``, for a run without a session.
        """
        launch = self._launch(
            "",
            SILENT,
            session=session,
            store=store,
            wait_for_session=wait_for_session,
            deps=deps,
            resume=True,
            decisions=decisions,
            resume_state=resume_state,
        )
        try:
            result = await execute(launch)
        except anyio.get_cancelled_exc_class() as exc:
            shed(exc)  # the caller's task keeps neither this run's frames nor the run
            raise
        return _checked(result, raise_on_error)

    async def unfinished_run(
        self, *, session: str, store: SessionStore | None = None
    ) -> RunRecord | None:
        """The session's last run that never finished (what ``resume`` would pick up), or
        ``None``. It reads the session without taking its lease.

        Args:
            session: The session to look in.
            store: The session store, instead of the agent's ``store``.
        """
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
        session: str | None = None,
        store: SessionStore | None = None,
        wait_for_session: float | None = None,
        deps: DepsT | None = None,
        raise_on_error: bool = False,
        decisions: Mapping[str, Decision] | None = None,
        resume_state: Mapping[str, Any] | None = None,
    ) -> RunStream[OutputT]:
        """``resume``, streamed.

        Args:
            session: The session whose last unfinished run to finish.
            store: The session store, instead of the agent's ``store``.
            wait_for_session: Seconds to wait for the lease of a run that still holds it.
            deps: Anything the tools and middleware need (``ToolContext.deps``).
            raise_on_error: Raise the matching ``RunError`` instead of setting
                ``result.error``.
            decisions: The decisions on a waiting run's pending calls, by ``PendingCall.id``.
            resume_state: A waiting run's ``result.resume_state``, for a run without a session.
        """
        return RunStream[OutputT](
            lambda emitter: self._launch(
                "",
                emitter,
                session=session,
                store=store,
                wait_for_session=wait_for_session,
                deps=deps,
                resume=True,
                decisions=decisions,
                resume_state=resume_state,
            ),
            buffer=self.event_buffer,
            raise_on_error=raise_on_error,
        )

    def as_tool(self, *, name: str | None = None, description: str | None = None) -> Tool:
        """This agent as a tool of another: each call is a sub-run on the branch
        ``<parent>.<name>`` (``#<tag>`` added when calls of it overlap), with its own steps,
        limits and goal budget, sharing the parent's session state and lease. Its events reach
        the caller's stream; its steps are kept in the action's result (``subrun``) and its
        usage is added to the parent's.

        Args:
            name: The tool's name (default: the agent's name).
            description: What the tool does, for the calling model (default: a sentence naming
                the agent).
        """
        child = self
        tool_name = name or self.name
        doc = description or f"Delegate a task to the {self.name!r} agent and get its answer."

        async def delegate(ctx: ToolContext[Any], task: str) -> Any:
            parent = run_of(ctx.run)
            busy = parent.own_scratch().setdefault(id(child), {"running": 0})
            branch = f"{parent.branch}.{tool_name}"
            if busy["running"]:
                branch = f"{branch}#{ctx.action.tag}"
            busy["running"] += 1
            # A sub-run that waited on decisions resumes from where it stopped, with them.
            waited = parent.subrun_resumes.pop(ctx.action.tag, None)
            agent: RunnableAgent = child
            effects = parent.effects
            if effects is not None:  # the parent's tools are another driver's: so are these
                agent, effects = effects.sub_agent(child, tool_name)
            sub = Launch(
                agent=agent,
                run_id=new_id(),
                user_input=task,
                branch=branch,
                emitter=parent.emitter,
                state=parent.state,
                parent=parent,
                session_id=parent.session_id,
                deps=parent.deps,
                call_prefix=f"{parent.call_prefix}{ctx.action.tag}/",
                effects=effects,
            )
            if waited is not None:
                earlier, sub.decisions = waited
                sub.branch = earlier.branch
                sub.loaded = decode_state(
                    earlier.resume_state, agent=child.name, state=parent.state
                )
            try:
                result = await execute(sub)
            finally:
                busy["running"] -= 1
                if sub.run is not None:
                    parent.absorb(sub.run)
            if result.pending:  # waits on decisions: so does the parent's run
                return SubrunOutput(result)
            if result.error is not None:
                raise ToolError(f"the {tool_name} agent failed: {result.error.message}")
            return SubrunOutput(result)

        delegate.__doc__ = f"""{doc}

        Args:
            task: what the {tool_name} agent should do, with everything it needs to know
        """
        setattr(delegate, _SUBAGENT, child)  # so that the parent's aclose closes it too
        return tool(name=tool_name, description=doc)(delegate)

    def run_sync(
        self,
        input: RunInput,
        *,
        backend: Literal["asyncio", "trio"] = "asyncio",
        **kwargs: Any,
    ) -> RunResult[OutputT]:
        """``run`` for scripts: starts an event loop, and closes the models' clients (made on
        that loop) before the loop ends. From async code, ``await agent.run(...)`` instead
        (``UserError`` here).

        Args:
            input: The user's message: text, or a sequence of text, images and files.
            backend: The event loop to start: ``"asyncio"`` or ``"trio"``.
            **kwargs: The options of ``run``.
        """
        if _in_event_loop():
            raise UserError(
                "run_sync starts its own event loop and cannot run inside one: "
                "use `await agent.run(...)` in async code"
            )

        async def run_and_close() -> RunResult[OutputT]:
            try:
                return await self.run(input, **kwargs)
            finally:
                with anyio.CancelScope(shield=True):
                    await self.aclose()

        return anyio.run(run_and_close, backend=backend)


_SETTINGS = frozenset(f.name for f in dataclasses.fields(Agent) if f.init)
_SUBAGENT = SUBAGENT


def _in_event_loop() -> bool:
    """Whether this thread is running an event loop (asyncio's or trio's)."""
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        pass
    else:
        return True
    import asyncio

    try:
        asyncio.get_running_loop()  # a callback of a running loop, outside any task
    except RuntimeError:
        return False
    return True


class _Derived:
    """What an agent makes of its settings: all of it when the agent is made (so that a bad
    setting fails there), except the model, resolved on first use (until ``aclose``), and the
    system messages, rendered for each distinct set of inputs."""

    __slots__ = (
        "handoffs",
        "instructions",
        "instrumentation",
        "model",
        "output",
        "rulesets",
        "stages",
        "subagents",
        "system_messages",
        "tools",
        "toolsets",
    )

    def __init__(self, agent: Agent[Any, Any]) -> None:
        self.handoffs = _handoffs(agent.handoffs)
        self.tools, self.toolsets = _tools_and_toolsets(
            [*agent.tools, *(_transfer_tool(h) for h in self.handoffs)]
        )
        self.subagents = tuple(
            child
            for t in self.tools
            for a in t.activities.values()
            if isinstance(child := getattr(a.fn, _SUBAGENT, None), Agent)
        )
        rulesets = agent.rulesets
        if isinstance(rulesets, Mapping):
            self.rulesets = tuple(Ruleset(name=k, rules=tuple(v)) for k, v in rulesets.items())
        else:
            self.rulesets = tuple(rulesets)
        self.instructions = _instructions(agent.instructions)
        if agent.react_template:
            compile_template(agent.react_template)
        self.output = Output.of(agent.output_type)
        self.instrumentation: Instrumentation | Literal[False] | None = coerce_instrument(
            agent.instrument
        )
        self.model: Model | None = None
        self.system_messages: dict[tuple[Any, ...], Message | None] = {}
        self.stages = Stages(agent.guardrails, agent.output_validators, self.handoffs)


_PLAIN_HINT = (
    "instructions are a jinja2 template: for text that is never rendered, pass agentloop.Plain(...)"
)


def _instructions(source: str | None) -> jinja2.Template | str | None:
    """The instructions' compiled template, or their text when they are ``Plain``."""
    if not source:
        return None
    if isinstance(source, Plain):
        return str(source)
    text = untemplated(source)
    if text is not None:
        return text
    try:
        return compile_template(source)
    except UserError as exc:
        raise UserError(f"instructions: {exc}; {_PLAIN_HINT}") from None


def _handoffs(entries: Sequence[Agent[Any, Any] | Handoff | str]) -> tuple[Handoff, ...]:
    """``Agent(handoffs=...)`` as ``Handoff`` values, checked."""
    handoffs = tuple(handoff_of(entry) for entry in entries)
    names = [h.target_name for h in handoffs]
    if len(set(names)) != len(names):
        raise UserError(f"handoffs name an agent twice: {names}")
    for handoff in handoffs:
        target = handoff.agent
        if not isinstance(target, Agent | str):
            raise UserError(f"a handoff is to an Agent or an agent's name, not {target!r}")
    return handoffs


def _transfer_tool(handoff: Handoff) -> Tool:
    """The tool the model calls to hand over (the loop sees its call and switches agents)."""
    name = handoff.target_name
    description = f"Hand the conversation over to the agent {name!r}." + (
        f" {handoff.description}" if handoff.description else ""
    )

    async def transfer() -> str:
        return transferred(name)

    return tool(name=handoff.tool_name, description=description)(transfer)


def _tools_and_toolsets(
    items: Sequence[Tool | Toolkit | Toolset | Callable[..., Any]],
) -> tuple[tuple[Tool, ...], tuple[Toolset, ...]]:
    tools: list[Tool] = []
    toolsets: list[Toolset] = []
    for item in items:
        if isinstance(item, Tool):
            tools.append(item)
        elif isinstance(item, Toolkit):
            tools.append(item.tool)
        elif isinstance(item, Toolset):
            toolsets.append(item)
        elif callable(item):
            tools.append(tool(item))
        else:
            raise UserError(f"not a tool, toolkit or toolset: {item!r}")
    check_unique_names(tools)
    return tuple(tools), tuple(toolsets)


def _checked(result: RunResult[Any], raise_on_error: bool) -> RunResult[Any]:
    if raise_on_error:
        result.raise_for_error()
    return result


_HOST_CANCELLED = "the host cancelled the run (a cancel scope around the stream) before it ended"


@final
class RunStream(Generic[OutputT]):
    """A streamed run: iterate it for events, then read ``result`` (a ``RunResult`` of the
    agent's output type). Use it as an async context manager; ``cancel(reason)`` stops the run
    from any task. Made by ``Agent.stream``.

    Args:
        launch: Makes the run, given where its events go.
        buffer: The events held for a slow consumer (``Agent.event_buffer``).
        raise_on_error: ``result`` raises the matching ``RunError`` for a result with an error.
    """

    def __init__(
        self, launch: Callable[[Emitter], Launch], *, buffer: int, raise_on_error: bool
    ) -> None:
        self._launch = launch
        self._buffer = buffer
        self._raise_on_error = raise_on_error
        self._scope = anyio.CancelScope()
        self._channel: EventChannel[ev.Event] | None = None
        self._tg: TaskGroup | None = None
        self._result: RunResult[OutputT] | None = None
        self._error: BaseException | None = None
        self._cancel_reason: str | None = None
        self._done = False
        self.run_id: str | None = None

    async def __aenter__(self) -> Self:
        channel = EventChannel[ev.Event](self._buffer)
        launch = self._launch(Emitter(channel))
        self.run_id = launch.run_id
        self._channel = channel
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._drive, launch, channel)
        return self

    async def _drive(self, launch: Launch, channel: EventChannel[ev.Event]) -> None:
        async with channel:
            try:
                with self._scope:
                    try:
                        self._result = await execute(launch)
                    except Exception as exc:
                        self._error = exc
            finally:
                if self._result is None and self._error is None:
                    # Cancelled: by ``cancel()`` or leaving the stream early (this scope), or by
                    # a scope of the host around the stream, whose cancellation goes on past here.
                    self._error = RunCancelled(self._cancel_reason or _HOST_CANCELLED)
                self._done = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if not self._done:
            if self._cancel_reason is None:
                by_host = isinstance(exc, anyio.get_cancelled_exc_class())
                self._cancel_reason = _HOST_CANCELLED if by_host else "the caller left the stream"
            self._scope.cancel()
        if self._tg is None or self._channel is None:
            raise RuntimeError("RunStream left without being entered")
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._channel.close_reader()

    def __aiter__(self) -> Self:
        return self

    def __anext__(self) -> Awaitable[ev.Event]:
        channel = self._channel
        if channel is None:
            raise UserError("use the stream as `async with agent.stream(...) as run:`")
        # A cancellation point even when events are buffered; the events of one wake-up are
        # read without a scheduling round trip each (``EventChannel``).
        return channel.next()

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run: its tools and model stream are cancelled; ``result`` raises
        ``RunCancelled(reason)``.

        Args:
            reason: Why, for ``RunCancelled``.
        """
        if not self._done:
            self._cancel_reason = reason
            self._scope.cancel()

    @property
    def done(self) -> bool:
        return self._done

    @property
    def result(self) -> RunResult[OutputT]:
        """The run's result, once its events have been consumed. Raises what the run raised;
        ``RunCancelled`` if it was cancelled (``cancel()``, leaving the stream before its end,
        or a cancel scope of the host around it)."""
        if not self._done:
            raise UserError("the run has not finished: iterate its events first")
        if self._error is not None:
            raise self._error
        result = cast("RunResult[OutputT]", self._result)
        if self._raise_on_error:
            result.raise_for_error()
        return result

    async def get_result(self) -> RunResult[OutputT]:
        """Consume the remaining events and return ``result``."""
        async for _ in self:
            pass
        return self.result
