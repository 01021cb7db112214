"""A run's events in the wire protocols front ends already speak.

An encoder turns each agentloop event into zero or more protocol messages (JSON values), and
keeps what it needs between them (which text or reasoning part is open, which tool call an
action is). Its state is a fold over the events, so a stream resumed at any ``seq`` rebuilds it
by encoding the earlier events again and sending only what follows.

- ``agentloop``: each event's own JSON (``event_from_json`` reads it back).
- ``ag-ui``: the AG-UI protocol (the ``ag-ui-protocol`` package's events).
- ``vercel``: the Vercel AI SDK's UI message stream (``x-vercel-ai-ui-message-stream: v1``).

Thoughts are reasoning, actions are tool calls (their arguments streamed, then their input and
output), answers and undecided text are text. Neither protocol can take back text it streamed:
a withdrawn draft ends its parts and is announced by a custom message naming them
(``agentloop.attempt_discarded``), for the front end to strike through or drop. A running
tool's progress is a custom message too (``agentloop.action_progress``; in the Vercel stream a
transient data part, which ``useChat`` hands to ``onData`` and keeps out of the message).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic_core import to_json

from agentloop import (
    ActionArgsDelta,
    ActionAwaiting,
    ActionDecided,
    ActionFinished,
    ActionProgress,
    ActionStarted,
    AnswerDelta,
    AttemptDiscarded,
    Event,
    ModelCallFinished,
    ModelCallStarted,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWaiting,
    StepFinished,
    TextDelta,
    ThoughtDelta,
)

Protocol_ = Literal["agentloop", "ag-ui", "vercel"]
PROTOCOLS: tuple[Protocol_, ...] = ("agentloop", "ag-ui", "vercel")


class Encoder(Protocol):
    """Turns events into protocol messages (JSON values); ``headers`` go on the response."""

    headers: dict[str, str]

    def encode(self, event: Event) -> list[Any]:
        """The protocol messages for ``event`` (none, one or several).

        Args:
            event: The next event of the run.
        """
        ...

    def end(self) -> list[Any]:
        """What follows the last event (``[DONE]`` for the Vercel stream)."""
        ...

    def encode_json(self, event: Event) -> list[bytes]:
        """``encode``'s messages serialised, each as compact JSON (a bare word as itself):
        what a stream's ``data:`` lines carry, made without building JSON values first.

        Args:
            event: The next event of the run.
        """
        ...

    def end_json(self) -> list[bytes]:
        """``end``'s messages serialised as ``encode_json``'s."""
        ...


def _wire(message: Any) -> bytes:
    """A message as the wire carries it: compact JSON, a bare word (``[DONE]``) as itself."""
    return message.encode() if isinstance(message, str) else to_json(message)


def encoder(protocol: str, *, thread_id: str = "") -> Encoder:
    """A fresh encoder for ``protocol`` (``agentloop``, ``ag-ui`` or ``vercel``).

    Args:
        protocol: The protocol's name.
        thread_id: The conversation's id (the session), for AG-UI's ``threadId``.
    """
    if protocol == "agentloop":
        return AgentloopEncoder()
    if protocol == "ag-ui":
        return AgUiEncoder(thread_id=thread_id)
    if protocol == "vercel":
        return VercelEncoder()
    raise ValueError(f"unknown protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")


class AgentloopEncoder:
    """Each event as its own JSON."""

    headers: dict[str, str] = {}  # noqa: RUF012  read only

    def encode(self, event: Event) -> list[Any]:
        return [json.loads(event.to_json())]

    def end(self) -> list[Any]:
        return []

    def encode_json(self, event: Event) -> list[bytes]:
        return [event.to_json().encode()]  # by the event's class: cheaper than to_json(event)

    def end_json(self) -> list[bytes]:
        return []


@dataclass(slots=True)
class _Parts:
    """Which text and reasoning parts are open, per (run, attempt), and the tool call ids."""

    open_text: dict[tuple[str, int], str] = field(default_factory=dict)
    open_reasoning: dict[tuple[str, int], str] = field(default_factory=dict)
    sections: dict[tuple[str, int], int] = field(default_factory=dict)
    by_attempt: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    calls: dict[tuple[str, int, int], str] = field(default_factory=dict)
    call_by_tag: dict[tuple[str, int, str], str] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)
    complete: set[str] = field(default_factory=set)  # calls whose input is final
    pending_args: dict[str, list[str]] = field(default_factory=dict)
    steps: dict[str, str] = field(default_factory=dict)  # run → its open step's name
    resumed: set[tuple[str, str]] = field(default_factory=set)  # (run, tag) decided on resume
    awaiting: dict[str, str] = field(default_factory=dict)  # pending call id → its call's id

    def decided(self, event: ActionDecided) -> None:
        if event.by == "resume":
            self.resumed.add((event.run_id, event.call.tag))

    def waiting(self, event: ActionAwaiting) -> str:
        """The id of the call ``event`` awaits a decision on (announced by its args)."""
        call = event.call
        ident = self.awaiting[call.id] = self.latest_call(event.run_id, call.tag, call.id)
        return ident

    def part_id(self, kind: str, event: Event, attempt: int) -> str:
        ident = f"{kind}-{event.run_id[:12]}-{attempt}-{len(self.by_attempt.get((event.run_id, attempt), ()))}"
        self.by_attempt.setdefault((event.run_id, attempt), []).append(ident)
        return ident

    def call_id(self, run_id: str, attempt: int, index: int, tag: str | None) -> str:
        key = (run_id, attempt, index)
        ident = self.calls.get(key)
        if ident is None:
            ident = (
                _call_id(run_id, attempt, tag) if tag else f"call-{run_id[:12]}-{attempt}-{index}"
            )
            self.calls[key] = ident
        if tag is not None:
            self.call_by_tag[(run_id, attempt, tag)] = ident
        return ident

    def call_for(self, run_id: str, attempt: int, tag: str) -> str:
        found = self.call_by_tag.get((run_id, attempt, tag))
        if found is not None:
            return found
        ident = _call_id(run_id, attempt, tag)
        self.call_by_tag[(run_id, attempt, tag)] = ident
        return ident

    def announced(self, event: ActionStarted) -> bool:
        """Whether ``event``'s call was announced by the stream before this one: a resumed run
        starts with the decisions on calls its waiting run announced."""
        return (event.run_id, event.tag) in self.resumed

    def latest_call(self, run_id: str, tag: str, fallback: str) -> str:
        """The id of the run's most recent call tagged ``tag`` (a pending call's)."""
        found = [(k[1], v) for k, v in self.call_by_tag.items() if k[0] == run_id and k[2] == tag]
        return max(found)[1] if found else fallback


def _call_id(run_id: str, attempt: int, tag: str) -> str:
    """A call's id on the wire: its tag in the run's attempt (tags repeat from step to step),
    the same in the stream that announced it, its interrupt, and the resumed run's stream."""
    return f"{tag}-{run_id[:12]}-{attempt}"


