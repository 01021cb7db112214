"""The incremental ReAct parser: one named test per behaviour it promises."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest

from agentloop import UserError
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
    render_actions,
)

_CHUNKS = (TextPiece, ThoughtPiece, AnswerPiece)


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
        elif isinstance(event, _CHUNKS) and type(last) is type(event):
            assert isinstance(last, _CHUNKS)
            out[-1] = type(event)(text=last.text + event.text)
        elif (
            isinstance(event, ActionPiece)
            and isinstance(last, ActionPiece)
            and last.index == event.index
        ):
            out[-1] = ActionPiece(index=event.index, text=last.text + event.text)
        else:
            out.append(event)
    return out


def run(deltas: Iterable[str], parser: ReactParser | None = None) -> list[ReactEvent]:
    """Feed the deltas and close; returns every event, unmerged."""
    parser = parser or ReactParser()
    events: list[ReactEvent] = []
    for delta in deltas:
        events += parser.feed(delta)
    events += parser.close()
    return events


def parse(text: str) -> list[ReactEvent]:
    """Events of ``text`` fed whole, checked to equal those of one-character deltas."""
    whole = run([text])
    assert merge(run(text)) == merge(whole)
    return merge(whole)


def texts(events: Iterable[ReactEvent], kind: type[TextPiece | ThoughtPiece | AnswerPiece]) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


def parsed(events: Iterable[ReactEvent]) -> list[tuple[str, str, str, object]]:
    return [(e.tag, e.name, e.path, e.input) for e in events if isinstance(e, ActionParsed)]


def invalid(events: Iterable[ReactEvent]) -> list[ActionInvalid]:
    return [e for e in events if isinstance(e, ActionInvalid)]


def act(tag: str, **input: object) -> str:
    return json.dumps({"tag": tag, "name": "tool", "path": "run", "input": input})


# 1 -------------------------------------------------------------------------------------------


def test_header_split_across_deltas() -> None:
    """A header split over deltas is still a header, and so is a split cut marker."""
    events = run(["Tho", "ught: x\nAns", "wer", ":", " y"])
    assert merge(events) == [ThoughtPiece(text="x"), AnswerPiece(text="y")]

    parser = ReactParser()
    assert parser.feed("Thought: a\n<|Resp") == [ThoughtPiece(text="a")]
    cut_before = parser.cut
    assert parser.feed("onse|>: the model made this up") == [StreamCut(marker="<|Response|>")]
    assert (cut_before, parser.cut) == (False, True)
    assert parser.feed("Answer: more") == []
    assert parser.close() == []


# 2 -------------------------------------------------------------------------------------------


def test_multiline_thought_streams_with_little_hold_back() -> None:
    """Thought text is emitted as it arrives; only trailing spaces and a possible header wait."""
    parser = ReactParser()
    assert parser.feed("Thought: first li") == [ThoughtPiece(text="first li")]
    assert parser.feed("ne  ") == [ThoughtPiece(text="ne")]
    assert parser.feed("x") == [ThoughtPiece(text="  x")]
    assert parser.feed("\nTh") == []  # a newline and what may become "Thought:"
    assert parser.feed("e end") == [ThoughtPiece(text="\nThe end")]
    assert parser.feed("\nsecond\n  third") == [ThoughtPiece(text="\nsecond\n  third")]
    assert parser.close() == []


# 3 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opener", ["```json\n", "```\n", "``` json  \n", "````JSON\n"])
def test_code_fence_around_actions(opener: str) -> None:
    """A fenced actions array, with or without a language tag, parses like a bare one."""
    reply = f"Thought: t\nActions:\n{opener}[{act('a', q='x')},\n{act('b')}]\n```\nAnswer: done"
    events = parse(reply)
    assert parsed(events) == [("a", "tool", "run", {"q": "x"}), ("b", "tool", "run", {})]
    assert texts(events, AnswerPiece) == "done"
    assert not any(isinstance(e, TextPiece) for e in events)


def test_code_fence_on_the_header_line() -> None:
    """The fence may open on the header line and close right after the ``]``."""
    events = parse(f"Actions: ```json\n[{act('a')}]```\nThought: next")
    assert parsed(events) == [("a", "tool", "run", {})]
    assert texts(events, ThoughtPiece) == "next"


def test_code_fence_that_never_closes() -> None:
    """An unclosed fence neither loses the actions nor hides the headers after them."""
    events = parse(f"Actions:\n```json\n[{act('a')}]\nAnswer: done")
    assert parsed(events) == [("a", "tool", "run", {})]
    assert texts(events, AnswerPiece) == "done"
    events = parse(f"Actions:\n```json\n[{act('a')}")  # fence and array both left open
    assert parsed(events) == [("a", "tool", "run", {})]
    assert invalid(events) == []


def test_code_fence_in_text_hides_headers_until_it_closes() -> None:
    """Inside a fence in an answer, header lines are text; after it closes they are headers."""
    reply = "Answer: see\n```text\nThought: not a header\n``` \nThought: real"
    events = parse(reply)
    assert texts(events, AnswerPiece) == "see\n```text\nThought: not a header\n```"
    assert texts(events, ThoughtPiece) == "real"
    events = parse("Answer:\n```\nAnswer: x")  # never closes: everything is answer text
    assert events == [AnswerPiece(text="```\nAnswer: x")]
    for inner in ("```python", "```"):  # a closer has no info string and is as long as the opener
        opener = "```" if inner == "```python" else "````"
        events = parse(f"Answer:\n{opener}\n{inner}\nThought: x\n{opener}\nThought: y")
        assert texts(events, ThoughtPiece) == "y"


def test_code_fence_may_open_on_the_header_line() -> None:
    """A fence opened right after a header counts, so its closing line does not open another."""
    reply = f"Thought: ```\nActions: not yet\n```\nActions: [{act('a')}]\n<|Response|>"
    events = parse(reply)
    assert texts(events, ThoughtPiece) == "```\nActions: not yet\n```"
    assert parsed(events) == [("a", "tool", "run", {})]
    assert events[-1] == StreamCut(marker="<|Response|>")
    assert parse("Thought: Answer: same line") == [ThoughtPiece(text="Answer: same line")]


# 4 -------------------------------------------------------------------------------------------


def test_json_strings_with_brackets_quotes_escapes_and_newlines() -> None:
    """Brackets, quotes, escapes and raw newlines inside strings, and nesting, parse exactly."""
    reply = (
        'Actions: [{"tag": "t]", "name": "n}", "path": "p{", "input": {'
        '"s": "a [b] {c} \\"q\\" back\\\\slash \\u00e9 \\ud83d\\ude00 end",'
        '"raw": "line one\nThought: not a header\n<|Response|> not a cut\n  ]}",'
        '"nested": {"list": [1, [2, {"k": "}"}]], "t": true, "n": null}}}]'
    )
    events = parse(reply)
    assert invalid(events) == []
    assert parsed(events) == [
        (
            "t]",
            "n}",
            "p{",
            {
                "s": 'a [b] {c} "q" back\\slash é 😀 end',
                "raw": "line one\nThought: not a header\n<|Response|> not a cut\n  ]}",
                "nested": {"list": [1, [2, {"k": "}"}]], "t": True, "n": None},
            },
        )
    ]
    assert not any(isinstance(e, (StreamCut, ThoughtPiece)) for e in events)


def test_pretty_printed_objects_span_lines() -> None:
    """Objects written over several lines (keys and ``true`` at line starts) parse."""
    obj = {"tag": "a", "name": "n", "path": "p", "input": {"flag": True, "x": [False]}}
    pretty = json.dumps([obj], indent=2).replace(": true", ":\ntrue")
    events = parse(f"Actions:\n{pretty}\nAnswer: ok")
    assert parsed(events) == [("a", "n", "p", {"flag": True, "x": [False]})]


# 5 -------------------------------------------------------------------------------------------


def test_each_action_is_sealed_when_its_object_closes() -> None:
    """ActionParsed for an object comes in the feed that delivers its closing brace."""
    parser = ReactParser()
    assert parser.feed("Actions: [") == []
    assert parser.feed(act("a", q="x")[:-1]) == [ActionPiece(index=0, text=act("a", q="x")[:-1])]
    events = parser.feed("}, ")
    assert events[0] == ActionPiece(index=0, text="}")
    assert isinstance(events[1], ActionParsed)
    assert events[1].tag == "a"
    assert len(events) == 2
    events = parser.feed(act("b") + ", " + act("c")[:5])
    assert [type(e) for e in events] == [ActionPiece, ActionParsed, ActionPiece]
    assert [e.index for e in events if isinstance(e, (ActionPiece, ActionParsed))] == [1, 1, 2]
    events = parser.feed(act("c")[5:] + "]")
    assert [(type(e), getattr(e, "index", None)) for e in events] == [
        (ActionPiece, 2),
        (ActionParsed, 2),
    ]
    assert parser.close() == []


# 6 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("marker", ["<|Response|>", "Observation:"])
def test_cut_marker_at_line_start_cuts(marker: str) -> None:
    """A cut marker at a line start ends the reply: StreamCut, ``cut``, nothing afterwards."""
    parser = ReactParser()
    events = run([f'Thought: t\nActions: [{act("a")}]\n  {marker}: ["fake"]\nAnswer: no'], parser)
    assert parser.cut
    assert events[-1] == StreamCut(marker=marker)
    assert parsed(events) == [("a", "tool", "run", {})]
    assert not any(isinstance(e, AnswerPiece) for e in events)
    assert parser.feed("Answer: still no") == []


def test_cut_marker_inside_an_open_action_invalidates_it() -> None:
    """A cut marker at a line start inside an unfinished object ends that object as invalid."""
    events = parse('Actions: [{"tag": "a",\n<|Response|>: x')
    assert [type(e) for e in events] == [ActionPiece, ActionInvalid, StreamCut]
    assert "cut marker" in invalid(events)[0].error


@pytest.mark.parametrize(
    "reply",
    [
        'Actions: [{"tag": "a", "name": "n", "path": "p", "input": {"s": "x\n<|Response|>: y"}}]',
        "Answer: code:\n```\n<|Response|>: quoted\nObservation: too\n```\nok",
        "Thought: the stop word is <|Response|> and Observation: mid-line",
        "Thought: observation: lower case is not the marker",
    ],
)
def test_cut_marker_in_string_fence_or_mid_line_does_not_cut(reply: str) -> None:
    """Marker text inside a JSON string, in a fence or in the middle of a line does not cut."""
    parser = ReactParser()
    events = merge(run([reply], parser))
    assert not parser.cut
    assert not any(isinstance(e, StreamCut) for e in events)
    assert merge(run(reply)) == events


def test_custom_cut_markers() -> None:
    """Only the configured markers cut."""
    parser = ReactParser(cut_markers=("User:",))
    events = run(["Answer: a\n<|Response|>\nUser: hi"], parser)
    assert events == [AnswerPiece(text="a\n<|Response|>"), StreamCut(marker="User:")]
    assert run(["Answer: a\nUser: hi"], ReactParser(cut_markers=()))[-1] == AnswerPiece(
        text="a\nUser: hi"
    )


@pytest.mark.parametrize("marker", ["", " x", "a\nb", "```"])
def test_bad_cut_marker_is_rejected(marker: str) -> None:
    """A marker that could never be matched at a line start is a configuration error."""
    with pytest.raises(UserError):
        ReactParser(cut_markers=(marker,))


# 7 -------------------------------------------------------------------------------------------


def test_answer_streams_as_answer_chunks() -> None:
    """Answer text arrives delta by delta as AnswerPiece events."""
    parser = ReactParser()
    assert parser.feed("Thought: done\nAnswer: Paris is") == [
        ThoughtPiece(text="done"),
        AnswerPiece(text="Paris is"),
    ]
    assert parser.feed(" 20°C,") == [AnswerPiece(text=" 20°C,")]
    assert parser.feed(" Oslo 5°C.\n") == [AnswerPiece(text=" Oslo 5°C.")]
    assert parser.close() == []


# 8 -------------------------------------------------------------------------------------------


def test_reply_without_headers_is_only_text() -> None:
    """Text with no header at all comes out as TextPiece events only, whole."""
    reply = "Paris is 20°C.\nThoughts are free; Actions speak.\n  Answer - none [x] {y}\n"
    events = parse(reply)
    assert events == [TextPiece(text=reply.strip())]


# 9 -------------------------------------------------------------------------------------------


def test_malformed_items_are_invalid_and_the_array_recovers() -> None:
    """Bad JSON, missing keys and non-objects are ActionInvalid; later items still parse."""
    reply = (
        'Actions: [{"tag": "a", "name": },'
        ' {"name": "n", "path": "p", "tag": 7},'
        ' 42, "str {", [1, {"k": 2}],'
        ' {"tag": "b", "name": "n", "path": "p", "input": [1]},'
        ' {"tag": "c", "name": "", "path": "p"},'
        f" {act('ok', n=1)}]\nAnswer: fine"
    )
    events = parse(reply)
    bad = invalid(events)
    assert [e.index for e in bad] == [0, 1, 2, 3, 4, 5, 6]
    assert bad[0].error.startswith("invalid JSON")
    assert bad[1].error == "'tag' must be a string"
    assert (bad[1].name, bad[1].path, bad[1].tag) == ("n", "p", None)
    assert [e.raw for e in bad[2:5]] == ["42", '"str {"', '[1, {"k": 2}]']
    assert all("not a JSON object" in e.error for e in bad[2:5])
    assert bad[5].error == "'input' must be a JSON object"
    assert bad[5].tag == "b"
    assert bad[6].error == "'name' must not be empty"
    assert [(e.index, e.tag) for e in events if isinstance(e, ActionParsed)] == [(7, "ok")]
    assert texts(events, AnswerPiece) == "fine"


def test_missing_keys_are_named() -> None:
    """Each missing key is named in the error."""
    (bad,) = invalid(parse('Actions: [{"input": {}}]'))
    assert bad.error == "missing 'tag'; missing 'name'; missing 'path'"


def test_garbage_before_an_object_resynchronises_at_the_next_brace() -> None:
    """Junk between items is one invalid item; the next top-level ``{`` starts a new object."""
    events = parse(f"Actions: [oops, sorry {act('a')} {act('b')}]")
    assert [(e.index, e.raw) for e in invalid(events)] == [(0, "oops"), (1, "sorry ")]
    assert [(e.index, e.tag) for e in events if isinstance(e, ActionParsed)] == [(2, "a"), (3, "b")]


def test_array_closed_while_an_object_is_open() -> None:
    """A ``]`` that closes the array before the object's ``}`` ends both; text goes on."""
    events = parse('Actions: [{"tag": "a", "name": "n", "path": "p"]\nAnswer: x')
    (bad,) = invalid(events)
    assert bad.error == "the array closed before the action object did"
    assert texts(events, AnswerPiece) == "x"


