"""Handoffs: an agent hands the conversation over to another, in the same run.

The model sees each handoff as a transfer tool (``transfer_to_<agent>``, no arguments). When it
calls one, the step's actions finish, and the run goes on under the other agent: its
instructions, tools, model, limits and middleware (goal enforcement included, on the branch
named for it). What the new agent sees is ``Handoff.history``'s policy.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal, TypeAlias

from ._errors import UserError

HandoffHistory: TypeAlias = Literal["full", "input"]

# The session state key under which a run records the agent it ended under, by entry branch.
ACTIVE_AGENT_KEY = "active_agent:"


@dataclass(frozen=True, slots=True)
class Handoff:
    """A handoff to another agent, as ``Agent(handoffs=[...])`` takes it (an agent, or an
    agent's name, is a ``Handoff`` with the defaults).

    ``agent`` is an ``Agent``, or the name of one the run reaches through handoffs from the
    agent it started under: agents are immutable, so a handoff back (``billing`` handing back
    to ``triage``) names it.

    History policy: with ``history="full"`` (the default) the new agent sees the whole
    conversation so far (the session's memory, the input, every step with its actions and
    results, the transfer call included), under its own system message. With
    ``history="input"`` it sees the memory and the input only, as if it had been asked first.

    Args:
        agent: The agent handed over to, or its name.
        description: When the model should hand over (the transfer tool's description).
        history: What the new agent sees: ``"full"`` or ``"input"``.
    """

    agent: Any
    _: KW_ONLY
    description: str | None = None
    history: HandoffHistory = "full"

    def __post_init__(self) -> None:
        if self.history not in ("full", "input"):
            raise UserError(f"Handoff.history must be 'full' or 'input', not {self.history!r}")
        name = self.target_name
        if not name:
            raise UserError(f"a handoff is to an Agent or an agent's name, not {self.agent!r}")

    @property
    def target_name(self) -> str:
        """The name of the agent handed over to."""
        agent = self.agent
        return agent if isinstance(agent, str) else getattr(agent, "name", "")

    @property
    def tool_name(self) -> str:
        """The transfer tool's name: ``transfer_to_<agent>``."""
        return f"transfer_to_{self.target_name}"


def handoff_of(entry: object) -> Handoff:
    """An ``Agent(handoffs=...)`` entry as a ``Handoff``."""
    return entry if isinstance(entry, Handoff) else Handoff(entry)


def transferred(name: str) -> str:
    """What the transfer tool returns to the model."""
    return f"Transferred to {name}: {name} continues the conversation from here."
