"""Incremental Okapi BM25 whose scores equal rank_bm25.BM25Okapi's.

Documents live at caller-chosen slots and can be added, replaced and removed
one at a time; postings, document frequencies, the document count and the
total length change in place, nothing is rebuilt.

Layout (memory is about 12 bytes per distinct term of a document):
- per term, one `array('Q')` of postings `(doc uid << 32) | term frequency`,
  appended to as documents arrive;
- per slot, the document's distinct term ids (to undo its frequencies on
  removal), its length, and its uid. A uid names one version of a document,
  so a removed or replaced version's postings go stale in place and are
  dropped lazily (when a term's postings are next read, or by a compaction
  once stale postings outnumber live ones).

Scoring is vectorised: each query term's live postings are cached as numpy
arrays (slots, frequencies) until that term changes, and one bincount sums
the contributions, in query order, as BM25Okapi does.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, pairwise
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
SlotArray = npt.NDArray[np.int32]
TfArray = npt.NDArray[np.uint32]

_TF_BITS = 32
_TF_MASK = (1 << _TF_BITS) - 1
_UID_LIMIT = 1 << 32  # uids are renumbered (compaction) before they outgrow a posting
_MIN_CAPACITY = 64
_COMPACT_FLOOR = 1 << 16  # stale postings tolerated before a compaction is worth it
_MIN_CACHED_POSTINGS = 4096  # decoded query postings kept: this, or a quarter of all
_MAX_SLOT = (1 << 31) - 1  # decoded slots are int32
# Below this many documents a batch is indexed one at a time: numpy's ~150 us
# per batch outweighs the ~6 us per document it saves (an agent's step appends 2-3).
BULK_MIN_DOCS = 32


_Array = TypeVar("_Array", IntArray, FloatArray)
_Params = tuple[float, float, float]
_Bytes = tuple[bytes, ...]  # the numpy arrays' bytes in `BM25Index.state`
IndexState = tuple[_Params, list[str], bytes, bytes, _Bytes, list[bytes | None], tuple[int, ...]]
_ARRAYS = ["_df", "_term_changed", "_slot_uid", "_doc_len", "_uid_slot"]  # numpy, by term or slot
_COUNTERS: tuple[str, ...] = ("_next_uid", "_docs", "_total_len", "_end", "_live_postings")
_COUNTERS += ("_stale_postings", "_version")


def _grown(values: _Array, size: int, fill: int) -> _Array:
    """`values` copied into an array of at least `size` (doubling), padded with `fill`."""
    if size <= len(values):
        return values
    grown: _Array = np.full(max(size, 2 * len(values), _MIN_CAPACITY), fill, dtype=values.dtype)
    grown[: len(values)] = values
    return grown


class _TermIds(dict[str, int]):
    """term -> id; an unseen term gets the next id and an empty postings list."""

    def __init__(self, postings: list[array[int]]) -> None:
        super().__init__()
        self._postings = postings

    def __missing__(self, term: str) -> int:
        tid = len(self._postings)
        self._postings.append(array("Q"))
        self[term] = tid
        return tid


class TermIndex(Protocol):
    """What readers of a session's index may call (the writer is the session)."""

    @property
    def version(self) -> int: ...

    def document_frequency(self, term: str) -> int: ...

    def holders(self, terms: Iterable[str]) -> frozenset[int]: ...

    def scores(self, query_terms: Sequence[str], n_slots: int) -> FloatArray: ...

    def feedback_scores(
        self, slots: Sequence[int], query_terms: Sequence[str], count: int, n_slots: int
    ) -> FloatArray: ...