def test_header_inside_an_open_action_ends_it() -> None:
    """A line-start header outside strings ends an unfinished object and the array."""
    events = parse('Actions: [{"tag": "a", "input": {\nAnswer: gave up')
    (bad,) = invalid(events)
    assert bad.error == "the action was not closed before the 'Answer:' header"
    assert texts(events, AnswerPiece) == "gave up"


# 10 ------------------------------------------------------------------------------------------


def test_reply_ending_inside_the_array() -> None:
    """Finished objects are parsed as they close; the unfinished one is invalid at close()."""
    parser = ReactParser()
    events = parser.feed(f'Actions: [{act("a")}, {act("b")}, {{"tag": "c", "input": {{"s": "x')
    assert [e.tag for e in events if isinstance(e, ActionParsed)] == ["a", "b"]
    assert not invalid(events)
    closing = parser.close()
    assert closing == [
        ActionInvalid(
            index=2,
            raw='{"tag": "c", "input": {"s": "x',
            error="the reply ended inside a JSON string of the action",
        )
    ]
    assert parser.close() == []
    assert invalid(parse('Actions: [{"tag": "c"'))[0].error == "the reply ended inside the action"


# 11 ------------------------------------------------------------------------------------------


def test_whitespace_after_headers_and_before_sections_is_dropped() -> None:
    """One space after a header and a section's trailing whitespace are not emitted."""
    events = parse("Thought: a b  \n\n  Answer:    c\t \n\n")
    assert events == [ThoughtPiece(text="a b"), AnswerPiece(text="c")]


