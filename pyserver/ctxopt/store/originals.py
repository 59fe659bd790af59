"""The stash side of a write: originals kept when chunks leave the window or
shrink, and the `Change` a plan or a removal commits.

Originals are never lost: a chunk whose text is already an excerpt or
placeholder does not stash that text again; the entry holding its original
records the newer decision instead (`Restash`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ctxopt.model import Action, Plan
from ctxopt.session import Entry, Session
from ctxopt.store.rows import Change, Restash, StashEntry, StoredChunk


@dataclass
class Originals:
    """The stash side of one change: originals to store, and stored originals
    whose excerpt or placeholder got a newer decision."""

    session_id: str
    owner: str
    now_ms: int
    plan_id: str = ""
    stash: list[StashEntry] = field(default_factory=list)
    restash: list[Restash] = field(default_factory=list)

    def stash_original(
        self, entry: Entry, action: Action, reasons: tuple[str, ...], score: float
    ) -> str:
        """Stash the original of a chunk leaving the window or shrinking: a new
        entry, or, when its text is already an excerpt or placeholder, the newer
        decision on the entry holding its original. Returns that stash id."""
        if entry.origin:
            self.restash.append(
                Restash(entry.origin, action, reasons, score, self.now_ms, self.plan_id)
            )
            return entry.origin
        stash_id = entry.stash_id()
        self.stash.append(
            StashEntry(
                stash_id,
                self.session_id,
                self.owner,
                entry.chunk,
                action,
                reasons,
                score,
                self.now_ms,
                self.plan_id,
            )
        )
        return stash_id


def plan_fingerprint(session_id: str, plan: Plan) -> str:
    """A stable id of a plan: the same state and request give the same id."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(session_id.encode())
    decisions = plan.decisions
    for chunk_id, action in zip(decisions.chunk_ids, decisions.actions, strict=True):
        digest.update(f"{chunk_id}:{action}".encode())
    return digest.hexdigest()


_SHRINKS = frozenset((Action.TRIM, Action.MASK))


def plan_change(
    session_id: str,
    owner: str,
    plan: Plan,
    entries: Mapping[str, Entry],
    *,
    collections: int,
    now_ms: int,
) -> Change:
    """Every original a plan needs kept, and the session after it, as one change
    (the collection count goes up by one)."""
    originals = Originals(session_id, owner, now_ms, plan_fingerprint(session_id, plan))
    d = plan.decisions
    upserts: list[StoredChunk] = []
    removals: list[str] = []
    for i, action in enumerate(d.actions):
        if action in _SHRINKS:
            entry = entries[d.chunk_ids[i]]
            origin = originals.stash_original(entry, action, d.reasons[i], d.scores[i])
            shrunk = replace(entry.chunk, text=d.replacement_texts[i], tokens=d.tokens_after[i])
            upserts.append(replace(stored_of(entry), chunk=shrunk, origin=origin))
    for i, action in enumerate(d.actions):
        if action not in _SHRINKS:
            entry = entries[d.chunk_ids[i]]
            removals.append(entry.chunk.id)
            if action != Action.DELETE:
                originals.stash_original(entry, action, d.reasons[i], d.scores[i])
    return Change(
        session_id,
        owner,
        upserts=upserts,
        removals=removals,
        stash=originals.stash,
        restash=originals.restash,
        collections=collections + 1,
    )


def removal_change(
    session_id: str,
    owner: str,
    removed: Sequence[Entry],
    *,
    stash_reason: str | None,
    now_ms: int,
) -> Change:
    """Chunks leaving the session, their originals stashed with `stash_reason`
    (None: not stashed)."""
    originals = Originals(session_id, owner, now_ms)
    if stash_reason is not None:
        for entry in removed:
            originals.stash_original(entry, Action.STASH, (stash_reason,), 0.0)
    return Change(
        session_id,
        owner,
        removals=[entry.chunk.id for entry in removed],
        stash=originals.stash,
        restash=originals.restash,
    )


def restore_change(
    session: Session,
    owner: str,
    back: Sequence[StashEntry],
    counts: Sequence[int],
    *,
    now_ms: int,
) -> Change:
    """Stashed originals back into the session (`counts`: their tokens), and
    out of the stash. A chunk still in the window keeps its slot; ids the
    session no longer places (after a restart or a compaction) come back at
    the end, in conversation order."""
    returning = sorted(
        (e.chunk for e in back if e.chunk.id not in session),
        key=lambda c: (c.turn, c.created_at_ms),
    )
    slots = session.slots_for([c.id for c in returning])
    upserts = []
    for stashed, count in zip(back, counts, strict=True):
        current = session.entries.get(stashed.chunk.id)
        upserts.append(
            StoredChunk(
                replace(stashed.chunk, tokens=count),
                current.slot if current else slots[stashed.chunk.id],
                current.born if current else session.collections,
                now_ms,
            )
        )
    unstash = [e.stash_id for e in back]
    return Change(session.id, owner, upserts=upserts, unstash=unstash)


def entry_of(item: StoredChunk) -> Entry:
    """A stored live chunk as the session holds it."""
    return Entry(
        item.chunk, item.seq, item.chunk.tokens, item.born, item.last_touched_ms, item.origin
    )


def stored_of(entry: Entry) -> StoredChunk:
    """A session's entry as the store keeps it."""
    return StoredChunk(entry.chunk, entry.slot, entry.born, entry.last_touched_ms, entry.origin)
