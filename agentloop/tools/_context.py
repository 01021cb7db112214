"""``ToolContext``: what a tool may ask of the run that called it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, final

from typing_extensions import TypeVar

if TYPE_CHECKING:
    from .._context import StateView
    from .._steps import Action
    from ..models._types import RunContext

DepsT = TypeVar("DepsT", default=Any)


@final
class ToolContext(Generic[DepsT]):
    """Injected into a tool that declares a parameter annotated ``ToolContext`` (or
    ``ToolContext[Deps]``, which types ``deps``: what the agent's ``deps_type`` says).

    ``idempotency_key`` is stable across a re-run of the same step after a crash
    (``session:run:step:tag``): tools with side effects use it to do their work at most once.
    After a sync tool was abandoned (cancelled or timed out while its thread still runs) its
    ``state`` becomes read-only.

    Args:
        run: The run that called the tool.
        action: The action being run.
        step: The number of the step whose reply held it.
    """

    __slots__ = ("_abandoned", "action", "run", "step")

    def __init__(self, *, run: RunContext[DepsT], action: Action, step: int) -> None:
        self.run = run
        self.action = action
        self.step = step
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
        return f"{self.session_id or '-'}:{self.run_id}:{self.step}:{self.action.tag}"

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
        from .._events import ActionProgress
        from .._run import run_of

        try:
            run = run_of(self.run)
        except TypeError:  # a context made outside the engine (a test's, another driver's)
            return
        if self._abandoned or not run.emitting:
            return
        action = self.action
        await run.emit(
            ActionProgress,
            attempt=action.attempt,
            tag=action.tag,
            name=action.name,
            progress=float(progress),
            total=None if total is None else float(total),
            message=message,
        )

    def __repr__(self) -> str:
        return f"ToolContext(run_id={self.run_id!r}, tag={self.action.tag!r})"


def abandon(ctx: ToolContext[Any]) -> None:
    """The runtime stopped waiting for this sync tool's thread (cancelled or timed out) while
    the thread still runs: from now on the tool's ``state`` is read-only, so that a tool the
    run has given up on cannot change it behind the run's back."""
    ctx._abandoned = True  # pyright: ignore[reportPrivateUsage]  # the engine's seam, hidden from tools