def test_leading_blank_lines_are_dropped_but_indentation_kept() -> None:
    """Content starting on a later line keeps its first line's indentation."""
    assert parse("Answer:\n\n    def f():\n        pass\n") == [
        AnswerPiece(text="    def f():\n        pass")
    ]
    assert parse("\n\n  hello  \n") == [TextPiece(text="  hello")]


def test_whitespace_rule_is_independent_of_splitting() -> None:
    """Long and short whitespace runs give the same merged events however the text is split."""
    for ws in [" ", "\t \n ", " " * 1500, "\n" * 700 + " " * 600]:
        reply = f"Thought:{ws}a{ws}b{ws}\nAnswer:{ws}"
        whole = merge(run([reply]))
        assert merge(run(reply)) == whole
        assert merge(run([reply[:7], reply[7:300], reply[300:]])) == whole


def test_whitespace_hold_back_is_bounded() -> None:
    """Of a whitespace run longer than the cap, all but the last 512 characters are emitted."""
    parser = ReactParser()
    assert parser.feed("Thought: b") == [ThoughtPiece(text="b")]  # "a" might start "Actions:"
    assert parser.feed(" " * 1500) == [ThoughtPiece(text=" " * (1500 - 512))]
    assert parser.feed("\nAnswer: b") == [ThoughtPiece(text=" "), AnswerPiece(text="b")]
    reply = "Thought: a" + " " * 1500 + "\nAnswer: b"
    assert parse(reply) == [ThoughtPiece(text="a" + " " * 989), AnswerPiece(text="b")]


