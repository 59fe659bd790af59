"""The token counts a session's plans made, kept with the session in the store.

A plan counts the exact tokens of every excerpt it makes (each tool output's
line excerpts, each anchored excerpt): about a tenth of a session's first
plan after a restart, spent counting again the excerpts the plan before the
restart had counted. The counter (`ctxopt.tokens`) remembers each count by a
digest of its text; a session's plans note the counts they asked for, and the
store keeps them (`LiveSessions.keep_counts`), so a restart tells them to the
counter instead of tokenising again. A count is a fact about its text alone,
found by the text's digest: a count of a text no plan makes again costs only
its bytes.

As with `text/termblob.py`, a blob is trusted only when everything it depends
on matches: its format, the counter (its mode, the digest's size and its
count of a probe text), and its own checksum; anything else decodes to
None, and each text is counted when a plan asks, as before.

Layout, little-endian: magic `CK`, format (1 byte), counter digest (8), the
number of counts n (uint32), n text digests (`KEY_BYTES` each), n counts
(uint32 each), and a checksum (8) of everything before it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from ctxopt.text.sealed import DIGEST, digest, opened, packed, seal, unpacked
from ctxopt.tokens import KEY_BYTES, TokenCounter

FORMAT = 1
_MAGIC = b"CK"
_HEAD = struct.Struct(f"<2sB{DIGEST}sI")
# Code, prose, digits, whitespace runs and non-ASCII: cl100k and the Gemini
# estimate count it differently.
_PROBE = "def total(x):\n    return x * 1.25  # naïve 日本語 🙂\n\n   The end. "


class CountBlobs:
    """Encodes and decodes one counter's blobs (thread-safe)."""

    def __init__(self, counter: TokenCounter) -> None:
        identity = f"{FORMAT}\0{counter.mode}\0{KEY_BYTES}\0{counter.count(_PROBE)}"
        self._counter = digest(identity.encode("utf-8"))

    def encode(self, counts: Mapping[bytes, int]) -> bytes:
        """The blob of `counts` (text digest -> tokens)."""
        head = _HEAD.pack(_MAGIC, FORMAT, self._counter, len(counts))
        return seal(head + b"".join(counts) + packed("I", list(counts.values())))

    def decode(self, blob: bytes | None) -> dict[bytes, int] | None:
        """The counts `blob` holds, None when it cannot be trusted."""
        body = opened(blob, head_size=_HEAD.size)
        if body is None:
            return None
        magic, version, counter, n = _HEAD.unpack_from(body)
        if (magic, version, counter) != (_MAGIC, FORMAT, self._counter):
            return None
        keys_end = _HEAD.size + KEY_BYTES * n
        if len(body) != keys_end + 4 * n:
            return None
        keys = [body[i : i + KEY_BYTES] for i in range(_HEAD.size, keys_end, KEY_BYTES)]
        found = dict(zip(keys, unpacked("I", body[keys_end:]), strict=True))
        return found if len(found) == n else None
