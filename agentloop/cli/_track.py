"""What every view needs to know about a run in flight: when each model stream and each action
started and ended, whether an action started while its reply was still streaming, and the goal.

Views call ``Tracker.see(event)`` first, then draw. Times are ``anyio.current_time()`` relative to
the tracker's start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from .. import (
    ActionAwaiting,
    ActionDecided,
    ActionFinished,
    ActionResult,
    ActionStarted,
    AttemptDiscarded,
    Event,
    ModelCallFinished,
    ModelCallStarted,
    RunFailed,
    RunFinished,
    RunResult,
    RunStarted,
    RunWaiting,
)

if TYPE_CHECKING:
    from ..goals import GoalRecord

GOAL_TOOLS = frozenset({"create_goal", "get_goal", "update_goal"})


@dataclass(slots=True)
class AttemptInfo:
    started: float
    model: str
    finished: float | None = None
    discarded: str | None = None


@dataclass(slots=True)
class ActionInfo:
    name: str
    path: str | None
    input: Any
    attempt: tuple[str, int]
    started: float
    during_stream: bool
    finished: float | None = None
    result: ActionResult | None = None


@dataclass(slots=True)
class Timing:
    """The figures of a finished run, for the summary."""

    wall: float
    model: float
    model_calls: int
    tools: float
    actions: int
    overlapped: float  # tool time spent while its own reply was still streaming

    @property
    def sequential(self) -> float:
        """The same work one piece after another: each stream, then each tool in turn."""
        return self.model + self.tools

    @property
    def saved(self) -> float:
        return max(0.0, self.sequential - self.wall)


@dataclass(slots=True)
class Tracker:
    start: float = field(default_factory=anyio.current_time)
    root_run_id: str | None = None
    attempts: dict[tuple[str, int], AttemptInfo] = field(default_factory=dict)
    actions: dict[tuple[str, str], ActionInfo] = field(default_factory=dict)
    goal: GoalRecord | None = None
    result: RunResult | None = None
    failure: str | None = None
    ended: float | None = None

    def now(self) -> float:
        return anyio.current_time() - self.start

    def is_root(self, event: Event) -> bool:
        return event.parent_run_id is None

    def see(self, event: Event) -> None:
        now = self.now()
        match event:
            case RunStarted() if self.root_run_id is None and event.parent_run_id is None:
                self.root_run_id = event.run_id
                self.start = anyio.current_time()  # times count from the run's start
            case ModelCallStarted():
                self.attempts[(event.run_id, event.attempt)] = AttemptInfo(now, event.model)
            case ModelCallFinished():
                info = self.attempts.get((event.run_id, event.attempt))
                if info is not None:
                    info.finished = now
            case AttemptDiscarded():
                info = self.attempts.get((event.run_id, event.attempt))
                if info is not None:
                    info.discarded = event.reason
            case ActionStarted():
                key = (event.run_id, event.attempt)
                attempt = self.attempts.get(key)
                streaming = attempt is not None and attempt.finished is None
                self.actions[(event.run_id, event.tag)] = ActionInfo(
                    event.name, event.path, event.input, key, now, streaming
                )
            case ActionFinished():
                action = self.actions.get((event.run_id, event.result.tag))
                if action is not None:
                    action.finished = now
                    action.result = event.result
                self._goal_from(event.result)
            case RunFinished() | RunWaiting() if event.parent_run_id is None:
                self.result = event.result
                self.ended = now
            case RunFailed() if event.parent_run_id is None:
                self.failure = f"{event.error.kind}: {event.error.message}"
                self.ended = now
            case _:
                pass

    def _goal_from(self, result: ActionResult) -> None:
        if result.name not in GOAL_TOOLS or not isinstance(result.output, dict):
            return
        from ..goals import get_goal_record  # here: runs without a goal never get this far

        goal = get_goal_record(result.output)  # the output holds it under "goal", as the state does
        if goal is not None:
            self.goal = goal

    def action(self, event: ActionStarted | ActionFinished) -> ActionInfo | None:
        tag = event.tag if isinstance(event, ActionStarted) else event.result.tag
        return self.actions.get((event.run_id, tag))

    def timing(self) -> Timing:
        wall = self.ended if self.ended is not None else self.now()
        model = sum(
            (a.finished if a.finished is not None else wall) - a.started
            for a in self.attempts.values()
        )
        tools = 0.0
        overlapped = 0.0
        for action in self.actions.values():
            end = action.finished if action.finished is not None else wall
            tools += end - action.started
            attempt = self.attempts.get(action.attempt)
            if action.during_stream and attempt is not None:
                stream_end = attempt.finished if attempt.finished is not None else wall
                overlapped += max(0.0, min(end, stream_end) - action.started)
        return Timing(
            wall=wall,
            model=model,
            model_calls=len(self.attempts),
            tools=tools,
            actions=len(self.actions),
            overlapped=overlapped,
        )


def short(text: str, limit: int = 72) -> str:
    """One line, at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_text(name: str, path: str | None, input: Any, limit: int = 72) -> str:
    """``travel_desk.train(origin="London", destination="Paris")``."""
    label = tool_label(name, path)
    if isinstance(input, dict):
        args = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in input.items()
        )
    elif input is None:
        args = ""
    else:
        args = json.dumps(input, ensure_ascii=False, default=str)
    return short(f"{label}({args})", limit)