def _output(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def _content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(_output(value))


def _progress(ident: str, event: ActionProgress) -> dict[str, Any]:
    """A running tool's progress report, for the call the protocol knows as ``ident``."""
    value: dict[str, Any] = {"toolCallId": ident, "name": event.name, "progress": event.progress}
    if event.total is not None:
        value["total"] = event.total
    if event.message is not None:
        value["message"] = event.message
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class _AgUiMessage:
    """Builds one AG-UI message as ``ag-ui-protocol``'s model of that name dumps it (by alias,
    without ``None`` fields), as a plain JSON value: a model built, validated and dumped per
    message cost six times the encoding. ``test_protocols`` validates each against the
    package's models, and the AG-UI client reads them."""

    __slots__ = ("kind",)

    def __init__(self, kind: str | None) -> None:
        self.kind = kind

    def __call__(self, **fields: Any) -> dict[str, Any]:
        message: dict[str, Any] = {} if self.kind is None else {"type": self.kind}
        for name, value in fields.items():
            if value is not None:
                alias = _ALIASES.get(name)
                if alias is None:  # bounded: the encoder's own keyword names
                    alias = _ALIASES[name] = _camel(name)
                message[alias] = value
        return message


_ALIASES: dict[str, str] = {}  # field name → its alias


class _AgUi:
    """The ``ag_ui.core`` names the encoder uses, each an ``_AgUiMessage``."""

    RunStartedEvent = _AgUiMessage("RUN_STARTED")
    RunFinishedEvent = _AgUiMessage("RUN_FINISHED")
    RunErrorEvent = _AgUiMessage("RUN_ERROR")
    StepStartedEvent = _AgUiMessage("STEP_STARTED")
    StepFinishedEvent = _AgUiMessage("STEP_FINISHED")
    TextMessageStartEvent = _AgUiMessage("TEXT_MESSAGE_START")
    TextMessageContentEvent = _AgUiMessage("TEXT_MESSAGE_CONTENT")
    TextMessageEndEvent = _AgUiMessage("TEXT_MESSAGE_END")
    ReasoningStartEvent = _AgUiMessage("REASONING_START")
    ReasoningMessageStartEvent = _AgUiMessage("REASONING_MESSAGE_START")
    ReasoningMessageContentEvent = _AgUiMessage("REASONING_MESSAGE_CONTENT")
    ReasoningMessageEndEvent = _AgUiMessage("REASONING_MESSAGE_END")
    ReasoningEndEvent = _AgUiMessage("REASONING_END")
    ToolCallStartEvent = _AgUiMessage("TOOL_CALL_START")
    ToolCallArgsEvent = _AgUiMessage("TOOL_CALL_ARGS")
    ToolCallEndEvent = _AgUiMessage("TOOL_CALL_END")
    ToolCallResultEvent = _AgUiMessage("TOOL_CALL_RESULT")
    CustomEvent = _AgUiMessage("CUSTOM")
    SubagentStartedEvent = _AgUiMessage("SUBAGENT_STARTED")
    SubagentFinishedEvent = _AgUiMessage("SUBAGENT_FINISHED")
    SubagentErrorEvent = _AgUiMessage("SUBAGENT_ERROR")
    Interrupt = _AgUiMessage(None)

    @staticmethod
    def RunFinishedInterruptOutcome(*, type: str, interrupts: list[Any]) -> dict[str, Any]:
        return {"type": type, "interrupts": interrupts}

    @staticmethod
    def RunFinishedCancelledOutcome(*, type: str) -> dict[str, Any]:
        return {"type": type}


_AG_UI = _AgUi()


class AgUiEncoder:
    """The AG-UI protocol: RUN_STARTED … RUN_FINISHED (an interrupt outcome for a waiting run),
    REASONING_* for thoughts, TEXT_MESSAGE_* for text, TOOL_CALL_* for actions, CUSTOM for
    what AG-UI has no event for (a withdrawn draft, a call awaiting or given a decision)."""

    headers: dict[str, str] = {}  # noqa: RUF012  read only

    def __init__(self, *, thread_id: str = "") -> None:
        self._core = _AG_UI
        self._thread = thread_id
        self._parts = _Parts()
        self._run: str | None = None  # the root run, once started, until it ends
        self._subs: list[str] = []  # sub-agent runs started and not yet ended

    def encode(self, event: Event) -> list[Any]:
        return self._models(event)

    def encode_json(self, event: Event) -> list[bytes]:
        return [to_json(m) for m in self._models(event)]

    def _models(self, event: Event) -> list[Any]:
        if event.parent_run_id is None:
            if isinstance(event, RunStarted):
                self._run = event.run_id
            elif isinstance(event, RunFinished | RunWaiting | RunFailed):
                self._run = None
        return self._messages(event)

    def end_json(self) -> list[bytes]:
        return [to_json(m) for m in self.end()]

    def end(self) -> list[Any]:
        """A run stopped before its end (``DELETE``, the server shutting down): its open parts
        and steps end, then the run, cancelled."""
        if self._run is None:
            return []
        c, p, out = self._core, self._parts, []
        for key, ident in p.open_text.items():
            out.append(
                c.TextMessageEndEvent(message_id=ident, subagent_run_id=self._sub_of(key[0]))
            )
        for key, ident in p.open_reasoning.items():
            sub = self._sub_of(key[0])
            out.append(c.ReasoningMessageEndEvent(message_id=ident, subagent_run_id=sub))
            out.append(c.ReasoningEndEvent(message_id=ident, subagent_run_id=sub))
        for ident in [i for i in p.named if i not in p.complete]:
            out.append(c.ToolCallEndEvent(tool_call_id=ident))
        for run, step in p.steps.items():
            out.append(c.StepFinishedEvent(step_name=step, subagent_run_id=self._sub_of(run)))
        for run in reversed(self._subs):  # innermost first
            out.append(c.SubagentErrorEvent(subagent_run_id=run, message="the run was stopped"))
        self._subs.clear()
        p.open_text.clear()
        p.open_reasoning.clear()
        p.steps.clear()
        outcome = c.RunFinishedCancelledOutcome(type="cancelled")
        finished = c.RunFinishedEvent(thread_id=self._thread, run_id=self._run, outcome=outcome)
        self._run = None
        return [*out, finished]

    def _sub_of(self, run_id: str) -> str | None:
        return None if run_id == self._run else run_id

    def _sub(self, event: Event) -> str | None:
        return event.run_id if event.parent_run_id else None

    def _close(self, event: Event, attempt: int | None = None) -> list[Any]:
        c, p, out = self._core, self._parts, []
        for key in [k for k in p.open_text if k[0] == event.run_id and attempt in (None, k[1])]:
            ident = p.open_text.pop(key)
            out.append(c.TextMessageEndEvent(message_id=ident, subagent_run_id=self._sub(event)))
        for key in [
            k for k in p.open_reasoning if k[0] == event.run_id and attempt in (None, k[1])
        ]:
            ident = p.open_reasoning.pop(key)
            sub = self._sub(event)
            out.append(c.ReasoningMessageEndEvent(message_id=ident, subagent_run_id=sub))
            out.append(c.ReasoningEndEvent(message_id=ident, subagent_run_id=sub))
        step = p.steps.pop(event.run_id, None) if attempt is None else None
        if step is not None:  # a step, a run or its wait ends: so does its open step
            out.append(c.StepFinishedEvent(step_name=step, subagent_run_id=self._sub(event)))
        return out

    def _messages(self, event: Event) -> list[Any]:
        c, p = self._core, self._parts
        sub = self._sub(event)
        match event:
            case RunStarted() if event.parent_run_id is None:
                return [c.RunStartedEvent(thread_id=self._thread, run_id=event.run_id)]
            case RunStarted():
                self._subs.append(event.run_id)
                return [c.SubagentStartedEvent(subagent_run_id=event.run_id, name=event.branch)]
            case ModelCallStarted():
                if event.run_id in p.steps:  # a retry or a second call of the same step
                    return []
                name = f"step-{event.step}" + (f"-{event.run_id[:12]}" if sub else "")
                p.steps[event.run_id] = name
                return [c.StepStartedEvent(step_name=name, subagent_run_id=sub)]
            case ThoughtDelta():
                key = (event.run_id, event.attempt)
                out = self._close(event, event.attempt) if key in p.open_text else []
                if key not in p.open_reasoning:
                    ident = p.part_id("reasoning", event, event.attempt)
                    p.open_reasoning[key] = ident
                    out += [
                        c.ReasoningStartEvent(message_id=ident, subagent_run_id=sub),
                        c.ReasoningMessageStartEvent(
                            message_id=ident, role="reasoning", subagent_run_id=sub
                        ),
                    ]
                ident = p.open_reasoning[key]
                return [
                    *out,
                    c.ReasoningMessageContentEvent(
                        message_id=ident, delta=event.text, subagent_run_id=sub
                    ),
                ]
            case TextDelta() | AnswerDelta():
                key = (event.run_id, event.attempt)
                section = event.section if isinstance(event, AnswerDelta) else 0
                out = []
                if key in p.open_reasoning or p.sections.get(key, section) != section:
                    out = self._close(event, event.attempt)
                p.sections[key] = section
                if key not in p.open_text:
                    ident = p.part_id("text", event, event.attempt)
                    p.open_text[key] = ident
                    out.append(
                        c.TextMessageStartEvent(
                            message_id=ident, role="assistant", subagent_run_id=sub
                        )
                    )
                text_id = p.open_text[key]
                if sub is None:  # most messages of a run: built as the builder would, directly
                    delta: dict[str, Any] = {"type": "TEXT_MESSAGE_CONTENT", "messageId": text_id}
                    delta["delta"] = event.text
                    return [*out, delta]
                return [
                    *out,
                    c.TextMessageContentEvent(
                        message_id=text_id, delta=event.text, subagent_run_id=sub
                    ),
                ]
            case ActionArgsDelta():
                ident = p.call_id(event.run_id, event.attempt, event.index, event.tag)
                out = []
                if ident not in p.named:
                    if event.name is None:
                        p.pending_args.setdefault(ident, []).append(event.text)
                        return []
                    p.named.add(ident)
                    out.append(
                        c.ToolCallStartEvent(
                            tool_call_id=ident, tool_call_name=event.name, subagent_run_id=sub
                        )
                    )
                    held = "".join(p.pending_args.pop(ident, []))
                    if held:
                        out.append(
                            c.ToolCallArgsEvent(tool_call_id=ident, delta=held, subagent_run_id=sub)
                        )
                if event.text:
                    out.append(
                        c.ToolCallArgsEvent(
                            tool_call_id=ident, delta=event.text, subagent_run_id=sub
                        )
                    )
                return out
            case ActionStarted():
                ident = p.call_for(event.run_id, event.attempt, event.tag)
                if p.announced(event):  # by the waiting run's stream, under this id
                    p.named.add(ident)
                    p.complete.add(ident)
                return self._input_complete(ident, event.name, event.input, sub)
            case ActionFinished():
                result = event.result
                ident = p.call_for(event.run_id, result.attempt, result.tag)
                content = f"error: {result.error}" if result.error else _content(result.output)
                return [
                    c.ToolCallResultEvent(
                        message_id=f"result-{ident}",
                        tool_call_id=ident,
                        content=content,
                        role="tool",
                        subagent_run_id=sub,
                    )
                ]
            case ActionProgress():
                value = _progress(p.call_for(event.run_id, event.attempt, event.tag), event)
                name = "agentloop.action_progress"
                return [c.CustomEvent(name=name, value=value, subagent_run_id=sub)]
            case AttemptDiscarded():
                out = self._close(event, event.attempt)
                ids = list(p.by_attempt.get((event.run_id, event.attempt), []))  # not the state
                value = {"attempt": event.attempt, "reason": event.reason, "message_ids": ids}
                name = "agentloop.attempt_discarded"
                return [*out, c.CustomEvent(name=name, value=value, subagent_run_id=sub)]
            case ActionAwaiting() | ActionDecided():
                value = json.loads(event.to_json())
                name = f"agentloop.{event.type}"
                out = []
                if isinstance(event, ActionAwaiting):
                    call = event.call
                    out = self._input_complete(p.waiting(event), call.name, call.input, sub)
                else:
                    p.decided(event)
                return [*out, c.CustomEvent(name=name, value=value, subagent_run_id=sub)]
            case StepFinished():
                return self._close(event)
            case RunFinished() | RunWaiting() | RunFailed() if event.parent_run_id:
                return [*self._close(event), self._sub_end(event)]
            case RunFinished():
                out = self._close(event)
                error = event.result.error
                if error is not None:
                    return [*out, c.RunErrorEvent(message=error.message, code=error.kind)]
                output = _output(event.result.output)
                finished = c.RunFinishedEvent(
                    thread_id=self._thread, run_id=event.run_id, result=output
                )
                return [*out, finished]
            case RunWaiting():
                interrupts = [
                    c.Interrupt(
                        id=call.id,
                        reason=call.kind,
                        tool_call_id=p.awaiting.get(call.id, call.tag),
                        metadata={"name": call.name, "input": _output(call.input)},
                    )
                    for call in event.result.pending
                ]
                outcome = c.RunFinishedInterruptOutcome(type="interrupt", interrupts=interrupts)
                return [
                    *self._close(event),
                    c.RunFinishedEvent(
                        thread_id=self._thread, run_id=event.run_id, outcome=outcome
                    ),
                ]
            case RunFailed():
                return [
                    *self._close(event),
                    c.RunErrorEvent(message=event.error.message, code=event.error.kind),
                ]
            case _:
                return []

    def _input_complete(self, ident: str, name: str, input: Any, sub: str | None) -> list[Any]:
        """A call's input is final: its start (if its arguments never streamed), then its end,
        once however many events say so."""
        c, p, out = self._core, self._parts, []
        if ident in p.complete:
            return []
        p.complete.add(ident)
        if ident not in p.named:
            p.named.add(ident)
            p.pending_args.pop(ident, None)
            out = [
                c.ToolCallStartEvent(tool_call_id=ident, tool_call_name=name, subagent_run_id=sub),
                c.ToolCallArgsEvent(
                    tool_call_id=ident, delta=json.dumps(_output(input)), subagent_run_id=sub
                ),
            ]
        return [*out, c.ToolCallEndEvent(tool_call_id=ident, subagent_run_id=sub)]

    def _sub_end(self, event: RunFinished | RunWaiting | RunFailed) -> Any:
        c = self._core
        if event.run_id in self._subs:
            self._subs.remove(event.run_id)
        if isinstance(event, RunFailed):
            return c.SubagentErrorEvent(subagent_run_id=event.run_id, message=event.error.message)
        return c.SubagentFinishedEvent(subagent_run_id=event.run_id)


# agentloop's finish reasons as the AI SDK's (``refusal``, ``cut`` and the rest are "other").
_VERCEL_REASONS = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "length": "length",
    "content_filter": "content-filter",
    "error": "error",
}