def test_sections_of_the_same_kind_are_kept_apart() -> None:
    """A second section of a kind already emitted starts with a newline."""
    events = parse(f"Thought: one\nActions: [{act('a')}]\nThought: two\nThought: three")
    assert texts(events, ThoughtPiece) == "one\ntwo\nthree"


# 12 ------------------------------------------------------------------------------------------


def test_text_after_the_actions_array_is_parsed_as_sections() -> None:
    """After the array: a header opens a section, other text is TextPiece, more arrays parse."""
    reply = (
        f"Thought: t\nActions: [{act('a')}] trailing note\nAnswer: ans\n"
        f"Actions: [{act('b')}]\nThought: again"
    )
    events = parse(reply)
    assert [type(e) for e in events if not isinstance(e, ActionPiece)] == [
        ThoughtPiece,
        ActionParsed,
        TextPiece,
        AnswerPiece,
        ActionParsed,
        ThoughtPiece,
    ]
    assert texts(events, TextPiece) == "trailing note"
    assert [(e.index, e.tag) for e in events if isinstance(e, ActionParsed)] == [(0, "a"), (1, "b")]
    assert texts(events, ThoughtPiece) == "t\nagain"


# leniency and other decisions -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "kind"),
    [
        ("Thought:", ThoughtPiece),
        ("THOUGHT:", ThoughtPiece),
        ("thoughts:", ThoughtPiece),
        ("Answer:", AnswerPiece),
        ("answer:", AnswerPiece),
        ("Final Answer:", AnswerPiece),
        ("  \tAnswer:", AnswerPiece),
    ],
)
def test_header_spellings(header: str, kind: type[ReactEvent]) -> None:
    """Headers are case-insensitive, allow leading spaces and a few common variants."""
    assert parse(f"intro\n{header} body") == [TextPiece(text="intro"), kind(text="body")]  # type: ignore[call-arg]


