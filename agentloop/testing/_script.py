"""What the loopback server plays and records: scripted responses (whole, chunked, re-split,
corrupted or cut) and the requests it received. Plain values, shared by the server, the fault
profiles and the emulated provider.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Chunk", "RecordedRequest", "ScriptedResponse", "load_recording"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a response body, sent after waiting ``delay`` seconds.

    Args:
        data: The bytes.
        delay: Seconds to wait before sending them.
    """

    data: bytes
    delay: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptedResponse:
    """What the server answers to one request.

    ``body`` is bytes (sent as one piece) or a sequence of pieces (bytes or ``Chunk``). With
    ``split_at`` (byte offsets) or ``split_seed`` (random boundaries, pieces of 1..``split_max``
    bytes) the whole body is re-split, ``chunk_delay`` seconds apart. ``inject`` inserts bytes at
    body offsets (malformed streams). ``reset_after`` resets the connection (TCP RST) after that
    many body bytes, ``reset_delay`` seconds later (time for the client to read what it got).
    Bodies are sent with chunked transfer encoding unless ``chunked=False``.

    Args:
        status: The HTTP status.
        headers: Response headers.
        body: The body, whole or in pieces.
        split_at: Byte offsets to re-split the body at.
        split_seed: Seed of random re-split boundaries.
        split_max: The largest random piece, in bytes.
        chunk_delay: Seconds between re-split pieces.
        inject: Bytes to insert, by body offset.
        reset_after: Reset the connection after this many body bytes.
        reset_delay: Seconds to wait before that reset.
        chunked: Send with chunked transfer encoding (else with a content length).
    """

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | Sequence[bytes | Chunk] = b""
    split_at: Sequence[int] | None = None
    split_seed: int | None = None
    split_max: int = 64
    chunk_delay: float = 0.0
    inject: Mapping[int, bytes] = field(default_factory=dict)
    reset_after: int | None = None
    reset_delay: float = 0.05
    chunked: bool = True

    @classmethod
    def sse(cls, body: bytes | Sequence[bytes | Chunk], **kwargs: Any) -> ScriptedResponse:
        """A ``text/event-stream`` response.

        Args:
            body: The events, whole or in pieces.
            **kwargs: Other fields (``headers`` are added to the content type).
        """
        headers = {"content-type": "text/event-stream; charset=utf-8", **kwargs.pop("headers", {})}
        return cls(body=body, headers=headers, **kwargs)

    @classmethod
    def json(cls, value: Any, *, status: int = 200, **kwargs: Any) -> ScriptedResponse:
        """A JSON response (``value`` is encoded, or sent as is when it is bytes).

        Args:
            value: The body.
            status: The HTTP status.
            **kwargs: Other fields (``headers`` are added to the content type).
        """
        data = value if isinstance(value, bytes) else json.dumps(value).encode()
        headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
        return cls(status=status, body=data, headers=headers, chunked=False, **kwargs)

    def pieces(self) -> list[Chunk]:
        """The body as the pieces the server will send, in order."""
        raw: list[Chunk] = (
            [Chunk(self.body)]
            if isinstance(self.body, bytes)
            else [p if isinstance(p, Chunk) else Chunk(p) for p in self.body]
        )
        if self.inject:
            raw = _inject(raw, self.inject)
        if self.split_at is None and self.split_seed is None:
            return [p for p in raw if p.data or p.delay]
        data = b"".join(p.data for p in raw)
        cuts = (
            sorted({c for c in self.split_at if 0 < c < len(data)})
            if self.split_at is not None
            else _random_cuts(len(data), self.split_seed or 0, self.split_max)
        )
        bounds = [0, *cuts, len(data)]
        return [
            Chunk(data[a:b], self.chunk_delay if i else 0.0)
            for i, (a, b) in enumerate(itertools.pairwise(bounds))
        ]


def _random_cuts(size: int, seed: int, split_max: int) -> list[int]:
    """Cuts at steps of ``randint(1, split_max)``: the same draws ``randint`` makes (rejection
    sampling on ``getrandbits``), inlined, since a large body needs hundreds of thousands and
    ``randint``'s layers of calls were most of a replayed test's time."""
    getrandbits = random.Random(seed).getrandbits
    span = max(1, split_max)
    bits = span.bit_length()
    cuts: list[int] = []
    at = 0
    while True:
        step = getrandbits(bits)
        while step >= span:
            step = getrandbits(bits)
        at += step + 1
        if at >= size:
            return cuts
        cuts.append(at)


def _inject(pieces: list[Chunk], inject: Mapping[int, bytes]) -> list[Chunk]:
    out: list[Chunk] = []
    offset = 0
    todo = sorted(inject.items())
    for piece in pieces:
        data = piece.data
        end = offset + len(data)
        parts: list[bytes] = []
        cursor = 0
        while todo and todo[0][0] <= end:
            at, extra = todo.pop(0)
            parts += [data[cursor : at - offset], extra]
            cursor = at - offset
        parts.append(data[cursor:])
        out.append(Chunk(b"".join(parts), piece.delay))
        offset = end
    if todo:
        out.append(Chunk(b"".join(extra for _, extra in todo)))
    return out


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request as the server received it. Header names are lower-cased.

    Args:
        method: The HTTP method.
        path: The request's path.
        headers: Its headers.
        body: Its body.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def load_recording(prefix: str | Path) -> ScriptedResponse:
    """The response of a recorded fixture: ``<prefix>.meta.json`` and ``<prefix>.response.*``.

    Args:
        prefix: The fixture's path without its suffixes.
    """
    prefix = Path(prefix)
    meta = json.loads(prefix.with_name(prefix.name + ".meta.json").read_text())
    sse = prefix.with_name(prefix.name + ".response.sse")
    body_path = sse if sse.exists() else prefix.with_name(prefix.name + ".response.json")
    return ScriptedResponse(
        status=int(meta["status"]),
        headers=dict(meta.get("headers", {})),
        body=body_path.read_bytes(),
        chunked=sse.exists(),
    )
