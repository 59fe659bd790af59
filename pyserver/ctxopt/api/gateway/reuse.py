"""Parse only what changed: a request body spliced onto the previous one's parse.

A host resends its whole history on every call, byte for byte, with a few new
messages at the end. Parsing the whole body again (about 1 MB at 1,000
messages) was the gateway's largest cost per call. `Bodies.parse` keeps each
conversation's last body (its bytes, its parse and where each element of its
message list ends) and, when a new body starts with the same bytes up to the
end of element k, parses only a shortened document: the body with the list's
first k elements cut out. The k elements come from the previous parse, as the
same objects, so the formats see them unchanged (`build` compares by identity
first) and nothing new is allocated for them.

Correctness never rests on an assumption: the prefix is compared byte for
byte (a host that edited an earlier message shares fewer bytes, and only the
elements before the edit are reused); the element ends come from a scan of
the bytes (`_scan`) that is checked against the parser's own count; and a
list key that appears twice at the top level disables the reuse for that body
(the parser keeps the last one). The parsed elements are shared between
requests, so nothing may mutate a body (every format's `render` copies).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from ctxopt.api.gateway.formats.conversation import JsonObject

# Bodies kept, over all conversations: each holds its bytes (its parsed elements
# are the conversation state's too). Least recently used go first.
MAX_BODIES = 64
# Bodies kept per slot (owner, credential, format, session header): conversations
# without a session header share a slot; each is tried, a mismatch costs a few bytes.
MAX_PER_SLOT = 8
# A JSON string (escapes included) or one structural character: all the scan needs.
_TOKEN = re.compile(rb'"[^"]*"|[\[\]{}:,]')

Slot = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Parsed:
    """A body, its parse, and where the elements of its list `key` end: `ends[i]`
    is the offset of the comma or bracket after element i, `opened` the offset
    just past the list's `[`. Empty `ends`: no reuse from this body."""

    raw: bytes
    body: JsonObject
    key: str
    opened: int
    ends: tuple[int, ...]

    def reusable(self, raw: bytes) -> int:
        """How many leading elements `raw` shares with this body, byte for byte
        (everything before them included)."""
        if not self.ends or not raw.startswith(memoryview(self.raw)[: self.opened]):
            return 0
        view = memoryview(self.raw)
        if raw.startswith(view[: self.ends[-1]]):
            return len(self.ends)
        # an edited history: the longest run of leading elements still identical
        low, high = 0, len(self.ends) - 1  # ends[low - 1] matches (or low == 0), ends[high] not
        while low < high:
            mid = (low + high) // 2
            if raw.startswith(view[: self.ends[mid]]):
                low = mid + 1
            else:
                high = mid
        return low


