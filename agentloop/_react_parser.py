"""Incremental ReAct parser: text deltas in, thought / answer / action events out.

The model writes ``Thought:`` / ``Actions: [json]`` / ``Answer:`` sections (the seed's ReAct text
format). The seed parsed a finished reply with regexes; this parser is a character-level state
machine fed the reply as it streams, so thoughts reach the caller as they are written and each
action is sealed (and can start) the moment its JSON object closes. It is synchronous, knows no
tools, never raises from ``feed``/``close`` and examines each character O(1) times: no buffer is
re-scanned and no regex runs over accumulated text (``chars_examined`` counts the work).

Decisions (each is tested):

* **Headers** are recognised at a line start (after optional whitespace), outside JSON strings
  and, in text sections, outside code fences. They are case-insensitive and lenient: ``Thought:``
  or ``Thoughts:``; ``Actions:`` or ``Action:``; ``Answer:`` or ``Final Answer:``. Cut markers
  (``<|Response|>``, ``Observation:`` by default) are matched case-sensitively at the same places;
  they cut the stream (``StreamCut``) and everything after them is ignored.
* **Mid-line headers.** Models that drift write ``Thought: I will add. Actions: [...]`` on one
  line; Griptape's ``Actions:[^\\[]*(\\[.*\\])`` search would run it, so we do too, but more
  narrowly, since prose says "actions:" and "answer:" too. In a text section outside fences
  (and not on a fence line), after a space or a tab: ``Actions:`` / ``Action:`` opens the
  actions only if a ``[`` or ``{`` follows after at most 64 characters of whitespace (newlines
  included) and one fence opener (backticks and an info string); ``Answer:`` / ``Final Answer:``
  opens an answer only outside an answer section (a second answer would replace the first) and
  only when the line's text before it ends a sentence (``.``, ``!``, ``?``): ``Thought: done.
  Answer: 42`` is an answer, ``the answer: 42`` and ``Thought: Answer: 42`` are thought text.
  ``Thought:`` and cut markers are never recognised mid-line. Candidates are found by their
  colon (rare in prose), and a header prefix only at the end of a delta, where it is held back
  while it may still match (at most the header plus that bounded gap) and replayed as text
  otherwise.
* **Fences.** In a ``Thought``/``Answer``/plain-text section a line opening with three or more
  backticks (or a header followed by them) opens a code fence, with any info string; a line of at
  least as many backticks and nothing else closes it. Inside, headers and markers are text.
  Around the actions JSON a fence is only syntax: it is skipped, and since a line-start header is
  never valid JSON, headers and markers outside JSON strings still end the array, so an unclosed
  fence or array cannot swallow the rest of the reply.
* **A reply wrapped in a fence.** Models often fence their whole reply. When the reply's first
  non-blank line opens a fence whose info string is empty or names a text format (``text``,
  ``txt``, ``plaintext``, ``markdown``, ``md``, ``json``, ``react``), that line is dropped and the
  reply is parsed as if unfenced: headers inside are headers, actions run. ```python`` and other
  languages start a code block as before (a plain answer that opens with code keeps it). Inside
  the wrapper, fences opened with an info string hide headers as usual; the first line of at
  least as many backticks and nothing else while no such fence is open closes the wrapper (as in
  CommonMark) and is dropped, with its newline; what follows is parsed as usual. Those backticks
  (and the whitespace after them, up to 64 characters) are held until their line ends. A fenced
  JSON array with no ``Actions:`` header is not an action (Griptape requires the header too): it
  is text, without its fence lines.
* **Actions.** Text between ``Actions:`` and the first ``[`` is skipped (a fence opener, prose).
  A bare object (``Action: {...}``, no array) is accepted, as are several bare objects in a row.
  Each array item gets the next ``index`` (from 0, over the whole reply): objects and non-objects
  alike. Every item streams as ``ActionPiece`` events and ends with exactly one ``ActionParsed``
  or ``ActionInvalid``; the chunks of an item concatenate to its ``raw``. An object needs
  non-empty string ``tag`` and ``name``, a string ``path`` (may be empty) and an object ``input``
  (absent or ``null`` means ``{}``); other keys are ignored.
* **Recovery.** A malformed object ends where its brackets balance (strings respected) and the
  array goes on. A non-object item runs until the next ``,``, ``]`` or ``{`` at the array's top
  level, so the parser resynchronises at the next top-level ``{``. A ``]`` that closes the array
  while an object is still open ends that object (invalid) and the array. A line-start header or
  marker ends an open item (invalid) and the array. What cannot be recovered: an unterminated
  string or a missing ``}`` inside an object swallows what follows, up to one of those ends. A
  reply that ends inside an item makes it invalid at ``close()``; an unclosed array with no open
  item is closed silently.
* **Text after the array.** Whitespace and a closing fence are skipped; other text until the next
  header is emitted as ``TextPiece`` (text outside any section), like the text before the first
  header.
* **Whitespace.** A section's leading whitespace is dropped: the spaces after the header (all of
  them, not just one) and any blank lines; when the text starts on a later line, that line keeps
  its indentation (the reply's start counts as a header line). Its trailing whitespace (before
  the next header, marker or the end) is not emitted. Only whitespace is held back for this, at
  most ``_WS_CAP`` (512) characters of one run; past that the oldest part of the run is emitted.
  When a ``Thought`` section or text outside sections starts and text of the same kind was
  already emitted in this reply, its text begins with ``"\\n"`` so the pieces stay apart.
* **Several answers.** Griptape takes the last ``Answer:`` match. Each answer section that has
  text gets the next ``AnswerPiece.section`` (from 0; empty sections are not counted) and no
  ``"\\n"`` prefix: the number tells the sections apart, and the caller keeps the last.
  The merged events do not depend on how the reply is split into deltas.
* **Hold-back.** Besides whitespace, only a possible header or marker prefix at a line start
  (at most the longest header or marker), a possible mid-line header, the reply's first line
  while it may open a wrapping fence (at most 40 characters) and a line of backticks that may
  close it (see above) are held back.
* ``close()`` flushes and ends the reply; later ``close()`` calls and ``feed()`` after
  ``close()`` or after a cut return ``[]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, final

from ._errors import UserError

# Text outside any section is a ``TextPiece`` and a ``Thought:`` section's text a
# ``ThoughtPiece``: the same values a native driver yields for text and reasoning.
from .models._types import TextPiece, ThoughtPiece

__all__ = [
    "ActionInvalid",
    "ActionParsed",
    "ActionPiece",
    "AnswerPiece",
    "ReactEvent",
    "ReactParser",
    "StreamCut",
    "TextPiece",
    "ThoughtPiece",
    "render_actions",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerPiece:
    """Text of an ``Answer:`` section, without the header.

    ``section`` numbers the reply's answer sections that have text, from 0: the last one is the
    answer, so a caller must be able to tell them apart."""

    text: str
    section: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionPiece:
    """Raw JSON text of action item ``index`` as it streams (for a live UI)."""

    index: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionParsed:
    """Action item ``index`` closed and has the right shape; it can start now."""

    index: int
    tag: str
    name: str
    path: str
    input: dict[str, Any] = field(default_factory=dict)
    raw: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionInvalid:
    """Action item ``index`` is unusable; ``error`` says why (fed back to the model)."""

    index: int
    raw: str
    error: str
    tag: str | None = None
    name: str | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamCut:
    """The model wrote a cut marker at a line start: stop the provider stream, ignore the rest."""

    marker: str


ReactEvent: TypeAlias = (
    TextPiece | ThoughtPiece | AnswerPiece | ActionPiece | ActionParsed | ActionInvalid | StreamCut
)

# Section kinds. Text kinds index _TEXT_EVENT.
_TEXT: Final = 0
_THOUGHT: Final = 1
_ANSWER: Final = 2
_ACTIONS: Final = 3
_TEXT_EVENT: Final = (TextPiece, ThoughtPiece, AnswerPiece)

# Header spellings (compared lower-cased) and the section each opens.
_HEADERS: Final[dict[str, int]] = {
    "thought:": _THOUGHT,
    "thoughts:": _THOUGHT,
    "action:": _ACTIONS,
    "actions:": _ACTIONS,
    "answer:": _ANSWER,
    "final answer:": _ANSWER,
}
_PARTIAL: Final = -1

# Parser modes.
_M_TEXT: Final = 0  # text section, mid-line
_M_LINE: Final = 1  # text section, only whitespace seen on the line (or since the header)
_M_TICKS: Final = 2  # text section, a run of backticks at a line start
_M_PEND: Final = 3  # holding a possible header/marker prefix in _pend
_M_APRE: Final = 4  # after an actions header, before its '[' or '{'
_M_ARRAY: Final = 5  # inside the array, between items
_M_ITEM: Final = 6  # inside an item, outside JSON strings
_M_ISTR: Final = 7  # inside a JSON string of an item
_M_IESC: Final = 8  # after a backslash in a JSON string
_M_POST: Final = 9  # after the array (or a bare object)
_M_DONE: Final = 10  # cut or closed
_M_MID: Final = 11  # holding a possible mid-line header (and what leads to its JSON) in _pend
_M_WOPEN: Final = 12  # holding the reply's first non-blank line, a fence opener, in _pend

_WS_CAP: Final = 512  # most whitespace of one run held back (it may be trailing)
_ITEM_SPECIAL: Final = re.compile(r'["{}\[\],\n`]')
_STR_SPECIAL: Final = re.compile(r'["\\]')
_CLOSER: Final = {"}": "{", "]": "["}
# Mid-line headers: only these, only after a space or tab (see the module docstring).
_MID_ACTIONS: Final = {"action:": _ACTIONS, "actions:": _ACTIONS}
_MID_ANSWERS: Final = {"answer:": _ANSWER, "final answer:": _ANSWER}
_MID_ALL: Final = _MID_ACTIONS | _MID_ANSWERS
_MID_LONGEST_FIRST: Final = sorted(_MID_ALL, key=len, reverse=True)
# Proper prefixes of the mid-line headers, lower-cased: a candidate at the end of the text.
_MID_ACTIONS_PREFIXES: Final = frozenset(w[:k] for w in _MID_ACTIONS for k in range(1, len(w)))
_MID_ANSWERS_PREFIXES: Final = frozenset(w[:k] for w in _MID_ANSWERS for k in range(1, len(w)))
_MID_LOOK: Final = 64  # most characters held between a mid-line "Actions:" and its JSON
_SENTENCE_END: Final = ".!?"
# A reply whose first non-blank line opens a fence with one of these info strings is wrapped.
_WRAP_OPENER: Final = re.compile(r"(`{3,})[ \t]*([A-Za-z]*)[ \t]*\r?")
_WRAP_INFO: Final = frozenset(["", "text", "txt", "plaintext", "markdown", "md", "json", "react"])
_WRAP_LINE_MAX: Final = 40  # longest opener line held
_INFO_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+-.")


def _prefix_table(words: Mapping[str, int]) -> dict[str, int]:
    table: dict[str, int] = {}
    for word in words:
        for k in range(1, len(word)):
            table.setdefault(word[:k], _PARTIAL)
    for word, value in words.items():
        table[word] = value
    return table


_HEADER_TABLE: Final = _prefix_table(_HEADERS)
_MID_ACTIONS_TABLE: Final = _prefix_table(_MID_ACTIONS)
_MID_ALL_TABLE: Final = _prefix_table(_MID_ALL)


def _short(text: str, limit: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _check(index: int, raw: str, obj: object) -> ActionParsed | ActionInvalid:
    """Turn one decoded action object into an event; the parser knows no tools."""
    if not isinstance(obj, dict):
        return ActionInvalid(index=index, raw=raw, error="the action is not a JSON object")
    found: dict[str, str] = {}
    errors: list[str] = []
    for key in ("tag", "name", "path"):
        value = obj.get(key)
        if key not in obj:
            errors.append(f"missing {key!r}")
        elif not isinstance(value, str):
            errors.append(f"{key!r} must be a string")
        elif not value and key != "path":
            errors.append(f"{key!r} must not be empty")
        else:
            found[key] = value
    args = obj.get("input")
    if args is None:
        args = {}
    elif not isinstance(args, dict):
        errors.append("'input' must be a JSON object")
    if errors:
        return ActionInvalid(
            index=index,
            raw=raw,
            error="; ".join(errors),
            tag=found.get("tag"),
            name=found.get("name"),
            path=found.get("path"),
        )
    return ActionParsed(
        index=index, tag=found["tag"], name=found["name"], path=found["path"], input=args, raw=raw
    )


@final
class ReactParser:
    """Feed one ReAct reply's text deltas; get events as soon as the text settles them.

    ``cut`` turns true when a cut marker was seen (the caller then stops the provider stream);
    ``chars_examined`` counts the characters looked at, including by ``json.loads`` on each action
    object, and stays within a small multiple of the reply's length. Use one parser per reply.
    """

    __slots__ = (
        "_afence",
        "_bare",
        "_fence",
        "_fresh",
        "_hline",
        "_index",
        "_item_obj",
        "_item_open",
        "_jline",
        "_kind",
        "_lead",
        "_lead_nl",
        "_lf",
        "_lf_blank",
        "_marker_table",
        "_markers",
        "_mid",
        "_mid_look",
        "_mid_table",
        "_mid_ticks",
        "_mode",
        "_out",
        "_pend",
        "_prev_ws",
        "_raw",
        "_raw_sent",
        "_ret",
        "_section",
        "_seen",
        "_sent",
        "_stack",
        "_starts",
        "_tparts",
        "_wmark",
        "_wrap",
        "_ws",
        "_wtick",
        "chars_examined",
        "cut",
    )

    def __init__(self, *, cut_markers: tuple[str, ...] = ("<|Response|>", "Observation:")) -> None:
        for marker in cut_markers:
            if not marker or marker[0].isspace() or marker[0] == "`" or "\n" in marker:
                raise UserError(
                    f"cut marker {marker!r} must be non-empty, contain no newline and not start "
                    "with whitespace or a backtick"
                )
        self._markers = tuple(cut_markers)
        self._marker_table = _prefix_table({m: i for i, m in enumerate(cut_markers)})
        self._starts = frozenset(
            [m[0] for m in cut_markers] + [c for h in _HEADERS for c in (h[0], h[0].upper())]
        )
        self.cut = False
        self.chars_examined = 0
        self._mode = _M_LINE
        self._out: list[ReactEvent] = []
        # text section state
        self._kind = _TEXT
        self._tparts: list[str] = []
        self._ws = ""  # held whitespace (may turn out to be trailing)
        self._lead = True  # nothing emitted in this section yet
        self._lead_nl = False  # a newline was seen in the section's leading whitespace
        self._seen = [False, False, False]  # text of this kind was emitted in this reply
        self._section = -1  # number of the current (or last) answer section with text
        self._fence = 0  # backticks of the open code fence, 0 when none
        self._hline = False  # on a header's line: a fence may open here, a header may not
        self._lf = 0  # backticks opening the current line (>= 3), else 0
        self._lf_blank = True  # nothing but whitespace after those backticks
        # header/marker prefix hold-back
        self._pend = ""
        self._ret = _M_TEXT
        # mid-line headers
        self._prev_ws = False  # the last character consumed was a space or a tab
        self._sent = False  # the line's text so far ends a sentence (an answer may follow)
        self._mid = 0  # phase of a held mid-line header: word, gap, ticks, info, after fence
        self._mid_look = 0  # characters held after a mid-line actions header
        self._mid_ticks = 0
        self._mid_table: dict[str, int] = _MID_ACTIONS_TABLE
        # a reply wrapped in a fence
        self._fresh = True  # nothing but whitespace so far: a fence line here may wrap the reply
        self._wrap = 0  # backticks of the wrapping fence, 0 when none (or closed)
        self._wtick = False  # holding a line-start run of backticks: it may close the wrapper
        self._wmark = 0  # length of _ws when that run started (whitespace after it is held too)
        # actions state
        self._jline = False  # at a line start (only whitespace so far) in JSON modes
        self._afence = False  # the actions JSON was opened with a fence
        self._bare = False  # actions given as bare objects, no array
        self._index = 0
        self._item_open = False
        self._item_obj = False
        self._stack: list[str] = []
        self._raw: list[str] = []
        self._raw_sent = 0  # pieces of _raw already sent as ActionPiece

    # ----------------------------------------------------------------- public

    def feed(self, delta: str) -> list[ReactEvent]:
        """Parse the next piece of the reply; returns the events it completes."""
        mode = self._mode
        # Fast paths for the common deltas: mid-line section text, and the inside of a JSON
        # string. Each does exactly what the general path below would.
        if mode == _M_TEXT:
            if (
                not self._lead
                and not self._lf
                and delta
                and "\n" not in delta
                and (self._fence or self._plain(delta))
            ):
                body = delta.rstrip()
                if body and len(delta) - len(body) <= 2 * _WS_CAP:
                    self.chars_examined += len(delta)
                    text = self._ws + body if self._ws else body
                    self._ws = delta[len(body) :] if len(body) < len(delta) else ""
                    self._sent = body[-1] in _SENTENCE_END
                    self._prev_ws = delta[-1] in " \t"
                    kind = self._kind
                    if kind == _ANSWER:
                        return [AnswerPiece(text=text, section=self._section)]
                    return [_TEXT_EVENT[kind](text=text)]
        elif mode == _M_ISTR:
            if delta and '"' not in delta and "\\" not in delta:
                self.chars_examined += len(delta)
                self._raw.append(delta)
                self._raw_sent = len(self._raw)
                return [ActionPiece(index=self._index - 1, text=delta)]
        elif mode == _M_DONE:
            return []
        if not delta:
            return []
        out = self._out = []
        self._consume(delta)
        self._flush()
        return out

    def close(self) -> list[ReactEvent]:
        """End of the reply: flush held text, and report an unfinished action item."""
        if self._mode == _M_DONE:
            return []
        out = self._out = []
        while self._mode in (_M_PEND, _M_MID, _M_WOPEN):
            if self._mode == _M_PEND:
                self._replay()
            elif self._mode == _M_MID:
                self._replay_mid()
            else:
                self._replay_opener()
        if self._wtick:  # the reply ends on a bare fence line
            if self._lf >= self._wrap:
                self._ws = self._ws[: self._wmark]  # the wrapper's closing fence: dropped
                self._wtick = False
            else:
                self._release_ticks()
        if self._kind != _ACTIONS:
            self._end_text()
        elif self._item_open:
            where = "a JSON string of " if self._mode in (_M_ISTR, _M_IESC) else ""
            self._end_item(f"the reply ended inside {where}the action")
        self._flush()
        self._mode = _M_DONE
        return out

    # --------------------------------------------------------------- the loop

    def _consume(self, s: str) -> None:
        """Run the state machine over ``s``; events go to ``self._out``."""
        i = 0
        n = len(s)
        while i < n:
            mode = self._mode
            if mode == _M_TEXT:
                if self._fence or self._lf:
                    j = s.find("\n", i)
                    if j < 0:
                        j = n
                else:
                    j = self._text_stop(s, i)
                if j > i:
                    self._text_seg(s[i:j])
                    self.chars_examined += j - i
                    i = j
                if i < n and s[i] != "\n":  # a possible mid-line header (_text_stop chose it)
                    self.chars_examined += 1
                    self._pend = s[i]
                    self._mid = self._mid_look = 0
                    self._mode = _M_MID
                    i += 1
                elif i < n:  # a newline
                    self.chars_examined += 1
                    if self._wtick:  # a bare line of enough backticks closes the wrapper
                        self._ws = self._ws[: self._wmark]
                        self._wtick = False
                        self._wrap = self._lf = 0
                        self._mode = _M_LINE
                        self._hline = self._sent = False
                        i += 1
                        continue
                    if self._lf:
                        if not self._fence:
                            self._fence = self._lf
                        elif self._lf >= self._fence and self._lf_blank:
                            self._fence = 0
                        self._lf = 0
                    self._add_ws("\n")
                    self._mode = _M_LINE
                    self._hline = self._sent = False
                    i += 1
            elif mode == _M_MID:
                i = self._mid_pending(s[i], i)
            elif mode == _M_ISTR:
                m = _STR_SPECIAL.search(s, i)
                j = m.start() if m else n
                if j > i:
                    self._raw.append(s[i:j])
                if j < n:
                    self._raw.append(s[j])
                    self._mode = _M_ITEM if s[j] == '"' else _M_IESC
                    j += 1
                self.chars_examined += j - i
                i = j
            elif mode == _M_ITEM:
                i = self._item(s, i, n)
            elif mode == _M_IESC:
                self._raw.append(s[i])
                self.chars_examined += 1
                self._mode = _M_ISTR
                i += 1
            elif mode == _M_LINE:
                c = s[i]
                self.chars_examined += 1
                if c.isspace():
                    self._add_ws(c)
                    if c == "\n":
                        self._hline = False
                elif c == "`":
                    if self._fresh:
                        self._fresh = False
                        self._pend = ""
                        self._mode = _M_WOPEN
                    else:
                        if self._wrap and not self._fence and not self._hline:
                            self._wtick = True
                            self._wmark = len(self._ws)
                        self._mode = _M_TICKS
                    continue
                elif not self._fence and not self._hline and c in self._starts:
                    self._pend = c
                    self._ret = _M_TEXT
                    self._mode = _M_PEND
                else:
                    self._mode = _M_TEXT
                    continue
                i += 1
            elif mode == _M_PEND:
                i = self._pending(s[i], i)
                if self._mode == _M_DONE:
                    return
            elif mode == _M_TICKS:
                j = i
                while j < n and s[j] == "`":
                    j += 1
                self.chars_examined += j - i + (j < n)
                if j > i:
                    if not self._wtick:
                        self._put(s[i:j])
                        self._sent = False
                    self._lf += j - i
                    i = j
                if i < n:
                    if self._wtick and self._lf < self._wrap:
                        self._release_ticks()
                    self._lf = self._lf if self._lf >= 3 else 0
                    self._lf_blank = True
                    self._mode = _M_TEXT
            elif mode == _M_WOPEN:
                c = s[i]
                self.chars_examined += 1
                if c == "\n":
                    m = _WRAP_OPENER.fullmatch(self._pend)
                    if m and m.group(2).lower() in _WRAP_INFO:
                        self._wrap = len(m.group(1))
                        self._pend = ""
                        self._mode = _M_LINE
                        i += 1
                        continue
                elif len(self._pend) < _WRAP_LINE_MAX:
                    self._pend += c
                    i += 1
                    continue
                self._replay_opener()  # c is looked at again below
            elif mode == _M_ARRAY:
                c = s[i]
                self.chars_examined += 1
                if c.isspace():
                    self._jline = self._jline or c == "\n"
                elif (self._jline and self._hold(c, _M_ARRAY)) or c == ",":
                    pass  # held as a possible header, or a separator
                elif c == "]":
                    self._mode = _M_POST
                elif c == "`":  # a closing fence: the array was left open
                    self._mode = _M_POST
                    continue
                else:
                    self._start_item(c == "{")
                    continue
                i += 1
            elif mode == _M_APRE:
                c = s[i]
                self.chars_examined += 1
                if c.isspace():
                    self._jline = self._jline or c == "\n"
                elif self._jline and self._hold(c, _M_APRE):
                    pass  # held as a possible header
                elif c == "[":
                    self._mode = _M_ARRAY
                elif c == "{":
                    self._bare = True
                    self._start_item(True)
                    continue
                elif c == "`":
                    self._afence = True
                i += 1
            elif mode == _M_POST:
                c = s[i]
                self.chars_examined += 1
                line = self._jline
                if c.isspace():
                    self._jline = self._jline or c == "\n"
                elif (
                    (self._jline and self._hold(c, _M_POST))
                    or (c == "`" and self._afence)
                    or (c == "," and self._bare)
                ):
                    pass  # held as a possible header, the closing fence, or a separator
                elif self._bare and c == "{":
                    self._start_item(True)
                    continue
                else:
                    self._start_text(_TEXT)
                    self._hline = not line  # a fence line after the array is a line of its own
                    continue
                i += 1
            else:  # _M_DONE
                return
        self._prev_ws = s[-1] in " \t"

    def _item(self, s: str, i: int, n: int) -> int:
        """Scan an action item outside JSON strings from ``s[i]``; returns the next index."""
        raw = self._raw
        if self._jline:
            c = s[i]
            self.chars_examined += 1
            if c.isspace():
                raw.append(c)
                return i + 1
            self._jline = False
            if self._hold(c, _M_ITEM):
                return i + 1
            self.chars_examined -= 1  # examined again below
        m = _ITEM_SPECIAL.search(s, i)
        j = m.start() if m else n
        if j > i:
            raw.append(s[i:j])
        self.chars_examined += j - i
        if j == n:
            return j
        self.chars_examined += 1
        c = s[j]
        stack = self._stack
        top_level = not stack
        if c == '"':
            self._mode = _M_ISTR
        elif c == "\n":
            self._jline = True
        elif c == "{" or c == "[":
            if top_level and not self._item_obj and c == "{":  # resynchronise at a new object
                self._end_item(None)
                self._mode = _M_ARRAY
                return j
            stack.append(c)
        elif c == "}" or c == "]":
            if top_level:
                if c == "]":  # ends a non-object item and the array
                    self._end_item(None)
                    self._mode = _M_POST
                    return j + 1
            elif stack[-1] != _CLOSER[c] and c == "]" and len(stack) == 1:
                self._end_item("the array closed before the action object did")
                self._mode = _M_POST
                return j + 1
            else:
                stack.pop()
                if not stack and self._item_obj:
                    raw.append(c)
                    self._end_item(None)
                    self._mode = _M_POST if self._bare else _M_ARRAY
                    return j + 1
        elif top_level and not self._item_obj:  # ',' or '`' ends a non-object item
            self._end_item(None)
            self._mode = _M_ARRAY
            return j + (c == ",")
        raw.append(c)
        return j + 1

    def _pending(self, c: str, i: int) -> int:
        """Extend the held line-start prefix with ``c``: a header, a marker, or plain text."""
        self.chars_examined += 1
        word = self._pend + c
        marker = self._marker_table.get(word)
        header = _HEADER_TABLE.get(word.lower())
        if marker is not None and marker >= 0:
            self._pend = ""
            self._end_section(f"the cut marker {self._markers[marker]!r}")
            self._flush()
            self._out.append(StreamCut(marker=self._markers[marker]))
            self.cut = True
            self._mode = _M_DONE
            return i + 1
        if header is not None and header >= 0:
            self._pend = ""
            self._end_section(f"the {word.strip()!r} header")
            if header == _ACTIONS:
                self._flush()
                self._kind = _ACTIONS
                self._mode = _M_APRE
                self._afence = self._bare = self._jline = False
            else:
                self._start_text(header)
            return i + 1
        if marker is not None or header is not None:
            self._pend = word
            return i + 1
        self._replay()
        return i  # c is looked at again in the mode we returned to

    def _hold(self, c: str, ret: int) -> bool:
        """At a line start in JSON modes: start holding ``c`` if it may begin a header."""
        self._jline = False
        if c in self._starts:
            self._pend = c
            self._ret = ret
            self._mode = _M_PEND
            return True
        return False

    def _replay(self) -> None:
        """The held prefix is not a header: process it as ordinary mid-line text."""
        pend = self._pend
        self._pend = ""
        self._mode = self._ret
        self._jline = self._prev_ws = False  # its first character starts no header
        self._consume(pend)  # free of newlines; may hold a mid-line header again, further on

    def _plain(self, s: str) -> bool:
        """Cheap test that a newline-free delta holds no possible mid-line header: no colon, and
        its last word does not start like one (else ``_text_stop`` decides)."""
        if ":" in s:
            return False
        b = max(s.rfind(" "), s.rfind("\t")) + 1
        if b == len(s) or s[b] not in "aAfF":
            return True
        return (b == 0 and not self._prev_ws) or self._text_stop(s, 0) == len(s)

    def _text_stop(self, s: str, i: int) -> int:
        """Index of the next newline or possible mid-line header in ``s`` from ``i`` (else
        ``len(s)``), outside fences. Every header ends with a colon, rare in prose, so only
        colons are looked for, and a header prefix only at the end of ``s``: ordinary prose is
        neither held back nor replayed, and stays on the ``str.find`` fast path."""
        n = len(s)
        end = s.find("\n", i)
        if end < 0:
            end = n
        k = i
        while (c := s.find(":", k, end)) >= 0:
            for header in _MID_LONGEST_FIRST:
                j = c + 1 - len(header)
                if (
                    j >= i
                    and s[j : c + 1].lower() == header
                    and self._mid_ok(s, i, j, _MID_ALL[header] == _ANSWER)
                ):
                    return j
            k = c + 1
        if end < n:
            return end
        # A header may be starting in the last word (or two: "final answer" has a space).
        b = max(s.rfind(" ", i), s.rfind("\t", i))
        j = b + 1 if b >= 0 else i
        if j < n and s[j] in "aAfF" and n - j <= 12:
            if b > i and s[j] in "aA":
                b2 = max(s.rfind(" ", i, b), s.rfind("\t", i, b))
                j2 = b2 + 1 if b2 >= 0 else i
                if s[j2] in "fF" and n - j2 <= 12 and self._tail_header(s, i, j2):
                    return j2
            if self._tail_header(s, i, j):
                return j
        return n

    def _tail_header(self, s: str, i: int, j: int) -> bool:
        word = s[j:].lower()
        if word in _MID_ACTIONS_PREFIXES:
            return self._mid_ok(s, i, j, False)
        return word in _MID_ANSWERS_PREFIXES and self._mid_ok(s, i, j, True)

    def _mid_ok(self, s: str, i: int, j: int, is_answer: bool) -> bool:
        """Whether a header (an answer if ``is_answer``) may start at ``s[j]`` mid-line; chooses
        the table to hold it with."""
        if not (s[j - 1] in " \t" if j > 0 else self._prev_ws):
            return False
        answer = self._kind != _ANSWER and self._ends_sentence(s, i, j)
        if is_answer and not answer:
            return False
        self._mid_table = _MID_ALL_TABLE if answer else _MID_ACTIONS_TABLE
        return True

    def _ends_sentence(self, s: str, i: int, j: int) -> bool:
        """Whether the text before ``s[j]`` (from ``s[i]`` on, else what came before) ends a
        sentence, spaces aside; each space is stepped over once, as one candidate follows it."""
        k = j - 1
        while k >= i and s[k] in " \t":
            k -= 1
        return s[k] in _SENTENCE_END if k >= i else self._sent

    def _mid_pending(self, c: str, i: int) -> int:
        """Extend a held mid-line header with ``c``; after ``Actions:`` only whitespace and one
        fence opener may come before the ``[`` or ``{`` that confirms it."""
        self.chars_examined += 1
        phase = self._mid
        if phase == 0:
            word = self._pend + c
            found = self._mid_table.get(word.lower())
            if found == _PARTIAL:
                self._pend = word
                return i + 1
            if found == _ANSWER:
                self._pend = ""
                self._end_text()
                self._start_text(_ANSWER)
                return i + 1
            if found == _ACTIONS:
                self._pend = word
                self._mid = 1
                return i + 1
        elif c in "[{" and (phase != 2 or self._mid_ticks >= 3):
            self._pend = ""
            self._end_text()
            self._flush()
            self._kind = _ACTIONS
            self._mode = _M_APRE
            self._afence = phase >= 2
            self._bare = self._jline = False
            return i  # the bracket is looked at again in _M_APRE
        elif self._mid_look < _MID_LOOK:
            ok = False
            if c.isspace():
                ok = phase != 2 or self._mid_ticks >= 3
                self._mid = 1 if phase == 1 else 4
            elif c == "`" and phase in (1, 2):
                ok = True
                self._mid_ticks = self._mid_ticks + 1 if phase == 2 else 1
                self._mid = 2
            elif c in _INFO_CHARS and phase in (2, 3):
                ok = phase == 3 or self._mid_ticks >= 3
                self._mid = 3
            if ok:
                self._pend += c
                self._mid_look += 1
                return i + 1
        self._replay_mid()
        return i  # c is looked at again in the mode we returned to

    def _replay_opener(self) -> None:
        """The reply's first line is not a wrapping fence: process it as it would have been."""
        pend = self._pend
        self._pend = ""
        self._mode = _M_LINE
        self._consume(pend)

    def _release_ticks(self) -> None:
        """Held line-start backticks are not the wrapper's closing fence: emit them in place."""
        after = self._ws[self._wmark :]
        self._ws = self._ws[: self._wmark]
        self._wtick = False
        self._put("`" * self._lf)
        self._ws = after

    def _replay_mid(self) -> None:
        """The held mid-line text is no header: process it as text (it may hold again later)."""
        pend = self._pend
        self._pend = ""
        self._mode = _M_TEXT
        self._prev_ws = False  # its first character starts no header
        if self._mid == 0 and " " not in pend:  # one word: plain text (the common case)
            self.chars_examined += len(pend)
            self._text_seg(pend)
        else:
            self._consume(pend)

    # ---------------------------------------------------------------- sections

    def _start_text(self, kind: int) -> None:
        self._flush()
        self._kind = kind
        self._mode = _M_LINE
        self._hline = True
        self._lead = True
        self._lead_nl = False
        self._ws = ""
        self._fence = self._lf = 0
        self._sent = False

    def _end_section(self, why: str) -> None:
        self._fresh = False
        if self._kind != _ACTIONS:
            self._end_text()
        elif self._item_open:
            self._end_item(f"the action was not closed before {why}")

    def _end_text(self) -> None:
        """Drop the section's trailing whitespace (beyond the cap, the excess was text)."""
        ws = self._ws
        if not self._lead and len(ws) > _WS_CAP:
            self._tparts.append(ws[:-_WS_CAP])
        self._ws = ""

    def _text_seg(self, seg: str) -> None:
        """Mid-line text without newlines: emit it, holding back its trailing whitespace."""
        body = seg.rstrip()
        if not body:
            self._add_ws(seg)
            return
        if self._wtick:
            self._release_ticks()
        if self._lf:
            self._lf_blank = False
        self._sent = body[-1] in _SENTENCE_END
        if self._lead:
            core = body.lstrip()
            if len(core) < len(body):
                self._add_ws(body[: len(body) - len(core)])
            self._put(core)
        else:
            self._put(body)
        if len(body) < len(seg):
            self._add_ws(seg[len(body) :])

    def _add_ws(self, ws: str) -> None:
        """Hold whitespace; ``ws`` is ``"\\n"`` or free of newlines."""
        if self._lead and ws == "\n":
            self._lead_nl = True
            self._ws = ""
            return
        if self._wtick and len(self._ws) + len(ws) - self._wmark > _MID_LOOK:
            self._release_ticks()  # too much whitespace after the backticks to hold it apart
        held = self._ws + ws
        if len(held) > 2 * _WS_CAP:
            self._ws = ""
            self._put(held[:-_WS_CAP])
            held = held[-_WS_CAP:]
        self._ws = held

    def _put(self, text: str) -> None:
        """Emit section text, preceded by the held whitespace that is not leading."""
        self._fresh = False
        if self._lead:
            if self._lead_nl:
                text = self._ws + text
            self._lead = False
            if self._kind == _ANSWER:  # numbered, not separated
                self._section += 1
            elif self._seen[self._kind]:
                text = "\n" + text
            self._seen[self._kind] = True
        elif self._ws:
            text = self._ws + text
        self._ws = ""
        self._tparts.append(text)

    # ------------------------------------------------------------------ items

    def _start_item(self, is_object: bool) -> None:
        self._flush()
        self._index += 1
        self._item_open = True
        self._item_obj = is_object
        self._stack = []
        self._raw = []
        self._raw_sent = 0
        self._jline = False
        self._mode = _M_ITEM

    def _end_item(self, error: str | None) -> None:
        """Seal the open item: parse it, or report ``error``."""
        self._flush()
        index = self._index - 1
        raw = "".join(self._raw)
        self._item_open = False
        self._raw = []
        self._raw_sent = 0
        event: ActionParsed | ActionInvalid
        if error is not None:
            event = ActionInvalid(index=index, raw=raw, error=error)
        elif not self._item_obj:
            event = ActionInvalid(
                index=index, raw=raw, error=f"the action is not a JSON object: {_short(raw)}"
            )
        else:
            self.chars_examined += len(raw)
            try:
                obj = json.loads(raw, strict=False)
            except (ValueError, RecursionError) as exc:
                event = ActionInvalid(index=index, raw=raw, error=f"invalid JSON: {exc}")
            else:
                event = _check(index, raw, obj)
        self._out.append(event)

    def _chunk(self, text: str) -> TextPiece | ThoughtPiece | AnswerPiece:
        if self._kind == _ANSWER:
            return AnswerPiece(text=text, section=self._section)
        return _TEXT_EVENT[self._kind](text=text)

    def _flush(self) -> None:
        """Turn the text and raw JSON gathered so far into chunk events."""
        parts = self._tparts
        if parts:
            text = parts[0] if len(parts) == 1 else "".join(parts)
            parts.clear()
            if text:
                self._out.append(self._chunk(text))
        raw = self._raw
        if len(raw) > self._raw_sent:
            text = "".join(raw[self._raw_sent :])
            self._raw_sent = len(raw)
            self._out.append(ActionPiece(index=self._index - 1, text=text))


def render_actions(actions: Sequence[Mapping[str, Any]]) -> str:
    """Render ``{tag, name, path, input}`` mappings as the JSON array the model is taught.

    One compact object per line; used to replay earlier steps. ``ReactParser`` reads it back to the
    same actions. An ``input`` that is not an object (the raw text of an action the model got
    wrong) is replayed as it is, as a JSON value, so the array stays valid JSON.
    """
    lines = [
        json.dumps(
            {
                "tag": action["tag"],
                "name": action["name"],
                "path": action["path"],
                "input": {} if action.get("input") is None else action["input"],
            },
            ensure_ascii=False,
        )
        for action in actions
    ]
    return "[" + ",\n ".join(lines) + "]"
