"""A run's plan: what the loop and the turn read of the agent, settled once per run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ._prompt import RESPONSE_MARKER

if TYPE_CHECKING:
    from ._actions import Toolbox
    from ._decisions import Approver
    from ._guardrails import (
        Guardrail,
        InputGuardrail,
        OutputGuardrail,
        OutputValidator,
        ToolGuardrail,
    )
    from ._handoff import Handoff
    from ._instrument import Instrumentation
    from ._middleware import ModelMiddleware, ToolMiddleware
    from ._output import Output
    from ._retry import RetryPolicy
    from ._session_run import Memory
    from ._usage_limits import UsageLimits
    from ._window import ContextWindow
    from .models._base import Model
    from .models._types import Message, ModelSettings, OutputSchema, ToolMode, ToolSpec
    from .tools._limits import ToolLimits
    from .tools._tool import Tool
    from .tools._toolset import Toolset


class RunnableAgent(Protocol):
    """What the engine reads of an agent (``Agent`` is the implementation). Naming it here
    keeps the engine below ``_agent``: a run depends on these members, not on the class."""

    @property
    def name(self) -> str: ...
    @property
    def deadline(self) -> float | None: ...
    @property
    def lease_ttl(self) -> float: ...
    @property
    def memory(self) -> Memory: ...
    @property
    def max_steps(self) -> int: ...
    @property
    def max_reply_chars(self) -> int | None: ...
    @property
    def reflect_on_tool_use(self) -> bool: ...
    @property
    def settings(self) -> ModelSettings: ...
    @property
    def tool_limits(self) -> ToolLimits: ...
    @property
    def retry(self) -> RetryPolicy: ...
    @property
    def model_middleware(self) -> Sequence[ModelMiddleware]: ...
    @property
    def tool_middleware(self) -> Sequence[ToolMiddleware]: ...
    @property
    def static_tools(self) -> tuple[Tool, ...]: ...
    @property
    def toolsets(self) -> tuple[Toolset, ...]: ...
    @property
    def output_schema(self) -> OutputSchema | None: ...
    @property
    def instrumentation(self) -> Instrumentation | Literal[False] | None: ...
    @property
    def approver(self) -> Approver | None: ...
    @property
    def approval_timeout(self) -> float | None: ...

    @property
    def context_window(self) -> ContextWindow | None: ...
    @property
    def usage_limits(self) -> UsageLimits | None: ...
    @property
    def guardrails(self) -> Sequence[Guardrail]: ...
    @property
    def output_validators(self) -> Sequence[OutputValidator]: ...
    @property
    def output_retries(self) -> int: ...
    @property
    def typed_output(self) -> Output | None: ...
    @property
    def handoff_targets(self) -> Sequence[Handoff]: ...
    @property
    def stages(self) -> Stages: ...
    def resolved_model(self) -> Model: ...
    def effective_tool_mode(self, has_tools: bool) -> ToolMode: ...
    def render_instructions(self, variables: Mapping[str, Any]) -> str | None: ...
    def system_message(
        self,
        instructions: str | None,
        tools: Sequence[Tool],
        tool_mode: ToolMode,
        teach_output: bool,
    ) -> Message | None: ...
    def parse_output(self, text: str) -> Any: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """The agent's settings as one run uses them, fixed when the run's tools are known: the
    resolved model and tool mode, the system message, tool specs and stop sequences of every
    request, the answer's parser, and the limits and retry policy of every step."""

    name: str
    model: Model
    tool_mode: ToolMode
    system: Message | None
    specs: tuple[ToolSpec, ...]
    stop: tuple[str, ...]
    output_schema: OutputSchema | None
    parse_output: Callable[[str], Any]
    settings: ModelSettings
    max_steps: int
    max_reply_chars: int | None
    reflect_on_tool_use: bool
    tool_limits: ToolLimits
    retry: RetryPolicy
    model_middleware: Sequence[ModelMiddleware]
    tool_middleware: Sequence[ToolMiddleware]
    context_window: ContextWindow | None = None
    usage_limits: UsageLimits | None = None
    input_guardrails: tuple[InputGuardrail, ...] = ()
    output_guardrails: tuple[OutputGuardrail, ...] = ()
    tool_guardrails: tuple[ToolGuardrail, ...] = ()
    output_validators: tuple[OutputValidator, ...] = ()
    output_retries: int = 1
    handoffs: Mapping[str, Handoff] = field(default_factory=dict)
    typed_output: Output | None = None


