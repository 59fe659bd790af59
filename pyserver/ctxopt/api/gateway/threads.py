"""One conversation, one session: which live session a request continues.

Requests whose openings (system prompt, first message) are the same may come
from different conversations: two aider runs on one machine and day send the
same system prompt and canned examples; two runs of any host given the same
task start the same way. A request continues the live session whose last
request it extends: that request's history, its trail (the turns after the
frame, without the host's canned turns and working set, which hosts rebuild in
place), is a prefix of this one's. Hosts decorate their newest turn (aider
appends its reminder to the user's request, and drops it next time), so the
last request's newest turn may differ, unless that turn is the task, which
must then match, or start the other's text followed by a line break.

A request that continues no live session starts a new one, named by its
opening's hash (as without this), or when that name is taken by a live
conversation it does not continue, by the hash of its opening and trail. Two
conversations whose requests are identical so far cannot be told apart: they
share a session until the first request where they differ. A host that
rewrites earlier history (aider's summary of old exchanges, a rewind) starts a
new session. `x-ctxopt-session` bypasses all of this.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxopt.api.gateway.formats.conversation import (
    Conversation,
    JsonObject,
    Turn,
    WireFormat,
    digest,
    first_prompt,
)

# Conversations whose trails are remembered (as the gateway's live session states)
MAX_THREADS = 1024


@dataclass(frozen=True, slots=True)
class Trail:
    """A request's history as the session choice compares it."""

    keys: tuple[str, ...]  # one digest per history turn
    task: int  # the task's position in `keys`, -1 when there is none
    newest: str  # the newest history turn's text (hosts decorate it)


def trail_of(turns: Sequence[Turn]) -> Trail:
    history = [t for t in turns if not t.locked and not t.working_set]
    keys = []
    for turn in history:
        if not turn.key:
            turn.key = digest(turn.role.name, *(b.text for b in turn.blocks))
        keys.append(turn.key)
    found = first_prompt(history)
    task = -1 if found is None else found
    # the newest text is compared only while the trail ends at the task or before it
    newest = _text(history[-1]) if history and len(history) - 1 <= task else ""
    return Trail(tuple(keys), task, newest)


def continues(trail: Trail, last: Trail, newest_of: Callable[[int], str]) -> bool:
    """Whether a request whose trail is `trail` continues the one whose trail was
    `last`; `newest_of(i)` is the text of the request's i-th history turn."""
    n = len(last.keys)
    if n == 0 or len(trail.keys) < n or trail.keys[: n - 1] != last.keys[: n - 1]:
        return n == 0 and not trail.keys
    if trail.keys[n - 1] == last.keys[n - 1] or n - 1 > last.task:
        return True
    # the newest turn was the task (or before it): only a decoration may differ
    return _decorated(newest_of(n - 1), last.newest)


def _decorated(a: str, b: str) -> bool:
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    return long == short or (long.startswith(short) and long[len(short)] in "\r\n")


@dataclass(frozen=True, slots=True)
class Followed:
    """The session a request continues, and its conversation (parsed reusing that of
    `previous`, the session's last one when it is the same object)."""

    session_id: str
    conversation: Conversation | None  # None: the request passes untouched
    previous: Conversation | None


class Threads:
    """The trails of the live conversations, by opening; least recently used forgotten."""

    def __init__(self, limit: int = MAX_THREADS) -> None:
        self._limit = limit
        self._trails: OrderedDict[str, tuple[str, Trail]] = OrderedDict()  # id -> (opening, trail)
        self._by_opening: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def follow(
        self,
        fmt: WireFormat,
        body: JsonObject,
        path: str,
        opening_id: str,
        conversation_of: Callable[[str], Conversation | None],
    ) -> Followed:
        """The session of a request whose opening names `opening_id`;
        `conversation_of(session)` is that session's last conversation."""
        with self._lock:
            candidates = list(reversed(self._by_opening.get(opening_id, [])))
        previous = conversation_of(candidates[0]) if candidates else None
        conversation = fmt.parse(body, path, previous)
        if conversation is None:
            return Followed(opening_id, None, previous)
        trail = trail_of(conversation.turns)
        history = [t for t in conversation.turns if not t.locked and not t.working_set]
        with self._lock:
            chosen = self._choose(opening_id, trail, lambda i: _text(history[i]))
            self._remember(chosen, opening_id, trail)
        return Followed(chosen, conversation, previous)

    def _choose(self, opening_id: str, trail: Trail, newest_of: Callable[[int], str]) -> str:
        best, best_length = "", -1
        for session_id in self._by_opening.get(opening_id, []):
            last = self._trails[session_id][1]
            if len(last.keys) > best_length and continues(trail, last, newest_of):
                best, best_length = session_id, len(last.keys)
        if best:
            return best
        if opening_id not in self._trails:
            return opening_id
        named = f"{opening_id}-{digest(*trail.keys)}"
        suffix, candidate = 1, named
        while candidate in self._trails:
            suffix += 1
            candidate = f"{named}-{suffix}"
        return candidate

    def _remember(self, session_id: str, opening_id: str, trail: Trail) -> None:
        known = self._trails.pop(session_id, None)
        self._trails[session_id] = (opening_id, trail)
        siblings = self._by_opening.setdefault(opening_id, [])
        if known is not None:
            siblings.remove(session_id)
        siblings.append(session_id)
        while len(self._trails) > self._limit:
            gone, (opening, _) = self._trails.popitem(last=False)
            others = self._by_opening[opening]
            others.remove(gone)
            if not others:
                del self._by_opening[opening]


def _text(turn: Turn) -> str:
    return "".join(b.text for b in turn.blocks)
