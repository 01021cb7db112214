"""Properties of the ReAct parser: split-independence, robustness on garbage, linear work."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop._react_parser import (
    ActionInvalid,
    ActionParsed,
    ActionPiece,
    AnswerPiece,
    ReactEvent,
    ReactParser,
    StreamCut,
    TextPiece,
    ThoughtPiece,
)

_HEADERS = ("thought:", "thoughts:", "action:", "actions:", "answer:", "final answer:")
_MARKERS = ("<|Response|>", "Observation:")
_TRICKY = ["[", "]", "{", "}", '"', "\\", "\n", ":", ",", "`", " ", "\t", "é", "😀", "中", "\u2028"]
_TRICKY += ["<|Response|>", "Observation:", "Thought: ", "Answer:", "```", "\\u00e9", "\\n"]


def merge(events: Iterable[ReactEvent]) -> list[ReactEvent]:
    """Join adjacent chunk events of the same kind (and, for actions, the same index)."""
    out: list[ReactEvent] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, AnswerPiece) and isinstance(last, AnswerPiece):
            if last.section == event.section:
                out[-1] = AnswerPiece(text=last.text + event.text, section=event.section)
            else:
                out.append(event)
        elif isinstance(event, (TextPiece, ThoughtPiece)) and type(last) is type(event):
            assert isinstance(last, (TextPiece, ThoughtPiece))
            out[-1] = type(event)(text=last.text + event.text)
        elif isinstance(event, ActionPiece) and isinstance(last, ActionPiece):
            assert last.index == event.index
            out[-1] = ActionPiece(index=event.index, text=last.text + event.text)
        else:
            out.append(event)
    return out


def run(deltas: Iterable[str], parser: ReactParser) -> list[ReactEvent]:
    """Feed the deltas and close; returns every event, unmerged."""
    events: list[ReactEvent] = []
    for delta in deltas:
        events += parser.feed(delta)
    events += parser.close()
    return events


def _is_special_line(line: str) -> bool:
    """True if the line would open a section, cut, or toggle a fence."""
    stripped = line.lstrip()
    lowered = stripped.lower()
    return (
        any(lowered.startswith(h) for h in _HEADERS)
        or any(stripped.startswith(m) for m in _MARKERS)
        or stripped.startswith("```")
        or any(h in lowered for h in ("answer:", "action:", "actions:"))  # mid-line headers
    )


_line_text = st.lists(st.sampled_from(_TRICKY[:-4]) | st.text(max_size=4), max_size=6).map(
    lambda parts: "".join(parts).replace("\n", " ")
)
_line = _line_text.filter(lambda s: not _is_special_line(s))
_lines = st.lists(_line, min_size=1, max_size=4).filter(lambda ls: bool(ls[0].strip()))
_json_str = st.lists(st.sampled_from(_TRICKY) | st.text(max_size=4), max_size=6).map("".join)
_json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _json_str,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_json_str, inner, max_size=3),
    max_leaves=8,
)


@dataclass(frozen=True)
class Style:
    """How one action object is written."""

    raw_newlines: bool
    ascii_only: bool
    indent: bool


def _dump_str(s: str, style: Style) -> str:
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n" and style.raw_newlines:
            out.append("\n")
        elif ch < " " or (style.ascii_only and ord(ch) > 126):
            out.append(json.dumps(ch)[1:-1])
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def dump(value: Any, style: Style, level: int = 0) -> str:
    """JSON text, optionally pretty-printed and with raw newlines in strings."""
    if isinstance(value, str):
        return _dump_str(value, style)
    if not isinstance(value, (list, dict)):
        return json.dumps(value)
    if isinstance(value, list):
        items = [dump(v, style, level + 1) for v in value]
        open_, close = "[", "]"
    else:
        items = [f"{_dump_str(k, style)}: {dump(v, style, level + 1)}" for k, v in value.items()]
        open_, close = "{", "}"
    if not style.indent or not items:
        return open_ + ", ".join(items) + close
    pad = "\n" + "  " * (level + 1)
    return open_ + ",".join(pad + item for item in items) + "\n" + "  " * level + close


@dataclass(frozen=True)
class Reply:
    """A generated valid reply and the merged events it must produce (without ActionPiece)."""

    text: str
    expected: list[ReactEvent]
    actions: list[tuple[str, str, str, dict[str, Any], str]]


@st.composite
def replies(draw: st.DrawFn) -> Reply:
    parts: list[str] = []
    expected: list[ReactEvent] = []
    if draw(st.booleans()):
        prelude = draw(_lines)
        parts.append("\n".join(prelude) + "\n")
        expected.append(TextPiece(text="\n".join(prelude).strip()))
    thought = draw(_lines)
    parts.append(draw(st.sampled_from(["Thought: ", "Thought:", "thought:  "])))
    parts.append("\n".join(thought))
    expected.append(ThoughtPiece(text="\n".join(thought).strip()))
    actions: list[tuple[str, str, str, dict[str, Any], str]] = []
    if draw(st.booleans()):
        objects = []
        for index in range(draw(st.integers(0, 4))):
            tag = draw(st.text(min_size=1, max_size=8))
            name = draw(st.text(min_size=1, max_size=8))
            path = draw(st.text(max_size=8))
            args = draw(st.dictionaries(_json_str, _json_value, max_size=3))
            style = Style(draw(st.booleans()), draw(st.booleans()), draw(st.booleans()))
            obj: dict[str, Any] = {"tag": tag, "name": name, "path": path}
            explicit_empty = draw(st.booleans())
            if args or explicit_empty:
                obj["input"] = args
            raw = dump(obj, style)
            objects.append(raw)
            actions.append((tag, name, path, args, raw))
            expected.append(
                ActionParsed(index=index, tag=tag, name=name, path=path, input=args, raw=raw)
            )
        header = draw(st.sampled_from(["Actions:", "Action:", "ACTIONS:"]))
        fence = draw(st.sampled_from(["", "```json\n", "```\n"]))
        sep = draw(st.sampled_from([", ", ",\n", ",\n  ", ","]))
        array = "[" + sep.join(objects) + "]"
        lead = draw(st.sampled_from([" ", "\n", "  \n"]))
        closing = "\n```" if fence and draw(st.booleans()) else ""
        parts.append(f"\n{header}{lead}{fence}{array}{closing}")
    if draw(st.booleans()):
        answer = draw(_lines)
        parts.append("\n" + draw(st.sampled_from(["Answer: ", "Final Answer:"])))
        parts.append("\n".join(answer))
        expected.append(AnswerPiece(text="\n".join(answer).strip()))
    parts.append(draw(st.sampled_from(["", "\n", "  \n\n"])))
    if draw(st.booleans()):
        marker = draw(st.sampled_from(_MARKERS))
        parts.append(f"\n{marker}: " + draw(_json_str))
        expected.append(StreamCut(marker=marker))
    return Reply("".join(parts), expected, actions)


def splits(text: str, points: list[int]) -> list[str]:
    cuts = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(cuts)]


def check_invariants(text: str, events: list[ReactEvent], parser: ReactParser) -> None:
    """Structure every event stream has, valid or not."""
    terminal = [e for e in events if isinstance(e, (ActionParsed, ActionInvalid))]
    assert [e.index for e in terminal] == list(range(len(terminal)))
    for item in terminal:
        chunks = [e.text for e in events if isinstance(e, ActionPiece) and e.index == item.index]
        assert "".join(chunks) == item.raw
    sealed = -1
    for event in events:
        if isinstance(event, ActionPiece):
            assert event.index == sealed + 1
        elif isinstance(event, (ActionParsed, ActionInvalid)):
            sealed = event.index
        if isinstance(event, (TextPiece, ThoughtPiece, AnswerPiece, ActionPiece)):
            assert event.text
    cuts = [i for i, e in enumerate(events) if isinstance(e, StreamCut)]
    assert cuts in ([], [len(events) - 1])
    assert parser.cut == bool(cuts)
    assert parser.chars_examined <= 4 * len(text) + 16


def run_checked(deltas: list[str], text: str) -> list[ReactEvent]:
    parser = ReactParser()
    events = run(deltas, parser)
    check_invariants(text, events, parser)
    return merge(events)


@settings(max_examples=200)
@given(reply=replies(), data=st.data())
def test_valid_replies_parse_the_same_however_split(reply: Reply, data: st.DataObject) -> None:
    """Any split of a valid reply gives the one-delta events, and the generated actions."""
    whole = run_checked([reply.text], reply.text)
    assert [e for e in whole if not isinstance(e, ActionPiece)] == reply.expected
    got = [(e.tag, e.name, e.path, e.input, e.raw) for e in whole if isinstance(e, ActionParsed)]
    assert got == reply.actions
    assert run_checked(list(reply.text), reply.text) == whole
    points = data.draw(st.lists(st.integers(0, len(reply.text)), max_size=12))
    assert run_checked(splits(reply.text, points), reply.text) == whole


_MORE = ["Action:", "final answer:", "Tho", "<|Resp", "\r\n", "true", "1", "null", "``", '"tag"']
_MORE += ['{"tag": "a", "name": "b", "path": "c", "input": {}}', '\\"', '"input": {']
_MORE += [" " * 700, "\n \t" * 200]  # whitespace runs past the hold-back cap
_MORE += [". Answer: ", " Actions: [", " final answer:", " Action: ```json\n{"]  # mid-line
_garbage_token = st.sampled_from(_TRICKY + _MORE) | st.text(max_size=3)
_garbage = st.lists(_garbage_token, max_size=40).map("".join) | st.text(max_size=80)


@settings(max_examples=400)
@given(text=_garbage, data=st.data())
def test_garbage_never_raises_and_splits_agree(text: str, data: st.DataObject) -> None:
    """Random text from the format's alphabet never raises, and splitting does not matter."""
    whole = run_checked([text], text)
    assert run_checked(list(text), text) == whole
    points = data.draw(st.lists(st.integers(0, len(text)), max_size=8))
    assert run_checked(splits(text, points), text) == whole


