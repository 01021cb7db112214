"""The emulated provider's script: turns (a text, tool calls, or both), in Python or as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import UserError
from ._json import is_dict, is_list

__all__ = ["EmulatedCall", "EmulatedTurn", "load_turns"]

MAX_SCRIPT_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class EmulatedCall:
    """A tool call in an emulated turn.

    ``name`` is the tool's name; ``path`` names a ``Toolkit`` activity (the call goes to
    ``name__path``, as the model would write it). ``arguments`` is a dict (sent as JSON), a
    string (sent as it is: raw, possibly broken JSON), or ``None``: then they are made up from
    the JSON schema the request offers for that tool, a value for each required property that
    fits its type, enum, format and bounds (``{}`` when the request offers no such tool).

    In a JSON script a call is ``"name"`` or ``{"name": ..., "path": ..., "arguments": ...}``
    (only ``name`` is required).

    Args:
        name: The tool's name.
        arguments: The arguments: a dict, a raw string, or ``None`` (made up from the schema).
        path: The ``Toolkit`` activity, or ``None``.
    """

    name: str
    arguments: Mapping[str, Any] | str | None = None
    path: str | None = None

    @classmethod
    def from_json(cls, value: Any) -> EmulatedCall:
        """A call from its JSON form; ``ValueError`` says what is wrong.

        Args:
            value: A tool name, or an object with ``name``, ``path`` and ``arguments``.
        """
        if isinstance(value, str):
            value = {"name": value}
        if not is_dict(value):
            raise ValueError(f"a call is a tool name or an object, not {_show(value)}")
        unknown = sorted(set(value) - {"name", "path", "arguments"})
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} (a call has name, path, arguments)")
        name, path, arguments = value.get("name"), value.get("path"), value.get("arguments")
        if not isinstance(name, str) or not name:
            raise ValueError("a call needs a name (a string)")
        if path is not None and not isinstance(path, str):
            raise ValueError("path must be a string")
        if arguments is not None and not isinstance(arguments, dict | str):
            raise ValueError("arguments must be an object or a string of raw JSON")
        return cls(name, arguments, path)


@dataclass(frozen=True, kw_only=True, slots=True)
class EmulatedTurn:
    """One reply in an emulated provider's script: the model's reasoning (``thought``), then
    ``text``, then the tool ``calls`` (parallel calls of one reply), any of which may be empty.

    ``EmulatedProvider(script=[...])`` takes turns or plain strings (a text turn). The script
    is played per conversation: each reply of the model that the request's conversation holds
    is taken for the next turn whose text and calls it has (a reply that matches none, as
    memory written by hand, for one turn), and the request gets the turn after. So each
    conversation plays it from its start, concurrent conversations do not disturb each other,
    a retried request gets the same turn again, and a session's next run goes on where the last
    one stopped, although its memory holds only the runs' answers. A conversation that outlives
    the script gets a text saying so.

    A thought streams as each API streams reasoning: a reasoning item with a summary
    (Responses), a thinking block with a signature (Messages), ``reasoning_content`` deltas
    as OpenAI-compatible servers send them (Chat Completions; OpenAI's own sends none).

    Text is sent as it is, so a ReAct-mode script writes ``Thought:``/``Answer:`` itself. In a
    request that offers no tools (ReAct mode), the calls are written as an ``Actions: [...]``
    line after the text, in the runtime's ReAct format.

    The JSON form (``agentloop emulate --script FILE``, ``EmulatedProvider.from_script_file``)
    is a list of turns, each a string or ``{"thought": ..., "text": ..., "calls": [...]}``:

        [
          {"text": "Let me look.", "calls": ["get_weather", {"name": "get_time",
                                                             "arguments": {"city": "Oslo"}}]},
          "It is sunny in Oslo, and noon."
        ]

    Args:
        text: The reply's text (may be empty).
        calls: The reply's parallel tool calls (may be empty).
        thought: The model's reasoning before them (may be empty).
    """

    text: str = ""
    calls: Sequence[EmulatedCall] = ()
    thought: str = ""

    @classmethod
    def from_json(cls, value: Any) -> EmulatedTurn:
        """A turn from its JSON form; ``ValueError`` says what is wrong.

        Args:
            value: A text, or an object with ``text`` and ``calls``.
        """
        if isinstance(value, str):
            return cls(text=value)
        if not is_dict(value):
            raise ValueError(f"a turn is a text or an object, not {_show(value)}")
        unknown = sorted(set(value) - {"thought", "text", "calls"})
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} (a turn has thought, text, calls)")
        text, calls = value.get("text", ""), value.get("calls", [])
        thought = value.get("thought", "")
        if not isinstance(text, str):
            raise ValueError("text must be a string")
        if not isinstance(thought, str):
            raise ValueError("thought must be a string")
        if not is_list(calls):
            raise ValueError("calls must be a list")
        parsed = []
        for i, call in enumerate(calls):
            try:
                parsed.append(EmulatedCall.from_json(call))
            except ValueError as exc:
                raise ValueError(f"calls[{i}]: {exc}") from None
        return cls(text=text, calls=tuple(parsed), thought=thought)


def load_turns(path: str | Path) -> list[EmulatedTurn]:
    """The turns of a JSON script file; ``UserError`` names the file and the faulty turn."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            data = file.read(MAX_SCRIPT_BYTES + 1)
    except OSError as exc:
        raise UserError(f"cannot read the script {str(path)!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_SCRIPT_BYTES:
        raise UserError(f"script {str(path)!r} is larger than {MAX_SCRIPT_BYTES >> 20} MiB")
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise UserError(f"script {str(path)!r} is not JSON: {exc}") from None
    if not is_list(value):
        raise UserError(f"script {str(path)!r} must be a JSON list of turns")
    turns = []
    for i, item in enumerate(value):
        try:
            turns.append(EmulatedTurn.from_json(item))
        except ValueError as exc:
            raise UserError(f"script {str(path)!r}, turn {i + 1}: {exc}") from None
    return turns


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:60] + "…"
