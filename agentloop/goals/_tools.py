"""``GoalToolSet``: ``create_goal``, ``get_goal`` and ``update_goal`` for the model.

Each tool's load → mutate → save runs in its branch's serial queue, taken in the model's order
when the actions start, so parallel goal calls in one reply apply one after another. Errors are
returned, never raised: ``{"error": "INVALID_ARGS: …"}`` or ``{"error": "INVALID_STATE: …"}``.
Arguments that break a tool's schema (a missing, empty or wrongly typed ``objective``, a
``status`` other than ``complete`` / ``blocked``, an unknown argument) get the tool's own
``INVALID_ARGS`` answer, through ``tool(on_invalid=...)``, not the runtime's generic
``invalid_arguments`` error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .. import RunContext, UserError
from ..tools import Tool, ToolContext, tool
from ._record import DEFAULT_PREFIX, GoalRecord, GoalStatus, decode_goal, encode_goal, state_key

if TYPE_CHECKING:
    from pydantic import ValidationError

# What each tool says when its arguments break its schema.
_EXPECTED = {
    "create_goal": "create_goal takes one argument, objective: a non-empty string "
    'saying what "done" means',
    "get_goal": "get_goal takes no arguments",
    "update_goal": "update_goal takes one argument, status: 'complete' or 'blocked'",
}


class GoalToolSet:
    """The three goal tools, as a ``Toolset``. Use ``setup_goal`` to also enforce the goal.

    Args:
        state_key_prefix: As ``GoalOptions.state_key_prefix``.
    """

    def __init__(self, *, state_key_prefix: str = DEFAULT_PREFIX) -> None:
        if state_key_prefix.startswith("temp:"):
            raise UserError("a goal's state key must persist: do not use a 'temp:' prefix")
        self.prefix = state_key_prefix
        self._tools = tuple(self._build())

    async def list_tools(self, ctx: RunContext) -> Sequence[Tool]:
        """``create_goal``, ``get_goal`` and ``update_goal``.

        Args:
            ctx: The run that starts.
        """
        return self._tools

    def key(self, branch: str) -> str:
        """The state key of a branch's goal.

        Args:
            branch: The branch.
        """
        return state_key(self.prefix, branch)

    def _build(self) -> list[Tool]:
        prefix = self.prefix

        def serial(run: RunContext) -> str:
            return state_key(prefix, run.branch)

        async def create_goal(ctx: ToolContext, objective: str) -> dict[str, Any]:
            """Start a session goal: the objective says exactly what "done" means. While the
            goal is active you may not give a final answer; finish with update_goal.

            Args:
                objective: the completion criterion, specific enough to check
            """
            objective = objective.strip()
            if not objective:
                return {"error": "INVALID_ARGS: objective must not be blank"}
            key = serial(ctx.run)
            current = decode_goal(ctx.state.get(key))
            if current is not None and current.status is GoalStatus.ACTIVE:
                return {
                    "error": "INVALID_STATE: an active goal already exists; finish it with "
                    "update_goal before creating another",
                    "goal": current.to_camel(),
                }
            goal = GoalRecord.new(objective)
            ctx.state[key] = encode_goal(goal)
            return {"message": "Goal created.", "goal": goal.to_camel()}

        async def get_goal(ctx: ToolContext) -> dict[str, Any]:
            """Read the session goal and its status."""
            goal = decode_goal(ctx.state.get(serial(ctx.run)))
            if goal is None:
                return {"message": "No session goal is set."}
            return {"message": f"The goal is {goal.status.value}.", "goal": goal.to_camel()}

        async def update_goal(
            ctx: ToolContext, status: Literal["complete", "blocked"]
        ) -> dict[str, Any]:
            """Close the active goal: "complete" when its objective is met; "blocked" only when
            the same obstacle keeps recurring and you cannot go on without the user.

            Args:
                status: "complete" or "blocked"
            """
            key = serial(ctx.run)
            goal = decode_goal(ctx.state.get(key))
            if goal is None:
                return {"error": "INVALID_STATE: there is no goal to update"}
            if goal.status.terminal:
                return {
                    "error": f"INVALID_STATE: the goal is already {goal.status.value} (terminal)",
                    "goal": goal.to_camel(),
                }
            goal = goal.with_status(GoalStatus(status))
            ctx.state[key] = encode_goal(goal)
            return {"message": f"Goal marked {status}.", "goal": goal.to_camel()}

        return [_tool(fn, serial) for fn in (create_goal, get_goal, update_goal)]


def _tool(fn: Callable[..., Any], serial: Callable[[RunContext], str]) -> Tool:
    return tool(serial_key=serial, on_invalid=_invalid_args(_EXPECTED[fn.__name__]))(fn)


def _invalid_args(expected: str) -> Callable[[ValidationError], dict[str, Any]]:
    """The tool's answer to arguments that break its schema: what it expects, then what was
    wrong (at most three problems, as pydantic words them)."""

    def answer(exc: ValidationError) -> dict[str, Any]:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)[:3]
        ]
        return {"error": f"INVALID_ARGS: {expected} ({'; '.join(problems)})"}

    return answer
