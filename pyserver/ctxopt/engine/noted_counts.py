"""The token counts a plan asks for, noted so the session can keep them.

A plan counts the exact tokens of every excerpt it makes; the counter
remembers each count per process, and a restart used to count them all
again. `NotedCounts.count` is the counter's `count` that, inside `noting`,
also notes each text and its count for the calling thread (plans of
different sessions run on different threads), and `LiveSessions.keep_counts`
stores them with the session (text/countblob.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ctxopt.tokens import TokenCounter


class NotedCounts:
    """`count` is the one function a plan counts with: one object per engine,
    so caches keyed by it match from plan to plan."""

    def __init__(self, counter: TokenCounter) -> None:
        self._local = threading.local()
        count = counter.count
        local = self._local

        def noted_count(text: str) -> int:
            n = count(text)
            noted: dict[str, int] | None = getattr(local, "noted", None)
            if noted is not None:
                noted[text] = n
            return n

        self.count = noted_count

    @contextmanager
    def noting(self) -> Iterator[dict[str, int]]:
        """The texts this thread counts meanwhile, with their counts."""
        noted: dict[str, int] = {}
        self._local.noted = noted
        try:
            yield noted
        finally:
            self._local.noted = None
