"""A context window that holds: each request's prompt bounded in tokens over a long run.

A run replays every earlier step on each request, so a long tool-heavy run grows until the
provider refuses it. ``ContextWindow`` bounds it. Tokens are estimated (a token per four
characters; a flat count per image), and the estimate is scaled by what the provider reported
for the previous request (its ``input_tokens`` over our estimate of that request: the schemas
of tools and the wire's own overhead are in it).

When the prompt would exceed the budget, it is trimmed below ``1 - headroom`` of it, so that
the steps after a trim append to a prompt whose start does not change (the provider's prefix
cache keeps hitting) until the next trim:

1. older tool results are elided (their text replaced by a note, images dropped), oldest first;
2. then older steps are summarised by the window's ``summarizer`` (an async callable, which may
   call a model) into a note after the user's input; without one they are dropped, with a
   note saying how many;
3. then, as a last resort, the results of recent steps are elided (never the last step's).

A step is trimmed whole: a tool call and its result are never separated (providers refuse
a result whose call is gone). The system message, memory and the user's input are never
trimmed. Each trim is reported as a ``ContextTrimmed`` event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from . import _checks as checks
from ._errors import ContextWindowExceeded, UserError, as_given
from .models._types import (
    FilePart,
    ImagePart,
    Message,
    ModelRequest,
    Part,
    ProviderPart,
    RunContext,
    TextPart,
    ThoughtPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)

if TYPE_CHECKING:
    from .models._base import Model

__all__ = ["ContextFitter", "ContextWindow", "Summarizer", "Trim", "summarize_with"]

Summarizer: TypeAlias = Callable[[Sequence[Message], RunContext[Any]], Awaitable[str]]
"""``async (messages, run) -> str``: a summary of earlier steps' messages (a previous summary,
if any, comes first, as a user message). It may call a model: see ``summarize_with``."""

IMAGE_TOKENS = 1_000  # an image, whatever its size: about what a 1 MP image costs
_MIN_RATIO, _MAX_RATIO = 0.5, 4.0  # how far the provider's count may correct the estimate
_KEEP_CHARS = 200  # a result this short is kept whole: eliding it would save nothing


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextWindow:
    """How many tokens each request's prompt may take (``Agent(context_window=...)``).

    Args:
        max_tokens: The budget of a request's prompt, in tokens (leave room for the reply
            and the tools' schemas below the model's own window).
        keep_steps: The most recent steps, never summarised and elided only as a last resort.
        summarizer: ``async (messages, run) -> str``, summarising older steps; ``None`` drops
            them instead, with a note. ``summarize_with(model)`` makes one that asks a model.
        headroom: The share of the budget a trim frees, so the following steps grow a prompt
            whose start stays the same (the provider's prefix cache hits) until the next trim.
    """

    max_tokens: int
    keep_steps: int = 4
    summarizer: Summarizer | None = None
    headroom: float = 0.25

    def __post_init__(self) -> None:
        checks.count("ContextWindow", "max_tokens", self.max_tokens, minimum=1)
        checks.count("ContextWindow", "keep_steps", self.keep_steps, minimum=1)
        checks.number("ContextWindow", "headroom", self.headroom, below=1.0)
        if self.summarizer is not None and not callable(as_given(self.summarizer)):
            raise UserError(
                f"ContextWindow.summarizer must be an async function, not {self.summarizer!r}"
            )


_SUMMARY_PROMPT = (
    "Summarise the earlier steps of an agent's work below for the agent itself: what was "
    "asked, what each tool call found (names, numbers, identifiers, decisions), what is done "
    "and what is left. Be brief and factual; keep every detail the next steps may need."
)


def summarize_with(model: Model | str, *, instructions: str = _SUMMARY_PROMPT) -> Summarizer:
    """A summarizer that asks ``model`` (a ``Model`` or a ``"provider:name"`` string) for the
    summary: the steps go to it as one transcript. Its tokens are not counted in the run's
    usage.

    Args:
        model: The model that writes summaries (a small, fast one is enough).
        instructions: Its system prompt.
    """
    from .models import collect, resolve_model

    resolved = resolve_model(model) if isinstance(model, str) else model

    async def summarize(messages: Sequence[Message], run: RunContext[Any]) -> str:
        request = ModelRequest(
            messages=(Message.system(instructions), Message.user(transcript(messages)))
        )
        async with resolved.stream(request) as deltas:
            response = await collect(deltas)
        return response.text

    return summarize


def transcript(messages: Sequence[Message]) -> str:
    """Messages as plain text, one block per part (what a summarising model reads)."""
    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, TextPart) and part.text:
                lines.append(f"{message.role}: {part.text}")
            elif isinstance(part, ToolCallPart):
                lines.append(f"call {part.id} {part.wire_name}({part.arguments})")
            elif isinstance(part, ToolResultPart):
                lines.append(f"result {part.id} of {part.name}: {part.content}")
            elif isinstance(part, ImagePart | FilePart):
                lines.append(f"{message.role}: [{part.kind}]")
    return "\n".join(lines)


def estimate(message: Message) -> int:
    """A message's tokens, roughly: a token per four characters, a flat count per image."""
    chars = 16
    images = 0
    for part in message.parts:
        chars += _part_chars(part)
        if isinstance(part, ImagePart):
            images += 1
        elif isinstance(part, ToolResultPart):
            images += len(part.images)
    return chars // 4 + images * IMAGE_TOKENS


def _part_chars(part: Part) -> int:
    if isinstance(part, TextPart | ThoughtPart):
        return len(part.text) + len(getattr(part, "signature", None) or "")
    if isinstance(part, ToolCallPart):
        return len(part.arguments) + len(part.name) + len(part.id) + 16
    if isinstance(part, ToolResultPart):
        return len(part.content) + len(part.id) + 16
    if isinstance(part, FilePart):
        return len(part.data or b"") + len(part.url or "")
    if isinstance(part, ProviderPart):
        return len(str(part.data))
    return 0


def _elided(messages: tuple[Message, ...]) -> tuple[tuple[Message, ...], int]:
    """The step's messages with long results elided (and their images dropped): tool results,
    and the text of ReAct result turns. Calls are kept, so every result still has its call."""
    count = 0
    out: list[Message] = []
    for message in messages:
        if message.role == "assistant":
            out.append(message)
            continue
        parts: list[Part] = []
        changed = count
        for part in message.parts:
            if isinstance(part, ToolResultPart) and (
                len(part.content) > _KEEP_CHARS or part.images
            ):
                note = (
                    f"[elided to fit the context window: {len(part.content)} characters"
                    f"{f' and {len(part.images)} image(s)' if part.images else ''} of the "
                    f"result of {part.name}]"
                )
                parts.append(dataclasses.replace(part, content=note, images=()))
                count += 1
            elif isinstance(part, TextPart) and len(part.text) > _KEEP_CHARS:
                head = part.text[:_KEEP_CHARS]
                note = f"{head}… [{len(part.text) - _KEEP_CHARS} characters elided]"
                parts.append(TextPart(text=note))
                count += 1
            else:
                parts.append(part)
        out.append(Message(role=message.role, parts=tuple(parts)) if count > changed else message)
    return (tuple(out) if count else messages), count


@dataclass(frozen=True, kw_only=True, slots=True)
class Trim:
    """What one trim did (the engine reports it as ``ContextTrimmed``)."""

    elided_results: int
    summarized_steps: int
    tokens_before: int
    tokens_after: int


class ContextFitter:
    """One run's view of its replayed steps under a ``ContextWindow``. Trims are kept (a step
    elided stays elided, the same objects), so the prompt's start is the same from step to
    step between trims; the work per step is the new step's estimate, not the history's."""

    __slots__ = (
        "_elided_upto",
        "_first",
        "_head_tokens",
        "_kept_tokens",
        "_last_estimate",
        "_overhead",
        "_ratio",
        "_sizes",
        "_steps",
        "_summary",
        "_summary_tokens",
        "_user",
        "window",
    )

    def __init__(self, window: ContextWindow) -> None:
        self.window = window
        self._steps: list[tuple[Message, ...]] = []
        self._sizes: list[int] = []
        self._first = 0  # steps before it are summarised (or dropped)
        self._elided_upto = 0  # steps before it have their results elided
        self._kept_tokens = 0  # the estimate of steps[first:]
        self._head_tokens = 0
        self._summary: str | None = None
        self._summary_tokens = 0
        self._user: Message | None = None  # the user's input, with the summary after it
        self._ratio = 1.0
        self._overhead: int | None = None
        self._last_estimate = 0

    def observe(self, usage: Usage | None) -> None:
        """Correct the estimate by the provider's count of the last request's prompt: the
        first count fixes the overhead (tools' schemas, the wire's framing: what the first
        request's messages do not explain), later ones the ratio of the rest."""
        if usage is None or usage.input_tokens <= 0 or self._last_estimate <= 0:
            return
        if self._overhead is None:
            self._overhead = max(0, usage.input_tokens - self._last_estimate)
            return
        ratio = (usage.input_tokens - self._overhead) / self._last_estimate
        self._ratio = min(_MAX_RATIO, max(_MIN_RATIO, ratio))

    async def fit(
        self,
        head: tuple[Message, ...],
        user: Message,
        replayed: Sequence[tuple[Message, ...]],
        run: RunContext[Any],
    ) -> tuple[tuple[Message, ...], Trim | None]:
        """The prompt: ``head`` (system and memory), the user's input (with the summary, once
        there is one) and the replayed steps, trimmed to the window; and the trim, if any."""
        if self._user is None:  # the head and the input are the same on every step
            self._user = user
            self._head_tokens = sum(map(estimate, head)) + estimate(user)
        for step in replayed[len(self._steps) :]:
            size = sum(map(estimate, step))
            self._steps.append(step)
            self._sizes.append(size)
            self._kept_tokens += size
        before = self._total()
        fixed = round(self._scaled(self._head_tokens))
        if fixed > self.window.max_tokens:
            raise ContextWindowExceeded(
                f"the system message, memory and input take about {fixed} tokens, over the "
                f"context window's budget of {self.window.max_tokens} (ContextWindow.max_tokens);"
                " they are never trimmed, so the request was not sent",
                details={"max_tokens": self.window.max_tokens, "tokens": fixed},
            )
        trim = None
        if self._scaled(before) > self.window.max_tokens:
            trim = await self._trim(run, user, before)
        self._last_estimate = self._total()
        messages = [*head, self._user]
        for step in self._steps[self._first :]:
            messages.extend(step)
        return tuple(messages), trim

    def _total(self) -> int:
        return self._head_tokens + self._summary_tokens + self._kept_tokens

    def _scaled(self, tokens: int) -> float:
        return tokens * self._ratio + (self._overhead or 0)

    async def _trim(self, run: RunContext[Any], user: Message, before: int) -> Trim:
        window = self.window
        target = window.max_tokens * (1.0 - window.headroom)
        recent = max(self._first, len(self._steps) - window.keep_steps)
        elided = self._elide(target, recent)
        summarized = 0
        if self._scaled(self._total()) > target and self._first < recent:
            summarized = await self._summarise(run, user, target, recent)
        if self._scaled(self._total()) > target:  # the last resort: recent steps' results
            elided += self._elide(target, len(self._steps) - 1)
        return Trim(
            elided_results=elided,
            summarized_steps=summarized,
            tokens_before=round(self._scaled(before)),
            tokens_after=round(self._scaled(self._total())),
        )

    def _elide(self, target: float, end: int) -> int:
        count = 0
        i = max(self._first, self._elided_upto)
        while i < end and self._scaled(self._total()) > target:
            step, n = _elided(self._steps[i])
            if n:
                size = sum(map(estimate, step))
                self._kept_tokens += size - self._sizes[i]
                self._steps[i], self._sizes[i] = step, size
                count += n
            i += 1
            self._elided_upto = i
        return count

    async def _summarise(self, run: RunContext[Any], user: Message, target: float, end: int) -> int:
        first = self._first
        upto = first
        tokens = self._total()
        while upto < end and self._scaled(tokens) > target:
            tokens -= self._sizes[upto]
            upto += 1
        folded = [m for step in self._steps[first:upto] for m in step]
        summarizer = self.window.summarizer
        if summarizer is not None:
            earlier = [Message.user(self._summary)] if self._summary else []
            text = (await summarizer([*earlier, *folded], run)).strip()
            summary = f"[Summary of the earlier steps, to fit the context window]\n{text}"
        else:  # steps count from 0: ``upto`` steps are gone, this trim's and earlier ones
            summary = f"[{upto} earlier step(s) were removed to fit the context window]"
        for i in range(first, upto):
            self._kept_tokens -= self._sizes[i]
            self._steps[i] = ()  # folded: kept out of memory as well as out of the prompt
        self._first = upto
        self._elided_upto = max(self._elided_upto, upto)
        self._summary = summary
        self._summary_tokens = estimate(Message.user(summary))
        # Its own part, after a blank line: APIs that take the message as one text join parts.
        note = TextPart(text=f"\n\n{summary}")
        self._user = Message(role="user", parts=(*user.parts, note))
        return upto - first
