"""A request under the decisions that stuck: its edits and its sizes, by pure
functions of the mapped request and the decisions.

Sizes are the engine's counts of the block texts plus `BLOCK_FRAMING_TOKENS`
per block (what the provider counts around a text). Three sizes travel
together in a `Projection`: the prompt as the host sent it, the prompt with
the edits, and what the engine sees of it (its chunks after the decisions).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ctxopt.api.gateway.formats.conversation import (
    Conversation,
    Edit,
    JsonObject,
    Rewrite,
    WireFormat,
)
from ctxopt.model import Action, Decision

Ref = tuple[int, int]  # a block's place in the body (`Block.ref`)
EMPTIED_CALL_TOKENS = 12  # a call's id, name and empty arguments, generously
# What the provider counts around a block's text (role, type, ids, separators):
# the engine counts the text only, and a request must fit by the provider's count.
BLOCK_FRAMING_TOKENS = 4


@dataclass(frozen=True)
class Call:
    """One request as the pipeline mapped it."""

    fmt: WireFormat
    body: JsonObject
    conversation: Conversation
    ids: list[list[str]]  # chunk ids per turn
    protected: frozenset[int]  # turns never rewritten (the first prompt, the latest turn)
    frame_tokens: int  # the system prompt and tool declarations
    ceiling: int  # tokens the request may carry, at our counts
    sizes: Mapping[str, int]  # chunk id -> tokens (the engine's counts, or estimates without it)


class Decided(Protocol):
    """The decisions a projection applies (a `ConversationState`)."""

    @property
    def decisions(self) -> Mapping[str, Decision]: ...

    @property
    def version(self) -> int: ...

    def shown(self, chunk_id: str, decision: Decision) -> tuple[str, int]:
        """A rewritten chunk's text under `decision`, and its estimated size."""
        ...


@dataclass
class TurnProjection:
    """One turn under the decisions of `version`: its edits and sizes."""

    version: int
    protected: bool
    edits: list[tuple[Ref, Edit]] = field(default_factory=list)
    total: int = 0
    seen: int = 0
    before: int = 0


@dataclass(frozen=True)
class Projection:
    """The request with the decisions that stuck applied."""

    edits: dict[Ref, Edit]  # in turn order
    tokens_after: int  # the prompt's size with the edits
    engine_tokens: int  # the engine's view of it: its chunks after the decisions
    tokens_before: int  # the prompt as the host sent it
    turns: list[TurnProjection]  # turn by turn, for the next call to reuse
    # after each turn, the frame left out: the three sizes so far and len(edits)
    marks: list[tuple[int, int, int, int]] = field(default_factory=list)
    version: int = -1  # the decisions' version it was made under
    protected: frozenset[int] = frozenset()  # the call's protected turns

    @property
    def overhead(self) -> int:
        """What the request carries beyond the engine's view (placeholders, calls
        kept for pairing): a collection's ceiling leaves room for it."""
        return max(0, self.tokens_after - self.engine_tokens)


def project(call: Call, decided: Decided, previous: Projection | None) -> Projection:
    """The decisions that stuck as edits, with the three sizes. A turn unchanged
    since `previous` (reused from the last call, under the same version and
    protection) is not walked again; the leading run of such turns is not even
    visited: its edits and sizes are `previous`'s up to there."""
    frame = call.frame_tokens
    turns_now = call.conversation.turns
    reused = call.conversation.reused
    earlier = previous.turns if previous is not None else []
    start = 0
    if previous is not None and previous.version == decided.version:
        # every turn of `previous` was projected under this version: a reused turn's
        # projection holds unless its protection moved (the latest turns, the task)
        start = min(reused, len(earlier))
        for t in previous.protected ^ call.protected:
            if t < start and not turns_now[t].locked:
                start = t
    edits: dict[Ref, Edit] = {}
    marks: list[tuple[int, int, int, int]] = []
    total = seen = before = frame
    if start:
        assert previous is not None
        marks = previous.marks[:start]
        sums = marks[-1]
        total, seen, before = frame + sums[0], frame + sums[1], frame + sums[2]
        edits = dict(itertools.islice(previous.edits.items(), sums[3]))
    turns = earlier[:start]
    for t in range(start, len(turns_now)):
        protected = turns_now[t].locked or t in call.protected
        entry = earlier[t] if t < reused and t < len(earlier) else None
        if entry is None or entry.version != decided.version or entry.protected != protected:
            entry = _project_turn(call, decided, t, protected)
        turns.append(entry)
        edits.update(entry.edits)
        total += entry.total
        seen += entry.seen
        before += entry.before
        marks.append((total - frame, seen - frame, before - frame, len(edits)))
    return Projection(edits, total, seen, before, turns, marks, decided.version, call.protected)


def _project_turn(call: Call, decided: Decided, t: int, protected: bool) -> TurnProjection:
    """A removed step keeps only its skeleton: the call with empty arguments
    and the result's placeholder (which restores the whole group); the model's
    narration beside its calls goes without one."""
    turn = call.conversation.turns[t]
    steps = any(b.call_id for b in turn.blocks)
    entry = TurnProjection(decided.version, protected)
    for block, cid in zip(turn.blocks, call.ids[t], strict=True):
        tokens = call.sizes.get(cid, 0)
        decision = decided.decisions.get(cid)
        entry.before += tokens + BLOCK_FRAMING_TOKENS
        if decision is None or protected:
            entry.total += tokens + BLOCK_FRAMING_TOKENS
            entry.seen += tokens
            continue
        shrunk = decision.action in (Action.TRIM, Action.MASK)
        if shrunk:
            entry.seen += decision.tokens_after
        if block.rewrite == Rewrite.NEVER:
            entry.total += tokens + BLOCK_FRAMING_TOKENS
        elif block.rewrite == Rewrite.DROP or (steps and not shrunk and not block.call_id):
            entry.edits.append((block.ref, Edit(None)))
        elif block.rewrite == Rewrite.CALL:
            entry.edits.append((block.ref, Edit("")))
            entry.total += EMPTIED_CALL_TOKENS
        else:
            text, size = decided.shown(cid, decision)
            entry.edits.append((block.ref, Edit(text)))
            entry.total += size + BLOCK_FRAMING_TOKENS
    return entry


def unchanged_prefix(
    conversation: Conversation, turns: Sequence[TurnProjection], basis: Sequence[object]
) -> int:
    """How many leading raw messages (or items) carry the edits they carried
    under the projection `basis` (an earlier call's `Projection.turns`): those
    of the leading turns whose projection is the very one of `basis` (`project`
    hands a turn's over only while its turn, decisions and protection are
    unchanged), up to the first raw element of any other turn."""
    limit = min(len(turns), len(basis), conversation.reused)
    same = 0
    while same < limit and turns[same] is basis[same]:
        same += 1
    rest = (min(turn.items) for turn in conversation.turns[same:] if turn.items)
    return min(rest, default=sys.maxsize)  # every one


def tokens_as_sent(call: Call) -> int:
    """The request's size as the host sent it."""
    turns = call.conversation.turns
    return call.frame_tokens + sum(
        call.sizes.get(cid, 0) + BLOCK_FRAMING_TOKENS
        for t in range(len(turns))
        for cid in call.ids[t]
    )


def fixed_prefix(call: Call, turns: Sequence[TurnProjection], first: int | None) -> int:
    """The tokens at the prompt's start that no collection changes: the frame
    and the turns up to the task (`first`, the first prompt: a root of every
    plan; the turns before it are the host's canned, locked ones)."""
    if first is None:
        return call.frame_tokens
    return call.frame_tokens + sum(entry.total for entry in turns[: first + 1])
