"""Shrunk texts: line excerpts, TRIM excerpts, anchored excerpts and MASK
placeholders, each naming the stash entry that holds the original.

They are pure functions of the chunk and what is kept, and carry no counters
or times, so the same state always gives byte-identical prompts (prompt
caches stay warm); each is cached under what it depends on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from itertools import count, groupby
from operator import sub
from typing import TypeVar

from ctxopt.planner.knobs import MASK_EDGE_CHARS, TRIM_CONTEXT_LINES
from ctxopt.scoring import line_value
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.lines import text_lines

GAP_MARK = "[...]"


def ranged_excerpt(chunk_id: str, lines: Sequence[str], kept: Sequence[int], stash: str) -> str:
    """Kept lines verbatim, each gap naming the lines it dropped (1-based),
    under a header naming the stash entry that restores them."""
    out = [
        f"[ctxopt: excerpt of {chunk_id}, {len(kept)} of {len(lines)} lines; "
        f"the rest in stash {stash}]"
    ]
    after = 0  # the line after the last run copied
    copied = 0  # the kept lines copied
    # a run of kept lines is one slice, its length counted in C (a line less
    # its place in `kept` is the same along a run): an excerpt keeps most lines
    for shift, run in groupby(map(sub, kept, count())):
        first = shift + copied
        size = len(list(run))
        if first > after:
            out.append(f"[... lines {_show([(after, first - 1)])} dropped ...]")
        out.extend(lines[first : first + size])
        after, copied = first + size, copied + size
    if after < len(lines):
        out.append(f"[... lines {_show([(after, len(lines) - 1)])} dropped ...]")
    return "\n".join(out)


def _ranges(lines: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted line numbers -> inclusive (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for line in lines:
        if runs and line == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], line)
        else:
            runs.append((line, line))
    return runs


def _show(runs: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"{a + 1}" if a == b else f"{a + 1}-{b + 1}" for a, b in runs)


class Trimmer:
    """TRIM excerpts, fast on the second sight of a text.

    A line's score is how many distinct query terms it holds. The lines of
    each query term come from the text's postings (`TextLines.term_lines`:
    found among the text's distinct tokens in C and kept per text, the
    terms asked only; analysing every line of a text for all its terms was
    most of a first plan's trims, ~2-3% of it); and since the excerpt
    depends only on the query terms present in the text, excerpts are
    cached under those (most chunks hold none of a new query's terms and
    hit the cache turn after turn).
    """

    def __init__(self, analyzer: Analyzer, cache_size: int = 8192) -> None:
        self._analyzer = analyzer
        self._cache_size = cache_size
        self._excerpts: OrderedDict[tuple[str, tuple[str, ...], int, int], str] = OrderedDict()
        self._lock = threading.Lock()  # plans of different sessions run in parallel

    def trim(
        self,
        chunk_id: str,
        text: str,
        stash: str,
        query_terms: frozenset[str],
        target_tokens: int,
        total_tokens: int,
    ) -> str:
        """An excerpt of the query-relevant lines of `text`, about `target_tokens` long."""
        split = text_lines(text)
        postings = split.term_lines(query_terms, self._analyzer)
        present = tuple(sorted(t for t in query_terms if postings[t]))
        key = (stash, present, target_tokens, total_tokens)
        with self._lock:
            excerpt = self._excerpts.get(key)
            if excerpt is not None:
                self._excerpts.move_to_end(key)
                return excerpt
        lines = split.lines
        scores = [0.0] * len(lines)
        for term in present:
            for line in postings[term]:
                scores[line] += 1.0
        tokens_per_char = total_tokens / max(len(text), 1)
        costs = [(len(line) + 1) * tokens_per_char for line in lines]
        excerpt = _excerpt(
            chunk_id,
            lines,
            line_value.select_lines(scores, costs, target_tokens, TRIM_CONTEXT_LINES),
            stash,
        )
        with self._lock:
            remember(self._excerpts, key, excerpt, self._cache_size)
        return excerpt


K = TypeVar("K")
V = TypeVar("V")


def remember(cache: OrderedDict[K, V], key: K, value: V, size: int) -> None:
    cache[key] = value
    if len(cache) > size:
        cache.popitem(last=False)


def _excerpt(chunk_id: str, lines: Sequence[str], kept: list[int], stash: str) -> str:
    kept_set = set(kept)
    omitted = _ranges([i for i in range(len(lines)) if i not in kept_set])
    out = [
        f"[ctxopt: trimmed {chunk_id}; showing lines {_show(_ranges(kept))} of {len(lines)}; "
        f"full text in stash {stash}]"
    ]
    omitted_at = dict(omitted)
    i = 0
    while i < len(lines):
        if i in omitted_at:
            end = omitted_at[i]
            out.append(f"[... lines {_show([(i, end)])} omitted ...]")
            i = end + 1
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out)


_anchored: OrderedDict[tuple[str, tuple[int, ...], Callable[[str], int]], tuple[str, int]] = (
    OrderedDict()
)
_anchored_lock = threading.Lock()
ANCHORED_CACHE_SIZE = 16384


def anchored_excerpt(
    chunk_id: str,
    lines: Sequence[str],
    kept: tuple[int, ...],
    stash: str,
    count_tokens: Callable[[str], int],
) -> tuple[str, int]:
    """The excerpt that keeps exactly the lines `kept` verbatim, and its tokens
    (cached: the same lines of the same text give the same bytes)."""
    return _counted(
        (stash, kept, count_tokens),
        lambda: _compact_excerpt(chunk_id, lines, kept, stash),
        count_tokens,
    )


def _compact_excerpt(chunk_id: str, lines: Sequence[str], kept: Sequence[int], stash: str) -> str:
    """Kept lines verbatim, each gap a bare `[...]`: an anchored excerpt keeps
    a few scattered lines, and a per-gap line range would cost more than they do."""
    out = [f"[ctxopt: trimmed {chunk_id} ({len(lines)} lines); full text in stash {stash}]"]
    previous = -1
    for line in kept:
        if line != previous + 1:
            out.append(GAP_MARK)
        out.append(lines[line])
        previous = line
    if previous != len(lines) - 1:
        out.append(GAP_MARK)
    return "\n".join(out)


def masked(
    chunk_id: str, text: str, stash: str, tokens: int, count_tokens: Callable[[str], int]
) -> tuple[str, int]:
    """`mask_text` and its tokens, cached (the same text masks to the same bytes)."""
    return _counted(
        (stash, (tokens,), count_tokens),
        lambda: mask_text(chunk_id, text, stash, tokens),
        count_tokens,
    )


def _counted(
    key: tuple[str, tuple[int, ...], Callable[[str], int]],
    make: Callable[[], str],
    count_tokens: Callable[[str], int],
) -> tuple[str, int]:
    """A shrunk text and its tokens, made once per key (stash id and what was kept)."""
    found = _anchored.get(key)
    if found is not None:
        return found
    text = make()
    made = (text, count_tokens(text))
    with _anchored_lock:
        remember(_anchored, key, made, ANCHORED_CACHE_SIZE)
    return made


def mask_text(chunk_id: str, text: str, stash: str, tokens: int) -> str:
    """A short stable placeholder: the stash id plus the head and tail of the body."""
    head = text[:MASK_EDGE_CHARS].rstrip()
    tail = text[-MASK_EDGE_CHARS:].lstrip() if len(text) > 2 * MASK_EDGE_CHARS else ""
    parts = [f"[ctxopt: masked {chunk_id} ({tokens} tokens); full text in stash {stash}]", head]
    if tail:
        parts += ["[...]", tail]
    return "\n".join(parts)
