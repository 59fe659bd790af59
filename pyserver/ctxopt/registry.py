"""Sessions of ordered chunks with incremental indexes.

A session stores its chunks by *slot*: the position a chunk was first appended
at. Slots are never reused, so slot order is prompt order and the per-slot
numpy columns let scoring and planning run vectorised. Removal marks a slot
dead; re-appending or restoring an id brings it back into its old slot.

Besides the BM25 index the session keeps the reference graph incrementally:
explicit edges (`references`, `parent_id`, `summary_of`) with back-references
and refcounts, and implicit hubs (same `file_path`, shared tags, same
`topic_id`, same `group_id`) that reachability walks through without ever
materialising the quadratic set of pairwise edges.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from ctxopt.model import Chunk, UpsertStatus
from ctxopt.scoring.analyzer import Analyzer
from ctxopt.scoring.bm25 import BM25Index
from ctxopt.shrink import stash_id

_INITIAL_CAPACITY = 64
# Below this many dead slots, their memory costs less than rebuilding the indexes.
COMPACT_MIN_DEAD_SLOTS = 4096


@dataclass(slots=True)
class Entry:
    """A chunk as the registry holds it, with its GC bookkeeping."""

    chunk: Chunk  # `tokens` filled in with the count
    slot: int
    tokens: int
    born: int = 0  # the session's collection count when the chunk arrived
    last_touched_ms: int = 0
    origin: str = ""  # stash id of the original while the text is an excerpt or placeholder
    _own_stash_id: str = ""

    def stash_id(self) -> str:
        """Where this chunk's original is (or would be) stashed: `origin` while the
        text is an excerpt, else the id of this text (hashed once per entry)."""
        if self.origin:
            return self.origin
        if not self._own_stash_id:
            self._own_stash_id = stash_id(self.chunk.id, self.chunk.text)
        return self._own_stash_id


def _grow(array: npt.NDArray[np.generic], size: int) -> npt.NDArray[np.generic]:
    grown = np.zeros(max(size, 2 * len(array)), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


class Columns:
    """Per-slot numpy columns the scorer and planner read in bulk."""

    def __init__(self) -> None:
        n = _INITIAL_CAPACITY
        self.alive = np.zeros(n, dtype=bool)
        self.tokens = np.zeros(n, dtype=np.int64)
        self.turn = np.zeros(n, dtype=np.int64)
        self.created_ms = np.zeros(n, dtype=np.int64)
        self.kind = np.zeros(n, dtype=np.int8)
        self.role = np.zeros(n, dtype=np.int8)
        self.policy = np.zeros(n, dtype=np.int8)
        self.pinned = np.zeros(n, dtype=bool)
        self.boost = np.zeros(n, dtype=np.float64)
        self.born = np.zeros(n, dtype=np.int64)
        self.refcount = np.zeros(n, dtype=np.int64)
        self.lines = np.zeros(n, dtype=np.int64)

    NAMES = (
        "alive",
        "tokens",
        "turn",
        "created_ms",
        "kind",
        "role",
        "policy",
        "pinned",
        "boost",
        "born",
        "refcount",
        "lines",
    )

    def ensure(self, size: int) -> None:
        if size <= len(self.alive):
            return
        for name in self.NAMES:
            setattr(self, name, _grow(getattr(self, name), size))

    def frozen(self, size: int) -> Columns:
        """Read-only views of the first `size` slots (no copy)."""
        view = Columns.__new__(Columns)
        for name in self.NAMES:
            column = getattr(self, name)[:size]
            column.flags.writeable = False
            setattr(view, name, column)
        return view


@dataclass(slots=True)
class Hubs:
    """Implicit links: chunks sharing a file, tag, topic or group."""

    by_file: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_tag: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_topic: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_group: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_task: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))

    def keys_of(self, chunk: Chunk) -> Iterator[tuple[dict[str, set[int]], str]]:
        """Each hub this chunk belongs to, with its key there."""
        if chunk.file_path:
            yield self.by_file, chunk.file_path
        for tag in chunk.tags:
            yield self.by_tag, tag
        if chunk.topic_id:
            yield self.by_topic, chunk.topic_id
        if chunk.group_id:
            yield self.by_group, chunk.group_id
        if chunk.task_id:
            yield self.by_task, chunk.task_id

    def add(self, chunk: Chunk, slot: int) -> None:
        for hub, key in self.keys_of(chunk):
            hub[key].add(slot)

    def discard(self, chunk: Chunk, slot: int) -> None:
        for hub, key in self.keys_of(chunk):
            members = hub.get(key)
            if members is not None:
                members.discard(slot)
                if not members:
                    del hub[key]


@dataclass(frozen=True, slots=True)
class SessionView:
    """A session as marking, scoring and planning read it: a snapshot taken
    under the session lock, with read-only columns and mappings. Only the
    registry changes a session (the engine drives it through `Session`)."""

    id: str
    n_slots: int
    live: npt.NDArray[np.intp]  # live slots in prompt order
    columns: Columns  # read-only, `n_slots` long
    slot_ids: Sequence[str]  # slot -> id, kept after removal
    entries: Mapping[str, Entry]
    hubs: Hubs
    out_edges: Mapping[str, tuple[str, ...]]  # explicit edges by id: source -> targets
    in_edges: Mapping[str, AbstractSet[str]]
    parent_of: Mapping[str, str]  # child id -> parent id
    index: BM25Index
    embeddings: Mapping[int, npt.NDArray[np.float32]]
    analyzer: Analyzer  # the one that indexed the text
    collections: int
    tokens_total: int

    def __len__(self) -> int:
        return len(self.entries)

    def live_slots(self) -> npt.NDArray[np.intp]:
        return self.live

    def entry_at(self, slot: int) -> Entry:
        return self.entries[self.slot_ids[slot]]

    def slot_of(self, chunk_id: str) -> int | None:
        entry = self.entries.get(chunk_id)
        return None if entry is None else entry.slot

    def parent_pairs(self) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """(child slots, parent slots) of live chunks whose parent is live."""
        children: list[int] = []
        parents: list[int] = []
        for child, parent in self.parent_of.items():
            parent_entry = self.entries.get(parent)
            if parent_entry is not None:
                children.append(self.entries[child].slot)
                parents.append(parent_entry.slot)
        return np.asarray(children, dtype=np.intp), np.asarray(parents, dtype=np.intp)

    def survived(self) -> npt.NDArray[np.int64]:
        """Collections each slot's chunk has survived: every chunk present now
        survived every collection since it arrived, so nothing is written per
        survivor when a collection promotes them."""
        return np.maximum(self.collections - self.columns.born, 0)


class Session:
    """One conversation's chunks. Callers hold `lock` around every use."""

    def __init__(self, session_id: str, owner: str, analyzer: Analyzer) -> None:
        self.id = session_id
        self.owner = owner
        self.lock = threading.RLock()
        self.collections = 0
        self.analyzer = analyzer  # the one that indexed the text; line links use its terms too
        self._clear()

    def _clear(self) -> None:
        """No chunks and no slots (the collection count stays)."""
        self.embedding_dim = 0
        self.entries: dict[str, Entry] = {}
        self.slot_ids: list[str] = []  # slot -> id, kept after removal
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
        return SessionView(
            self.id,
            n,
            self.live_slots(),
            self.columns.frozen(n),
            self.slot_ids,
            self.entries,
            self.hubs,
            self.out_edges,
            self.in_edges,
            self.parent_of,
            self.index,
            self.embeddings,
            self.analyzer,
            self.collections,
            self.tokens_total,
        )

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

    def restore_entry(self, entry: Entry) -> None:
        """Put back a chunk with its bookkeeping (restart, restore, a committed change)."""
        old = self.entries.get(entry.chunk.id)
        if old is not None:
            self._relink(old, replace(entry, slot=old.slot) if entry.slot != old.slot else entry)
            return
        slot = self._slot_for(entry.chunk.id, wanted=entry.slot)
        self._link(replace(entry, slot=slot) if slot != entry.slot else entry, index_text=True)

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
        for entry in entries:
            self.restore_entry(entry)
        self.index.advance_version(version)

    def touch(self, chunk_id: str, now_ms: int) -> None:
        self.entries[chunk_id].last_touched_ms = now_ms

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
        self.slot_by_id[chunk_id] = slot
        self.columns.ensure(self.n_slots)
        return slot

    def _relink(self, old: Entry, new: Entry) -> None:
        """Replace a chunk at its slot; the same text keeps its indexed terms
        (a changed flag, tag or touch time is not worth a re-analysis)."""
        same_text = old.chunk.text == new.chunk.text
        self._unlink(old, keep_text=same_text)
        self._link(new, index_text=not same_text)

    def _link(self, entry: Entry, *, index_text: bool) -> None:
        """Hold `entry` at its slot; `index_text` False when the slot's document
        in the index already is this text."""
        chunk, slot, cols = entry.chunk, entry.slot, self.columns
        self.entries[chunk.id] = entry
        cols.alive[slot] = True
        cols.tokens[slot] = entry.tokens
        cols.turn[slot] = chunk.turn
        cols.created_ms[slot] = chunk.created_at_ms
        cols.kind[slot] = chunk.kind
        cols.role[slot] = chunk.role
        cols.policy[slot] = chunk.gc_policy
        cols.pinned[slot] = chunk.pinned
        cols.boost[slot] = chunk.boost
        cols.born[slot] = entry.born
        cols.refcount[slot] = len(self.in_edges.get(chunk.id, ()))
        self.tokens_total += entry.tokens
        if index_text:
            self.index.set_doc(slot, self.analyzer.terms(chunk.text))
        self.hubs.add(chunk, slot)
        if chunk.embedding:
            self.embedding_dim = len(chunk.embedding)
            self.embeddings[slot] = np.asarray(chunk.embedding, dtype=np.float32)
        if chunk.parent_id and chunk.parent_id != chunk.id:
            self.parent_of[chunk.id] = chunk.parent_id
        cols.lines[slot] = chunk.text.count("\n") + 1
        targets = self.explicit_targets(chunk)
        self.out_edges[chunk.id] = targets
        for target in targets:
            self.in_edges[target].add(chunk.id)
            self._recount(target)

    def _unlink(self, entry: Entry, *, keep_text: bool = False) -> None:
        """Release `entry`'s slot; `keep_text` leaves its document in the index
        (the same text comes back at once)."""
        chunk, slot = entry.chunk, entry.slot
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


class Registry:
    """All live sessions; sessions lock individually so they never block each other."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def get(self, session_id: str) -> Session | None:
        with self._lock:
            return self._sessions.get(session_id)

    def create(self, session_id: str, owner: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                session = Session(session_id, owner, self.analyzer)
                self._sessions[session_id] = session
            return session

    def put(self, session: Session) -> Session:
        """Insert a loaded session unless another thread got there first."""
        with self._lock:
            return self._sessions.setdefault(session.id, session)

    def drop(self, session_id: str) -> Session | None:
        with self._lock:
            return self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