@given(reply=replies(), data=st.data())
def test_truncated_replies_never_raise(reply: Reply, data: st.DataObject) -> None:
    """A valid reply cut off anywhere parses without error, however it is split."""
    cut = data.draw(st.integers(0, len(reply.text)))
    text = reply.text[:cut]
    whole = run_checked([text], text)
    assert run_checked(list(text), text) == whole


def _big_reply(size: int) -> tuple[str, int]:
    """A reply of about ``size`` characters: long thought, many long actions, long answer."""
    line = 'thinking about {braces} [brackets] "quotes" and Thought: mid-line, café 😀\n'
    value = 'lorem {ipsum} [dolor] \\"sit\\" \\\\ amet\n<|Response|> \\u00e9 ' * 16
    parts = ["Thought: ", line * (size * 3 // 10 // len(line)), "Actions: ```json\n["]
    count = 0
    while sum(map(len, parts)) < size * 7 // 10:
        parts.append(
            f'{{"tag": "t{count}", "name": "n", "path": "p", '
            f'"input": {{"q": "{value}", "n": [1, {{"k": null}}]}}}},\n '
        )
        count += 1
    parts.append("]\n```\nAnswer: ")
    parts.append(line * ((size - sum(map(len, parts))) // len(line)))
    return "".join(parts), count


def test_work_is_linear_on_a_megabyte_in_one_character_deltas() -> None:
    """A ~1 MB reply fed one character at a time is examined fewer than 4 times per character."""
    text, count = _big_reply(1_000_000)
    assert len(text) > 990_000
    parser = ReactParser()
    feed = parser.feed
    sealed = 0
    thought = answer = 0
    for ch in text:
        for event in feed(ch):
            if type(event) is ActionParsed:
                sealed += 1
            elif type(event) is ThoughtPiece:
                thought += len(event.text)
            elif type(event) is AnswerPiece:
                answer += len(event.text)
    assert parser.close() == []
    assert sealed == count
    assert thought > 250_000
    assert answer > 250_000
    assert parser.chars_examined < 4 * len(text)
