"""Sealed blobs: what a store keeps beside a chunk's text (its analysed terms,
its line facts), checksummed and bound to that text, so a damaged, cut or
stale blob is recognised and made again instead of trusted.

>>> sealed = seal(b"body")
>>> opened(sealed, head_size=2)
b'body'
>>> opened(sealed[:-1] + b"?", head_size=2) is None
True
>>> unpacked("I", packed("I", [1, 2**32 - 1]))
[1, 4294967295]
"""

from __future__ import annotations

import hashlib
import sys
from array import array

DIGEST = 8  # bytes of each blake2b digest: a checksum, not a signature


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST).digest()


def text_digest(text: str) -> bytes:
    """The digest a blob holds of the text it was made from. The last text's
    is remembered: a restart checks each text's terms, then its line facts
    (a pair swapped whole: threads may share it)."""
    last_text, last_digest = _last[0]
    if text is last_text:
        return last_digest
    made = digest(text.encode("utf-8", "surrogatepass"))
    _last[0] = (text, made)
    return made


_last: list[tuple[str, bytes]] = [("", digest(b""))]


def seal(body: bytes) -> bytes:
    """`body` followed by its checksum."""
    return body + digest(body)


def packed(typecode: str, values: list[int]) -> bytes:
    """`values` as little-endian machine numbers (`array` typecode), whatever the host's order."""
    numbers = array(typecode, values)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers.tobytes()


def unpacked(typecode: str, data: bytes) -> list[int]:
    """The numbers `packed` wrote."""
    numbers = array(typecode)
    numbers.frombytes(data)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers.tolist()


def opened(blob: bytes | None, *, head_size: int) -> bytes | None:
    """The body of a sealed `blob` at least `head_size` bytes long whose
    checksum holds, else None (a column of another type included)."""
    if not isinstance(blob, bytes) or len(blob) < head_size + DIGEST:
        return None
    body, checksum = blob[:-DIGEST], blob[-DIGEST:]
    return body if digest(body) == checksum else None
