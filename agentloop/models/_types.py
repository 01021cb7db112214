"""The values that cross the seam between the runtime and a model driver.

A driver translates a ``ModelRequest`` into its provider's wire format and yields ``ModelDelta``
values while the reply streams. The runtime assembles them into a ``ModelResponse`` (the value
middleware sees). Drivers know nothing of steps, tools' code or goals.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeAlias

from typing_extensions import TypeVar

from .. import _checks as checks
from .._errors import UserError, as_given
from .._generic import subscript_callable

if TYPE_CHECKING:
    from .._context import StateView

# The type of a run's ``deps`` (``Agent(deps_type=...)``); any, when not given.
DepsT = TypeVar("DepsT", default=Any)
DepsT_co = TypeVar("DepsT_co", covariant=True, default=Any)

# ---------------------------------------------------------------------------------------------
# Message parts

TOOL_NAME_SEPARATOR = "__"


def wire_tool_name(name: str, path: str | None) -> str:
    """The native tool name: ``name``, or ``name__path`` for a toolkit activity.

    Args:
        name: The tool's name.
        path: The toolkit activity, or ``None``.
    """
    return name if path is None else f"{name}{TOOL_NAME_SEPARATOR}{path}"


def split_wire_tool_name(wire: str) -> tuple[str, str | None]:
    """Invert ``wire_tool_name`` (our tool names never contain the separator; a name from
    elsewhere that starts or ends with it stays whole)."""
    name, sep, path = wire.partition(TOOL_NAME_SEPARATOR)
    return (name, path) if sep and name and path else (wire, None)


@dataclass(frozen=True, kw_only=True, slots=True)
class TextPart:
    """Visible text. ``citations`` keeps provider citation/annotation objects for replay.

    Args:
        text: The text.
        citations: The provider's citation objects, as sent.
        kind: The part's kind (its JSON discriminator), fixed per class.
    """

    text: str
    citations: tuple[Mapping[str, Any], ...] = ()
    kind: Literal["text"] = "text"


@dataclass(frozen=True, kw_only=True, slots=True)
class ThoughtPart:
    """Reasoning, or a ReAct ``Thought:``.

    ``signature`` is what the provider needs back to accept the thought on replay (Anthropic's
    thinking signature, or a Responses reasoning item's encrypted content; ``""`` means "no
    payload, but replay the item's ``id``"); ``redacted`` marks Anthropic ``redacted_thinking``
    (its data is in ``signature``). ``provider`` names the provider that produced it: a thought
    is only replayed to that provider. A ReAct thought has no provider.

    Args:
        text: The reasoning text.
        signature: What the provider needs back on replay (see above).
        redacted: An Anthropic ``redacted_thinking`` block.
        id: The provider's id of the reasoning item.
        provider: The provider that produced it (``None`` for a ReAct thought).
        kind: The part's kind (its JSON discriminator), fixed per class.
    """

    text: str
    signature: str | None = None
    redacted: bool = False
    id: str | None = None
    provider: str | None = None
    kind: Literal["thought"] = "thought"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallPart:
    """One action the model asked for. ``arguments`` is the JSON text exactly as the model wrote
    it; ``error`` is set when the runtime could not make an action of it (bad JSON in ReAct mode,
    unknown tool): the action then gets that error as its result without running.

    Args:
        id: The call's id (the provider's, or the ReAct ``tag``).
        name: The tool's name.
        path: The toolkit activity, or ``None``.
        arguments: The arguments' JSON text.
        error: Why no action could be made of it, or ``None``.
        kind: The part's kind (its JSON discriminator), fixed per class.
    """

    id: str
    name: str
    path: str | None = None
    arguments: str = "{}"
    error: str | None = None
    kind: Literal["tool_call"] = "tool_call"

    @property
    def wire_name(self) -> str:
        return wire_tool_name(self.name, self.path)


IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def _check_source(what: str, url: str | None, data: bytes | None) -> None:
    if (url is None) == (data is None):
        raise ValueError(f"{what} takes a url or data, exactly one of them")
    if url is not None and not url.startswith(("https://", "http://", "data:")):
        raise ValueError(f"{what} url must be http(s) or a data: URL, not {url[:40]!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ImagePart:
    """An image in a user message or a tool result: a URL the provider fetches, or the bytes.

    ``media_type`` is required with ``data`` (``image/png``, ``image/jpeg``, ``image/gif`` or
    ``image/webp``, the types all three APIs take); with a URL it is optional.

    Args:
        url: An ``https://`` (or ``data:``) URL.
        data: The image's bytes.
        media_type: The image's MIME type.
        kind: The part's kind (its JSON discriminator), fixed per class.
    """

    # Sessions and events store the bytes as base64 (pydantic reads this).
    __pydantic_config__: ClassVar[dict[str, str]] = {
        "ser_json_bytes": "base64",
        "val_json_bytes": "base64",
    }

    url: str | None = None
    data: bytes | None = None
    media_type: str | None = None
    kind: Literal["image"] = "image"

    def __post_init__(self) -> None:
        _check_source("ImagePart", self.url, self.data)
        if self.data is not None and self.media_type not in IMAGE_TYPES:
            raise ValueError(
                f"ImagePart media_type must be one of {', '.join(sorted(IMAGE_TYPES))}, "
                f"not {self.media_type!r}"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class FilePart:
    """A document in a user message (a PDF, or plain text where the provider takes it): a URL
    or the bytes, with its MIME type; ``filename`` is shown to the model where the API has one.

    Args:
        media_type: The file's MIME type (``application/pdf``, ``text/plain``).
        url: An ``https://`` URL.
        data: The file's bytes.
        filename: Its name.
        kind: The part's kind (its JSON discriminator), fixed per class.
    """

    # Sessions and events store the bytes as base64 (pydantic reads this).
    __pydantic_config__: ClassVar[dict[str, str]] = {
        "ser_json_bytes": "base64",
        "val_json_bytes": "base64",
    }

    media_type: str
    url: str | None = None
    data: bytes | None = None
    filename: str | None = None
    kind: Literal["file"] = "file"

    def __post_init__(self) -> None:
        _check_source("FilePart", self.url, self.data)


def data_url(part: ImagePart | FilePart) -> str:
    """The part as a URL: its own, or a base64 ``data:`` URL of its bytes."""
    if part.url is not None:
        return part.url
    return f"data:{part.media_type};base64,{base64.b64encode(part.data or b'').decode()}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResultPart:
    """The result of one action, replayed to the model. ``content`` is text (JSON for values);
    ``images`` are images the tool returned, sent where the API takes them in a result.

    Args:
        id: The id of the call it answers.
        name: The tool's name.
        path: The toolkit activity, or ``None``.
        content: The result as the model reads it.
        is_error: The action failed; ``content`` is the error message.
        images: Images the tool returned (an MCP image, an ``ImagePart``).
        kind: The part's kind (its JSON discriminator), fixed per class.
    """

    id: str
    name: str
    path: str | None = None
    content: str
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()
    kind: Literal["tool_result"] = "tool_result"

    @property
    def wire_name(self) -> str:
        return wire_tool_name(self.name, self.path)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderPart:
    """A provider block the runtime does not interpret but must replay: server-tool calls and
    their results (web search), Responses items it does not model. ``data`` is the raw JSON.

    Args:
        provider: The provider that sent it.
        type: The block's type, as the provider names it.
        data: The block's JSON.
        kind: The part's kind (its JSON discriminator), fixed per class.
    """

    provider: str
    type: str
    data: Mapping[str, Any]
    kind: Literal["provider"] = "provider"


Part: TypeAlias = (
    TextPart | ThoughtPart | ToolCallPart | ToolResultPart | ProviderPart | ImagePart | FilePart
)
# What a run's input may hold besides text (``Agent.run(["Describe it", ImagePart(...)])``).
InputPart: TypeAlias = TextPart | ImagePart | FilePart
Role: TypeAlias = Literal["system", "user", "assistant", "tool"]


# ``weakref_slot``: drivers cache the JSON they encoded for a message for as long as it lives.
@dataclass(frozen=True, kw_only=True, slots=True, weakref_slot=True)
class Message:
    """One message of a prompt. ``tool`` messages carry ``ToolResultPart`` values only.

    Args:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        parts: Its content.
    """

    role: Role
    parts: tuple[Part, ...]

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message of text.

        Args:
            text: The message's text.
        """
        return cls(role="system", parts=(TextPart(text=text),))

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message of text.

        Args:
            text: The message's text.
        """
        return cls(role="user", parts=(TextPart(text=text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        """An assistant message of text.

        Args:
            text: The message's text.
        """
        return cls(role="assistant", parts=(TextPart(text=text),))

    @property
    def text(self) -> str:
        """The visible text of the message (text parts joined)."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