@pytest.mark.parametrize("header", ["Actions:", "Action:", "ACTIONS:"])
def test_action_header_spellings(header: str) -> None:
    """``Action:`` and ``Actions:`` in any case open the actions section."""
    assert parsed(parse(f"{header} [{act('a')}]")) == [("a", "tool", "run", {})]


@pytest.mark.parametrize(
    "line", ["Thought without colon", "My Thought: mid-line", "Thought : spaced", "Answers: no"]
)
def test_not_headers(line: str) -> None:
    """A header must be the whole spelling, at a line start."""
    assert parse(f"Thought: x\n{line}") == [ThoughtPiece(text=f"x\n{line}")]


def test_bare_action_objects_without_array() -> None:
    """``Action: {...}`` without an array is accepted, and so are several such objects."""
    events = parse(f"Action: {act('a')}\n{act('b')}\nAnswer: x")
    assert [(e.index, e.tag) for e in events if isinstance(e, ActionParsed)] == [(0, "a"), (1, "b")]
    assert texts(events, AnswerPiece) == "x"


def test_prose_between_actions_header_and_array_is_skipped() -> None:
    """Text between ``Actions:`` and the ``[`` is neither text nor an action."""
    events = parse(f"Actions: I will call it now:\n[{act('a')}]")
    assert [type(e) for e in events] == [ActionPiece, ActionParsed]


def test_input_absent_or_null_is_empty() -> None:
    """A missing or null ``input`` is ``{}``; an empty ``path`` is allowed."""
    reply = (
        'Actions: [{"tag": "a", "name": "n", "path": ""},'
        ' {"tag": "b", "name": "n", "path": "p", "input": null}]'
    )
    assert parsed(parse(reply)) == [("a", "n", "", {}), ("b", "n", "p", {})]


