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

The index gives its state as plain data and is made again from it
(`BM25Index.state`, `from_state`); `index_of` checks the types of what a
blob gives back first.

Layout: magic `CI`, format (1 byte), byte order (1 byte: `l` or `b`), the
analyzer's digest (8), the chunks' digest (8), the marshalled state, and a
checksum (8) of everything before it.
"""

from __future__ import annotations

import hashlib
import marshal
import struct
import sys
from collections.abc import Sequence

from ctxopt.text.bm25 import BM25Index
from ctxopt.text.sealed import DIGEST, opened, packed, seal

FORMAT = 1
_MAGIC = b"CI"
_HEAD = struct.Struct(f"<2sBc{DIGEST}s{DIGEST}s")
_ORDER = sys.byteorder[:1].encode()
# the parameters of a session's index (`Session` makes it with the defaults)
_DEFAULTS = (BM25Index().k1, BM25Index().b, BM25Index().epsilon)
_COUNT = 7  # `IndexState`'s parts: parameters, terms, sizes, postings, arrays, term ids, counters


def chunks_digest(slots: Sequence[int], texts: Sequence[str]) -> bytes:
    """The digest of a session's live chunks, by slot: each one's slot and
    text (their lengths first: no two lists join the same). One SHA-256 over
    the texts joined (hashed in hardware where the CPU can: ~3x faster than a
    blake2b per text), cut to `DIGEST` bytes."""
    encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
    head = packed("Q", list(slots)) + packed("Q", list(map(len, encoded)))
    return hashlib.sha256(head + b"".join(encoded)).digest()[:DIGEST]


def index_of(state: object) -> BM25Index:
    """The index whose `BM25Index.state` this is; ValueError or TypeError when
    it does not hold together (a mistyped or foreign tuple)."""
    if not isinstance(state, tuple) or len(state) != _COUNT:
        raise TypeError(f"state: a tuple of {_COUNT}")
    params, terms, sizes, joined, arrays, doc_terms, counters = state
    if params != _DEFAULTS:
        raise ValueError("parameters: not a session's")
    if not all(isinstance(t, str) for t in terms) or not isinstance(sizes, bytes):
        raise TypeError("terms: strings; sizes: bytes")
    if not all(isinstance(a, bytes) for a in (joined, *arrays)):
        raise TypeError("postings, arrays: bytes")
    if not all(d is None or isinstance(d, bytes) for d in doc_terms):
        raise TypeError("doc_terms: bytes or None")
    if not all(isinstance(c, int) for c in counters):
        raise TypeError("counters: integers")
    return BM25Index.from_state((params, list(terms), sizes, joined, arrays, doc_terms, counters))


class IndexBlobs:
    """Encodes and decodes the index blobs of one analyzer (thread-safe)."""

    def __init__(self, analyzer_digest: bytes) -> None:
        self._analyzer = analyzer_digest

    def encode(self, index: BM25Index, chunks: bytes) -> bytes:
        """The blob of `index`, bound to the live chunks whose digest is `chunks`."""
        head = _HEAD.pack(_MAGIC, FORMAT, _ORDER, self._analyzer, chunks)
        return seal(head + marshal.dumps(index.state()))

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
