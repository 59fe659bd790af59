"""`Session`: one conversation's chunks with incremental indexes, the only writer.

Removal marks a slot dead; re-appending or restoring an id brings it back
into its old slot (slots: see `columns.py`).

Besides the BM25 index the session keeps the reference graph incrementally:
explicit edges (`references`, `parent_id`, `summary_of`) with back-references
and refcounts, and implicit hubs (same `file_path`, shared tags, same
`topic_id`, same `group_id`) that reachability walks through without ever
materialising the quadratic set of pairwise edges; and its line book (the
echo lines of `text/lines.py`), brought up to date when a plan asks for it.
Readers get a `SessionView`.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from itertools import pairwise
from operator import attrgetter
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from ctxopt.model import Chunk, UpsertStatus
from ctxopt.session.columns import Columns, Entry, Hubs
from ctxopt.session.view import SessionView
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.bm25 import BM25Index
from ctxopt.text.line_book import LineBook
from ctxopt.text.termblob import DocTerms

# Below this many dead slots, their memory costs less than rebuilding the indexes.
COMPACT_MIN_DEAD_SLOTS = 4096


class Session:
    """One conversation's chunks. Callers hold `lock` around every use."""

    def __init__(self, session_id: str, owner: str, analyzer: Analyzer) -> None:
        self.id = session_id
        self.owner = owner
        self.lock = threading.RLock()
        self.collections = 0
        # bumped by every change of a chunk, its slot or its links: what a plan
        # reads besides `collections` (the collector's memo of its last plan)
        self.revision = 0
        self.analyzer = analyzer  # the one that indexed the text; line links use its terms too
        # a restart's kept index, read on first use (`restore_kept`)
        self._unread: Callable[[], BM25Index] | None = None
        # kept across a compaction, as the quoted marks are (text/lines.py)
        self._lines = LineBook()
        self._clear()

    def _clear(self) -> None:
        """No chunks and no slots (the collection count stays)."""
        self.embedding_dim = 0
        self.entries: dict[str, Entry] = {}
        self.slot_ids: list[str] = []  # slot -> id, kept after removal
        self._frozen_slot_ids: tuple[str, ...] | None = None  # for views, until a slot changes
        self.slot_by_id: dict[str, int] = {}  # every id ever seen, so it comes back to its slot
        self.columns = Columns()
        self.index = BM25Index()
        self.hubs = Hubs()
        self.embeddings: dict[int, npt.NDArray[np.float32]] = {}
        # explicit edges by id (targets may not exist yet): source -> targets
        self.out_edges: dict[str, tuple[str, ...]] = {}
        self.in_edges: dict[str, set[str]] = defaultdict(set)
        self.parent_of: dict[str, str] = {}  # child id -> parent id
        self.tokens_total = 0

    # ---- reading -------------------------------------------------------

    @property
    def index(self) -> BM25Index:
        """The BM25 index of the live texts (a restart's kept one read now if not yet)."""
        self.settle()
        return self._index

    @index.setter
    def index(self, index: BM25Index) -> None:
        self._unread = None
        self._index = index

    def settle(self) -> None:
        """Read a restart's kept index now if not yet (`restore_kept`)."""
        if self._unread is not None:
            read, self._unread = self._unread, None
            self._index = read()

    @property
    def settled(self) -> bool:
        """Whether the index (and what a restart reads with it) has been read."""
        return self._unread is None

    @property
    def n_slots(self) -> int:
        return len(self.slot_ids)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self.entries

    def live_slots(self) -> npt.NDArray[np.intp]:
        """Slots of live chunks in prompt order."""
        return np.flatnonzero(self.columns.alive[: self.n_slots])

    def entry_at(self, slot: int) -> Entry:
        return self.entries[self.slot_ids[slot]]

    def view(self) -> SessionView:
        """The snapshot one plan reads (valid while the caller holds the lock)."""
        n = self.n_slots
        if self._frozen_slot_ids is None:
            self._frozen_slot_ids = tuple(self.slot_ids)
        return SessionView(
            id=self.id,
            n_slots=n,
            live=self.live_slots(),
            columns=self.columns.frozen(n),
            slot_ids=self._frozen_slot_ids,
            entries=MappingProxyType(self.entries),
            hubs=self.hubs.view(),
            out_edges=MappingProxyType(self.out_edges),
            in_edges=MappingProxyType(self.in_edges),
            parent_of=MappingProxyType(self.parent_of),
            index=self.index,
            embeddings=MappingProxyType(self.embeddings),
            analyzer=self.analyzer,
            collections=self.collections,
            tokens_total=self.tokens_total,
        )

    @property
    def lines(self) -> LineBook:
        """The line book as it is (`line_book` brings it up to date first)."""
        return self._lines

    def line_book(self) -> LineBook:
        """The session's line book, brought up to its live chunks."""
        self._lines.sync(self.index.version, self.entries.values())
        return self._lines

    def book_as_fresh(self) -> bool:
        """Whether the line book marks quoted the slots a book filled from the
        live chunks alone (a restart's) would: one that kept the marks of a
        quoting chunk since gone, or lacks a mark a text changed later would
        have got, makes plans a restart does not. Read from the synced book's
        holders: filling a second book to compare was ~17 ms per 1,000 chunks
        of a close."""
        return self.line_book().quoted_as_fresh()

    def explicit_targets(self, chunk: Chunk) -> tuple[str, ...]:
        targets = [*chunk.references, *chunk.summary_of]
        if chunk.parent_id:
            targets.append(chunk.parent_id)
        return tuple(dict.fromkeys(t for t in targets if t != chunk.id))

    # ---- writing -------------------------------------------------------

    def upsert(self, chunk: Chunk, tokens: int, now_ms: int) -> UpsertStatus:
        """Add or replace one chunk (text already counted as `tokens`)."""
        chunk = _with_tokens(chunk, tokens)
        old = self.entries.get(chunk.id)
        if old is not None and old.chunk == chunk:
            return UpsertStatus.UNCHANGED
        if old is not None:
            self._relink(old, Entry(chunk, old.slot, tokens, old.born, old.last_touched_ms))
            return UpsertStatus.UPDATED
        slot = self._slot_for(chunk.id)
        self._link(Entry(chunk, slot, tokens, self.collections, now_ms), index_text=True)
        return UpsertStatus.ADDED

    def staged(self, chunks: Sequence[Chunk], tokens: Sequence[int], now_ms: int) -> list[Entry]:
        """The entries `upsert` would make of chunks that change, without changing
        anything: new ids get the slots `restore_entry` gives them in this order."""
        entries: list[Entry] = []
        slots = self.slots_for([c.id for c in chunks if c.id not in self.entries])
        for chunk, count in zip(chunks, tokens, strict=True):
            chunk = _with_tokens(chunk, count)
            old = self.entries.get(chunk.id)
            if old is None:
                entries.append(Entry(chunk, slots[chunk.id], count, self.collections, now_ms))
            elif old.chunk != chunk:
                entries.append(Entry(chunk, old.slot, count, old.born, old.last_touched_ms))
        return entries

    def slots_for(self, chunk_ids: Sequence[str]) -> dict[str, int]:
        """The slot each id gets back from `restore_entry`, in this order: its own
        when it was ever here, else the next new ones."""
        slots: dict[str, int] = {}
        fresh = self.n_slots
        for chunk_id in chunk_ids:
            known = self.slot_by_id.get(chunk_id)
            if known is None:
                known, fresh = fresh, fresh + 1
            slots[chunk_id] = known
        return slots

    def restore_entry(self, entry: Entry, doc: DocTerms | None = None) -> None:
        """Put back a chunk with its bookkeeping (restart, restore, a committed
        change); `doc`, when given, is its text's terms (not analysed again)."""
        old = self.entries.get(entry.chunk.id)
        if old is not None:
            new = replace(entry, slot=old.slot) if entry.slot != old.slot else entry
            self._relink(old, new, doc)
            return
        slot = self._slot_for(entry.chunk.id, wanted=entry.slot)
        self._link(replace(entry, slot=slot) if slot != entry.slot else entry, True, doc)

    def restore_entries(
        self, entries: Sequence[Entry], docs: Sequence[DocTerms | None] | None = None
    ) -> None:
        """`restore_entry` of each entry in order (`docs[i]` the terms of
        `entries[i]`'s text, or None), the new chunks' texts analysed and
        indexed together: an append of a thousand new chunks does per batch
        what one chunk does per chunk."""
        wanted = [None] * len(entries) if docs is None else docs
        slots: list[int] = []
        known: list[DocTerms | None] = []
        texts: list[str] = []
        for entry, doc in zip(entries, wanted, strict=True):
            if entry.chunk.id in self.entries:
                self._index_new(slots, known, texts)
                self.restore_entry(entry, doc)
                continue
            slot = self._slot_for(entry.chunk.id, wanted=entry.slot)
            self._link(replace(entry, slot=slot) if slot != entry.slot else entry, False)
            slots.append(slot)
            known.append(doc)
            texts.append(entry.chunk.text)
        self._index_new(slots, known, texts)

    def restore_kept(
        self, entries: Sequence[Entry], index: BM25Index | Callable[[], BM25Index]
    ) -> None:
        """Put back a stored session's chunks, in slot order at their own slots,
        with `index` kept of exactly their texts there (text/indexblob.py), or
        what reads it on the index's first use (a restart whose kept plan may
        answer its first call needs none): nothing is indexed. Into a session
        holding nothing (a restart's)."""
        slots = [e.slot for e in entries]
        if self.slot_ids:
            raise ValueError("restore_kept: the session already holds chunks")
        if slots and (slots[0] < 0 or any(a >= b for a, b in pairwise(slots))):
            raise ValueError("restore_kept: slots not increasing")
        # the slots at once, not a `_slot_for` per chunk (~5 ms per 1,000)
        self.slot_ids = [""] * (slots[-1] + 1 if slots else 0)
        for entry in entries:
            self.slot_ids[entry.slot] = entry.chunk.id
            self.slot_by_id[entry.chunk.id] = entry.slot
        if len(self.slot_by_id) != len(entries):
            raise ValueError("restore_kept: a chunk id twice")
        self.columns.ensure(self.n_slots)
        self._link_all(entries)
        if isinstance(index, BM25Index):
            self.index = index
        else:
            self._unread = index

    def _index_new(self, slots: list[int], docs: list[DocTerms | None], texts: list[str]) -> None:
        """Index the texts of chunks just linked at `slots` (analysing those
        without known terms), then forget them."""
        for i, doc in enumerate(docs):
            if doc is None:
                docs[i] = DocTerms.of(self.analyzer.terms(texts[i]))
        ready = [doc for doc in docs if doc is not None]
        self.index.set_docs_counts(slots, [d.terms for d in ready], [d.counts for d in ready])
        slots.clear()
        docs.clear()
        texts.clear()

    def remove(self, chunk_id: str) -> Entry | None:
        entry = self.entries.get(chunk_id)
        if entry is not None:
            self._unlink(entry)
        return entry

    def needs_compaction(self) -> bool:
        """Dead slots outnumber live ones (and are many): a long session that keeps
        stashing would otherwise hold a slot per chunk it ever saw."""
        dead = self.n_slots - len(self.entries)
        return dead > max(COMPACT_MIN_DEAD_SLOTS, len(self.entries))

    def compacted(self) -> list[Entry]:
        """The live entries renumbered 0, 1, ... in prompt order."""
        live = self.live_slots().tolist()
        return [replace(self.entries[self.slot_ids[s]], slot=i) for i, s in enumerate(live)]

    def compact(self, entries: Sequence[Entry]) -> None:
        """Rebuild holding exactly `entries` (from `compacted`): the ids of dead
        chunks are forgotten, so one restored later comes back at the end, as it
        does after a restart."""
        version = self.index.version
        self._clear()
        self.restore_entries(entries)
        self.index.advance_version(version)

    # ---- internals -----------------------------------------------------

    def _slot_for(self, chunk_id: str, wanted: int = -1) -> int:
        known = self.slot_by_id.get(chunk_id)
        if known is not None:
            return known
        if wanted >= self.n_slots:
            # a restart or import brings slots back with gaps: keep their order
            self.slot_ids.extend([""] * (wanted - self.n_slots + 1))
            slot = wanted
        elif wanted >= 0 and self.slot_ids[wanted] == "":
            slot = wanted
        else:
            self.slot_ids.append("")
            slot = self.n_slots - 1
        self.slot_ids[slot] = chunk_id
        self._frozen_slot_ids = None
        self.slot_by_id[chunk_id] = slot
        self.columns.ensure(self.n_slots)
        return slot

    def _relink(self, old: Entry, new: Entry, doc: DocTerms | None = None) -> None:
        """Replace a chunk at its slot; the same text keeps its indexed terms
        (a changed flag, tag or touch time is not worth a re-analysis)."""
        same_text = old.chunk.text == new.chunk.text
        self._unlink(old, keep_text=same_text)
        self._link(new, not same_text, doc)

    def _link(self, entry: Entry, index_text: bool, doc: DocTerms | None = None) -> None:
        """Hold `entry` at its slot; `index_text` False when the slot's document
        in the index already is this text, `doc` its terms when known."""
        chunk, slot, cols = entry.chunk, entry.slot, self.columns
        self.revision += 1
        self.entries[chunk.id] = entry
        cols.alive[slot] = True
        for name, of in Columns.OF_ENTRY:
            getattr(cols, name)[slot] = of(entry)
        cols.refcount[slot] = len(self.in_edges.get(chunk.id, ()))
        self.tokens_total += entry.tokens
        if index_text and doc is not None:
            self.index.set_doc_counts(slot, doc.terms, doc.counts)
        elif index_text:
            self.index.set_doc(slot, self.analyzer.terms(chunk.text))
        self.hubs.add(chunk, slot)
        if chunk.embedding:
            self.embedding_dim = len(chunk.embedding)
            self.embeddings[slot] = np.asarray(chunk.embedding, dtype=np.float32)
        if chunk.parent_id and chunk.parent_id != chunk.id:
            self.parent_of[chunk.id] = chunk.parent_id
        targets = self.explicit_targets(chunk)
        self.out_edges[chunk.id] = targets
        for target in targets:
            self.in_edges[target].add(chunk.id)
            self._recount(target)

    def _link_all(self, entries: Sequence[Entry]) -> None:
        """`_link` of each entry (its text indexed already) into a session holding
        none: the columns filled as whole arrays, not a numpy store per field and
        chunk (~2 ms per 1,000 chunks of a restart)."""
        chunks = [entry.chunk for entry in entries]
        slots = np.fromiter((entry.slot for entry in entries), np.intp, len(entries))
        cols = self.columns
        cols.alive[slots] = True
        for name, of in Columns.OF_ENTRY:
            getattr(cols, name)[slots] = list(map(of, entries))
        self.revision += len(entries)
        self.tokens_total += int(cols.tokens[slots].sum())
        add_hub, in_edges = self.hubs.add, self.in_edges
        for entry, chunk in zip(entries, chunks, strict=True):
            self.entries[chunk.id] = entry
            add_hub(chunk, entry.slot)
            if chunk.embedding:
                self.embedding_dim = len(chunk.embedding)
                self.embeddings[entry.slot] = np.asarray(chunk.embedding, dtype=np.float32)
            if chunk.parent_id and chunk.parent_id != chunk.id:
                self.parent_of[chunk.id] = chunk.parent_id
            targets = self.explicit_targets(chunk)
            self.out_edges[chunk.id] = targets
            for target in targets:
                in_edges[target].add(chunk.id)
        # each chunk's count once all are linked, as `_recount` leaves it
        cols.refcount[slots] = [len(in_edges.get(chunk.id, ())) for chunk in chunks]

    def _unlink(self, entry: Entry, *, keep_text: bool = False) -> None:
        """Release `entry`'s slot; `keep_text` leaves its document in the index
        (the same text comes back at once)."""
        chunk, slot = entry.chunk, entry.slot
        self.revision += 1
        del self.entries[chunk.id]
        self.columns.alive[slot] = False
        self.tokens_total -= entry.tokens
        if not keep_text:
            self.index.remove_doc(slot)
        self.hubs.discard(chunk, slot)
        self.embeddings.pop(slot, None)
        self.parent_of.pop(chunk.id, None)
        if not self.embeddings:
            self.embedding_dim = 0
        for target in self.out_edges.pop(chunk.id, ()):
            sources = self.in_edges.get(target)
            if sources is not None:
                sources.discard(chunk.id)
                if not sources:
                    del self.in_edges[target]
            self._recount(target)

    def _recount(self, target: str) -> None:
        entry = self.entries.get(target)
        if entry is not None:
            self.columns.refcount[entry.slot] = len(self.in_edges.get(target, ()))


_CHUNK_FIELDS = attrgetter(*(f.name for f in fields(Chunk) if f.init))


def _with_tokens(chunk: Chunk, tokens: int) -> Chunk:
    """A copy of `chunk` holding `tokens` (dataclasses.replace, five times faster:
    it runs once per appended chunk)."""
    copy = Chunk(*_CHUNK_FIELDS(chunk))
    copy.tokens = tokens
    return copy
