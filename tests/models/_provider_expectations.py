"""What each recorded provider fixture must normalise to, loaded from
``tests/fixtures/provider-streams/expectations.json`` (one entry per fixture).

Every value there was read off the fixture files themselves (the SSE events or JSON body), never
computed by the drivers under test. A long string is given as ``{"prefix", "suffix", "length"}``;
an error reply as the ``ModelError`` class name with its status and request id; a field left out
has its default below. Conventions asserted there (they are the drivers' documented
normalisation):

- ``text`` is all visible text joined; ``thoughts`` are the reasoning parts in order, with the
  provider's signature (Anthropic signature, redacted-thinking data, or a Responses reasoning
  item's encrypted content, ``""`` when it has none) and the Responses item id;
- Chat Completions reads choice 0 only; ``finish_reason: "stop"`` with tool calls (a forced tool
  choice) is ``"tool_calls"``; a refusal (``delta.refusal`` / ``message.refusal``) is
  ``"refusal"`` with its text;
- Anthropic ``input_tokens`` counts cached prompt tokens too (all zero in these recordings), and
  the latest ``message_delta`` usage wins; ``thinking_tokens`` are ``reasoning_tokens``;
- server-tool blocks and items are ``blocks`` (``ProviderBlock``), never tool calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentloop import _errors as errors
from agentloop.models import Usage

from ._provider_helpers import FIXTURES


@dataclass(frozen=True)
class Long:
    """A long string: its first and last characters and its length."""

    prefix: str
    suffix: str
    length: int

    def matches(self, value: str) -> bool:
        return (
            len(value) == self.length
            and value.startswith(self.prefix)
            and value.endswith(self.suffix)
        )


@dataclass(frozen=True)
class Thought:
    text: str | Long
    signature: str | Long | None = None
    redacted: bool = False
    id: str | None = None


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Expect:
    text: str | Long = ""
    thoughts: tuple[Thought, ...] = ()
    calls: tuple[Call, ...] = ()
    usage: Usage | None = None
    finish: str = "stop"
    refusal: str | None = None
    blocks: tuple[str, ...] = ()
    citations: int = 0
    error: type[errors.ModelError] | None = None
    status: int | None = None
    request_id: str | None = None


def matches(expected: str | Long | None, value: str | None) -> bool:
    if isinstance(expected, Long):
        return value is not None and expected.matches(value)
    return expected == value


def _string(value: Any) -> Any:
    return Long(**value) if isinstance(value, dict) else value


def _expect(entry: dict[str, Any]) -> Expect:
    error = entry.get("error")
    usage = entry.get("usage")
    return Expect(
        text=_string(entry.get("text", "")),
        thoughts=tuple(
            Thought(**{**t, "text": _string(t["text"]), "signature": _string(t.get("signature"))})
            for t in entry.get("thoughts", ())
        ),
        calls=tuple(Call(**c) for c in entry.get("calls", ())),
        usage=None if usage is None else Usage(**usage),
        finish=entry.get("finish", "stop"),
        refusal=entry.get("refusal"),
        blocks=tuple(entry.get("blocks", ())),
        citations=entry.get("citations", 0),
        error=None if error is None else getattr(errors, error),
        status=entry.get("status"),
        request_id=entry.get("request_id"),
    )


EXPECTED: dict[str, Expect] = {
    key: _expect(entry)
    for key, entry in json.loads((FIXTURES / "expectations.json").read_text()).items()
}
