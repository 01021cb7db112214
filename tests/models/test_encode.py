"""The drivers' cache of encoded messages: hits only for the very same object, and no object
kept alive by it (a long-lived driver holds nothing of finished runs)."""

from __future__ import annotations

import gc
import json

import pytest

from agentloop.models import Message
from agentloop.models._encode import FragmentCache, loads


def _encode(message: Message) -> bytes:
    return message.text.encode()


def test_a_message_is_encoded_once_while_it_lives() -> None:
    """The second lookup of the same message object is a hit; an equal new object is not."""
    cache: FragmentCache[Message] = FragmentCache()
    message = Message.user("hello")
    assert cache.get(message, _encode) == b"hello"
    assert cache.get(message, lambda m: b"again") == b"hello"
    assert cache.get(Message.user("hello"), lambda m: b"new object") == b"new object"
    assert (cache.hits, cache.misses) == (1, 2)


def test_the_entry_leaves_with_its_message() -> None:
    """When a message is gone its entry is gone: the cache keeps no message alive."""
    cache: FragmentCache[Message] = FragmentCache()
    messages = [Message.user(str(i)) for i in range(10)]
    for message in messages:
        cache.get(message, _encode)
    assert len(cache) == 10
    del messages, message
    gc.collect()
    assert len(cache) == 0


def test_the_cache_is_bounded_first_in_first_out() -> None:
    """Beyond ``maxsize`` entries the oldest goes; its message is then encoded again."""
    cache: FragmentCache[Message] = FragmentCache(maxsize=2)
    a, b, c = (Message.user(t) for t in "abc")
    for message in (a, b, c):
        cache.get(message, _encode)
    assert len(cache) == 2
    assert cache.get(a, lambda m: b"re-encoded") == b"re-encoded"
    assert cache.get(c, lambda m: b"no") == b"c"


def test_objects_without_weak_references_are_encoded_every_time() -> None:
    """A value that cannot be weakly referenced is never cached (never kept alive either)."""
    cache: FragmentCache[tuple[str]] = FragmentCache()
    value = ("x",)
    assert cache.get(value, lambda v: b"1") == b"1"
    assert cache.get(value, lambda v: b"2") == b"2"
    assert len(cache) == 0


@pytest.mark.parametrize(
    "text",
    ['{"a":[1,2.5,"x"]}', ' {"a":1}', '{"a":1} ', "[1]", '"s"', "3", "null", '{"a":"\\u00e9"}'],
)
def test_loads_is_json_loads(text: str) -> None:
    """The one-call parse of stream events reads what ``json.loads`` reads."""
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", "{", '{"a":1} x', "nope", '{"a":1}{"b":2}'])
def test_loads_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        loads(text)
