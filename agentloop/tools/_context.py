"""``ToolContext``: what a tool may ask of the run that called it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, final

from typing_extensions import TypeVar

if TYPE_CHECKING:
    from .._context import StateView
    from .._decisions import Approve, Deny, Edit
    from .._steps import Action
    from ..models._types import RunContext

DepsT = TypeVar("DepsT", default=Any)

ProgressSink: TypeAlias = (
    "Callable[[RunContext[Any], Action, float, float | None, str | None], Awaitable[None]]"
)
"""Where the engine sends a tool's progress reports: ``(run, action, progress, total,
message)``. The run is an argument, not bound in: one sink serves every run of an agent."""

Asker: TypeAlias = (
    "Callable[[RunContext[Any], Action, Any], Awaitable[Approve | Deny | Edit | None]]"
)
"""How the engine asks the run's live approver about a running call: ``(run, action,
about)``."""


@final
class ToolContext(Generic[DepsT]):
    """Injected into a tool that declares a parameter annotated ``ToolContext`` (or
    ``ToolContext[Deps]``, which types ``deps``: what the agent's ``deps_type`` says).

    ``idempotency_key`` is stable across a re-run of the same step after a crash, for every
    tool (``session:run:step:tool:arguments:ordinal``, the arguments as a digest of their
    canonical JSON, the ordinal the call's place among equal calls of its reply): it is made
    of what the call asks, not the provider's call id, which a re-asked step does not repeat.
    A tool uses it to do its work at most once. (A step re-asked after a crash whose model
    asks something else gets other keys: it is another call.)
    After a sync tool was abandoned (cancelled or timed out while its thread still runs) its
    ``state`` becomes read-only.

    Args:
        run: The run that called the tool.
        action: The action being run.
        step: The number of the step whose reply held it.
        ordinal: How many equal calls (same tool, same arguments) came before it in its reply.
        progress: Where ``report_progress`` sends its reports (the engine's; without it they
            are dropped).
        asker: How ``ask_approver`` reaches the run's approver (the engine's; without it
            nothing is asked).
    """

    __slots__ = ("_abandoned", "_asker", "_progress", "action", "ordinal", "run", "step")

    def __init__(
        self,
        *,
        run: RunContext[DepsT],
        action: Action,
        step: int,
        ordinal: int = 0,
        progress: ProgressSink | None = None,
        asker: Asker | None = None,
    ) -> None:
        self.run = run
        self.action = action
        self.step = step
        self.ordinal = ordinal
        self._progress = progress  # the engine's: report_progress() sends there
        self._asker = asker  # the engine's: ask_approver() asks there
        self._abandoned = False  # see abandon()

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def agent_name(self) -> str:
        return self.run.agent_name

    @property
    def branch(self) -> str:
        return self.run.branch

    @property
    def session_id(self) -> str | None:
        return self.run.session_id

    @property
    def deps(self) -> DepsT:
        return self.run.deps

    @property
    def state(self) -> StateView:
        state = self.run.state
        return state.read_only() if self._abandoned else state

    @property
    def idempotency_key(self) -> str:
        action = self.action
        what = call_identity(action.name, action.path, action.input)
        return f"{self.session_id or '-'}:{self.run_id}:{self.step}:{what}:{self.ordinal}"

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Stream an ``ActionProgress`` event for this call: how far the tool is (``progress``
        of ``total``, if known) and what it does now. A caller's progress bar, not a record:
        the step keeps no trace of it.

        Args:
            progress: How far the tool is, in its own unit.
            total: What ``progress`` reaches when it is done, if known.
            message: What it is doing now.
        """
        sink = self._progress
        if sink is None or self._abandoned:  # no run streams it (a test's context, a worker's)
            return
        total = None if total is None else float(total)
        await sink(self.run, self.action, float(progress), total, message)

    async def ask_approver(self, about: Any) -> Approve | Deny | Edit | None:
        """Ask the run's live approver (``Agent(approver=...)``) about this running call, with
        ``about`` as the pending call's ``input`` (what the person is asked: an MCP server's
        elicitation, say). ``ActionAwaiting`` and ``ActionDecided`` stream as for an approval.
        ``None`` when the run has no approver, or it left the question undecided: then the
        call's result is set aside and the run waits on a pending call of kind
        ``elicitation``; resumed with its decision, the call runs again (same tag and
        idempotency key) and this returns that decision.

        Args:
            about: What the approver is asked (JSON-like).
        """
        asker = self._asker
        if asker is None or self._abandoned:
            return None
        return await asker(self.run, self.action, about)

    def __repr__(self) -> str:
        return f"ToolContext(run_id={self.run_id!r}, tag={self.action.tag!r})"


def call_identity(name: str, path: str | None, arguments: Any) -> str:
    """What a call asks, whatever its id: ``tool[.path]:digest`` of its canonical arguments
    (keys sorted, so an equal call whose keys come in another order is the same)."""
    try:
        canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        canonical = repr(arguments)
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{name if path is None else f'{name}.{path}'}:{digest}"


def abandon(ctx: ToolContext[Any]) -> None:
    """The runtime stopped waiting for this sync tool's thread (cancelled or timed out) while
    the thread still runs: from now on the tool's ``state`` is read-only, so that a tool the
    run has given up on cannot change it behind the run's back."""
    ctx._abandoned = True  # pyright: ignore[reportPrivateUsage]  # the engine's seam, hidden from tools