def test_action_chunks_concatenate_to_raw() -> None:
    """Each item's ActionPiece texts, in order, are exactly its raw text."""
    reply = f'Actions: [ {act("a", s="{[")} , 12 , {{"bad": ]\n'
    events = run(reply)
    for event in events:
        if isinstance(event, (ActionParsed, ActionInvalid)):
            chunks = [
                e.text for e in events if isinstance(e, ActionPiece) and e.index == event.index
            ]
            assert "".join(chunks) == event.raw


def test_close_twice_and_feed_after_close() -> None:
    """close() is safe to repeat and feed() after it returns nothing."""
    parser = ReactParser()
    assert parser.feed("Thought: a  ") == [ThoughtPiece(text="a")]
    assert parser.close() == []
    assert parser.close() == []
    assert parser.feed("more") == []
    held = ReactParser()
    assert held.feed("Tho") == []
    assert held.close() == [TextPiece(text="Tho")]
    assert held.close() == []


def test_render_actions_round_trips() -> None:
    """render_actions output parses back to the same actions."""
    actions: list[dict[str, Any]] = [
        {"tag": "call_1", "name": "weather", "path": "get", "input": {"city": "Paris"}},
        {"tag": "c2", "name": "n", "path": "", "input": {"s": 'x\n<|Response|>\nThought: "]}'}},
        {"tag": "c3", "name": "n", "path": "p"},
    ]
    text = render_actions(actions)
    assert text.count("\n") == 2
    assert parsed(parse(f"Thought: t\nActions: {text}")) == [
        (a["tag"], a["name"], a["path"], a.get("input", {})) for a in actions
    ]
    assert render_actions([]) == "[]"


# issue 13: mid-line headers --------------------------------------------------------------------


def test_actions_header_mid_line_before_json() -> None:
    """A mid-line ``Actions:`` / ``Action:`` followed by ``[`` or ``{`` opens the actions."""
    events = parse(f"Thought: I will add. Actions: [{act('a', x=1)}]")
    assert texts(events, ThoughtPiece) == "I will add."
    assert parsed(events) == [("a", "tool", "run", {"x": 1})]
    events = parse(f"Let me call it: Action: {act('b')} Done. Answer: ok")
    assert texts(events, TextPiece) == "Let me call it:\nDone."
    assert parsed(events) == [("b", "tool", "run", {})]
    assert texts(events, AnswerPiece) == "ok"
    for gap in (" ", "\n", " ```json\n", "```\n  ", "\t"):  # spaces, a newline or a fence
        closer = "\n```" if "`" in gap else ""
        events = parse(f"Thought: go. Actions:{gap}[{act('c')}]{closer}\nAnswer: done")
        assert parsed(events) == [("c", "tool", "run", {})], gap
        assert (texts(events, ThoughtPiece), texts(events, AnswerPiece)) == ("go.", "done")
    events = parse(f"Thought: Actions: [{act('d')}]")  # right after a header, too
    assert parsed(events) == [("d", "tool", "run", {})]
    assert texts(events, ThoughtPiece) == ""


@pytest.mark.parametrize(
    "reply",
    [
        "Thought: the actions: are many",
        "Thought: Actions: none yet, maybe [later]",
        "Thought: see `Actions: [1]` in the docs",
        "Thought: reActions: [1]",
        "Thought: Actions:" + " " * 100 + "[1]",
        "Answer:\n```\nthen Actions: [1]\n```",
        "Thought: actions: ``` x [1]",
    ],
)
def test_mid_line_actions_without_json_is_text(reply: str) -> None:
    """Not followed by ``[`` / ``{`` (spaces and a fence aside), after a non-space, in inline
    code or in a fence, a mid-line ``Actions:`` is ordinary text."""
    events = parse(reply)
    assert not any(isinstance(e, (ActionPiece, ActionParsed, ActionInvalid)) for e in events)
    body = reply.split(":", 1)[1].strip()
    assert "".join(e.text for e in events if isinstance(e, _CHUNKS)) == body


def test_mid_line_header_hold_back_is_bounded() -> None:
    """Only a possible mid-line header (and what may lead to its ``[``) is held back."""
    parser = ReactParser()
    assert parser.feed("Thought: I will. Act") == [ThoughtPiece(text="I will.")]
    assert parser.feed("ually no") == [ThoughtPiece(text=" Actually no")]
    assert parser.feed(". Actions: ") == [ThoughtPiece(text=".")]
    assert parser.feed("x") == [ThoughtPiece(text=" Actions: x")]
    assert parser.feed(" Actions:") == []
    assert parser.close() == [ThoughtPiece(text=" Actions:")]


