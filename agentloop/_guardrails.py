"""Guardrails: typed tripwires on a run's input, its final answer and its tool calls; and output
validators, which ask the model again instead of ending the run.

A guardrail's check returns a ``Tripwire`` to trip (ending the run with ``guardrail_tripped``)
or ``None`` to let the run go on. A check is an ``async def`` or a plain ``def`` (called on the
event loop, like a plain ``def`` middleware: keep it quick). The engine runs them at fixed points (``_controls``); these
are only the values an agent is configured with.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ._errors import GuardrailTripped, UserError

if TYPE_CHECKING:
    from ._middleware import ToolCall
    from ._steps import ActionResult
    from .models._types import RunContext

GuardrailStage: TypeAlias = Literal["input", "output", "tool_call", "tool_result"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Tripwire:
    """What a guardrail's check returns to trip: the run ends with ``guardrail_tripped``.

    Args:
        reason: Why, in words (the error's message).
        info: What the guardrail found, as JSON-compatible data (the error's
            ``details["info"]``).
    """

    reason: str = "tripped"
    info: Any = None


TripwireCheck: TypeAlias = "Tripwire | Awaitable[Tripwire | None] | None"


async def outcome(check: TripwireCheck) -> Tripwire | None:
    """What a check returned, awaited if it is awaitable (an ``async def`` check)."""
    if inspect.isawaitable(check):
        return await check
    return check


@dataclass(frozen=True, slots=True)
class InputGuardrail:
    """A check of the run's input before its first model call: ``async check(run, input)``.

    Blocking (the default), the first model call waits for it. ``concurrent=True`` runs it
    alongside that call, which saves its latency: a trip then cancels the call and withdraws
    what it streamed (``AttemptDiscarded(reason="guardrail")``); actions the call started
    meanwhile still run to their end.

    Args:
        check: ``async (run_context, input_text) -> Tripwire | None`` (or a plain ``def``).
        name: The guardrail's name in the error (the check's ``__name__`` by default).
        concurrent: Run alongside the first model call instead of before it.
    """

    check: Callable[[RunContext[Any], str], TripwireCheck]
    _: KW_ONLY
    name: str = ""
    concurrent: bool = False

    def __post_init__(self) -> None:
        _name(self, self.check)


@dataclass(frozen=True, slots=True)
class OutputGuardrail:
    """A check of the final answer before ``RunFinished``: ``async check(run, output)``, with
    the output as the result would have it (typed, with ``output_type``). A streamed answer
    streams as usual; a trip withdraws it (``AttemptDiscarded(reason="guardrail")``) and the
    result has no output and no text. What it tripped on is kept nowhere after that: not in
    the step, a later event or the session; the error keeps the tripwire's reason and info.

    Args:
        check: ``async (run_context, output) -> Tripwire | None`` (or a plain ``def``).
        name: The guardrail's name in the error (the check's ``__name__`` by default).
    """

    check: Callable[[RunContext[Any], Any], TripwireCheck]
    _: KW_ONLY
    name: str = ""

    def __post_init__(self) -> None:
        _name(self, self.check)


@dataclass(frozen=True, slots=True)
class ToolGuardrail:
    """Checks of a tool call before it runs (``before(call)``) and of its result after
    (``after(call, result)``). A trip ends the run once the step's actions are done: a call
    tripped before it runs never runs, a result tripped after is never shown to the model.

    Args:
        before: ``async (call) -> Tripwire | None`` (or a plain ``def``), before the call runs.
        after: ``async (call, result) -> Tripwire | None`` (or a plain ``def``), on its result.
        name: The guardrail's name in the error (the first check's ``__name__`` by default).
        tools: The tools it checks, by name (all, when empty).
    """

    before: Callable[[ToolCall[Any]], TripwireCheck] | None = None
    after: Callable[[ToolCall[Any], ActionResult], TripwireCheck] | None = None
    _: KW_ONLY
    name: str = ""
    tools: frozenset[str] | tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check = self.before or self.after
        if check is None:
            raise UserError("a ToolGuardrail needs before=, after= or both")
        _name(self, check)
        object.__setattr__(self, "tools", frozenset(self.tools))

    def applies_to(self, tool: str) -> bool:
        """Whether it checks calls of ``tool``.

        Args:
            tool: The tool's name.
        """
        return not self.tools or tool in self.tools


Guardrail: TypeAlias = InputGuardrail | OutputGuardrail | ToolGuardrail

OutputValidator: TypeAlias = Callable[["RunContext[Any]", Any], Awaitable[Any]]
"""``async (run_context, output) -> output``: return the output (or a corrected one), or raise
``ModelRetry(reason)`` to ask the model again with the reason (``Agent(output_retries=...)``
bounds how often)."""


def tripped(name: str, stage: GuardrailStage, wire: Tripwire) -> GuardrailTripped:
    """The run's error for a tripped guardrail."""
    return GuardrailTripped(
        f"guardrail {name!r} tripped on the {stage.replace('_', ' ')}: {wire.reason}",
        details={"guardrail": name, "stage": stage, "info": wire.info},
    )


def check_guardrails(guardrails: object) -> tuple[Guardrail, ...]:
    """``Agent(guardrails=...)`` as given, checked."""
    if not isinstance(guardrails, list | tuple):
        raise UserError(
            "guardrails must be a list of InputGuardrail, OutputGuardrail, ToolGuardrail"
        )
    for guardrail in guardrails:
        if not isinstance(guardrail, InputGuardrail | OutputGuardrail | ToolGuardrail):
            raise UserError(
                f"{guardrail!r} is not a guardrail: wrap the check in InputGuardrail, "
                "OutputGuardrail or ToolGuardrail"
            )
    return tuple(guardrails)


def _name(guardrail: object, check: Callable[..., Any]) -> None:
    if not callable(check):
        raise UserError(f"a guardrail's check must be a function (async def or def), not {check!r}")
    if not getattr(guardrail, "name", ""):
        object.__setattr__(guardrail, "name", getattr(check, "__name__", type(check).__name__))
