"""Goal enforcement: a model middleware that will not let a premature final answer end a run
while the branch's goal is active."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .. import Agent, ModelCall, UserError
from ..models import Message, ModelRequest, ModelResponse
from ._record import DEFAULT_PREFIX, GoalRecord, GoalStatus, decode_goal, state_key
from ._tools import GoalToolSet

logger = logging.getLogger("agentloop.goals")

GUIDANCE_MARKER = "Session goal protocol:"

DEFAULT_GUIDANCE = f"""{GUIDANCE_MARKER}
- For a task that takes several steps, call create_goal(objective) first, with an objective that
  says exactly what "done" means.
- While a goal is active you may not give a final answer: keep working, then call
  update_goal("complete") once the objective is met, and answer after that.
- Call update_goal("blocked") only when the same obstacle keeps recurring and you cannot go on
  without the user; not because the task is hard, slow or unfinished.
- Call one goal tool per reply; never create_goal and update_goal together."""

DEFAULT_NUDGE = (
    "Your goal is still active, so that was not accepted as a final answer "
    "(attempt {attempt} of {max_retries}). Objective: {objective}\n"
    'Keep working toward it, then call update_goal("complete") — or update_goal("blocked") '
    "if you truly cannot go on — before you answer."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryEvent:
    """What ``on_retry`` observes: an interception (``blocked``) or the spent budget
    (``exhausted``, after which the final answer passes).

    Args:
        reason: ``blocked`` or ``exhausted``.
        agent_name: The agent's name.
        branch: The run's branch, whose goal it is.
        goal: The goal, as it stood.
        attempt_number: The interception's number in this run and branch, from 1.
        max_retries: The budget (``GoalOptions.max_retries``).
    """

    reason: Literal["blocked", "exhausted"]
    agent_name: str
    branch: str
    goal: GoalRecord
    attempt_number: int
    max_retries: int


@dataclass(frozen=True, kw_only=True, slots=True)
class GoalOptions:
    """How goals work for an agent (see ``setup_goal``).

    Args:
        state_key_prefix: Goals live under ``<prefix>:<branch>`` in the session state (never
            ``temp:``).
        inject_guidance: Add ``guidance`` to the system prompt.
        guidance: The goal protocol taught to the model.
        max_retries: Interceptions per run and branch; then the answer passes.
        nudge_template: The message after an intercepted answer; ``{attempt}``,
            ``{max_retries}`` and ``{objective}`` are filled in.
        on_retry: Called with a ``RetryEvent`` on each interception and when the budget is
            spent.
    """

    state_key_prefix: str = DEFAULT_PREFIX
    inject_guidance: bool = True
    guidance: str = DEFAULT_GUIDANCE
    max_retries: int = 3
    nudge_template: str = DEFAULT_NUDGE
    on_retry: Callable[[RetryEvent], None] | None = None

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise UserError("GoalOptions.max_retries must be 0 or more")
        if self.state_key_prefix.startswith("temp:"):
            raise UserError("a goal's state key must persist: do not use a 'temp:' prefix")
        try:
            self.nudge_template.format(attempt=1, max_retries=1, objective="x")
        except (KeyError, IndexError, ValueError) as exc:
            raise UserError(
                f"nudge_template may use {{attempt}}, {{max_retries}} and {{objective}}: {exc}"
            ) from None


class GoalEnforcement:
    """The middleware. It holds no per-run state: the retry budget lives in the run's scratch,
    which is per run and per branch, so concurrent runs and sub-agents each get their own.

    Args:
        options: How goals work.
    """

    requires_reflection = True

    def __init__(self, options: GoalOptions) -> None:
        self.options = options

    async def __call__(self, request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        options = self.options
        run = request.run
        if run is None:  # called outside a run: nothing to enforce
            return await call_next(request)
        if options.inject_guidance:
            request = _with_guidance(request, options.guidance)
        key = state_key(options.state_key_prefix, run.branch)
        scratch = run.scratch(self)
        attempt_request = request
        while True:
            response = await call_next(attempt_request)
            goal = decode_goal(run.state.get(key))
            if (
                goal is None
                or goal.status is not GoalStatus.ACTIVE
                or not run.is_final_answer(response)
            ):
                return response
            used: int = scratch.get("retries", 0)
            if used >= options.max_retries:
                if not scratch.get("exhausted"):
                    scratch["exhausted"] = True
                    self._notify("exhausted", run.agent_name, run.branch, goal, used)
                return response
            scratch["retries"] = used + 1
            response.discard("goal")
            self._notify("blocked", run.agent_name, run.branch, goal, used + 1)
            nudge = options.nudge_template.format(
                attempt=used + 1, max_retries=options.max_retries, objective=goal.objective
            )
            attempt_request = request.with_message(Message.user(nudge))

    def _notify(
        self,
        reason: Literal["blocked", "exhausted"],
        agent_name: str,
        branch: str,
        goal: GoalRecord,
        attempt: int,
    ) -> None:
        if self.options.on_retry is None:
            return
        event = RetryEvent(
            reason=reason,
            agent_name=agent_name,
            branch=branch,
            goal=goal,
            attempt_number=attempt,
            max_retries=self.options.max_retries,
        )
        try:
            self.options.on_retry(event)
        except Exception:
            logger.exception("goal on_retry callback failed (ignored)")


def _with_guidance(request: ModelRequest, guidance: str) -> ModelRequest:
    system = request.system or ""
    marker = guidance.splitlines()[0] if guidance else ""
    if marker and marker in system:
        return request
    return request.with_system(f"{system}\n\n{guidance}" if system else guidance)


def setup_goal(agent: Agent, options: GoalOptions | None = None) -> Agent:
    """A new agent with the goal tools and goal enforcement (outermost middleware).

    The root run's branch is the agent's name, so its goal lives under ``goal:<name>``; a
    sub-agent's under ``goal:<parent>.<child>``.

    Args:
        agent: The agent to extend (unchanged: a new one is returned).
        options: How goals work (default: ``GoalOptions()``).
    """
    options = options or GoalOptions()
    toolset = GoalToolSet(state_key_prefix=options.state_key_prefix)
    return agent.replace(
        tools=(*agent.tools, toolset),
        model_middleware=(GoalEnforcement(options), *agent.model_middleware),
    )