def test_mid_line_answer_after_a_sentence() -> None:
    """``Answer:`` / ``Final Answer:`` mid-line in a thought or outside sections opens the
    answer when the text before it on the line ends a sentence; never inside an answer."""
    assert parse("Thought: done. Answer: 42") == [
        ThoughtPiece(text="done."),
        AnswerPiece(text="42"),
    ]
    assert parse("Let me see! Final Answer: 42") == [
        TextPiece(text="Let me see!"),
        AnswerPiece(text="42"),
    ]
    for reply in (
        "Thought: I know the answer: 42",
        "Thought: Answer: same line",
        "Thought: done.Answer: 42",
        "Answer: 42. Answer: still the same section",
    ):
        events = parse(reply)
        assert len(events) == 1, reply
        assert isinstance(events[0], _CHUNKS) and events[0].text == reply.split(": ", 1)[1]


# issue 13: a reply wrapped in a code fence -----------------------------------------------------


@pytest.mark.parametrize("opener", ["```", "```text", "```json", "````JSON ", "\n  \n```markdown"])
def test_reply_wrapped_in_a_fence_is_parsed_as_if_unfenced(opener: str) -> None:
    """A reply whose first non-blank line opens a fence: the fence lines are dropped, headers
    inside are headers and actions run."""
    ticks = "````" if "````" in opener else "```"
    reply = f"{opener}\nThought: t\nActions: [{act('a')}]\n{ticks}  \n"
    events = parse(reply)
    assert [e for e in events if not isinstance(e, ActionPiece)] == [
        ThoughtPiece(text="t"),
        ActionParsed(index=0, tag="a", name="tool", path="run", input={}, raw=act("a")),
    ]
    events = parse(f"{opener}\nThought: t\nAnswer: 42\n{ticks}")
    assert events == [ThoughtPiece(text="t"), AnswerPiece(text="42")]


def test_fences_inside_a_wrapped_reply() -> None:
    """Inside the wrapper a fence with an info string still hides headers; the first bare fence
    line with no inner fence open closes the wrapper, and what follows is parsed as usual."""
    reply = "```\nAnswer: see\n```python\nThought: no\n```\nmore\n```\nThought: after"
    events = parse(reply)
    assert events == [
        AnswerPiece(text="see\n```python\nThought: no\n```\nmore"),
        ThoughtPiece(text="after"),
    ]
    events = parse("```\nThought: a\n`` x\n  ``\nAnswer: b\n```")  # too few: text
    assert events == [ThoughtPiece(text="a\n`` x\n  ``"), AnswerPiece(text="b")]
    events = parse("```\nThought: a\n``` x\nAnswer: b\n```")  # an inner fence opens
    assert events == [ThoughtPiece(text="a\n``` x\nAnswer: b\n```")]


def test_a_leading_fence_that_does_not_wrap() -> None:
    """A leading fence with a programming language is a code block, as before; a fenced JSON
    array without an ``Actions:`` header is text (Griptape requires the header too)."""
    reply = "```python\nAnswer: x\n```\nThat is the code."
    assert parse(reply) == [TextPiece(text=reply)]
    events = parse(f"```json\n[{act('a')}]\n```")
    assert events == [TextPiece(text=f"[{act('a')}]")]
    assert parse("``` json and more words than an info string\nx") == [
        TextPiece(text="``` json and more words than an info string\nx")
    ]
    assert parse("```") == [TextPiece(text="```")]


# issue 13: several answers ----------------------------------------------------------------------


def test_answer_sections_are_numbered() -> None:
    """Each Answer section with text gets the next ``section`` (from 0); its text is exact, with
    no separator (the number tells the sections apart)."""
    reply = "Answer: x\nThought: t\nAnswer: y\nAnswer:\n\nFinal Answer: z\n  z2\nThought: done. Answer: w"
    assert parse(reply) == [
        AnswerPiece(text="x", section=0),
        ThoughtPiece(text="t"),
        AnswerPiece(text="y", section=1),
        AnswerPiece(text="z\n  z2", section=2),
        ThoughtPiece(text="\ndone."),
        AnswerPiece(text="w", section=3),
    ]
    parser = ReactParser()
    assert parser.feed("Answer: a\nAns") == [AnswerPiece(text="a")]
    assert parser.feed("wer: b") == [AnswerPiece(text="b", section=1)]
