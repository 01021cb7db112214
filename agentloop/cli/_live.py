"""The live terminal view, on rich: what is in flight is redrawn in place, what is settled is
printed above it and stays.

A text block is in flight until its attempt is settled: its step finished (it was kept) or the
attempt was discarded (it is then drawn struck through, marked withdrawn, and kept that way in the
scrollback). An action is in flight until it finishes. Only the settled prefix is printed, so the
order on screen is the order things started. Refreshes are manual and come from the event loop's
thread (no rich refresh thread reads our state while we change it).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from .. import (
    ActionAwaiting,
    ActionDecided,
    ActionFinished,
    ActionStarted,
    AnswerDelta,
    AttemptDiscarded,
    Event,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWaiting,
    StepFinished,
    TextDelta,
    ThoughtDelta,
)
from ._track import (
    Tracker,
    answer_text,
    awaiting_text,
    call_text,
    decided_text,
    discard_reason,
    result_text,
    waiting_text,
)

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_FRAME = 1 / 30  # at most this often a redraw between ticks


@dataclass(slots=True)
class _TextBlock:
    run_id: str
    attempt: int
    branch: str | None
    kind: str  # "model" | "think" | "answer"
    at: float
    section: int = 0  # of an answer: a later section is a new block
    chunks: list[str] = field(default_factory=list)
    state: str = "streaming"  # "streaming" | "kept" | "withdrawn"
    reason: str = ""


@dataclass(slots=True)
class _ActionBlock:
    run_id: str
    tag: str
    branch: str | None
    call: str
    at: float
    during_stream: bool
    finished: float | None = None
    ok: bool = True
    result: str = ""


@dataclass(slots=True)
class _Note:
    at: float
    label: str
    text: Text
    branch: str | None = None


_Block = _TextBlock | _ActionBlock | _Note


class LiveView:
    """The rich live view of one run (``final_panel``: end with the answer in a panel)."""

    ticks = True

    def __init__(
        self,
        console: Console,
        tracker: Tracker,
        *,
        show_input: bool = True,
        final_panel: bool = True,
    ) -> None:
        self.console = console
        self.tracker = tracker
        self.show_input = show_input
        self.final_panel = final_panel
        self._blocks: list[_Block] = []
        self._texts: dict[tuple[str, int], list[_TextBlock]] = {}  # an attempt's text blocks
        self._last_draw = -1.0
        self._held = False  # the terminal asks a person something: draw nothing meanwhile
        self._live = Live(
            _Tail(self),
            console=console,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
            transient=True,
        )
        self._live.start()

    # -- events ---------------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        now = self.tracker.now()
        branch = event.branch if event.parent_run_id else None
        match event:
            case TextDelta() | ThoughtDelta() | AnswerDelta():
                self._text(event, now, branch).chunks.append(event.text)
            case RunStarted():
                if self.show_input or branch:
                    self._note(now, "you", Text(event.input, style="bold"), branch)
            case ActionStarted():
                info = self.tracker.action(event)
                self._blocks.append(
                    _ActionBlock(
                        event.run_id,
                        event.tag,
                        branch,
                        call_text(event.name, event.path, event.input, 64),
                        now,
                        bool(info and info.during_stream),
                    )
                )
            case ActionFinished():
                self._action_finished(event, now)
            case StepFinished():
                for block in self._texts.get((event.run_id, event.step.attempt), ()):
                    block.state = "kept"
                    if event.step.answer is not None and block.kind == "model":
                        block.kind = "answer"
            case AttemptDiscarded():
                blocks = self._texts.get((event.run_id, event.attempt), [])
                reason = discard_reason(event)
                for block in blocks:
                    block.state = "withdrawn"
                    block.reason = reason
                if not blocks:
                    text = Text(f"attempt {event.attempt} discarded: {reason}", style="yellow")
                    self._note(now, "retry", text, branch)
            case ActionAwaiting():
                self._note(now, "await", Text(awaiting_text(event), style="bold yellow"), branch)
            case ActionDecided():
                style = "bold red" if event.decision == "deny" else "green"
                self._note(now, "decide", Text(decided_text(event), style=style), branch)
            case RunWaiting():
                self._settle(event.run_id)
                text = Text(waiting_text(event.result), style="bold yellow")
                self._note(now, "wait", text, branch)
            case RunFinished():
                self._run_finished(event, now, branch)
            case RunFailed():
                self._settle(event.run_id)
                if branch:  # the root run's failure is the command's error line
                    message = f"run failed: {event.error.kind}: {event.error.message}"
                    self._note(now, "failed", Text(message, style="bold red"), branch)
            case _:
                pass
        self._flush()
        self._draw(now)

    def _text(
        self, event: TextDelta | ThoughtDelta | AnswerDelta, now: float, branch: str | None
    ) -> _TextBlock:
        kind = {"text_delta": "model", "thought_delta": "think", "answer_delta": "answer"}
        blocks = self._texts.setdefault((event.run_id, event.attempt), [])
        section = event.section if isinstance(event, AnswerDelta) else 0
        last = blocks[-1] if blocks else None
        if (
            last is not None
            and last.kind == kind[event.type]
            and last.section == section
            and last.state == "streaming"
        ):
            return last
        block = _TextBlock(event.run_id, event.attempt, branch, kind[event.type], now, section)
        blocks.append(block)
        self._blocks.append(block)
        return block

    def _action_finished(self, event: ActionFinished, now: float) -> None:
        for block in self._blocks:
            if (
                isinstance(block, _ActionBlock)
                and block.run_id == event.run_id
                and block.tag == event.result.tag
            ):
                block.finished = now
                block.ok = not event.result.is_error
                block.result = result_text(event.result, 96)
        goal = self.tracker.goal
        if event.result.name in ("create_goal", "update_goal") and goal is not None:
            style = "bold green" if goal.status.value == "complete" else "bold yellow"
            text = f"[{goal.status.value}] {goal.objective}"
            self._note(now, "goal", Text(text, style=style), None)

    def _run_finished(self, event: RunFinished, now: float, branch: str | None) -> None:
        self._settle(event.run_id)
        result = event.result
        if self.final_panel and branch is None and result.error is None and result.steps:
            last = (event.run_id, result.steps[-1].attempt)  # drawn again, in the panel
            self._blocks = [
                b
                for b in self._blocks
                if not (
                    isinstance(b, _TextBlock)
                    and b.kind == "answer"
                    and (b.run_id, b.attempt) == last
                )
            ]
        if result.error is not None:
            if branch:  # the root run's is the command's error line
                message = f"no answer: {result.error.kind}: {result.error.message}"
                self._note(now, "failed", Text(message, style="bold red"), branch)
        elif branch:
            self._note(now, "done", Text("sub-agent answered", style="dim"), branch)

    def _settle(self, run_id: str) -> None:
        for block in self._blocks:
            if isinstance(block, _TextBlock) and block.run_id == run_id:
                if block.state == "streaming":
                    block.state = "kept"

    def _note(self, at: float, label: str, text: Text, branch: str | None) -> None:
        self._blocks.append(_Note(at, label, text, branch))

    # -- drawing --------------------------------------------------------------------------------

    def _flush(self) -> None:
        done = 0
        for block in self._blocks:
            if not self._settled(block):
                break
            done += 1
        if done:
            rows, self._blocks = self._blocks[:done], self._blocks[done:]
            for block in rows:
                if isinstance(block, _TextBlock):
                    key = (block.run_id, block.attempt)
                    left = [b for b in self._texts.get(key, ()) if b is not block]
                    if left:
                        self._texts[key] = left
                    else:
                        self._texts.pop(key, None)
            self._live.console.print(self._table(rows, self.tracker.now()))

    def _settled(self, block: _Block) -> bool:
        if isinstance(block, _TextBlock):
            if block.state == "streaming":
                return False
            # The answer stays in the live area until the run ends: the panel replaces it.
            held = self.final_panel and block.kind == "answer" and block.branch is None
            return not held or self.tracker.ended is not None
        if isinstance(block, _ActionBlock):
            return block.finished is not None
        return True

    def _draw(self, now: float) -> None:
        if not self._held and now - self._last_draw >= _FRAME:
            self._last_draw = now
            self._live.refresh()

    def tick(self) -> None:
        if not self._held:
            self._draw(self.tracker.now())

    @contextmanager
    def hold(self) -> Generator[None, None, None]:
        """Stand aside while the terminal asks a person something (an approval): what is
        settled is printed, the live area stops, and starts again after."""
        self._flush()
        self._live.stop()
        self._held = True
        try:
            yield
        finally:
            self._held = False
            self._live.start()

    def close(self) -> None:
        self._settle_all()
        self._flush()
        self._live.stop()
        result = self.tracker.result
        if self.final_panel and result is not None and result.error is None:
            body = answer_text(result).strip()
            self.console.print(
                Panel(Markdown(body), title="answer", title_align="left", border_style="green")
            )

    def _settle_all(self) -> None:
        for block in self._blocks:
            if isinstance(block, _TextBlock) and block.state == "streaming":
                block.state = "kept"
            if isinstance(block, _ActionBlock) and block.finished is None:
                block.finished = self.tracker.now()
                block.ok = False
                block.result = "(unfinished)"

    def live_renderable(self, now: float) -> RenderableType:
        table = self._table(self._blocks, now)
        return Group(table, self._footer(now))

    def _table(self, blocks: list[_Block], now: float) -> Table:
        table = Table.grid(padding=(0, 1))
        table.add_column(style="dim", no_wrap=True, width=7, justify="right")
        table.add_column(no_wrap=True, width=6)
        table.add_column(ratio=1, overflow="fold")
        for block in blocks:
            table.add_row(*_row(block, now, self.tracker))
        return table

    def _footer(self, now: float) -> Text:
        spin = _SPINNER[int(now * 12) % len(_SPINNER)]
        streaming = [
            n
            for (_, n), a in self.tracker.attempts.items()
            if a.finished is None and a.discarded is None
        ]
        running = sum(1 for a in self.tracker.actions.values() if a.finished is None)
        parts = [f"{spin} {now:5.2f}s"]
        if streaming:
            parts.append(f"model streaming (attempt {streaming[-1]})")
        if running:
            parts.append(f"{running} tool{'s' if running != 1 else ''} running")
        goal = self.tracker.goal
        if goal is not None:
            parts.append(f"goal {goal.status.value}")
        return Text("  ·  ".join(parts), style="cyan")


def _row(block: _Block, now: float, tracker: Tracker) -> tuple[Text, Text, Text]:
    stamp = Text(f"+{block.at:.2f}s")
    if isinstance(block, _Note):
        return stamp, _who(block.branch, block.label, "bold"), block.text
    if isinstance(block, _ActionBlock):
        return stamp, _who(block.branch, "tool"), _action(block, now)
    text = "".join(block.chunks)
    if block.state == "withdrawn":
        body = Text(text, style="strike dim")
        body.append(f"\n✗ withdrawn: {block.reason}", style="bold red")
        return stamp, _who(block.branch, "draft", "red"), body
    style = {"think": "italic dim", "answer": "bold", "model": ""}[block.kind]
    body = Text(text, style=style)
    attempt = tracker.attempts.get((block.run_id, block.attempt))
    if block.state == "streaming" and attempt is not None and attempt.finished is None:
        body.append("▌", style="blink")
    return (
        stamp,
        _who(block.branch, block.kind, "magenta" if block.kind == "think" else "blue"),
        body,
    )


def _who(branch: str | None, label: str, style: str = "dim") -> Text:
    if branch:
        return Text(branch.rsplit(".", 1)[-1][:6], style="yellow")
    return Text(label, style=style)


def _action(block: _ActionBlock, now: float) -> Text:
    text = Text()
    if block.finished is None:
        text.append(f"{_SPINNER[int(now * 12) % len(_SPINNER)]} ", style="yellow")
        text.append(block.call, style="yellow")
        text.append(f"  running {now - block.at:.1f}s", style="dim")
    else:
        text.append("✔ " if block.ok else "✗ ", style="green" if block.ok else "red")
        text.append(block.call)
        text.append(f"  {block.finished - block.at:.2f}s", style="dim")
    if block.during_stream:
        text.append("  ⚡ started mid-reply", style="cyan")
    if block.finished is not None:
        text.append(f"\n  → {block.result}", style="dim" if block.ok else "red")
    return text


class _Tail:
    """The live area, cut to its last lines so the newest text stays on screen."""

    def __init__(self, view: LiveView) -> None:
        self.view = view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        renderable = self.view.live_renderable(self.view.tracker.now())
        lines = console.render_lines(renderable, options, pad=False)
        room = max(3, (options.max_height or console.height) - 1)
        if len(lines) > room:
            lines = [[Segment("…", console.get_style("dim"))], *lines[-(room - 1) :]]
        for i, line in enumerate(lines):
            yield from line
            if i < len(lines) - 1:
                yield Segment.line()


def make_console(file: Any) -> Console:
    return Console(file=file, highlight=False, soft_wrap=False)
