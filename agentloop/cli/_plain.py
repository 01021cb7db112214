"""Views that need no terminal: a plain-text timeline, JSON lines, and the answer alone.

The plain timeline is what ``agentloop`` prints into a pipe (or without rich): one line per
thing that happened, stamped with the seconds since the run started; streamed text is written as
it arrives, and a withdrawn draft is shown again, struck through as ``~~text~~``. How the run
itself failed is left to the command's one error line on stderr (said once, not twice).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import TextIO

from .. import (
    ActionAwaiting,
    ActionDecided,
    ActionFinished,
    ActionStarted,
    AnswerDelta,
    AttemptDiscarded,
    ContextTrimmed,
    Event,
    ProviderEvent,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWaiting,
    TextDelta,
    ThoughtDelta,
)
from ._track import (
    Timing,
    Tracker,
    answer_text,
    awaiting_text,
    call_text,
    decided_text,
    discard_reason,
    goal_text,
    result_text,
    short,
    tool_label,
    waiting_text,
)

_LABELS = {"text_delta": "model", "thought_delta": "think", "answer_delta": "answer"}


class PlainView:
    """The timeline as plain text lines."""

    ticks = False

    def __init__(self, out: TextIO, tracker: Tracker, *, show_input: bool = True) -> None:
        self.out = out
        self.tracker = tracker
        self.show_input = show_input
        # (run_id, attempt, label, answer section) of the line being written
        self._open: tuple[str, int, str, int] | None = None
        self._drafts: dict[tuple[str, int], list[str]] = {}  # an attempt's text, to withdraw
        self._said: dict[tuple[str, int, str], list[str]] = {}  # by kind, to spot the answer

    def _stamp(self, event: Event | None = None) -> str:
        where = f" [{event.branch}]" if event is not None and event.parent_run_id else ""
        return f"[{self.tracker.now():5.2f}s]{where}"

    def _line(self, text: str, event: Event | None = None) -> None:
        self._break()
        self.out.write(f"{self._stamp(event)} {text}\n")
        self.out.flush()

    def _break(self) -> None:
        if self._open is not None:
            self.out.write("\n")
            self._open = None

    def handle(self, event: Event) -> None:
        match event:
            case TextDelta() | ThoughtDelta() | AnswerDelta():
                self._delta(event)
            case RunStarted():
                if self.show_input or event.parent_run_id:
                    self._line(f"run    {short(event.input, 100)}", event)
            case ActionStarted():
                info = self.tracker.action(event)
                note = "  · started while the reply streams" if info and info.during_stream else ""
                self._line(f"▶ {call_text(event.name, event.path, event.input)}{note}", event)
            case ActionFinished():
                self._finished(event)
            case AttemptDiscarded():
                self._discarded(event)
            case ProviderEvent():
                self._line(f"· provider {event.part.type}", event)
            case ActionAwaiting():
                self._line(f"⏸ {awaiting_text(event)}", event)
            case ActionDecided():
                self._line(
                    f"{'✗' if event.decision == 'deny' else '✔'} {decided_text(event)}", event
                )
            case RunWaiting():
                self._line(f"■ {waiting_text(event.result)}", event)
            case ContextTrimmed():
                self._line(
                    f"✂ context trimmed to fit {event.max_tokens:,} tokens: "
                    f"{_n(event.elided_results, 'result')} elided, "
                    f"{_n(event.summarized_steps, 'step')} summarised "
                    f"(~{event.tokens_before:,} → ~{event.tokens_after:,} tokens)",
                    event,
                )
            case RunFinished():
                self._run_finished(event)
            case RunFailed():
                if event.parent_run_id:  # the root run's failure is the command's error line
                    self._line(f"■ run failed: {event.error.kind}: {event.error.message}", event)
            case _:
                pass

    def _delta(self, event: TextDelta | ThoughtDelta | AnswerDelta) -> None:
        key = (event.run_id, event.attempt, _LABELS[event.type])
        self._drafts.setdefault((event.run_id, event.attempt), []).append(event.text)
        said = self._said.setdefault(key, [])
        section = event.section if isinstance(event, AnswerDelta) else 0
        line = (*key, section)
        if self._open != line:
            if self._open is not None and self._open[:3] == key:  # a later answer section
                said.clear()
            self._break()
            self.out.write(f"{self._stamp(event)} {key[2]:<6} ")
            self._open = line
        said.append(event.text)
        self.out.write(event.text)
        self.out.flush()

    def _finished(self, event: ActionFinished) -> None:
        result = event.result
        info = self.tracker.action(event)
        took = (
            f"  ({info.finished - info.started:.2f}s)"
            if info is not None and info.finished is not None
            else ""
        )
        mark = "✗" if result.is_error else "✔"
        label = tool_label(result.name, result.path)
        self._line(f"{mark} {label} → {result_text(result)}{took}", event)
        if result.name in ("create_goal", "update_goal") and self.tracker.goal is not None:
            self._line(f"◎ {goal_text(self.tracker.goal)}", event)

    def _discarded(self, event: AttemptDiscarded) -> None:
        draft = "".join(self._drafts.pop((event.run_id, event.attempt), []))
        why = discard_reason(event)
        if not draft.strip():
            self._line(f"↻ attempt {event.attempt} discarded: {why}", event)
            return
        self._line(f"✗ withdrawn: draft of attempt {event.attempt} discarded — {why}", event)
        self.out.write(f"{' ' * 9}~~{short(draft, 100)}~~\n")
        self.out.flush()

    def _run_finished(self, event: RunFinished) -> None:
        result = event.result
        if result.error is not None:
            if event.parent_run_id:  # the root run's is the command's error line
                self._line(f"■ no answer: {result.error.kind}: {result.error.message}", event)
            return
        if event.parent_run_id:
            self._line(f"■ sub-agent answered: {short(answer_text(result), 100)}", event)
            return
        counts = f"{_n(len(result.steps), 'step')}, {_n(result.usage.requests, 'model call')}"
        usage = result.usage
        if usage.input_tokens or usage.output_tokens:
            cached = f" ({usage.cache_read_tokens:,} cached)" if usage.cache_read_tokens else ""
            counts += f", {usage.input_tokens:,} tokens in{cached}, {usage.output_tokens:,} out"
        last = result.steps[-1].attempt if result.steps else 0
        said = self._said.get((event.run_id, last, "answer")) or self._said.get(
            (event.run_id, last, "model"), []
        )
        streamed = "".join(said)
        if result.text is not None and streamed.strip() == result.text.strip():
            if self.show_input:  # a chat turn needs no footer under its streamed answer
                self._line(f"■ answer: the text streamed above ({counts})", event)
            return
        self._line(f"■ answer ({counts}):", event)
        self.out.write(answer_text(result).rstrip() + "\n")
        self.out.flush()

    @contextmanager
    def hold(self) -> Generator[None, None, None]:
        """Stand aside while the terminal asks a person something (an approval)."""
        self._break()
        self.out.flush()
        yield

    def tick(self) -> None:
        pass

    def close(self) -> None:
        self._break()
        self.out.flush()


class JsonView:
    """One event per line, exactly ``event.to_json()``: nothing else goes to stdout."""

    ticks = False

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def handle(self, event: Event) -> None:
        self.out.write(event.to_json() + "\n")
        self.out.flush()

    @contextmanager
    def hold(self) -> Generator[None, None, None]:
        """Stand aside while the terminal asks a person something (an approval)."""
        self.out.flush()
        yield

    def tick(self) -> None:
        pass

    def close(self) -> None:
        self.out.flush()


class AnswerView:
    """Only the final answer (``--quiet``), for scripts."""

    ticks = False

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def handle(self, event: Event) -> None:
        if isinstance(event, RunFinished) and event.parent_run_id is None:
            if event.result.error is None:
                self.out.write(answer_text(event.result).rstrip() + "\n")
                self.out.flush()

    @contextmanager
    def hold(self) -> Generator[None, None, None]:
        """Stand aside while the terminal asks a person something (an approval)."""
        self.out.flush()
        yield

    def tick(self) -> None:
        pass

    def close(self) -> None:
        self.out.flush()


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def timing_lines(timing: Timing) -> list[str]:
    """The demo's closing summary: what eager dispatch and parallel tools bought."""
    lines = [
        f"wall time          {timing.wall:6.2f}s",
        f"model streaming    {timing.model:6.2f}s over {timing.model_calls} calls",
        f"tools              {timing.tools:6.2f}s over {timing.actions} actions (summed)",
        f"one after another  {timing.sequential:6.2f}s (each reply, then each tool in turn)",
    ]
    if timing.sequential > 0:
        share = 100 * timing.saved / timing.sequential
        lines.append(
            f"saved              {timing.saved:6.2f}s ({share:.0f}%): tools started mid-reply "
            f"({timing.overlapped:.2f}s overlap) and ran in parallel"
        )
    return lines
