"""Slot facts: what a plan reads of each slot that changes only when an entry
does (its chunk's id, the stash id of its text, its parent link), kept per
session between plans so a warm plan indexes arrays instead of walking
entries."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctxopt.planner.reuse import LastResult, Stamp
from ctxopt.session import SessionView
from ctxopt.text.lines import LineBook

IntArray = npt.NDArray[np.intp]
ObjectArray = npt.NDArray[np.object_]


@dataclass(frozen=True, slots=True)
class SlotFacts:
    """Per slot, its chunk's id and the stash id of its text ("" for a dead
    slot), as arrays a plan indexes with its slot columns; and the (child,
    parent) slot pairs of live chunks whose parent is live
    (`SessionView.parent_pairs`). All read-only."""

    chunk_ids: ObjectArray
    stash_ids: ObjectArray
    child_slots: IntArray
    parent_slots: IntArray


_last_facts: LastResult[SlotFacts] = LastResult()


def slot_facts(session: SessionView, book: LineBook | None) -> SlotFacts:
    """The session's `SlotFacts`, the last plan's while its slots and entries
    are the same objects (a text, an origin, a parent or an id changes by
    replacing the entry or the slots' tuple); `book` keys them per session
    (None: made fresh)."""
    entries = tuple(session.entries.values())
    now = Stamp((session.slot_ids, entries), ())
    found = None if book is None else _last_facts.get(book, now)
    if found is not None:
        return found
    stash_ids = np.full(session.n_slots, "", dtype=object)
    stash_ids[[entry.slot for entry in entries]] = [entry.stash_id() for entry in entries]
    made = SlotFacts(np.array(session.slot_ids, dtype=object), stash_ids, *session.parent_pairs())
    for array in (made.chunk_ids, made.stash_ids, made.child_slots, made.parent_slots):
        array.setflags(write=False)
    if book is not None:
        _last_facts.put(book, now, made)
    return made
