"""What ends a run: the one test of "this reply is the final answer".

The loop settles replies with it, and goal enforcement (through ``RunContext.is_final_answer``)
judges premature finals with it, so the two can never disagree. It looks at content, never at a
provider's ``finish_reason`` alone: some OpenAI-compatible servers say ``tool_calls`` for a reply
with no tool call, and Anthropic says ``tool_use`` with no tool block.
"""

from __future__ import annotations

from ._errors import ContentFiltered, ModelRefused, ReplyTruncated, RunError
from .models._types import ModelResponse, ThoughtPart

KEEP_GOING = "Please keep going: take the next step, or give your final answer."
REACT_REMINDER = (
    "Please keep going, in the format you were taught: to use tools, reply with `Actions:` "
    "followed by a JSON array of actions; to finish, reply with `Answer:` followed by your "
    "final answer."
)


def finish_error(response: ModelResponse) -> RunError | None:
    """A reply that ended for a reason other than a normal stop is never silently an answer."""
    reason = response.finish_reason
    if reason == "refusal" or response.refusal:
        return ModelRefused(response.refusal or response.text or "the model refused")
    if reason == "content_filter":
        return ContentFiltered("the provider's content filter stopped the reply")
    if reason in ("length", "incomplete"):
        return ReplyTruncated(f"the reply was cut short ({reason})")
    return None


def visible_thought(response: ModelResponse) -> str:
    """The reply's ReAct thought (provider reasoning is not visible text)."""
    return "".join(
        p.text for p in response.parts if isinstance(p, ThoughtPart) and p.provider is None
    )


def final_text(response: ModelResponse, *, accept_thought: bool) -> str | None:
    """The text with which the loop ends the run as its answer, or ``None`` if the reply does
    not end it (it has actions, is partial or a continuation, ended abnormally, or holds no
    visible text). ``accept_thought``: a ReAct reply with neither actions nor an answer was
    already reminded of the format (or no model call is left), so its thought is the answer.
    Whether the answer then validates against an output type is the loop's next question."""
    if (
        response.partial
        or response.has_actions
        or response.finish_reason in ("pause_turn", "error")
        or finish_error(response) is not None
    ):
        return None
    text = response.text
    if text.strip():
        return text
    if accept_thought:
        thought = visible_thought(response)
        if thought.strip():
            return thought
    return None