class BM25Index:
    """Okapi BM25 over documents at integer slots, updated in place.

    `scores(query, n)` equals `rank_bm25.BM25Okapi(corpus, k1, b, epsilon)
    .get_scores(query)` where corpus is the live documents in slot order,
    spread back to their slots (0 for empty slots): idf is
    log(N - df + 0.5) - log(df + 0.5), a negative idf is replaced by epsilon
    times the mean idf over the vocabulary, avgdl counts every live document
    (empty ones too), and a repeated query term counts each time.

    Not thread-safe: callers serialise access (the registry holds the
    session lock).
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        self._postings: list[array[int]] = []
        self._term_ids = _TermIds(self._postings)
        self._df: IntArray = np.zeros(0, dtype=np.int64)  # by term id
        self._term_changed: IntArray = np.zeros(0, dtype=np.int64)  # version, by term id
        self._slot_uid: IntArray = np.zeros(0, dtype=np.int64)  # -1: empty slot
        self._doc_len: FloatArray = np.zeros(0, dtype=np.float64)
        self._doc_terms: list[bytes | None] = []  # distinct term ids (uint32), by slot
        self._uid_slot: IntArray = np.zeros(0, dtype=np.int64)  # -1: stale version
        self._next_uid = 0
        self._docs = 0
        self._total_len = 0
        self._end = 0  # 1 + the highest live slot
        self._live_postings = 0
        self._stale_postings = 0
        self._version = 0
        self._stats: tuple[int, float, FloatArray] | None = None  # version, eps idf, norm
        # term id -> (its version, live slots, their frequencies), least recent first
        self._cache: dict[int, tuple[int, SlotArray, TfArray]] = {}
        self._cached_postings = 0

    def __len__(self) -> int:
        return self._docs

    @property
    def version(self) -> int:
        """Bumps on every change of a document (set or removed)."""
        return self._version

    def advance_version(self, past: int) -> None:
        """Continue another index's versions (a rebuild): a cache keyed by a version
        of the old index must never match one of this index."""
        self._version = max(self._version, past) + 1

    # ---- updates ---------------------------------------------------------

    def set_doc(self, slot: int, terms: Sequence[str]) -> None:
        """Index `terms` as the document at `slot`, replacing any document there."""
        counted = Counter(terms)
        self.set_doc_counts(slot, list(counted), list(counted.values()))

    def set_doc_counts(self, slot: int, terms: Sequence[str], counts: Sequence[int]) -> None:
        """`set_doc` of a document whose distinct `terms`, in first-occurrence
        order, occur `counts` times (a restart reads them from the store)."""
        if not 0 <= slot <= _MAX_SLOT:
            raise ValueError(f"slot: must be in [0, {_MAX_SLOT}] (got {slot!r})")
        if slot < len(self._slot_uid) and self._slot_uid[slot] >= 0:
            self.remove_doc(slot)
        if self._next_uid >= _UID_LIMIT:
            self._compact()
        tids = list(map(self._term_ids.__getitem__, terms))
        uid = self._next_uid
        self._next_uid += 1
        key = uid << _TF_BITS
        postings = self._postings
        for tid, tf in zip(tids, counts, strict=True):
            postings[tid].append(key | tf)
        length = sum(counts)

        self._version += 1
        self._ensure_capacity(slot, uid)
        tid_array = np.array(tids, dtype=np.int64)
        self._df[tid_array] += 1
        self._term_changed[tid_array] = self._version
        self._slot_uid[slot] = uid
        self._uid_slot[uid] = slot
        self._doc_len[slot] = length
        self._doc_terms[slot] = tid_array.astype(np.uint32).tobytes()
        self._docs += 1
        self._total_len += length
        self._end = max(self._end, slot + 1)
        self._live_postings += len(tids)

    def set_docs_counts(
        self, slots: Sequence[int], terms: Sequence[Sequence[str]], counts: Sequence[Sequence[int]]
    ) -> None:
        """`set_doc_counts(slot, t, c)` for each of `zip(slots, terms, counts)`
        in order, in bulk when every slot is empty (an append of new chunks)
        and the batch has at least `BULK_MIN_DOCS` documents:
        the same term ids, postings in the same order, frequencies, lengths and
        versions, with numpy doing per batch what the one-document path does
        per document."""
        n = len(slots)
        if not n == len(terms) == len(counts):
            raise ValueError(
                f"slots, terms, counts: lengths differ ({n}, {len(terms)}, {len(counts)})"
            )
        sizes = list(map(len, terms))
        if sizes != list(map(len, counts)):
            raise ValueError("terms, counts: a document's terms and counts differ in length")
        if n < BULK_MIN_DOCS or not self._bulk_fits(slots):
            for slot, doc_terms, doc_counts in zip(slots, terms, counts, strict=True):
                self.set_doc_counts(slot, doc_terms, doc_counts)
            return
        flat_terms = list(chain.from_iterable(terms))
        term_ids = self._term_ids
        fresh = [t for t in dict.fromkeys(flat_terms) if t not in term_ids]
        first = len(self._postings)
        term_ids.update(zip(fresh, range(first, first + len(fresh)), strict=True))
        self._postings.extend(array("Q") for _ in fresh)
        total = len(flat_terms)
        tids = np.fromiter(map(term_ids.__getitem__, flat_terms), dtype=np.int64, count=total)
        tfs = np.fromiter(chain.from_iterable(counts), dtype=np.uint64, count=total)

        uid0, version0 = self._next_uid, self._version
        uids = np.arange(uid0, uid0 + n, dtype=np.int64)
        doc_of = np.repeat(np.arange(n, dtype=np.int64), sizes)
        keys = (uids[doc_of].astype(np.uint64) << np.uint64(_TF_BITS)) | tfs
        order = np.argsort(tids, kind="stable")  # each term's postings stay in document order
        sorted_tids = tids[order]
        packed = memoryview(keys[order].tobytes())
        starts = np.flatnonzero(np.diff(sorted_tids, prepend=-1))  # each term's first
        edges = np.append(starts, len(sorted_tids)).tolist()
        postings, width = self._postings, keys.itemsize
        for tid, start, end in zip(sorted_tids[starts].tolist(), edges, edges[1:], strict=False):
            postings[tid].frombytes(packed[start * width : end * width])

        bounds = np.concatenate(([0], np.cumsum(sizes)))
        lengths = np.concatenate(([0], np.cumsum(tfs, dtype=np.int64)))
        doc_lengths = lengths[bounds[1:]] - lengths[bounds[:-1]]
        slot_array = np.array(slots, dtype=np.int64)
        self._next_uid += n
        self._version += n
        self._ensure_capacity(int(slot_array.max()), uid0 + n - 1)
        self._df += np.bincount(tids, minlength=len(self._df))
        np.maximum.at(self._term_changed, tids, version0 + 1 + doc_of)
        self._slot_uid[slot_array] = uids
        self._uid_slot[uids] = slot_array
        self._doc_len[slot_array] = doc_lengths
        distinct = tids.astype(np.uint32).tobytes()
        for slot, start, end in zip(slots, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            self._doc_terms[slot] = distinct[4 * start : 4 * end]
        self._docs += n
        self._total_len += int(lengths[-1])
        self._end = max(self._end, int(slot_array.max()) + 1)
        self._live_postings += len(tids)

    def _bulk_fits(self, slots: Sequence[int]) -> bool:
        """Whether `set_docs_counts` may take the bulk path: some slots, all
        distinct, valid and empty, and uids to spare (no removal or compaction
        would happen between the documents)."""
        if not slots or len(set(slots)) != len(slots):
            return False
        if min(slots) < 0 or max(slots) > _MAX_SLOT or self._next_uid + len(slots) > _UID_LIMIT:
            return False
        held = [s for s in slots if s < len(self._slot_uid)]
        return not held or bool((self._slot_uid[held] < 0).all())

    def remove_doc(self, slot: int) -> None:
        """Drop the document at `slot`; KeyError when the slot is empty."""
        if not 0 <= slot < len(self._slot_uid) or self._slot_uid[slot] < 0:
            raise KeyError(f"slot: no document at slot {slot!r}")
        doc_terms = self._doc_terms[slot]
        assert doc_terms is not None  # a live slot always has its terms
        tids = np.frombuffer(doc_terms, dtype=np.uint32).astype(np.int64)
        self._version += 1
        self._df[tids] -= 1
        self._term_changed[tids] = self._version
        self._uid_slot[self._slot_uid[slot]] = -1
        self._slot_uid[slot] = -1
        self._docs -= 1
        self._total_len -= int(self._doc_len[slot])
        self._doc_len[slot] = 0.0
        self._doc_terms[slot] = None
        self._live_postings -= len(tids)
        self._stale_postings += len(tids)
        while self._end > 0 and self._slot_uid[self._end - 1] < 0:
            self._end -= 1
        if self._stale_postings > max(self._live_postings, _COMPACT_FLOOR):
            self._compact()

    def _ensure_capacity(self, slot: int, uid: int) -> None:
        terms = len(self._postings)
        self._df = _grown(self._df, terms, 0)
        self._term_changed = _grown(self._term_changed, terms, 0)
        if slot >= len(self._slot_uid):
            self._slot_uid = _grown(self._slot_uid, slot + 1, -1)
            self._doc_len = _grown(self._doc_len, slot + 1, 0)
            self._doc_terms += [None] * (len(self._slot_uid) - len(self._doc_terms))
        self._uid_slot = _grown(self._uid_slot, uid + 1, -1)

    def _compact(self) -> None:
        """Drop stale postings and unused terms; renumber uids and term ids."""
        live_slots = np.flatnonzero(self._slot_uid >= 0)
        new_uid = np.full(len(self._uid_slot), -1, dtype=np.int64)
        new_uid[self._slot_uid[live_slots]] = np.arange(len(live_slots))
        used = [(term, tid) for term, tid in self._term_ids.items() if self._df[tid] > 0]
        new_tid = np.full(len(self._postings), -1, dtype=np.int64)
        new_tid[[tid for _, tid in used]] = np.arange(len(used))

        postings: list[array[int]] = []
        for _, tid in used:
            packed = np.frombuffer(self._postings[tid], dtype=np.uint64)
            uids = new_uid[(packed >> _TF_BITS).astype(np.intp)]
            live = uids >= 0
            renumbered = (uids[live].astype(np.uint64) << _TF_BITS) | (packed[live] & _TF_MASK)
            postings.append(array("Q", renumbered.tobytes()))
        self._postings[:] = postings
        self._term_ids.clear()
        self._term_ids.update((term, i) for i, (term, _) in enumerate(used))
        self._df = self._df[[tid for _, tid in used]]
        self._term_changed = np.zeros(len(used), dtype=np.int64)
        for slot in live_slots:
            doc_terms = self._doc_terms[slot]
            assert doc_terms is not None
            old = np.frombuffer(doc_terms, dtype=np.uint32)
            self._doc_terms[slot] = new_tid[old].astype(np.uint32).tobytes()
        self._slot_uid[live_slots] = np.arange(len(live_slots))
        self._uid_slot = live_slots.astype(np.int64)
        self._next_uid = len(live_slots)
        self._stale_postings = 0
        self._version += 1
        self._cache.clear()
        self._cached_postings = 0

    # ---- scoring ---------------------------------------------------------

    def document_frequency(self, term: str) -> int:
        """How many live documents hold `term`."""
        tid = self._term_ids.get(term)
        return 0 if tid is None else int(self._df[tid])

    def holders(self, terms: Iterable[str]) -> frozenset[int]:
        """The slots of the live documents holding any of `terms` (a plan asks
        for its few rare query terms: a text none of them is in has no line
        holding one, and is not read for them)."""
        get = self._term_ids.get
        found: set[int] = set()
        for tid in [tid for t in terms if (tid := get(t)) is not None]:
            found.update(self._live_postings_of(tid)[0].tolist())
        return frozenset(found)

    def scores(self, query_terms: Sequence[str], n_slots: int) -> FloatArray:
        """BM25 score of every slot for the query (float64, length `n_slots`,
        0 for empty slots); `n_slots` must exceed every live slot."""
        get = self._term_ids.get
        return self._scores([tid for t in query_terms if (tid := get(t)) is not None], n_slots)

    def feedback_scores(
        self, slots: Sequence[int], query_terms: Sequence[str], count: int, n_slots: int
    ) -> FloatArray:
        """BM25 of the expansion of a query by pseudo-relevance feedback: the
        `count` terms of the documents at `slots` (the query's top hits) that
        the query lacks, fewest documents holding them first, then most of
        `slots` holding them; terms one document alone holds are left out."""
        parts = [self._doc_terms[s] for s in slots if s < len(self._doc_terms)]
        held = [np.frombuffer(p, dtype=np.uint32) for p in parts if p is not None]
        if not held:
            return np.zeros(n_slots, dtype=np.float64)
        tids, hits = np.unique(np.concatenate(held).astype(np.int64), return_counts=True)
        get = self._term_ids.get
        asked = {get(t) for t in query_terms}
        df = self._df[tids]
        new = np.fromiter((t not in asked for t in tids.tolist()), dtype=bool, count=len(tids))
        wanted = (df > 1) & new
        tids, hits, df = tids[wanted], hits[wanted], df[wanted]
        chosen = tids[np.lexsort((tids, -hits, df))[:count]]
        return self._scores(chosen.tolist(), n_slots)

    def _scores(self, tids: Sequence[int], n_slots: int) -> FloatArray:
        if n_slots < self._end:
            raise ValueError(
                f"n_slots: must exceed the highest live slot {self._end - 1} (got {n_slots!r})"
            )
        if self._total_len == 0:
            return np.zeros(n_slots, dtype=np.float64)  # no live document holds a term
        eps_idf, norm = self._corpus_stats()
        slot_parts: list[SlotArray] = []
        tf_parts: list[TfArray] = []
        idfs: list[float] = []
        for tid in tids:
            if self._df[tid] == 0:
                continue  # outside the vocabulary: idf 0
            df = int(self._df[tid])
            slots, tf = self._live_postings_of(tid)
            slot_parts.append(slots)
            tf_parts.append(tf)
            idfs.append(self._idf(df) if 2 * df <= self._docs else eps_idf)
        if not idfs:
            return np.zeros(n_slots, dtype=np.float64)
        slots = np.concatenate(slot_parts)
        tf = np.concatenate(tf_parts, dtype=np.float64)
        idf = np.repeat(np.array(idfs), [len(s) for s in slot_parts])
        # the same expression as BM25Okapi.get_scores, so the floats agree
        contribution = idf * (tf * (self.k1 + 1) / (tf + norm[slots]))
        return np.bincount(slots, weights=contribution, minlength=n_slots).astype(
            np.float64, copy=False
        )

    def _idf(self, df: int) -> float:
        return math.log(self._docs - df + 0.5) - math.log(df + 0.5)

    def _corpus_stats(self) -> tuple[float, FloatArray]:
        """epsilon * mean idf over the vocabulary, and each slot's length
        normaliser k1 * (1 - b + b * len / avgdl); cached until the next update."""
        if self._stats is not None and self._stats[0] == self._version:
            return self._stats[1], self._stats[2]
        docs = self._docs
        docs_per_df = np.bincount(self._df[: len(self._postings)])
        df = np.flatnonzero(docs_per_df[1:]) + 1
        vocabulary = int(docs_per_df[df].sum())
        idf_sum = float(np.dot(docs_per_df[df], np.log(docs - df + 0.5) - np.log(df + 0.5)))
        eps_idf = self.epsilon * idf_sum / vocabulary if vocabulary else 0.0
        avgdl = self._total_len / docs
        norm = self.k1 * (1 - self.b + self.b * self._doc_len[: self._end] / avgdl)
        self._stats = (self._version, eps_idf, norm)
        return eps_idf, norm

    def _live_postings_of(self, tid: int) -> tuple[SlotArray, TfArray]:
        """(slots, term frequencies) of the live documents holding term `tid`."""
        changed = int(self._term_changed[tid])
        cached = self._cache.pop(tid, None)
        if cached is not None:
            self._cached_postings -= len(cached[1])
        if cached is None or cached[0] != changed:
            cached = (changed, *self._read_postings(tid))
        while self._cache and self._cached_postings > max(
            _MIN_CACHED_POSTINGS, self._live_postings // 4
        ):
            _, slots, _ = self._cache.pop(next(iter(self._cache)))  # least recently used
            self._cached_postings -= len(slots)
        self._cache[tid] = cached
        self._cached_postings += len(cached[1])
        return cached[1], cached[2]

    def _read_postings(self, tid: int) -> tuple[SlotArray, TfArray]:
        """Decode term `tid`'s postings, dropping (for good) those of stale versions."""
        packed = np.frombuffer(self._postings[tid], dtype=np.uint64)
        slots = self._uid_slot[(packed >> _TF_BITS).astype(np.intp)]
        live = slots >= 0
        if not live.all():
            packed = packed[live]  # a copy: the postings array may grow again
            slots = slots[live]
            self._stale_postings -= len(live) - len(packed)
            self._postings[tid] = array("Q", packed.tobytes())
        tf = (packed & _TF_MASK).astype(np.uint32)
        del packed
        return slots.astype(np.int32), tf

    def state(self) -> IndexState:
        """What a scoring or an update reads, as plain data (text/indexblob.py keeps it)."""
        terms = list(self._term_ids)  # ids are given in insertion order, from 0
        sizes = array("Q", map(len, self._postings)).tobytes()
        joined = b"".join(map(array.tobytes, self._postings))
        arrays = tuple(getattr(self, name).tobytes() for name in _ARRAYS)
        counters = tuple(getattr(self, name) for name in _COUNTERS)
        params = (self.k1, self.b, self.epsilon)
        return (params, terms, sizes, joined, arrays, self._doc_terms, counters)

    @classmethod
    def from_state(cls, state: IndexState) -> BM25Index:
        """The index whose `state` this is; ValueError when its parts do not fit together."""
        params, terms, sizes, joined, arrays, doc_terms, counters = state
        index, lengths, flat = cls(*params), array("Q"), array("Q")
        lengths.frombytes(sizes)
        flat.frombytes(joined)  # one read, then a slice per term: ~0.6 ms less per 4,000
        ends = list(accumulate(lengths, initial=0))
        index._postings.extend(flat[a:b] for a, b in pairwise(ends))
        at = 8 * ends[-1]
        index._term_ids.update(zip(terms, range(len(terms)), strict=True))
        for name, data in zip(_ARRAYS, arrays, strict=True):  # the new index's dtypes
            setattr(index, name, np.frombuffer(data, dtype=getattr(index, name).dtype).copy())
        fits = len(index._term_ids) == len(terms) == len(lengths) and at == len(joined)
        fits = fits and len(terms) <= len(index._df) == len(index._term_changed)
        if not fits or not len(index._slot_uid) == len(index._doc_len) == len(doc_terms):
            raise ValueError("terms not distinct, or arrays of lengths that do not fit")
        index._doc_terms = list(doc_terms)
        for name, value in zip(_COUNTERS, counters, strict=True):
            setattr(index, name, int(value))
        return index

    def memory_bytes(self) -> int:
        """Bytes this index holds: postings, vocabulary, per-slot and per-term
        arrays and the cached query postings (Python object headers included)."""
        total = sys.getsizeof(self._postings) + sum(map(sys.getsizeof, self._postings))
        total += sys.getsizeof(self._term_ids) + sum(map(sys.getsizeof, self._term_ids))
        total += sys.getsizeof(self._doc_terms)
        total += sum(sys.getsizeof(d) for d in self._doc_terms if d is not None)
        total += sum(int(getattr(self, name).nbytes) for name in _ARRAYS)
        total += self._stats[2].nbytes if self._stats is not None else 0
        total += sys.getsizeof(self._cache)
        total += sum(s.nbytes + tf.nbytes for _, s, tf in self._cache.values())
        return total
