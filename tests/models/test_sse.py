"""The incremental SSE decoder, in process: every recorded stream split at every byte boundary
(fed one byte at a time, which puts a boundary at every position at once), split in two at every
position for the small ones, and at seeded random points; CRLF and CR line endings; comments;
multi-line data; fields without a space; ``id`` and ``retry``; no trailing blank line."""

from __future__ import annotations

import random

import pytest

from agentloop.models._sse import SSEDecoder, SSEEvent

from ._provider_helpers import FIXTURES

SSE_FILES = sorted(FIXTURES.glob("*/*.response.sse"))


def reference(data: bytes) -> list[SSEEvent]:
    """A plain, whole-input reading of the event-stream format (independent of the decoder)."""
    text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    events: list[SSEEvent] = []
    lines: list[str] = []
    event_type = ""
    last_id: str | None = None
    retry: int | None = None
    has_data = False
    for line in [*text.split("\n"), ""]:
        if line == "":
            if has_data:
                events.append(SSEEvent("\n".join(lines), event_type or "message", last_id, retry))
            lines, event_type, has_data = [], "", False
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            lines.append(value)
            has_data = True
        elif name == "event":
            event_type = value
        elif name == "id":
            last_id = value
        elif name == "retry" and value.isdigit():
            retry = int(value)
    return events


def decode(pieces: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for piece in pieces:
        events += decoder.feed(piece)
    return events + decoder.close()


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_split_at_every_byte(path: object) -> None:
    """Fed one byte at a time, a recorded stream decodes exactly as a whole-input reading."""
    data = path.read_bytes()  # type: ignore[attr-defined]
    expected = reference(data)
    assert expected, "every recorded stream has events"
    assert decode([data]) == expected
    assert decode(byte_by_byte(data)) == expected


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_with_crlf_and_cr_line_endings(path: object) -> None:
    """The same stream with CRLF or CR line endings, split anywhere, gives the same events
    (a split between ``\\r`` and ``\\n`` included)."""
    data = path.read_bytes()  # type: ignore[attr-defined]
    expected = reference(data)
    for newline in (b"\r\n", b"\r"):
        variant = data.replace(b"\n", newline)
        assert decode(byte_by_byte(variant)) == expected
        rng = random.Random(len(data))
        cuts = sorted(rng.sample(range(1, len(variant)), min(40, len(variant) - 1)))
        pieces = [variant[a:b] for a, b in zip([0, *cuts], [*cuts, len(variant)], strict=True)]
        assert decode(pieces) == expected


SMALL = [p for p in SSE_FILES if p.stat().st_size <= 3000]


@pytest.mark.parametrize("path", SMALL, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_small_fixture_split_in_two_at_every_position(path: object) -> None:
    """Every two-piece split of a small recorded stream decodes the same (mid-UTF-8 too)."""
    data = path.read_bytes()  # type: ignore[attr-defined]
    expected = reference(data)
    for cut in range(1, len(data)):
        assert decode([data[:cut], data[cut:]]) == expected, cut


@pytest.mark.parametrize("seed", range(20))
def test_random_splits_of_every_fixture(seed: int) -> None:
    """Seeded random multi-way splits of every recorded stream decode the same."""
    rng = random.Random(seed)
    for path in SSE_FILES:
        data = path.read_bytes()
        n = rng.randint(1, min(200, len(data) - 1))
        cuts = sorted(rng.sample(range(1, len(data)), n))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        assert decode(pieces) == reference(data)


def test_utf8_split_inside_a_character() -> None:
    """A multi-byte character split across chunks comes out whole."""
    data = "data: héllo — 😄\n\n".encode()
    for cut in range(1, len(data)):
        assert decode([data[:cut], data[cut:]]) == [SSEEvent("héllo — 😄")]


def test_comments_and_keep_alive_lines_are_ignored() -> None:
    """``:`` lines (keep-alives, comments) produce nothing, even between data lines."""
    data = b": ping\n\n:\ndata: a\n: keep-alive\ndata: b\n\n: bye\n"
    assert decode(byte_by_byte(data)) == [SSEEvent("a\nb")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    """Several ``data:`` lines make one event, joined with ``\\n``; empty ``data`` counts."""
    assert decode([b'data: {\ndata:  "a": 1\ndata\ndata: }\n\n']) == [SSEEvent('{\n "a": 1\n\n}')]


def test_field_without_space_event_id_and_retry() -> None:
    """``data:x`` keeps all of ``x``; ``event``, ``id`` and ``retry`` are reported."""
    data = (
        b"event:update\nid:7\nretry:1500\ndata:x\n\ndata: y\n\nretry: soon\nid: a\x00b\ndata: z\n\n"
    )
    assert decode(byte_by_byte(data)) == [
        SSEEvent("x", "update", "7", 1500),
        SSEEvent("y", "message", "7", 1500),
        SSEEvent("z", "message", "7", 1500),
    ]


def test_event_without_data_is_not_dispatched() -> None:
    """An ``event:`` line with no data dispatches nothing and does not leak into the next."""
    assert decode([b"event: ping\n\ndata: 1\n\n"]) == [SSEEvent("1")]


def test_end_of_stream_without_trailing_blank_line() -> None:
    """The last event counts even when the stream ends right after its data line (or mid-line
    without any newline)."""
    assert decode([b"data: 1\n\ndata: [DONE]\n"]) == [SSEEvent("1"), SSEEvent("[DONE]")]
    assert decode([b"data: 1\n\ndata: [DO", b"NE]"]) == [SSEEvent("1"), SSEEvent("[DONE]")]


def test_decoder_work_is_linear_in_a_long_line() -> None:
    """A long line fed a byte at a time is never rescanned (the partial line only grows)."""
    data = b"data: " + b"x" * 200_000 + b"\n\n"
    events = decode(byte_by_byte(data))
    assert events == [SSEEvent("x" * 200_000)]


def test_an_event_larger_than_the_cap_is_refused_while_it_grows() -> None:
    """A line (or an event of many data lines) past max_event_bytes raises before it is whole."""
    from agentloop.models._sse import SSEEventTooLarge

    decoder = SSEDecoder(max_event_bytes=100)
    assert decoder.feed(b"data: " + b"x" * 50 + b"\n\n")[0].data == "x" * 50
    for _ in range(2):
        decoder.feed(b"data: " + b"y" * 30)  # one endless line, still within the cap
    with pytest.raises(SSEEventTooLarge):
        decoder.feed(b"y" * 30)
    decoder = SSEDecoder(max_event_bytes=100)
    for _ in range(3):
        decoder.feed(b"data: " + b"z" * 30 + b"\n")  # many data lines, no blank line
    with pytest.raises(SSEEventTooLarge):
        decoder.feed(b"data: " + b"z" * 30 + b"\n")
