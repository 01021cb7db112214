"""What an evaluation asks: ``Case`` values gathered in a ``Dataset``, in code or in YAML/JSON."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from .. import FilePart, ImagePart

# A user's message: text, or text, images and files in order (what ``Agent.run`` takes).
InputPart: TypeAlias = Annotated[ImagePart | FilePart, Field(discriminator="kind")]
UserInput: TypeAlias = str | list[str | InputPart]


class ToolCallSpec(BaseModel):
    """A tool call a case expects (``Case.expected_tools``).

    ``args`` of ``None`` accepts any arguments. Each expected value is compared with ``==``,
    or is a matcher: ``{"$any": true}``, ``{"$regex": "^Par"}`` (searched in the value as
    text), ``{"$contains": "x"}`` (a substring, or an item of a list), ``{"$in": [..]}`` (one of
    those values); in code, a function of the actual value returning ``bool``.

    Attributes:
        name: The tool's name.
        path: The toolkit activity (``None``: any).
        args: The expected arguments (``None``: any).
        args_mode: ``subset`` (the call may have more arguments than listed) or ``exact``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    path: str | None = None
    args: dict[str, Any] | None = None
    args_mode: Literal["subset", "exact"] = "subset"


class SimulatedUser(BaseModel):
    """Another agent plays the user: it reads the conversation so far (the agent's replies as
    its input) and writes the next message, until it says ``stop`` or ``max_turns`` messages
    have been sent, all on one session.

    Attributes:
        instructions: Who the user is and what they want (the simulated user's system prompt).
        max_turns: The most user messages sent (the case's ``input`` counts as the first).
        stop: The simulated user says this when it is done (its message is not sent).
        model: The simulated user's ``provider:model`` (else ``evaluate(user_model=...)``).
        until: In code: ``(transcript) -> bool``, checked after each of the agent's replies;
            true ends the conversation (``transcript`` holds ``(role, text)`` pairs).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    instructions: str
    max_turns: int = Field(default=5, ge=1, le=100)
    stop: str = "DONE"
    model: str | None = None
    until: SkipJsonSchema[Callable[[Sequence[tuple[str, str]]], bool] | None] = Field(
        default=None, exclude=True
    )


class Case(BaseModel):
    """One scenario: what the user says and what should come of it.

    The conversation is ``input`` then each of ``turns``, one run each on a fresh session; or,
    with ``user``, a simulated user carries it on from ``input`` (when given).

    Attributes:
        name: Names the case in reports (unique in its dataset).
        input: The first user message: text, or text, images and files.
        turns: The next user messages, in order, on the same session.
        user: A simulated user instead of fixed turns.
        expected_output: What ``Equals`` and ``Contains`` compare with (the typed output as
            JSON for an agent with ``output_type``).
        expected_tools: The tool calls ``ToolTrajectory`` compares with.
        metadata: Anything else the case carries (for custom evaluators).
        tags: Labels to select cases by (and the evaluators that apply to them).
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    input: UserInput | None = None
    turns: list[UserInput] = Field(default_factory=list)
    user: SimulatedUser | None = None
    expected_output: Any = None
    expected_tools: list[ToolCallSpec] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _conversation(self) -> Case:
        if self.input is None and not self.turns and self.user is None:
            raise ValueError(f"case {self.name!r} has no input, turns or simulated user")
        if self.user is not None and self.turns:
            raise ValueError(f"case {self.name!r}: give turns or a simulated user, not both")
        return self

    def messages(self) -> list[UserInput]:
        """The fixed user messages, in order (``input`` then ``turns``)."""
        return ([] if self.input is None else [self.input]) + list(self.turns)
