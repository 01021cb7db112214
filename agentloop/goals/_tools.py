"""``GoalToolSet``: ``create_goal``, ``get_goal`` and ``update_goal`` for the model.

Each tool's load → mutate → save runs in its branch's serial queue, taken in the model's order
when the actions start, so parallel goal calls in one reply apply one after another. Errors are
returned, never raised: ``{"error": "INVALID_ARGS: …"}`` or ``{"error": "INVALID_STATE: …"}``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import Field

from .._context import RunContext
from ..tools._context import ToolContext
from ..tools._tool import Tool, make_activity
from ._record import DEFAULT_PREFIX, GoalRecord, GoalStatus, decode_goal, encode_goal, state_key

# Shown to the model as an enum, but checked by the tool so that a wrong value gets the
# documented INVALID_ARGS answer.
_Status = Annotated[str, Field(json_schema_extra={"enum": ["complete", "blocked"]})]


class GoalToolSet:
    """The three goal tools, as a ``Toolset``. Use ``setup_goal`` to also enforce the goal."""

    def __init__(self, *, state_key_prefix: str = DEFAULT_PREFIX) -> None:
        if state_key_prefix.startswith("temp:"):
            from .._errors import UserError

            raise UserError("a goal's state key must persist: do not use a 'temp:' prefix")
        self.prefix = state_key_prefix
        self._tools = tuple(self._build())

    async def list_tools(self, ctx: RunContext) -> Sequence[Tool]:
        return self._tools

    def key(self, branch: str) -> str:
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

        async def update_goal(ctx: ToolContext, status: _Status) -> dict[str, Any]:
            """Close the active goal: "complete" when its objective is met; "blocked" only when
            the same obstacle keeps recurring and you cannot go on without the user.

            Args:
                status: "complete" or "blocked"
            """
            if status not in ("complete", "blocked"):
                return {"error": "INVALID_ARGS: status must be 'complete' or 'blocked'"}
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
    activity = make_activity(
        fn,
        tool_name=fn.__name__,
        path=None,
        description=None,
        eager=True,
        timeout=None,
        serial_key=serial,
    )
    return Tool(name=fn.__name__, description=activity.description, activities={None: activity})
