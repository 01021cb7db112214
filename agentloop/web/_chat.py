"""What the Vercel AI SDK's ``useChat`` posts besides a new prompt: its tool approval round trip.

After ``addToolApprovalResponse`` the SDK posts the conversation again, the last assistant
message's tool parts in state ``approval-responded``. That continues the waiting run with those
decisions (never runs the prompt again); their ``approval.id`` is the pending call's id, as the
stream's ``tool-approval-request`` named it.
"""

from __future__ import annotations

from typing import Any


def approval_responses(messages: Any) -> dict[str, dict[str, Any]] | None:
    """The decisions the last message carries (``{"decision": ...}`` by pending call id), or
    ``None`` when it carries none (a new prompt).

    Args:
        messages: The request's ``messages`` (UI messages).
    """
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return None
    decided: dict[str, dict[str, Any]] = {}
    for part in last.get("parts") or []:
        if not isinstance(part, dict) or part.get("state") != "approval-responded":
            continue
        approval = part.get("approval")
        if not isinstance(approval, dict) or not isinstance(approval.get("id"), str):
            continue
        if approval.get("approved") is True:
            decided[approval["id"]] = {"decision": "approve"}
        else:
            reason = approval.get("reason")
            decided[approval["id"]] = {"decision": "deny", "reason": reason or "denied"}
    return decided or None
