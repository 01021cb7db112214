"""``agentloop.temporal._payloads`` without a server: references made and read back exactly
(a value's own look-alike dict included), slices that fit, deltas cut to fit, batches bounded
in bytes, and a request that cannot fit refused as ``PayloadTooLarge``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop import PayloadTooLarge
from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal._payloads import (  # noqa: E402
    BLOB_REF,
    MAX_PAYLOAD_BYTES,
    REFER_CHARS,
    BlobReader,
    Blobs,
    fit_request,
    size_of,
    split_delta,
    within,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _reader_of(blobs: Blobs, asked: list[str]) -> Any:
    async def fetch(wants: list[list[Any]]) -> list[dict[str, Any]]:
        asked.append(repr(wants))
        reply = blobs.read(wants)
        assert size_of(reply) <= MAX_PAYLOAD_BYTES  # every reply fits
        return reply

    return fetch


async def test_references_are_read_back_exactly_and_once() -> None:
    big, wide = "x" * REFER_CHARS, "é\U0001f600" * 400_000  # 7.2 MB as JSON
    value = {
        "messages": [big, "small", {"text": wide}, [big]],
        "lookalike": {BLOB_REF: "not a digest", "chars": 3},
        "n": 1,
    }
    blobs = Blobs()
    referred = blobs.refer(value)
    assert size_of(referred) < 1024
    asked: list[str] = []
    reader = BlobReader()
    fetch = _reader_of(blobs, asked)
    assert await reader.resolve(referred, fetch) == value
    first = len(asked)
    assert 2 < first < 10  # the wide string came in several slices, the rest with them
    assert await reader.resolve(referred, fetch) == value
    assert len(asked) == first  # read once, then from the cache


async def test_an_event_is_kept_whole_when_small_and_by_reference_when_large() -> None:
    blobs, reader = Blobs(), BlobReader()
    small = json.dumps({"type": "text_delta", "seq": 1, "text": "hi"})
    assert blobs.event(small) == small
    large = json.dumps({"type": "run_finished", "seq": 2, "text": "y" * 3_000_000})
    kept = blobs.event(large)
    assert len(kept) < 1024 and json.loads(kept)["seq"] == 2
    assert json.loads(await reader.event(kept, _reader_of(blobs, []))) == json.loads(large)


async def test_a_request_of_many_small_strings_is_referred_more_or_refused() -> None:
    blobs = Blobs()
    many = {"messages": [f"{n:04}" + "m" * 300 for n in range(8_000)]}  # 2.4 MB, small strings
    fitted = blobs.fit(many)
    assert fitted is not None and size_of(fitted) <= MAX_PAYLOAD_BYTES
    asked: list[str] = []
    assert await BlobReader().resolve(fitted, _reader_of(blobs, asked)) == many
    assert len(asked) <= 16  # 8,000 strings in a few queries, not one each
    with pytest.raises(PayloadTooLarge, match="payload limit"):
        fit_request(blobs, {"messages": ["m" * 100] * 30_000})


def test_a_large_delta_is_cut_into_pieces_that_fit_and_join_again() -> None:
    text = "é" * 1_000_000
    delta: list[Any] = ["TextPiece", {"text": text}]
    pieces = split_delta(delta, 256 * 1024)
    assert all(size == size_of(p) <= 256 * 1024 for p, size in pieces)
    assert "".join(p[1]["text"] for p, _ in pieces) == text
    small = ["ToolCallStart", {"id": "c", "name": "t"}]
    assert split_delta(small, 256 * 1024) == [(small, size_of(small))]


def test_within_bounds_a_batch_in_bytes_and_takes_at_least_one() -> None:
    sizes = [MAX_PAYLOAD_BYTES // 3] * 10
    assert within(sizes, 0, 10) == 2
    assert within([MAX_PAYLOAD_BYTES * 2, 1], 0, 2) == 1
    assert within(sizes, 10, 5) == 0
    assert within([1] * 10, 3, 4) == 4