class VercelEncoder:
    """The Vercel AI SDK UI message stream (protocol v1, AI SDK 5 and later): ``start``,
    ``start-step``/``finish-step`` per model call, ``reasoning-*`` for thoughts, ``text-*`` for
    text, ``tool-input-*``/``tool-output-*`` for actions, ``data-agentloop-*`` parts for what it
    has no part for, ``error``, ``finish``, then ``[DONE]``."""

    headers: dict[str, str] = {"x-vercel-ai-ui-message-stream": "v1"}  # noqa: RUF012

    def __init__(self) -> None:
        self._parts = _Parts()
        self._steps = 0
        self._open = False  # a root run started and not yet finished
        self._reason = "stop"  # the last model reply's end, in the SDK's terms

    def end(self) -> list[Any]:
        """``[DONE]``, after an ``abort`` for a run stopped before its end."""
        if self._open:
            self._open = False
            return [{"type": "abort", "reason": "the run was stopped"}, "[DONE]"]
        return ["[DONE]"]

    def end_json(self) -> list[bytes]:
        return [_wire(message) for message in self.end()]

    def encode_json(self, event: Event) -> list[bytes]:
        return [to_json(message) for message in self.encode(event)]

    def _close(self, event: Event, attempt: int | None = None) -> list[Any]:
        p, out = self._parts, []
        for key in [k for k in p.open_text if k[0] == event.run_id and attempt in (None, k[1])]:
            out.append({"type": "text-end", "id": p.open_text.pop(key)})
        for key in [
            k for k in p.open_reasoning if k[0] == event.run_id and attempt in (None, k[1])
        ]:
            out.append({"type": "reasoning-end", "id": p.open_reasoning.pop(key)})
        return out

    def encode(self, event: Event) -> list[Any]:
        if event.parent_run_id is None:
            if isinstance(event, RunStarted):
                self._open = True
            elif isinstance(event, RunFinished | RunWaiting | RunFailed):
                self._open = False
        return self._parts_of(event)

    def _input_complete(self, ident: str, name: str, input: Any) -> list[Any]:
        """A call's input is final: ``tool-input-available`` (after its start if its arguments
        never streamed), once however many events say so."""
        p, out = self._parts, []
        if ident in p.complete:
            return []
        p.complete.add(ident)
        if ident not in p.named:
            p.named.add(ident)
            p.pending_args.pop(ident, None)
            out.append({"type": "tool-input-start", "toolCallId": ident, "toolName": name})
        available = {
            "type": "tool-input-available",
            "toolCallId": ident,
            "toolName": name,
            "input": _output(input),
        }
        return [*out, available]

    def _parts_of(self, event: Event) -> list[Any]:
        p = self._parts
        match event:
            case RunStarted() if event.parent_run_id is None:
                return [{"type": "start", "messageId": event.run_id}]
            case ModelCallStarted():
                self._steps += 1
                return [{"type": "start-step"}]
            case ModelCallFinished():
                self._steps -= 1
                if event.parent_run_id is None:
                    self._reason = _VERCEL_REASONS.get(event.finish_reason, "other")
                return [*self._close(event, event.attempt), {"type": "finish-step"}]
            case ThoughtDelta():
                key = (event.run_id, event.attempt)
                out = self._close(event, event.attempt) if key in p.open_text else []
                if key not in p.open_reasoning:
                    p.open_reasoning[key] = p.part_id("reasoning", event, event.attempt)
                    out.append({"type": "reasoning-start", "id": p.open_reasoning[key]})
                ident = p.open_reasoning[key]
                return [*out, {"type": "reasoning-delta", "id": ident, "delta": event.text}]
            case TextDelta() | AnswerDelta():
                key = (event.run_id, event.attempt)
                section = event.section if isinstance(event, AnswerDelta) else 0
                out = []
                if key in p.open_reasoning or p.sections.get(key, section) != section:
                    out = self._close(event, event.attempt)
                p.sections[key] = section
                if key not in p.open_text:
                    p.open_text[key] = p.part_id("text", event, event.attempt)
                    out.append({"type": "text-start", "id": p.open_text[key]})
                return [*out, {"type": "text-delta", "id": p.open_text[key], "delta": event.text}]
            case ActionArgsDelta():
                ident = p.call_id(event.run_id, event.attempt, event.index, event.tag)
                out = []
                if ident not in p.named:
                    if event.name is None:
                        p.pending_args.setdefault(ident, []).append(event.text)
                        return []
                    p.named.add(ident)
                    out.append(
                        {"type": "tool-input-start", "toolCallId": ident, "toolName": event.name}
                    )
                    held = "".join(p.pending_args.pop(ident, []))
                    if held:
                        out.append(
                            {
                                "type": "tool-input-delta",
                                "toolCallId": ident,
                                "inputTextDelta": held,
                            }
                        )
                if event.text:
                    out.append(
                        {
                            "type": "tool-input-delta",
                            "toolCallId": ident,
                            "inputTextDelta": event.text,
                        }
                    )
                return out
            case ActionStarted():
                ident = p.call_for(event.run_id, event.attempt, event.tag)
                if p.announced(event):  # by the waiting run's stream, under this id
                    p.named.add(ident)
                    p.complete.add(ident)
                return self._input_complete(ident, event.name, event.input)
            case ActionFinished():
                result = event.result
                ident = p.call_for(event.run_id, result.attempt, result.tag)
                if result.error_kind == "denied":
                    return [{"type": "tool-output-denied", "toolCallId": ident}]
                if result.error:
                    return [
                        {
                            "type": "tool-output-error",
                            "toolCallId": ident,
                            "errorText": result.error,
                        }
                    ]
                return [
                    {
                        "type": "tool-output-available",
                        "toolCallId": ident,
                        "output": _output(result.output),
                    }
                ]
            case ActionProgress():
                ident = p.call_for(event.run_id, event.attempt, event.tag)
                data = _progress(ident, event)
                kind = "data-agentloop-action-progress"
                return [{"type": kind, "id": f"progress-{ident}", "data": data, "transient": True}]
            case AttemptDiscarded():
                ids = p.by_attempt.get((event.run_id, event.attempt), [])
                data = {"attempt": event.attempt, "reason": event.reason, "ids": ids}
                return [
                    *self._close(event, event.attempt),
                    {"type": "data-agentloop-attempt-discarded", "data": data},
                ]
            case ActionAwaiting() | ActionDecided():
                data = json.loads(event.to_json())
                out = [{"type": f"data-agentloop-{event.type.replace('_', '-')}", "data": data}]
                if isinstance(event, ActionDecided):
                    p.decided(event)
                    return out
                call = event.call
                ident = p.waiting(event)
                out = [*self._input_complete(ident, call.name, call.input), *out]
                if call.kind != "external":  # an approval, or a running call's question
                    out.append(
                        {
                            "type": "tool-approval-request",
                            "approvalId": call.id,
                            "toolCallId": ident,
                        }
                    )
                return out
            case RunFinished() if event.parent_run_id is None:
                out = self._close(event)
                reason = self._reason
                if event.result.error is not None:
                    out.append({"type": "error", "errorText": event.result.error.message})
                    reason = "error"
                return [*out, {"type": "finish", "finishReason": reason}]
            case RunWaiting() if event.parent_run_id is None:
                data = json.loads(event.to_json())["result"]["pending"]
                return [
                    *self._close(event),
                    {"type": "data-agentloop-waiting", "data": data},
                    {"type": "finish", "finishReason": "tool-calls"},
                ]
            case RunFailed() if event.parent_run_id is None:
                return [
                    *self._close(event),
                    {"type": "error", "errorText": event.error.message},
                    {"type": "finish", "finishReason": "error"},
                ]
            case _:
                return []
