"""A text's lines and their echo keys, cached per text across sessions.

A line stripped to at least ECHO_MIN_CHARS characters is keyed by itself:
shorter lines (`return x`, `}`, `else:`) repeat everywhere and prove nothing.
`ctxopt.text.line_book` finds which chunks of a session share a key.

>>> from ctxopt.text.lines import text_lines
>>> text_lines("short\\n    value = compute_total(items)\\n").keys
('', 'value = compute_total(items)', '')
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ctxopt.text.analyzer import Analyzer

# Shorter lines (`return x`, `}`, `else:`) repeat everywhere and prove nothing.
ECHO_MIN_CHARS = 20
TEXT_CACHE_SIZE = 16384


@dataclass(slots=True)
class TextLines:
    """A text split into lines, each with its echo key ("" when too short)."""

    lines: tuple[str, ...]
    keys: tuple[str, ...]
    distinct: frozenset[str]  # the non-empty keys
    key_chars: int  # characters of the keyed lines (each distinct key once)
    # term -> the lines holding it, for the terms asked so far (and by which
    # analyzer): plans ask for a few query terms, never for all of a text's.
    # Never changed in place (a new mapping is swapped in), so every text
    # starts with the one shared empty one: a dict per text was a thousand
    # objects per 1,000 chunks left for the cyclic collector to scan
    postings: Mapping[str, tuple[int, ...]]
    analyzer: Analyzer | None

    def term_lines(
        self, terms: frozenset[str], analyzer: Analyzer
    ) -> Mapping[str, tuple[int, ...]]:
        """Per term of `terms`, the numbers of the lines holding it (absent
        terms map to no lines)."""
        if analyzer is not self.analyzer:
            self.analyzer, self.postings = analyzer, _NO_POSTINGS
        postings = self.postings
        missing = terms.difference(postings)
        if missing:
            found = analyzer.line_postings("\n".join(self.lines), frozenset(missing))
            # a new dict, swapped in whole: plans of other sessions read it
            self.postings = postings = {**postings, **dict.fromkeys(missing, ()), **found}
        return postings

    def searched(self, postings: dict[str, tuple[int, ...]], analyzer: Analyzer) -> None:
        """Take `postings` (term -> its lines, as `term_lines` gives them by
        `analyzer`: a restart's, kept by the last process) as found."""
        if analyzer is not self.analyzer:
            self.analyzer, self.postings = analyzer, {}
        self.postings = {**self.postings, **postings}  # swapped in whole, as `term_lines` does

    def lines_with(self, terms: frozenset[str], analyzer: Analyzer) -> set[int]:
        """Numbers of the lines holding any of `terms`."""
        postings = self.term_lines(terms, analyzer)
        return {n for t in terms for n in postings[t]}


_NO_POSTINGS: Mapping[str, tuple[int, ...]] = MappingProxyType({})
# one for every text with no keyed line (a frozenset stays tracked by the
# cyclic collector as long as the cache holds it)
_NO_KEYS: frozenset[str] = frozenset()
_texts: OrderedDict[str, TextLines] = OrderedDict()
_texts_lock = threading.Lock()  # plans of different sessions run in parallel


def text_lines(text: str) -> TextLines:
    """The lines and keys of a text, cached by the text itself."""
    found = _texts.get(text)
    if found is not None:
        return found
    lines = tuple(text.split("\n"))
    keys = tuple([s if len(s) >= ECHO_MIN_CHARS else "" for s in map(str.strip, lines)])
    distinct = frozenset(keys).difference(("",)) or _NO_KEYS
    made = TextLines(lines, keys, distinct, sum(map(len, distinct)), _NO_POSTINGS, None)
    with _texts_lock:
        _texts[text] = made
        if len(_texts) > TEXT_CACHE_SIZE:
            _texts.popitem(last=False)
    return made
