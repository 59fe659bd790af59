"""A pure function of a text, remembered per process, that can be told values.

`functools.lru_cache` remembers what a function made, but nothing else can
go in: a restart that reads a text's line facts from the store
(`ctxopt.scoring.lineblob`) must put them where the planner looks, and ask
whether a plan made them (to store them). `TextMemo` is that cache: least
recently used out past `size` texts, thread-safe (plans of different
sessions run in parallel; each dict call is atomic under the GIL, the
insert and its eviction hold a lock).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class TextMemo(Generic[V]):
    """`make(text)`, remembered for the last `size` texts asked or told."""

    __wrapped__: Callable[[str], V]  # `make` itself, as `functools.wraps` names it

    def __init__(self, make: Callable[[str], V], size: int) -> None:
        functools.update_wrapper(self, make)  # its docstring and examples stay its own
        self._make = make
        self._size = size
        self._cache: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()
        self.misses = 0  # texts made here (not told): a plan that made none has nothing new

    def __call__(self, text: str) -> V:
        found = self._cache.get(text)
        if found is not None:
            with contextlib.suppress(KeyError):  # another thread evicted it meanwhile
                self._cache.move_to_end(text)
            return found
        made = self._make(text)
        self.misses += 1
        self.tell(text, made)
        return made

    def peek(self, text: str) -> V | None:
        """The remembered value, None when the text is not remembered (never made)."""
        return self._cache.get(text)

    def cache_clear(self) -> None:
        """Forget every text (as `lru_cache` does: a fresh process's state)."""
        with self._lock:
            self._cache.clear()

    def tell(self, text: str, value: V) -> None:
        """Remember `value` as what `make(text)` gives (the caller vouches for it)."""
        with self._lock:
            self._cache[text] = value
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)


def text_memo(size: int) -> Callable[[Callable[[str], V]], TextMemo[V]]:
    """Decorator: `@text_memo(size)` over a pure function of one text."""
    return lambda make: TextMemo(make, size)
