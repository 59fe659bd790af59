"""A pure function of a text, remembered per process, that can be told values.

`functools.lru_cache` remembers what a function made, but nothing else can
go in: a restart that reads a text's line facts from the store
(`ctxopt.scoring.lineblob`) must put them where the planner looks, and ask
whether a plan made them (to store them). `TextMemo` is that cache: least
recently used out past `size` texts, thread-safe (plans of different
sessions run in parallel; each dict call is atomic under the GIL, the
insert and its eviction hold a lock). Its `lookup` is a plain closure: a
hit through a method of the memo cost 3-14x an `lru_cache` hit, and
profiles and names are asked for tens of thousands of times a plan.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

V = TypeVar("V")


class TextMemo(Generic[V]):
    """`make(text)`, remembered for the last `size` texts asked or told;
    `lookup` is the cached function."""

    def __init__(self, make: Callable[[str], V], size: int) -> None:
        self.make = make
        self._size = size
        self._cache: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()
        self.misses = 0  # texts made here (not told): a plan that made none has nothing new
        get, move_to_end, miss = self._cache.get, self._cache.move_to_end, self._miss

        def lookup(text: str) -> V:
            found = get(text)
            if found is None:
                return miss(text)
            # not contextlib.suppress: an object per call, on the hottest path
            try:  # noqa: SIM105
                move_to_end(text)
            except KeyError:  # another thread evicted it meanwhile
                pass
            return found

        self.lookup = lookup

    def _miss(self, text: str) -> V:
        made = self.make(text)
        self.misses += 1
        self.tell(text, made)
        return made

    def peek(self, text: str) -> V | None:
        """The remembered value, None when the text is not remembered (never made)."""
        return self._cache.get(text)

    def tell(self, text: str, value: V) -> None:
        """Remember `value` as what `make(text)` gives (the caller vouches for it)."""
        with self._lock:
            self._cache[text] = value
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)

    def tell_many(self, told: Sequence[tuple[str, V]]) -> None:
        """`tell` of each (text, value) in order, under one hold of the lock."""
        with self._lock:
            self._cache.update(told)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)

    def cache_clear(self) -> None:
        """Forget every text (as `lru_cache` does: a fresh process's state)."""
        with self._lock:
            self._cache.clear()