# ---------------------------------------------------------------------------------------------
# Requests


@dataclass(frozen=True, kw_only=True, slots=True, weakref_slot=True)
class ToolSpec:
    """A tool as a model sees it. ``name`` is the wire name (``name`` or ``name__path``).

    Args:
        name: The wire name.
        description: What it does.
        parameters: The JSON schema of its arguments.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputSchema:
    """The JSON schema the answer must match (from ``Agent(output_type=...)``).

    Args:
        name: The schema's name (the output type's).
        json_schema: The schema.
    """

    name: str
    json_schema: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSettings:
    """Sampling settings. ``None`` leaves the provider's default; ``extra`` is merged into the
    provider's request body as it is (for options agentloop does not model).

    Args:
        max_tokens: The longest reply, in tokens.
        temperature: Sampling temperature.
        top_p: Nucleus sampling.
        seed: A seed, where the provider supports one.
        thinking_budget: Tokens for reasoning (Anthropic's thinking budget).
        reasoning_effort: OpenAI's reasoning effort (``"low"``, ``"medium"``, ``"high"``).
        tool_choice: ``"auto"``, ``"required"`` (some tool must be called), ``"none"``, or a
            tool's wire name (that tool must be called). Sent only with tools. In a run, a
            forced choice holds until a tool has been called: later steps leave the choice
            to the model, so that it can answer.
        parallel_tool_calls: ``False`` asks for at most one tool call per reply (Anthropic's
            ``disable_parallel_tool_use``). Sent only with tools.
        prompt_cache_key: OpenAI's ``prompt_cache_key``: requests with the same key are routed
            to the same cache.
        prompt_caching: Place Anthropic ``cache_control`` breakpoints (tools, system, the
            history's end); ``False`` sends none. OpenAI caches prefixes on its own.
        extra: Fields merged into the request body as they are.
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    thinking_budget: int | None = None
    reasoning_effort: str | None = None
    tool_choice: Literal["auto", "required", "none"] | str | None = None
    parallel_tool_calls: bool | None = None
    prompt_cache_key: str | None = None
    prompt_caching: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        owner = "ModelSettings"
        checks.optional_count(owner, "max_tokens", self.max_tokens, minimum=1)
        checks.optional_count(owner, "thinking_budget", self.thinking_budget)
        # Its range differs by provider (0-2, 0-1), whose 400 names it.
        checks.optional_finite(owner, "temperature", self.temperature)
        checks.optional_number(owner, "top_p", self.top_p)
        if self.seed is not None:
            checks.count(owner, "seed", self.seed, minimum=-(2**63))
        for name in ("reasoning_effort", "tool_choice", "prompt_cache_key"):
            checks.optional_text(owner, name, getattr(self, name))
        checks.flag(owner, "parallel_tool_calls", self.parallel_tool_calls, optional=True)
        checks.flag(owner, "prompt_caching", self.prompt_caching)
        if not isinstance(as_given(self.extra), Mapping):
            raise UserError(f"ModelSettings.extra must be a mapping, not {self.extra!r}")


ToolMode: TypeAlias = Literal["native", "react"]


@subscript_callable
@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest(Generic[DepsT]):
    """One model call, derived from the run's state. Middleware may ``replace`` it.
    A middleware that takes a ``ModelRequest[Deps]`` sees ``request.run.deps`` typed.

    ``max_reply_chars`` is the runtime's limit on the reply: a driver also bounds what it
    buffers by it (one stream event may not grow past a few bytes per allowed character).

    Args:
        messages: The prompt.
        tools: The tools offered (none in ReAct mode: the system prompt teaches them).
        tool_mode: ``"native"`` or ``"react"``.
        stop: Stop sequences.
        output_schema: The schema the answer must match, if any.
        settings: Sampling settings.
        run: The run making the call (``None`` outside a run).
        max_reply_chars: The largest reply the run accepts.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_mode: ToolMode = "native"
    stop: tuple[str, ...] = ()
    output_schema: OutputSchema | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    run: RunContext[DepsT] | None = None
    max_reply_chars: int | None = None

    def replace(self, **changes: Any) -> ModelRequest[DepsT]:
        """A copy with some fields changed.

        Args:
            **changes: The fields to change, by name.
        """
        return dataclasses.replace(self, **changes)

    @property
    def system(self) -> str | None:
        """The text of the first system message, if any."""
        for m in self.messages:
            if m.role == "system":
                return m.text
        return None

    def with_system(self, text: str) -> ModelRequest[DepsT]:
        """This request with the first system message's text replaced (or one inserted).

        Args:
            text: The new system text.
        """
        messages = list(self.messages)
        for i, m in enumerate(messages):
            if m.role == "system":
                messages[i] = Message.system(text)
                break
        else:
            messages.insert(0, Message.system(text))
        return self.replace(messages=tuple(messages))

    def with_message(self, message: Message) -> ModelRequest[DepsT]:
        """This request with one more message at the end.

        Args:
            message: The message to add.
        """
        return self.replace(messages=(*self.messages, message))


# ---------------------------------------------------------------------------------------------
# Usage and finish reasons


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Token counts. ``unknown`` counts model calls whose usage was never reported (a stream the
    client cut, a provider that sends none): those are never counted as zero tokens.

    Args:
        requests: Model calls.
        input_tokens: Prompt tokens, cached ones included.
        output_tokens: Reply tokens, reasoning included.
        cache_read_tokens: Prompt tokens read from the provider's cache.
        cache_write_tokens: Prompt tokens written to it.
        reasoning_tokens: Reply tokens spent on reasoning.
        unknown: Model calls whose usage was never reported.
        stream_errors: Model calls whose stream failed after actions of the reply had started:
            the reply so far was kept as the step (a retry could run them twice), not retried.
    """

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    unknown: int = 0
    stream_errors: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            unknown=self.unknown + other.unknown,
            stream_errors=self.stream_errors + other.stream_errors,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


UNKNOWN_USAGE = Usage(requests=1, unknown=1)

FinishReason: TypeAlias = Literal[
    "stop",  # a normal end of reply
    "tool_calls",  # the reply ends with tool calls
    "length",  # a token limit cut the reply (OpenAI length, Anthropic max_tokens)
    "content_filter",  # the provider's filter stopped the reply
    "refusal",  # the model refused
    "pause_turn",  # Anthropic paused a long server-tool turn; the runtime continues it
    "incomplete",  # Responses ``incomplete`` for another reason
    "cut",  # the client cut the stream (ReAct: the model wrote its own tool response)
    "error",  # the stream failed after actions had started; the reply is partial
]

# ---------------------------------------------------------------------------------------------
# Deltas: what a driver yields while a reply streams


@dataclass(frozen=True, slots=True)
class TextPiece:
    """A piece of the reply's text; appended to the open text part.

    Args:
        text: The piece.
    """

    text: str


@dataclass(frozen=True, slots=True)
class ThoughtPiece:
    """A piece of reasoning text; appended to the open thought part.

    Args:
        text: The piece.
    """

    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ThoughtDone:
    """Closes the open thought part (opening an empty one if none is open, for redacted
    thinking), attaching what the provider needs on replay.

    Args:
        signature: The provider's signature or encrypted content.
        redacted: An Anthropic ``redacted_thinking`` block.
        id: The provider's id of the reasoning item.
    """

    signature: str | None = None
    redacted: bool = False
    id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallStart:
    """A native tool call begins. ``name`` is the wire name.

    Args:
        id: The call's id.
        name: The wire name.
    """

    id: str
    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallArgsDelta:
    """A piece of a native tool call's arguments.

    Args:
        id: The call's id.
        text: The piece of JSON text.
    """

    id: str
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallEnd:
    """The call is sealed: its arguments are complete and it may start now.

    ``arguments`` is the full JSON text when the driver has it (non-streaming responses, or
    providers that send it again at the end); otherwise the runtime uses the deltas it saw.

    Args:
        id: The call's id.
        arguments: The whole arguments' JSON, when the driver has it.
    """

    id: str
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderBlock:
    """A complete block kept for replay and surfaced as an event (web search and its results).

    Args:
        part: The block.
    """

    part: ProviderPart


@dataclass(frozen=True, slots=True)
class CitationDelta:
    """A citation/annotation for the open text part.

    Args:
        data: The provider's citation object.
    """

    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class UsageDelta:
    """The reply's usage so far; a later one replaces an earlier one.

    Args:
        usage: The usage.
    """

    usage: Usage


@dataclass(frozen=True, kw_only=True, slots=True)
class FinishDelta:
    """The reply ended.

    Args:
        reason: Why, normalised across providers.
        raw: The provider's own reason, as sent.
        refusal: The refusal's text, when the model refused.
    """

    reason: FinishReason
    raw: str | None = None
    refusal: str | None = None


ModelDelta: TypeAlias = (
    TextPiece
    | ThoughtPiece
    | ThoughtDone
    | ToolCallStart
    | ToolCallArgsDelta
    | ToolCallEnd
    | ProviderBlock
    | CitationDelta
    | UsageDelta
    | FinishDelta
)


# ---------------------------------------------------------------------------------------------
# Responses


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelResponse:
    """A whole reply, as middleware sees it.

    ``attempt`` is the number of the stream that produced it (``None`` for a response a
    middleware made up; the runtime gives it a fresh number). ``usage`` is ``None`` when unknown.
    ``partial`` marks a reply whose stream failed after some of its actions had started.

    Args:
        parts: The reply's content.
        usage: Its tokens, or ``None`` when unknown.
        finish_reason: Why it ended.
        model_name: The model that wrote it, as the provider reports it.
        attempt: The number of the stream that produced it.
        partial: The stream failed after some of its actions had started.
        refusal: The refusal's text, when the model refused.
    """

    parts: tuple[Part, ...]
    usage: Usage | None = None
    finish_reason: FinishReason = "stop"
    model_name: str | None = None
    attempt: int | None = None
    partial: bool = False
    refusal: str | None = None
    _attempts: AttemptLog | None = field(default=None, repr=False, compare=False)

    def replace(self, **changes: Any) -> ModelResponse:
        """A copy with some fields changed.

        Args:
            **changes: The fields to change, by name.
        """
        return dataclasses.replace(self, **changes)

    def discard(self, reason: DiscardReason = "middleware") -> None:
        """Withdraw this attempt's streamed text: the caller receives ``AttemptDiscarded``.

        A middleware that asks the model again calls this on the reply it throws away.

        Args:
            reason: Why: ``"middleware"``, or ``"goal"`` / ``"retry"`` for the runtime's own.
        """
        if self._attempts is not None and self.attempt is not None:
            self._attempts.discard(self.attempt, reason)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def thought(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, ThoughtPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolCallPart))

    @property
    def has_actions(self) -> bool:
        return any(isinstance(p, ToolCallPart) for p in self.parts)

    @property
    def is_final(self) -> bool:
        """Visible text, no actions, not partial and not a continuation: the reply ends a run."""
        return (
            not self.partial
            and self.finish_reason not in ("pause_turn", "error")
            and not self.has_actions
            and bool(self.text.strip())
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelProfile:
    """What a model driver supports; the runtime adapts (``tool_mode="auto"``, stop sequences,
    and whether the output schema is also taught in the system prompt).

    Args:
        native_tools: The model calls tools natively (else ``"auto"`` picks ReAct).
        stop_sequences: The API takes stop sequences.
        native_output: The API constrains the reply to a JSON schema.
    """

    native_tools: bool = True
    stop_sequences: bool = True
    native_output: bool = False


ModelStream: TypeAlias = AbstractAsyncContextManager[AsyncIterator[ModelDelta]]


# ---------------------------------------------------------------------------------------------
# The run, as middleware and tools see it (the engine implements these; drivers never use them)

DiscardReason: TypeAlias = Literal["retry", "goal", "middleware", "fallback", "guardrail", "limit"]


class AttemptLog(Protocol):
    """The engine's record of a run's attempts: the seam behind ``ModelResponse.discard``."""

    def discard(self, attempt: int, reason: DiscardReason) -> None:
        """Mark the attempt discarded; ``AttemptDiscarded`` goes out before the next event."""
        ...


class RunContext(Protocol[DepsT_co]):
    """A read-only view of the run, given to middleware (``request.run``) and tools.
    ``RunContext[Deps]`` types ``deps`` (what the agent's ``deps_type`` says runs take).

    Middleware objects are shared by concurrent runs and hold no per-run state: they keep it in
    ``scratch(self)``, a dict private to this run (and branch).
    """

    __slots__ = ()

    @property
    def run_id(self) -> str: ...

    @property
    def parent_run_id(self) -> str | None: ...

    @property
    def root_run_id(self) -> str: ...

    @property
    def agent_name(self) -> str: ...

    @property
    def branch(self) -> str: ...

    @property
    def session_id(self) -> str | None: ...

    @property
    def state(self) -> StateView: ...

    @property
    def step(self) -> int:
        """The index of the step in progress (0-based)."""
        ...

    @property
    def max_steps(self) -> int:
        """The agent's ``max_steps``: model calls (steps) the run may make."""
        ...

    @property
    def last_step(self) -> bool:
        """This step's model call is the last the run may make: actions of its reply do not
        run (the run ends with ``max_steps_exceeded``), and a ReAct reply's text is taken as
        the answer."""
        ...

    def is_final_answer(self, response: ModelResponse) -> bool:
        """Whether the loop would end the run with ``response`` as its answer: the test goal
        enforcement uses for a premature final. It judges content, not ``finish_reason``.

        Args:
            response: The reply to judge.
        """
        ...

    @property
    def deps(self) -> DepsT_co:
        """Whatever the caller passed as ``deps=`` (database handles, clients, …)."""
        ...

    @property
    def variables(self) -> Mapping[str, Any]: ...

    @property
    def usage(self) -> Usage:
        """The run's usage so far: every model call it made (discarded attempts and ended
        sub-runs included), as ``UsageLimits`` counts it."""
        ...

    @property
    def tool_calls(self) -> int:
        """The tool calls the run has made so far (as ``UsageLimits.tool_calls`` counts)."""
        ...

    def scratch(self, owner: object) -> dict[str, Any]:
        """A per-run, per-branch dict private to ``owner`` (usually a middleware object).

        Args:
            owner: The object the dict belongs to (keyed by identity).
        """
        ...
