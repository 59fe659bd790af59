"""Serialise only what changed: the body that goes upstream, spliced onto the last one's bytes.

Between two calls of a conversation the rendered message list keeps its
elements as the same objects (reuse.py hands the unchanged prefix over as the
parsed objects, `Renders` hands back the message it rendered last time under
the same edits), so `dump` writes the list's leading elements that are the
very objects it wrote last time as the bytes it wrote then, and serialises the
rest: at 1,000 messages it writes the few new ones instead of a megabyte.

Exact by construction: orjson writes the same object the same way, and no
rendered or parsed element is ever mutated (reuse.py and `Renders` say why);
everything around the list (system prompt, tools, settings) is serialised on
every call and compared byte for byte.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from ctxopt.api.gateway.formats.conversation import JsonObject
from ctxopt.api.gateway.reuse import MAX_BODIES, list_opening


@dataclass(frozen=True, slots=True)
class Dumped:
    """A body's bytes and its list `key`: the elements written (held, so their
    identity stays theirs), where the list opens (just past its `[`) and where
    each element ends (at the comma or bracket after it)."""

    raw: bytes
    key: str
    items: list[Any]
    opened: int
    ends: tuple[int, ...]


class Sent:
    """The last body each conversation sent, as many as reuse.py keeps bodies
    received (the bytes, about a megabyte at 1,000 messages, are what costs);
    least recently used go first. `_lock` guards the map only (a leaf lock)."""

    def __init__(self, limit: int = MAX_BODIES) -> None:
        self._limit = limit
        self._last: OrderedDict[tuple[str, str], Dumped] = OrderedDict()
        self._lock = threading.Lock()

    def dump(self, conversation: tuple[str, str], body: JsonObject, key: str) -> bytes:
        """`body`'s bytes (see `dump`), spliced onto the conversation's last ones."""
        with self._lock:
            previous = self._last.pop(conversation, None)
        dumped = dump(body, key, previous)
        with self._lock:
            self._last[conversation] = dumped
            while len(self._last) > self._limit:
                self._last.popitem(last=False)
        return dumped.raw


def dump(body: JsonObject, key: str, previous: Dumped | None) -> Dumped:
    """`body` as `orjson.dumps` writes it, the leading elements of its list `key`
    that `previous` wrote (the same objects) copied from its bytes."""
    items = body.get(key)
    if not isinstance(items, list):
        return Dumped(orjson.dumps(body), key, [], 0, ())
    skeleton = orjson.dumps({**body, key: []})
    opened = list_opening(skeleton, key)
    if opened is None:
        return Dumped(orjson.dumps(body), key, [], 0, ())
    head = skeleton[:opened]
    shared = 0
    if (
        previous is not None
        and previous.key == key
        and previous.opened == opened
        and previous.raw.startswith(head)
    ):
        limit = min(len(items), len(previous.ends))
        while shared < limit and items[shared] is previous.items[shared]:
            shared += 1
    parts: list[bytes | memoryview] = [head]
    ends = list(previous.ends[:shared]) if previous is not None else []
    at = opened
    if shared:
        assert previous is not None
        at = previous.ends[shared - 1]
        parts.append(memoryview(previous.raw)[opened:at])  # copied once, by the join
    for i in range(shared, len(items)):
        written = orjson.dumps(items[i])
        if i:
            parts.append(b",")
            at += 1
        parts.append(written)
        at += len(written)
        ends.append(at)
    parts.append(skeleton[opened:])
    return Dumped(b"".join(parts), key, items, opened, tuple(ends))
