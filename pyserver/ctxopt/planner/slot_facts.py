"""Slot facts: what a plan reads of each slot that changes only when an entry
does (its chunk's id and text, the stash id of its text, its parent link),
kept per session between plans so a warm plan indexes arrays instead of
walking entries. A session that only grew since (an append) extends the last
plan's arrays with its new entries: remaking them walked every entry (~1 ms
at 1,200 chunks)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from operator import is_
from weakref import WeakKeyDictionary

import numpy as np
import numpy.typing as npt

from ctxopt.session import SessionView
from ctxopt.session.columns import Entry
from ctxopt.text.line_book import LineBook

IntArray = npt.NDArray[np.intp]
ObjectArray = npt.NDArray[np.object_]


@dataclass(frozen=True, slots=True)
class SlotFacts:
    """Per slot, its chunk's id, its text and the stash id of its text (""
    for a dead slot's text and stash id), as arrays a plan indexes with its
    slot columns; and the (child, parent) slot pairs of live chunks whose
    parent is live (`SessionView.parent_pairs`). All read-only."""

    chunk_ids: ObjectArray
    stash_ids: ObjectArray
    texts: ObjectArray
    child_slots: IntArray
    parent_slots: IntArray


@dataclass(frozen=True, slots=True)
class _Made:
    """Slot facts and what they were made from: the slots' ids and the
    entries (in the session's order)."""

    slot_ids: Sequence[str]
    entries: tuple[Entry, ...]
    facts: SlotFacts


_last: WeakKeyDictionary[LineBook, _Made] = WeakKeyDictionary()
_last_lock = threading.Lock()  # plans of different sessions run in parallel


def slot_facts(session: SessionView, book: LineBook | None) -> SlotFacts:
    """The session's `SlotFacts`: the last plan's while its slots and entries
    are the same objects (a text, an origin, a parent or an id changes by
    replacing the entry or the slots' tuple), extended when entries were only
    added since; `book` keys them per session (None: made fresh)."""
    entries = tuple(session.entries.values())
    if book is None:
        return _frozen(_made(session, entries, entries, None))
    with _last_lock:
        last = _last.get(book)
    if last is not None and last.slot_ids == session.slot_ids and last.entries == entries:
        return last.facts
    grown = (
        last is not None
        and len(entries) > len(last.entries)
        # the same entries first, so the same slots, their ids and texts
        and all(map(is_, entries, last.entries))
    )
    if grown and last is not None:
        made = _made(session, entries, entries[len(last.entries) :], last.facts)
    else:
        made = _made(session, entries, entries, None)
    _frozen(made)
    with _last_lock:
        _last[book] = _Made(session.slot_ids, entries, made)
    return made


def _made(
    session: SessionView,
    entries: tuple[Entry, ...],
    new: tuple[Entry, ...],
    last: SlotFacts | None,
) -> SlotFacts:
    """The facts of `entries`: `last`'s (made from a prefix of them, with the
    same slots for that prefix) with the `new` ones set, or all made when
    `last` is None."""
    n = session.n_slots
    stash_ids = np.full(n, "", dtype=object)
    texts = np.full(n, "", dtype=object)
    if last is not None:
        stash_ids[: len(last.stash_ids)] = last.stash_ids
        texts[: len(last.texts)] = last.texts
    slots = [entry.slot for entry in new]
    stash_ids[slots] = [entry.stash_id() for entry in new]
    texts[slots] = [entry.chunk.text for entry in new]
    if last is not None and len(last.chunk_ids) <= n:
        chunk_ids = np.empty(n, dtype=object)
        chunk_ids[: len(last.chunk_ids)] = last.chunk_ids
        chunk_ids[len(last.chunk_ids) :] = session.slot_ids[len(last.chunk_ids) :]
    else:
        chunk_ids = np.array(session.slot_ids, dtype=object)
    return SlotFacts(chunk_ids, stash_ids, texts, *session.parent_pairs())


def _frozen(made: SlotFacts) -> SlotFacts:
    for array in (made.chunk_ids, made.stash_ids, made.texts, made.child_slots, made.parent_slots):
        array.setflags(write=False)
    return made
