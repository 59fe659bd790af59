"""A chunk's analysed terms, kept beside its text in the store.

A restart used to analyse every live text again to rebuild its session's BM25
index; the store now keeps each text's distinct terms and their counts (what
`BM25Index.set_doc_counts` reads) in a compact blob, so a restart decodes
instead of analysing. A blob is trusted only when everything it depends on
matches: its format, the analyzer (the terms it gives a probe text every
option changes), the text it was made from (a digest) and its own checksum.
Anything else (a row written before the column existed, another analyzer, a
damaged or foreign blob) decodes to None, and the caller analyses the text.

Layout, little-endian: magic `CT`, format (1 byte), analyzer digest (8),
text digest (8), term count n (uint32), n counts (uint32 each), the terms in
UTF-8 joined by NUL (a term never holds one: NUL separates raw tokens), and a
checksum (8) of everything before it.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass

from ctxopt.text.analyzer import Analyzer
from ctxopt.text.sealed import DIGEST, digest, opened, packed, seal, text_digest, unpacked

FORMAT = 1
_MAGIC = b"CT"
_HEAD = struct.Struct(f"<2sB{DIGEST}s{DIGEST}sI")
# Stopwords, stems, identifiers, numbers, non-ASCII and an over-long run: every
# analyzer option and rule changes the terms of this text.
_PROBE = (
    "The connections were failing in parseConfigFile, snake_case_name, os.path.join "
    "and src/app/main.py on HTTPServer2 in Straße 日本語 " + "x" * 100
)


@dataclass(frozen=True, slots=True)
class DocTerms:
    """A text's distinct terms in first-occurrence order and how often each occurs."""

    terms: list[str]
    counts: list[int]

    @classmethod
    def of(cls, terms: list[str]) -> DocTerms:
        counted = Counter(terms)
        return cls(list(counted), list(counted.values()))


class TermBlobs:
    """Encodes and decodes the blobs of one analyzer's terms (thread-safe)."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer
        self.analyzer_digest = digest(
            f"{FORMAT}\0{' '.join(analyzer.terms(_PROBE))}".encode("utf-8", "surrogatepass")
        )

    def analyse(self, text: str) -> DocTerms:
        return DocTerms(*self.analyzer.term_counts(text))

    def encode(self, text: str, doc: DocTerms) -> bytes:
        head = _HEAD.pack(_MAGIC, FORMAT, self.analyzer_digest, text_digest(text), len(doc.terms))
        body = (
            head + packed("I", doc.counts) + "\0".join(doc.terms).encode("utf-8", "surrogatepass")
        )
        return seal(body)

    def decode(self, text: str, blob: bytes | None) -> DocTerms | None:
        """The terms `blob` holds for `text`, None when it cannot be trusted."""
        body = opened(blob, head_size=_HEAD.size)
        if body is None:
            return None
        magic, version, analyzer, of_text, n = _HEAD.unpack_from(body)
        if (magic, version, analyzer) != (_MAGIC, FORMAT, self.analyzer_digest):
            return None
        counts_end = _HEAD.size + 4 * n
        if counts_end > len(body) or of_text != text_digest(text):
            return None
        counts = unpacked("I", body[_HEAD.size : counts_end])
        try:
            joined = body[counts_end:].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return None
        terms = joined.split("\0") if n else []
        well_formed = len(terms) == n == len(set(terms)) and (n or not joined)
        if not well_formed or 0 in counts:
            return None
        return DocTerms(terms, counts)
