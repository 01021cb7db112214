"""Every value a durable run records, measured against Temporal's payload limit; large strings
by reference.

Temporal refuses a payload over 2 MiB (the server's ``limit.blobSize.error``; its SDK refuses to
upload one too), and a workflow task whose commands cannot be recorded fails and is retried for
ever: the run sticks, RUNNING. So every value the workflow records (an activity's input, the
events a poll's reply carries, the result) and every value an activity records (a deltas signal,
its result) is measured here first, as Temporal's JSON converter encodes it (``size_of``),
against ``MAX_PAYLOAD_BYTES``. What still cannot fit fails the run with ``PayloadTooLarge`` or
refuses the one call, before anything is recorded.

Large strings go by reference. ``Blobs.refer`` replaces each string of at least ``REFER_CHARS``
characters with ``{"agentloop.blob": digest, "chars": n}`` (its SHA-256) and keeps the string in
the workflow's memory, where the ``agentloop.blob`` query reads it back, one slice that fits at
a time (``Blobs.read``). The conversation so travels to each model activity as references: the
activity input stays a few KB however long the run, and the history holds each tool output and
reply once (where it came in), not once more per step.

Why replay stays deterministic: a digest is a function of its string alone, and every string the
workflow refers to came to it through its history (the start, a tool activity's result, a model
activity's signals, an update), so a replay makes the same references and holds the same strings.
The query that reads them is not recorded. The readers (``BlobReader``: the activities and the
caller) check each string against its digest, and keep what they read in a cache bounded in
characters, so a conversation's earlier parts are read once per worker, not once per step.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, cast

from .._errors import RUN_ERRORS, PayloadTooLarge, RunError

# Temporal's default limit on one payload (the server's ``limit.blobSize.error``, the SDK's).
PAYLOAD_LIMIT = 2 * 1024 * 1024
# The most agentloop records in one payload: the limit less room for the converter's framing,
# the payload's metadata and the fields around the measured value.
MAX_PAYLOAD_BYTES = PAYLOAD_LIMIT - 128 * 1024
REFER_CHARS = 8 * 1024  # a string this long goes by reference
REFER_SMALL_CHARS = 256  # ... and this long, when the value still does not fit
EVENT_INLINE_BYTES = 64 * 1024  # an event this large or less is kept as it is
READER_CACHE_CHARS = 64 * 1024 * 1024  # what one reader keeps of the strings it read
BLOB_REF = "agentloop.blob"
BLOB_QUERY = "agentloop.blob"
READ_BATCH = 512  # strings asked for in one query at most
_ESCAPED = "agentloop.blob.escaped"  # a value's own dict that happens to have the key
RUN_ERROR = "agentloop.RunError"  # a model activity's failure that ends the run as in-process


def size_of(value: Any) -> int:
    """The bytes ``value`` takes as Temporal's JSON converter encodes it (ASCII, so one byte a
    character: a non-ASCII character takes 6 or 12)."""
    return len(json.dumps(value, separators=(",", ":"), default=str))


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Blobs:
    """The strings a workflow sent by reference, by digest (each came in through its
    history: see the module's docstring). They live as long as the workflow's memory, as the
    conversation they are parts of does."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}

    def refer(self, value: Any, min_chars: int = REFER_CHARS) -> Any:
        """``value`` (JSON) with each string of at least ``min_chars`` characters replaced by
        its reference."""
        if isinstance(value, str):
            if len(value) < min_chars:
                return value
            digest = digest_of(value)
            self._texts[digest] = value
            return {BLOB_REF: digest, "chars": len(value)}
        if isinstance(value, dict):
            fields = cast("dict[str, Any]", value)
            referred = {k: self.refer(v, min_chars) for k, v in fields.items()}
            return {_ESCAPED: referred} if BLOB_REF in fields or _ESCAPED in fields else referred
        if isinstance(value, list | tuple):
            return [self.refer(v, min_chars) for v in cast("list[Any]", value)]
        return value

    def fit(self, value: Any) -> Any | None:
        """``value`` with its large strings by reference, if then it fits in
        ``MAX_PAYLOAD_BYTES`` (with every string of ``REFER_SMALL_CHARS`` by reference if
        need be); ``None`` if it cannot."""
        referred = self.refer(value)
        if size_of(referred) <= MAX_PAYLOAD_BYTES:
            return referred
        referred = self.refer(value, REFER_SMALL_CHARS)
        return referred if size_of(referred) <= MAX_PAYLOAD_BYTES else None

    def event(self, data: str) -> str:
        """An event's JSON as the workflow keeps it: whole when small, else with its large
        strings by reference (the caller reads them back: ``BlobReader.event``)."""
        if len(data) <= EVENT_INLINE_BYTES:
            return data
        value = json.loads(data)
        referred = self.fit(value)
        if referred is None:  # thousands of small strings: all that can go by reference does
            referred = self.refer(value, REFER_SMALL_CHARS)
        return json.dumps(referred, separators=(",", ":"))

    def hold(self, digest: str, text: str) -> None:
        """Keep ``text``, read back for ``digest`` (``ValueError`` if it is not that string's)."""
        if digest_of(text) != digest:
            raise ValueError(f"the string read back for digest {digest!r} is not the one sent")
        self._texts[digest] = text

    def size(self, digest: str) -> int:
        """The bytes the string of ``digest`` takes as recorded (``size_of``)."""
        return size_of(self._texts[digest])

    def whole(self, value: Any) -> Any:
        """``value`` with each reference replaced by the string this workflow holds for it."""
        return _substitute(value, self._texts)

    def read(self, wants: list[Any]) -> list[dict[str, Any]]:
        """The ``agentloop.blob`` query: for each ``[digest, start]`` wanted, in order and as
        many as fit in one reply (one at least), the string's slice from ``start`` and whether
        it is the last; a slice that does not reach its string's end ends the reply."""
        replies: list[dict[str, Any]] = []
        budget = MAX_PAYLOAD_BYTES
        for digest, start in wants[:READ_BATCH]:
            text = self._texts.get(str(digest))
            if text is None:
                raise KeyError(f"this run sent no string of digest {digest!r} by reference")
            begin = int(start)
            chars = budget // 2
            piece = text[begin : begin + chars]
            while chars > 1 and size_of(piece) > budget:
                chars //= 2
                piece = text[begin : begin + chars]
            end = begin + len(piece) >= len(text)
            replies.append({"text": piece, "end": end})
            budget -= size_of(piece) + 32
            if not end or budget < REFER_CHARS * 12:
                break
        return replies


def too_large(what: str) -> str:
    return (
        f"{what} does not fit in Temporal's payload limit ({MAX_PAYLOAD_BYTES / 2**20:.2f} MB "
        "recorded at most, its long strings by reference): pass large values by reference"
    )


def fit_request(blobs: Blobs, encoded: dict[str, Any]) -> Any:
    """A model activity's request with its large strings by reference; ``PayloadTooLarge``
    (the run ends, before anything is recorded) when even so it cannot fit."""
    fitted = blobs.fit(encoded)
    if fitted is None:
        raise PayloadTooLarge(too_large("the model request"))
    return fitted


def run_error_details(error: RunError) -> dict[str, Any]:
    return {"kind": error.kind, "message": str(error)}


def run_error_of(details: dict[str, Any]) -> RunError:
    """The ``RunError`` a model activity failed with (its driver's ``ReplyTooLarge``, …)."""
    cls = RUN_ERRORS.get(str(details.get("kind")), RunError)
    return cls(str(details.get("message", "the model call failed")))


def tool_outcome(outcome: dict[str, Any], action: dict[str, Any]) -> dict[str, Any]:
    """A tool activity's outcome as it is recorded: without the result's ``input`` when it is
    the action's own (the workflow has it: a large argument is not recorded twice)."""
    result = outcome["result"]
    if "input" in result and result["input"] == action.get("input"):
        outcome = {**outcome, "result": {k: v for k, v in result.items() if k != "input"}}
        outcome["same_input"] = True
    return outcome


def with_input(outcome: dict[str, Any], action: dict[str, Any]) -> dict[str, Any]:
    """``tool_outcome`` undone: the encoded result, its input the action's again."""
    result: dict[str, Any] = outcome["result"]
    return {**result, "input": action.get("input")} if outcome.get("same_input") else result


def within(sizes: list[int], start: int, count: int) -> int:
    """How many of the values from ``start`` (at most ``count``, at least one) fit in one
    payload together, by their ``sizes``."""
    total, end, stop = 0, start, min(len(sizes), start + count)
    while end < stop:
        total += sizes[end] + 1
        if total > MAX_PAYLOAD_BYTES and end > start:
            break
        end += 1
    return end - start


# The ``agentloop.blob`` query: ``[[digest, start], ...]`` to a slice of each, as ``Blobs.read``.
Fetch = Callable[[list[list[Any]]], Awaitable[list[dict[str, Any]]]]


class BlobReader:
    """Reads referred strings back (``fetch`` queries the workflow), each checked against its
    digest, and keeps the latest ones it read, up to ``max_chars`` characters of them.

    Args:
        max_chars: The most characters of strings kept.
    """

    def __init__(self, max_chars: int = READER_CACHE_CHARS) -> None:
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._chars = 0
        self._max = max_chars

    async def resolve(self, value: Any, fetch: Fetch) -> Any:
        """``value`` with each reference replaced by its string.

        Args:
            value: A JSON value ``Blobs.refer`` made.
            fetch: The ``agentloop.blob`` query of the workflow that made it.
        """
        digests: set[str] = set()
        _collect(value, digests)
        if not digests:
            return value
        texts: dict[str, str] = {}
        for digest in digests:
            cached = self._cache.get(digest)
            if cached is not None:
                self._cache.move_to_end(digest)
                texts[digest] = cached
        missing = [d for d in digests if d not in texts]
        if missing:
            texts |= await self._read(missing, fetch)
        return _substitute(value, texts)

    async def event(self, data: str, fetch: Fetch) -> str:
        """An event's JSON whole again (``Blobs.event`` undone).

        Args:
            data: The event as the workflow keeps it.
            fetch: The ``agentloop.blob`` query of its workflow.
        """
        if BLOB_REF not in data:
            return data
        return json.dumps(await self.resolve(json.loads(data), fetch), separators=(",", ":"))

    async def _read(self, digests: list[str], fetch: Fetch) -> dict[str, str]:
        """The strings, read by as few queries as fit them, checked and cached."""
        pieces: dict[str, list[str]] = {d: [] for d in digests}
        starts = dict.fromkeys(digests, 0)
        todo = list(digests)
        while todo:
            asked = todo[:READ_BATCH]
            replies = await fetch([[d, starts[d]] for d in asked])
            if not replies:
                raise ValueError("the run's agentloop.blob query returned nothing")
            done: set[str] = set()
            for digest, reply in zip(asked, replies, strict=False):
                piece = str(reply["text"])
                pieces[digest].append(piece)
                starts[digest] += len(piece)
                if reply["end"] or not piece:
                    done.add(digest)
            todo = [d for d in todo if d not in done]
        texts = {d: "".join(p) for d, p in pieces.items()}
        for digest, text in texts.items():
            if digest_of(text) != digest:
                raise ValueError(f"the string read back for digest {digest!r} is not the one sent")
            self._cache[digest] = text
            self._chars += len(text)
        while self._chars > self._max and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._chars -= len(dropped)
        return texts


def digests_in(value: Any) -> list[str]:
    """The digests ``value``'s references name, each once, sorted."""
    digests: set[str] = set()
    _collect(value, digests)
    return sorted(digests)


def _is_ref(fields: dict[str, Any]) -> bool:
    return len(fields) == 2 and isinstance(fields.get(BLOB_REF), str) and "chars" in fields


def _collect(value: Any, digests: set[str]) -> None:
    if isinstance(value, dict):
        fields = cast("dict[str, Any]", value)
        if _is_ref(fields):
            digests.add(fields[BLOB_REF])
            return
        if len(fields) == 1 and _ESCAPED in fields:
            fields = cast("dict[str, Any]", fields[_ESCAPED])
        for v in fields.values():
            _collect(v, digests)
    elif isinstance(value, list):
        for v in cast("list[object]", value):
            _collect(v, digests)


def _substitute(value: Any, texts: dict[str, str]) -> Any:
    if isinstance(value, dict):
        fields = cast("dict[str, Any]", value)
        if _is_ref(fields):
            return texts[fields[BLOB_REF]]
        if len(fields) == 1 and _ESCAPED in fields:
            fields = cast("dict[str, Any]", fields[_ESCAPED])
        return {k: _substitute(v, texts) for k, v in fields.items()}
    if isinstance(value, list):
        return [_substitute(v, texts) for v in cast("list[object]", value)]
    return value


def split_delta(delta: list[Any], max_bytes: int) -> list[tuple[list[Any], int]]:
    """An encoded model delta (``[type, fields]``) as deltas of at most about ``max_bytes``
    each, with their sizes: a piece of text, of thought or of a tool call's arguments too large
    for one signal is cut into pieces that the workflow joins again (appended in order)."""
    size = size_of(delta)
    name, fields = delta
    text = fields.get("text") if isinstance(fields, dict) else None
    if size <= max_bytes or not isinstance(text, str):
        return [(delta, size)]
    chars = max(1, max_bytes // 12)  # 12 bytes is the most one character takes
    pieces = ([name, {**fields, "text": text[i : i + chars]}] for i in range(0, len(text), chars))
    return [(piece, size_of(piece)) for piece in pieces]
