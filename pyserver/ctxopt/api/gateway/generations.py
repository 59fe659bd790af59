"""Generational collections: which chunks a minor collection leaves alone, and
whether it can land.

A provider bills every token after a prompt's first changed byte at
`cache_write` and the prefix before it at `cache_read` (ctxopt.prices). A
full collection may change the prompt near its start, so the next call is
billed again almost whole. The turns the host sent since the last full
collection are the *young* generation, everything it sent up to then the
*old* one: a *minor* collection prunes only the young generation (the old
one's chunks are roots of its plan, its decisions stick), so every byte
before the first young chunk stays as the provider cached it and the rewrite
costs only the young part. Either kind keeps the latest turns whole up to a
share of the room its landing leaves (`latest_roots`). A minor collection
cannot land when the old generation and the turns no plan may prune (the
first prompt, the latest turns) already pass its target; then a full
collection runs and what the host sent up to it becomes the new old
generation, but for the latest turns: they were roots of that plan (kept
whole) and are the next minor collection's to prune.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from enum import Enum

from ctxopt.api.gateway.formats.conversation import latest_turns
from ctxopt.api.gateway.projection import Call, TurnProjection

# The model's latest call and the result that answers it: kept whole by every collection
LATEST_EXCHANGE = 2


class Kind(Enum):
    """Which collection ran (a closed outcome, for the log line and the tests)."""

    MINOR = "minor"
    FULL = "full"


class Generations:
    """One conversation's old generation: the chunk ids the host had sent when
    its last full collection ran (none before the first). Guarded by the
    conversation's lock (state.py), as the rest of its state."""

    def __init__(self) -> None:
        self._old: frozenset[str] = frozenset()

    @property
    def old(self) -> frozenset[str]:
        return self._old

    def promote(self, ids: Iterable[str]) -> None:
        """A full collection ran: `ids` (`promoted`) are the old generation from now on."""
        self._old = frozenset(ids)


def promoted(call: Call, *, recent_turns: int, kept_from: int) -> list[str]:
    """What a full collection over `call` makes old: every chunk before the
    latest `recent_turns` turns, the latest turn the API needs whole and the
    turns from `kept_from` on (`latest_start`): the plan kept those as roots,
    not on their merit."""
    turns = call.conversation.turns
    young = min(len(turns) - recent_turns, *latest_turns(turns), len(turns), kept_from)
    return [i for row in call.ids[: max(0, young)] for i in row]


def minor_floor(
    call: Call, turns: Sequence[TurnProjection], old: Set[str], *, recent_turns: int
) -> int:
    """The least a minor collection can land at: the frame, and as they are
    sent now every turn with an old chunk and the turns no plan prunes (the
    protected ones, and the latest `recent_turns`: the plan's roots)."""
    first_recent = len(turns) - recent_turns
    return call.frame_tokens + sum(
        entry.total
        for t, entry in enumerate(turns)
        if t >= first_recent or entry.protected or any(i in old for i in call.ids[t])
    )


def old_prefix(call: Call, turns: Sequence[TurnProjection], old: Set[str]) -> int:
    """The tokens a minor collection leaves byte-identical: the frame and, as
    they are sent now, the turns before the first one holding a young chunk
    (0 before the first full collection: nothing is old)."""
    if not old:
        return 0
    kept = call.frame_tokens
    for t, entry in enumerate(turns):
        if any(i not in old for i in call.ids[t]):
            break
        kept += entry.total
    return kept


def latest_count(
    turns: Sequence[TurnProjection], *, after: int, most: int, room: int, share: float
) -> int:
    """How many of the latest turns a collection keeps whole by count: `most`, but
    no more than fill `share` of `room` (what the ceiling leaves above the frame and
    the task) as they are sent now, so a few huge turns never leave a prompt over
    the ceiling with nothing to prune; never fewer than the latest exchange
    (LATEST_EXCHANGE turns) unless `most` is."""
    fits = len(turns) - latest_start(turns, after=after, room=room, share=share)
    return min(most, max(LATEST_EXCHANGE, fits))


def latest_start(turns: Sequence[TurnProjection], *, after: int, room: int, share: float) -> int:
    """The first of the latest turns (those after turn `after`, the task) that
    together fill at most `share` of `room` (what a landing leaves above the
    prompt's fixed start) as they are sent now: a collection keeps them whole.
    The lines an agent quotes next (the code it edits, the error it fixes) are
    mostly in its latest outputs, which a host alone keeps whole until it
    summarises; a plan ranking them by value per token would cut a long one
    first."""
    budget, used = max(0.0, min(1.0, share)) * room, 0
    start = len(turns)
    for t in range(len(turns) - 1, after, -1):
        used += turns[t].total
        if used > budget:
            break
        start = t
    return start