class Bodies:
    """The last bodies parsed, by slot; `_lock` guards the map only (a leaf lock)."""

    def __init__(self, limit: int = MAX_BODIES, per_slot: int = MAX_PER_SLOT) -> None:
        self._limit = limit
        self._per_slot = per_slot
        self._slots: OrderedDict[Slot, list[Parsed]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def parse(self, raw: bytes, key: str, slot: Slot) -> JsonObject:
        """`raw` parsed (as `orjson.loads` would), reusing the longest matching
        prefix of a body parsed before in `slot`; raises ValueError as the parser
        does. The body is remembered for the next call of the slot."""
        with self._lock:
            candidates = list(self._slots.get(slot, ()))
        best, shared = None, 0
        for candidate in candidates:
            if candidate.key != key:
                continue
            n = candidate.reusable(raw)
            if n > shared:
                best, shared = candidate, n
        parsed = _spliced(raw, best, shared) if best is not None else None
        if parsed is None:
            parsed = _parsed_whole(raw, key)
        self._remember(slot, parsed, replaces=best)
        return parsed.body

    def _remember(self, slot: Slot, parsed: Parsed, replaces: Parsed | None) -> None:
        """`parsed` first in its slot (in place of the body it continues)."""
        with self._lock:
            before = self._slots.pop(slot, [])
            kept = [parsed, *(p for p in before if p is not replaces)][: self._per_slot]
            self._slots[slot] = kept
            self._count += len(kept) - len(before)
            while self._count > self._limit:
                _, gone = self._slots.popitem(last=False)
                self._count -= len(gone)


def _parsed_whole(raw: bytes, key: str) -> Parsed:
    body = orjson.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    items = body.get(key)
    found = _scan(raw, key, until_open=True) if isinstance(items, list) and items else None
    if found is None:
        return Parsed(raw, body, key, 0, ())
    opened = found[0]
    ends = _ends_as_dumped(raw, opened, items or [])
    # the elements written otherwise than compact JSON (and what follows the list) scanned
    start = ends[-1] if len(ends) == len(items or ()) else (ends[-1] + 1 if ends else opened)
    rest = _scan(raw, key, resume=start)
    if rest is None or len(ends) + len(rest[1]) != len(items or ()):
        return Parsed(raw, body, key, 0, ())
    return Parsed(raw, body, key, opened, (*ends, *rest[1]))


def _ends_as_dumped(raw: bytes, opened: int, items: list[Any]) -> list[int]:
    """The ends of the leading elements written as the parser writes them back
    (compact JSON, as most clients send it): each such element is its own
    dump, followed by a comma or the closing bracket. A JSON object, list or
    string ends where its text ends, so a match is where the element ends."""
    ends: list[int] = []
    at = opened
    for item in items:
        try:
            dumped = orjson.dumps(item)
        except TypeError:  # what the parser reads but does not write (a huge integer)
            break
        end = at + len(dumped)
        if not raw.startswith(dumped, at) or raw[end : end + 1] not in (b",", b"]"):
            break
        ends.append(end)
        at = end + 1
    return ends


def _spliced(raw: bytes, previous: Parsed, shared: int) -> Parsed | None:
    """`raw` parsed with its first `shared` elements taken from `previous`: the
    document parsed is `raw` without them (the list then opens on element
    `shared`), so the parser reads the rest of the body and the new elements only."""
    end = previous.ends[shared - 1]
    delimiter = raw[end : end + 1]
    if delimiter == b",":
        document, resume = raw[: previous.opened] + raw[end + 1 :], end + 1
    elif delimiter == b"]":
        document, resume = raw[: previous.opened] + raw[end:], end
    else:
        return None
    scanned = _scan(raw, previous.key, resume=resume)
    if scanned is None:
        return None
    try:
        body = orjson.loads(document)
    except ValueError:
        return None  # parsed whole, which says what is wrong with `raw`
    tail = body.get(previous.key) if isinstance(body, dict) else None
    if not isinstance(tail, list) or len(scanned[1]) != len(tail):
        return None
    body[previous.key] = previous.body[previous.key][:shared] + tail
    return Parsed(raw, body, previous.key, previous.opened, (*previous.ends[:shared], *scanned[1]))


def list_opening(raw: bytes, key: str) -> int | None:
    """The offset just past the `[` of the top-level list `key` in `raw` (a JSON
    object), None when there is none or the scan cannot tell (see `_scan`)."""
    found = _scan(raw, key, until_open=True)
    return found[0] if found is not None else None


def _scan(
    raw: bytes, key: str, *, resume: int = -1, until_open: bool = False
) -> tuple[int, list[int]] | None:
    """Where the top-level list `key` opens and where each of its elements ends,
    from the start of `raw` (`until_open`: up to the list's opening only), or from
    `resume` inside that list (an element's start, or the closing bracket); None
    when the top level is not an object, names `key` twice (the parser keeps the
    last) or spells a top-level key with escapes."""
    wanted = orjson.dumps(key)
    inside = resume >= 0
    start = max(resume, 0)
    # escaped backslashes and quotes blanked (same length): a string is then
    # quote, no quote, quote, which the tokenizer skips in one step
    text = raw[start:].replace(b"\\\\", b"__").replace(b'\\"', b"__")
    stack = [0x7B, 0x5B] if inside else []
    seen = in_list = inside
    pending = False  # the key's value comes next
    opened = boundary = 0  # boundary: where the current element began (in `text`)
    last = (0, 0)  # the latest top-level string's span
    ends: list[int] = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        first, depth = token[0], len(stack)
        if pending and depth == 1 and first != 0x5B:
            pending, opened = False, 0  # the key's value is not a list
        if first == 0x22:  # a string: at the top level, maybe a key
            if depth == 1:
                last = match.span()
        elif first == 0x3A:  # ":"
            if depth == 1:
                name = raw[start + last[0] : start + last[1]]
                if b"\\" in name:
                    return None
                if name == wanted:
                    if seen:
                        return None
                    seen = pending = True
        elif first == 0x2C:  # ","
            if in_list and depth == 2:
                ends.append(start + match.start())
                boundary = match.end()
        elif first in (0x7B, 0x5B):  # "{" or "["
            if depth == 0 and first != 0x7B:
                return None
            if pending and depth == 1:
                pending, in_list, opened, boundary = False, True, match.end(), match.end()
                if until_open:
                    return start + opened, []
            stack.append(first)
        else:  # "}" or "]"
            if not stack:
                return None
            if in_list and depth == 2:
                if text[boundary : match.start()].strip():
                    ends.append(start + match.start())  # the last element, if any
                in_list = False
            stack.pop()
    if not seen or (not inside and opened == 0):
        return None
    return (start + opened if not inside else start), ends