class Stages:
    """The optional stages of an agent's runs, settled when the agent is made: a feature that
    is off (no guardrail of a kind, no validator, no handoff) is no stage at all, so that a run
    pays nothing for it. Also the agent's plans, which runs with the same model, tools and
    system message share."""

    __slots__ = (
        "handoffs",
        "input_guardrails",
        "output_guardrails",
        "output_validators",
        "plans",
        "tool_guardrails",
        "toolbox",
    )

    def __init__(
        self,
        guardrails: Sequence[Guardrail],
        output_validators: Sequence[OutputValidator],
        handoffs: Sequence[Handoff],
    ) -> None:
        self.input_guardrails: tuple[InputGuardrail, ...] = _of_kind(guardrails, "input")
        self.output_guardrails: tuple[OutputGuardrail, ...] = _of_kind(guardrails, "output")
        self.tool_guardrails: tuple[ToolGuardrail, ...] = _of_kind(guardrails, "tool")
        self.output_validators = tuple(output_validators)
        self.handoffs: Mapping[str, Handoff] = {h.tool_name: h for h in handoffs}
        self.plans: dict[tuple[Any, ...], Plan] = {}
        # The agent's own tools as a ``Toolbox``, with the tuple it was made of: every run of
        # an agent without toolsets has the same tools, and shares the one toolbox.
        self.toolbox: tuple[tuple[Tool, ...], Toolbox] | None = None


_PLANS_KEPT = 16  # plans per agent (runs with ever-new tools or instructions make new ones)


def plan_run(agent: RunnableAgent, toolbox: Toolbox, variables: Mapping[str, Any]) -> Plan:
    """The plan of a run of ``agent`` with ``toolbox`` (its tools, toolsets' included) and the
    run's ``variables``. The system message comes from the agent's cache, and the plan from the
    agent's stages when an earlier run had the same model, tools and system message: runs of
    one agent mostly share both."""
    model = agent.resolved_model()
    profile = model.profile
    tool_mode = agent.effective_tool_mode(bool(toolbox))
    output_schema = agent.output_schema
    teach_output = output_schema is not None and (tool_mode == "react" or not profile.native_output)
    tools = tuple(toolbox)
    system = agent.system_message(
        agent.render_instructions(variables), tools, tool_mode, teach_output
    )
    stages = agent.stages
    key = (model, tools, tool_mode, id(system))
    plans = stages.plans
    plan = plans.get(key)
    if plan is not None and plan.system is system:  # the same message, not a reused id
        return plan
    plan = _plan(agent, stages, model, toolbox, tool_mode, system, output_schema)
    if len(plans) >= _PLANS_KEPT:
        plans.clear()
    plans[key] = plan
    return plan


def _plan(
    agent: RunnableAgent,
    stages: Stages,
    model: Model,
    toolbox: Toolbox,
    tool_mode: ToolMode,
    system: Message | None,
    output_schema: OutputSchema | None,
) -> Plan:
    react_stop = tool_mode == "react" and model.profile.stop_sequences
    return Plan(
        name=agent.name,
        model=model,
        tool_mode=tool_mode,
        system=system,
        specs=toolbox.specs() if tool_mode == "native" else (),
        stop=(RESPONSE_MARKER,) if react_stop else (),
        output_schema=output_schema,
        parse_output=agent.parse_output,
        settings=agent.settings,
        max_steps=agent.max_steps,
        max_reply_chars=agent.max_reply_chars,
        reflect_on_tool_use=agent.reflect_on_tool_use,
        tool_limits=agent.tool_limits,
        retry=agent.retry,
        model_middleware=agent.model_middleware,
        tool_middleware=agent.tool_middleware,
        context_window=agent.context_window,
        usage_limits=agent.usage_limits,
        input_guardrails=stages.input_guardrails,
        output_guardrails=stages.output_guardrails,
        tool_guardrails=stages.tool_guardrails,
        output_validators=stages.output_validators,
        output_retries=agent.output_retries,
        handoffs=stages.handoffs,
        typed_output=agent.typed_output,
    )


def _of_kind(guardrails: Sequence[Guardrail], kind: str) -> tuple[Any, ...]:
    """The guardrails of one kind (``input``, ``output``, ``tool``), in order."""
    return tuple(g for g in guardrails if type(g).__name__.lower().startswith(kind))
