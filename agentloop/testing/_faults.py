"""Fault injection for the loopback provider server: make a provider misbehave on purpose.

Give ``ProviderServer`` a ``FaultProfile`` and it answers a seeded random share of requests with faults, on the wire, so
your agent meets them through the real SDK clients and drivers::

    from agentloop import Agent, RetryPolicy
    from agentloop.models.openai import OpenAIChatModel
    from agentloop.testing import EmulatedProvider, FaultProfile, ProviderServer

    profile = FaultProfile(rate_limit=0.05, reset=0.01, slow=0.01, seed=7)
    with ProviderServer(EmulatedProvider(), faults=profile) as server:
        model = OpenAIChatModel("m", base_url=server.url + "/v1", api_key="test")
        agent = Agent(model, tools=[...], retry=RetryPolicy(max_attempts=8))
        ...  # run your agent: it must still answer
        print(server.faults.counts)  # {"rate_limit": 3, "server_error": 0, "reset": 1, ...}

A profile is plain JSON (``to_json``/``from_json``), so a server in another process can take it.

Each request gets at most one fault, drawn in arrival order from ``random.Random(seed)``:

- ``rate_limit``: HTTP 429 with ``retry-after`` (the provider's error body; nothing is answered);
- ``server_error``: HTTP 500 or 503 (Anthropic's ``/messages``: 500 or 529 overloaded);
- ``reset``: the real answer, its connection reset (TCP RST) part-way through the body;
- ``slow``: the real answer, each server-sent event sent ``slow_delay`` seconds after the last;
- ``malformed``: the real answer with a garbage event (broken JSON, invalid UTF-8, deeply nested
  JSON, JSON of the wrong shape) injected at an event boundary.

The same faults can be scripted one at a time, around any ``ScriptedResponse`` (recorded with
``load_recording`` or written by hand): ``rate_limited``, ``server_failed``, ``slowed``,
``reset_midway`` and ``corrupted``; ``ScriptedResponse`` itself takes chunk boundaries
(``split_at``, ``split_seed``), delays (``Chunk(data, delay)``), injected bytes and resets.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._script import Chunk, RecordedRequest, ScriptedResponse

__all__ = [
    "FAULT_KINDS",
    "MALFORMED_EVENTS",
    "FaultInjector",
    "FaultProfile",
    "corrupted",
    "rate_limited",
    "reset_midway",
    "server_failed",
    "slowed",
]

FaultKind = Literal["rate_limit", "server_error", "reset", "slow", "malformed"]
FAULT_KINDS: tuple[FaultKind, ...] = ("rate_limit", "server_error", "reset", "slow", "malformed")

MALFORMED_EVENTS: tuple[bytes, ...] = (
    b'data: {"choices": [{"delta": {"content": "unterminated\n\n',
    b"data: \xff\xfe\xfd not utf-8 \xc3\x28\n\n",
    b"data: " + b"[" * 50_000 + b"]" * 50_000 + b"\n\n",
    b"data: [1, 2, 3]\n\n",
    b"data: null\n\n",
    b"event: content_block_delta\ndata: {oops}\n\n",
)
"""Garbage events the ``malformed`` fault injects (one, chosen at random)."""

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultProfile:
    """How often (0..1, their sum at most 1) each kind of fault is injected, and how.

    ``retry_after`` is the 429s' ``retry-after`` in seconds; ``slow_delay`` the pause before
    each event of a slow answer. ``seed`` makes the sequence of decisions reproducible.

    Args:
        rate_limit: The share of 429s.
        server_error: The share of 5xx.
        reset: The share of answers whose connection is reset mid-body.
        slow: The share of slow answers.
        malformed: The share of answers with a garbage event.
        seed: The seed of the random decisions.
        retry_after: The 429s' ``retry-after``, in seconds.
        slow_delay: Seconds before each event of a slow answer.
    """

    rate_limit: float = 0.0
    server_error: float = 0.0
    reset: float = 0.0
    slow: float = 0.0
    malformed: float = 0.0
    seed: int = 0
    retry_after: float = 1.0
    slow_delay: float = 0.05

    def __post_init__(self) -> None:
        rates = [getattr(self, kind) for kind in FAULT_KINDS]
        if any(not 0.0 <= r <= 1.0 for r in rates) or sum(rates) > 1.0 + 1e-9:
            raise ValueError(f"fault rates must be in [0, 1] and sum to at most 1: {self}")
        if self.retry_after < 0 or self.slow_delay < 0:
            raise ValueError("retry_after and slow_delay must not be negative")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FaultProfile:
        """The profile ``to_json`` wrote.

        Args:
            text: The JSON text.
        """
        return cls(**json.loads(text))


class FaultInjector:
    """Applies a ``FaultProfile`` to a server's answers and counts what it injected.

    ``ProviderServer(faults=profile)`` makes one (``server.faults``). ``respond(request,
    answer)`` is the whole seam: ``answer()`` makes the normal response and is not called for
    faults that replace it (429, 5xx). Counts may be read from any thread.

    Args:
        profile: What to inject, and how often.
    """

    def __init__(self, profile: FaultProfile) -> None:
        self.profile = profile
        self._rng = random.Random(profile.seed)
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self._requests = 0

    @property
    def counts(self) -> dict[str, int]:
        """Faults injected so far, by kind."""
        with self._lock:
            return dict(self._counts)

    @property
    def requests(self) -> int:
        """Requests seen so far (faulty or not)."""
        with self._lock:
            return self._requests

    @property
    def injected(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def _draw(self) -> tuple[FaultKind | None, float]:
        """The fault for the next request (or None) and a uniform number for its details."""
        with self._lock:
            self._requests += 1
            roll, detail = self._rng.random(), self._rng.random()
            edge = 0.0
            for kind in FAULT_KINDS:
                edge += getattr(self.profile, kind)
                if roll < edge:
                    self._counts[kind] += 1
                    return kind, detail
            return None, detail

    async def respond(
        self, request: RecordedRequest, answer: Callable[[], Awaitable[ScriptedResponse]]
    ) -> ScriptedResponse:
        """The answer to a request: a fault, or the normal answer (possibly made faulty).

        Args:
            request: The request.
            answer: Makes the normal answer.
        """
        kind, detail = self._draw()
        profile = self.profile
        if kind == "rate_limit":
            return rate_limited(request.path, retry_after=profile.retry_after)
        if kind == "server_error":
            anthropic = _is_anthropic(request.path)
            status = (500, 529 if anthropic else 503)[detail < 0.5]
            return server_failed(request.path, status=status)
        response = await answer()
        if kind == "reset":
            return reset_midway(response, at=0.1 + 0.8 * detail)
        if kind == "slow":
            return slowed(response, profile.slow_delay)
        if kind == "malformed":
            garbage = MALFORMED_EVENTS[int(detail * len(MALFORMED_EVENTS))]
            return corrupted(response, garbage, at=detail)
        return response


# -- single faults ----------------------------------------------------------------------------


def _is_anthropic(path: str) -> bool:
    return path.rstrip("/").endswith("/messages")


def _error_body(path: str, kind: str, message: str) -> dict[str, Any]:
    if _is_anthropic(path):
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def rate_limited(
    path: str = "/v1/chat/completions", *, retry_after: float = 1.0
) -> ScriptedResponse:
    """A 429 in the provider's shape (by the request path), with ``retry-after`` seconds.

    Args:
        path: The request's path (``/messages``: Anthropic's shape; else OpenAI's).
        retry_after: Its ``retry-after``, in seconds.
    """
    kind = "rate_limit_error" if _is_anthropic(path) else "rate_limit_exceeded"
    body = _error_body(path, kind, "Rate limit reached (injected by the fault kit).")
    headers = {"retry-after": f"{retry_after:g}", "x-request-id": "req_fault_429"}
    return ScriptedResponse.json(body, status=429, headers=headers)


def server_failed(path: str = "/v1/chat/completions", *, status: int = 500) -> ScriptedResponse:
    """A 5xx in the provider's shape (529 is Anthropic's ``overloaded_error``).

    Args:
        path: The request's path (``/messages``: Anthropic's shape; else OpenAI's).
        status: The status.
    """
    kind = {529: "overloaded_error", 503: "service_unavailable"}.get(status, "server_error")
    if _is_anthropic(path) and status == 500:
        kind = "api_error"
    body = _error_body(path, kind, f"Server error {status} (injected by the fault kit).")
    return ScriptedResponse.json(body, status=status, headers={"x-request-id": "req_fault_5xx"})


def _body(response: ScriptedResponse) -> bytes:
    return b"".join(p.data for p in response.pieces())


def _events(data: bytes) -> list[bytes]:
    """``data`` cut after each server-sent event (the last piece may be a partial event)."""
    pieces: list[bytes] = []
    start = 0
    for match in _EVENT_END.finditer(data):
        pieces.append(data[start : match.end()])
        start = match.end()
    if start < len(data):
        pieces.append(data[start:])
    return pieces


def _with_body(response: ScriptedResponse, body: Sequence[bytes | Chunk]) -> ScriptedResponse:
    return dataclasses.replace(
        response, body=list(body), split_at=None, split_seed=None, inject={}, chunk_delay=0.0
    )


def slowed(response: ScriptedResponse, delay: float) -> ScriptedResponse:
    """``response`` with ``delay`` seconds before each event (each 64 bytes of a JSON body).

    Args:
        response: The answer to slow down.
        delay: Seconds before each piece.
    """
    data = _body(response)
    if response.chunked:
        pieces = _events(data)
    else:
        pieces = [data[i : i + 64] for i in range(0, len(data), 64)]
    return _with_body(response, [Chunk(p, delay) for p in pieces])


def reset_midway(response: ScriptedResponse, *, at: float | int = 0.5) -> ScriptedResponse:
    """``response`` with its connection reset after ``at`` body bytes (an int) or that share of
    its body (a float in 0..1), at least one byte in and at least one byte short.

    Args:
        response: The answer to cut.
        at: Where: a byte count, or a share of the body.
    """
    size = len(_body(response))
    cut = at if isinstance(at, int) else int(size * at)
    return dataclasses.replace(response, reset_after=max(1, min(cut, size - 1)))


def corrupted(
    response: ScriptedResponse, garbage: bytes = MALFORMED_EVENTS[0], *, at: float | int = 0.5
) -> ScriptedResponse:
    """``response`` with ``garbage`` inserted after event number ``at`` (an int), or at that
    share of its events (a float in 0..1); a JSON body gets it in the middle of the document.

    Args:
        response: The answer to corrupt.
        garbage: The bytes to insert (a malformed event).
        at: Where: an event number, or a share of the events.
    """
    data = _body(response)
    if not response.chunked:
        middle = len(data) // 2
        return _with_body(response, [data[:middle], garbage, data[middle:]])
    events = _events(data)
    index = at if isinstance(at, int) else int(len(events) * at)
    index = max(0, min(index, len(events)))
    return _with_body(response, [*events[:index], garbage, *events[index:]])