def tool_label(name: str, path: str | None) -> str:
    """``toolkit.activity``, or the tool's name (ReAct names a plain tool's path after it)."""
    return f"{name}.{path}" if path and path != name else name


def result_text(result: ActionResult, limit: int = 72) -> str:
    """What an action returned, on one line (a goal tool's ``message``; an error's text)."""
    if result.error is not None:
        return short(f"{result.error_kind or 'error'}: {result.error}", limit)
    output = result.output
    if result.name in GOAL_TOOLS and isinstance(output, dict):
        if "error" in output:
            return short(str(output["error"]), limit)
        if "message" in output:
            return short(str(output["message"]), limit)
    return short(result.content, limit)


def answer_text(result: RunResult) -> str:
    """The answer as text: the model's own words, or the typed output."""
    if result.text is not None and not hasattr(result.output, "model_dump_json"):
        return result.text
    output: Any = result.output
    if hasattr(output, "model_dump_json"):
        return str(output.model_dump_json(indent=2))
    return result.text if result.text is not None else str(output)


def awaiting_text(event: ActionAwaiting) -> str:
    """``awaits approval: transfer(amount=5) · id 'call_1'``."""
    call = event.call
    what = {
        "approval": "awaits approval",
        "external": "awaits its result (external)",
        "elicitation": "awaits an answer to its question",
    }[call.kind]
    return f"{what}: {call_text(call.name, call.path, call.input)} · id {call.id!r}"


def decided_text(event: ActionDecided) -> str:
    """``approved transfer (by the approver)``, ``denied transfer: too much (timed out)``."""
    label = tool_label(event.call.name, event.call.path)
    by = {"approver": "by the approver", "timeout": "timed out", "resume": "on resume"}[event.by]
    match event.decision:
        case "approve":
            return f"approved {label} ({by})"
        case "deny":
            return f"denied {label}: {short(event.reason or '', 60)} ({by})"
        case "edit":
            return f"edited {call_text(event.call.name, event.call.path, event.arguments)} ({by})"
        case _:
            return f"result of {label} supplied ({by})"


def waiting_text(result: RunResult) -> str:
    """``waiting on decisions for 'a', 'b': resume with them``."""
    ids = ", ".join(repr(p.id) for p in result.pending)
    return f"waiting on decisions for {ids}: resume the run with them"


def goal_text(goal: GoalRecord) -> str:
    return f"goal [{goal.status.value}]: {short(goal.objective, 60)}"


def discard_reason(event: AttemptDiscarded) -> str:
    """Why an attempt was discarded; for a retry, the error and the wait before the next one."""
    error = event.error
    if event.reason == "retry" and error is not None:
        wait = "" if event.retry_in is None else f" in {seconds_text(event.retry_in)}"
        return f"the model call failed ({error.kind}: {short(error.message, 120)}); retrying{wait}"
    return DISCARD_REASONS.get(event.reason, event.reason)


def seconds_text(seconds: float) -> str:
    """``0.42 s``, ``3.5 s``, ``12 s``."""
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


DISCARD_REASONS = {
    "goal": "the session goal is still active, so the model was asked to keep working",
    "retry": "the model call failed (it is retried while attempts remain)",
    "middleware": "a middleware asked the model again",
}
