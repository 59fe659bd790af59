"""A session's BM25 index, kept whole in the store for the next restart.

A restart rebuilt each session's index from its texts' stored terms: decoding
a term blob per chunk and indexing them (~35 ms per 1,000 chunks, a quarter
of a restart's first plan). When the process closes, each session whose
index changed since it was loaded or kept writes the index as it is
(`LiveSessions.close`): the postings joined in one buffer, the arrays as
bytes, the terms and the counters, a `marshal`-able tuple of plain data (no
pickle: nothing in it names code). A restart reads it back in one piece.

It is trusted only when everything it depends on matches: its format, the
host's byte order (the arrays are native), the analyzer (`TermBlobs`'s
digest of a probe text's terms), the session's live chunks (a digest of each
one's slot and text, in order: any write since, a replaced or imported
session, another session's blob, all differ) and its own checksum, and the
tuple holds together (`index_of`). Anything else decodes to None and the
restart indexes the stored terms as before. The blob is ~17 bytes per
posting (1,000 SWE chunks: ~0.5 MB).

This module and `text/bm25.py` share the index's layout: `state_of` and
`index_of` read and set its fields (bm25.py is at the size limit).

Layout: magic `CI`, format (1 byte), byte order (1 byte: `l` or `b`), the
analyzer's digest (8), the chunks' digest (8), the marshalled state, and a
checksum (8) of everything before it.
"""

from __future__ import annotations

import marshal
import struct
import sys
from array import array
from collections.abc import Iterable

import numpy as np

from ctxopt.text.bm25 import BM25Index
from ctxopt.text.sealed import DIGEST, digest, opened, seal, text_digest

FORMAT = 1
_MAGIC = b"CI"
_HEAD = struct.Struct(f"<2sBc{DIGEST}s{DIGEST}s")
_ORDER = sys.byteorder[:1].encode()
_ARRAYS = (
    ("_df", np.int64),
    ("_term_changed", np.int64),
    ("_slot_uid", np.int64),
    ("_doc_len", np.float64),
    ("_uid_slot", np.int64),
)
# the parameters of a session's index (`Session` makes it with the defaults)
_DEFAULTS = (BM25Index().k1, BM25Index().b, BM25Index().epsilon)
_COUNTERS = (
    "_next_uid",
    "_docs",
    "_total_len",
    "_end",
    "_live_postings",
    "_stale_postings",
    "_version",
)


def chunk_key(slot: int, text: str) -> bytes:
    """What `chunks_digest` reads of one live chunk: its slot and its text's digest."""
    return slot.to_bytes(8, "little") + text_digest(text)


def chunks_digest(keys: Iterable[bytes]) -> bytes:
    """The digest of a session's live chunks: each one's `chunk_key`, by slot."""
    return digest(b"".join(keys))


# parameters, terms, posting counts, postings, arrays, term ids by slot, counters
State = tuple[
    tuple[float, float, float],
    list[str],
    bytes,
    bytes,
    tuple[bytes, ...],
    list[bytes | None],
    tuple[int, ...],
]


def state_of(index: BM25Index) -> State:
    """What a scoring or an update of `index` reads, as plain data: its
    parameters, the terms by id, each term's posting count and the postings
    joined, the arrays' bytes, each slot's term ids, the counters."""
    postings = index._postings
    terms = [""] * len(postings)
    for term, tid in index._term_ids.items():
        terms[tid] = term
    return (
        (index.k1, index.b, index.epsilon),
        terms,
        array("Q", map(len, postings)).tobytes(),
        b"".join(map(array.tobytes, postings)),
        tuple(getattr(index, name).tobytes() for name, _ in _ARRAYS),
        index._doc_terms,
        tuple(getattr(index, name) for name in _COUNTERS),
    )


def index_of(state: object) -> BM25Index:
    """The index whose `state_of` this is; ValueError or TypeError when it does
    not hold together (a mistyped or foreign tuple)."""
    if not isinstance(state, tuple) or len(state) != 7:
        raise TypeError("state: a tuple of 7")
    params, terms, sizes, joined, arrays, doc_terms, counters = state
    index = BM25Index()
    lengths = array("Q")
    lengths.frombytes(sizes)
    if len(terms) != len(lengths) or 8 * sum(lengths) != len(joined):
        raise ValueError("postings: the sizes do not fit")
    if params != _DEFAULTS:
        raise ValueError("parameters: not a session's")
    view, at = memoryview(joined), 0
    for n in lengths:
        postings = array("Q")
        postings.frombytes(view[at : at + 8 * n])
        index._postings.append(postings)
        at += 8 * n
    index._term_ids.update(zip(terms, range(len(terms)), strict=True))
    if len(index._term_ids) != len(terms) or not all(isinstance(t, str) for t in terms):
        raise ValueError("terms: not distinct strings")
    for (name, dtype), data in zip(_ARRAYS, arrays, strict=True):
        setattr(index, name, np.frombuffer(data, dtype=dtype).copy())
    by_term, by_slot = (len(index._df), len(index._term_changed)), len(index._slot_uid)
    if by_term != (by_term[0], by_term[0]) or by_term[0] < len(terms):
        raise ValueError("arrays by term: lengths do not fit")
    if not by_slot == len(index._doc_len) == len(doc_terms):
        raise ValueError("arrays by slot: lengths do not fit")
    if not all(d is None or isinstance(d, bytes) for d in doc_terms):
        raise TypeError("doc_terms: bytes or None")
    index._doc_terms = list(doc_terms)
    for name, value in zip(_COUNTERS, counters, strict=True):
        setattr(index, name, int(value))
    return index


class IndexBlobs:
    """Encodes and decodes the index blobs of one analyzer (thread-safe)."""

    def __init__(self, analyzer_digest: bytes) -> None:
        self._analyzer = analyzer_digest

    def encode(self, index: BM25Index, chunks: bytes) -> bytes:
        """The blob of `index`, bound to the live chunks whose digest is `chunks`."""
        head = _HEAD.pack(_MAGIC, FORMAT, _ORDER, self._analyzer, chunks)
        return seal(head + marshal.dumps(state_of(index)))

    def decode(self, blob: bytes | None, chunks: bytes) -> BM25Index | None:
        """The index `blob` holds for the live chunks whose digest is
        `chunks`, None when it cannot be trusted."""
        state = self.state(blob, chunks)
        return None if state is None else read_state(state)

    def state(self, blob: bytes | None, chunks: bytes) -> bytes | None:
        """The marshalled state of a blob that may be trusted (`read_state`
        tells whether it holds together), else None."""
        body = opened(blob, head_size=_HEAD.size)
        if body is None:
            return None
        if _HEAD.unpack_from(body) != (_MAGIC, FORMAT, _ORDER, self._analyzer, chunks):
            return None
        return body[_HEAD.size :]


def read_state(state: bytes) -> BM25Index | None:
    """The index of `IndexBlobs.state`'s bytes, None when it does not hold together."""
    try:
        return index_of(marshal.loads(state))
    except (ValueError, TypeError, EOFError):
        return None
