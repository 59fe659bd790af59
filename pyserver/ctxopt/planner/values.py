"""Values: what keeping each chunk is worth, and the only code that makes
shrunk text (TRIM excerpts, anchored excerpts, MASK placeholders).

Shrunk texts are pure functions of the chunk and the query, and carry no
counters or times, so the same state always gives byte-identical prompts
(prompt caches stay warm). Each names the stash entry that holds the original.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from ctxopt.model import Action, ChunkKind, OptimizeOptions, Strategy
from ctxopt.planner.knobs import MASK_EDGE_CHARS, TRIM_CONTEXT_LINES, Tuning
from ctxopt.scoring.hybrid import Scores
from ctxopt.scoring.terms import analyzer_of, rare_terms
from ctxopt.session import SessionView
from ctxopt.text.lines import LineBook, text_lines

FloatArray = npt.NDArray[np.float64]
GAP_MARK = "[...]"
# plain ints for numpy: comparing an array with an IntEnum member costs ~5x more
_KEEP, _TRIM, _MASK = int(Action.KEEP), int(Action.TRIM), int(Action.MASK)
_SUMMARY, _TOOL_RESULT = int(ChunkKind.SUMMARY), int(ChunkKind.TOOL_RESULT)


# (chunk id, text, stash id, target tokens, tokens) -> the TRIM excerpt
Trim = Callable[[str, str, str, int, int], str]
TokenCount = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class TextTools:
    """What a plan makes shrunk texts with: the query-aware trimmer, the token
    counter, and the session's line book (None for the truncate strategy)."""

    trim: Trim
    count_tokens: TokenCount
    book: LineBook | None


@dataclass(slots=True)
class ChunkValues:
    """Per slot: what keeping the chunk is worth, and how it would shrink."""

    value: FloatArray
    covered_by_summary: npt.NDArray[np.bool_]
    shrink_tokens: FloatArray
    shrink_action: npt.NDArray[np.int8]  # TRIM, MASK or KEEP (does not shrink)
    shrink_texts: dict[int, tuple[str, int]]
    retention: FloatArray  # share of the value a shrunk chunk keeps


def chunk_values(
    session: SessionView,
    options: OptimizeOptions,
    scores: Scores,
    tools: TextTools,
    *,
    tuning: Tuning,
) -> ChunkValues:
    """Each chunk's value (its score, less what a summary or a later repeat
    carries), and how it would shrink and what share of its value it keeps then."""
    value = scores.total.copy()
    covered_by_summary = _summary_covered(session)
    value[covered_by_summary] *= tuning.summary_discount
    if tools.book is not None and tuning.discount_repeated:
        # what a later chunk prints again (a rerun, a re-view, a duplicate) is stale here
        value *= 1.0 - tools.book.repeated(session.n_slots)
    shrink_tokens, shrink_action, shrink_texts, anchored = _shrink_options(
        session, options, tuning, tools, scores.marks.root
    )
    retention = np.where(
        shrink_action == _MASK,
        tuning.mask_retention,
        np.where(scores.bm25 > 0, tuning.trim_retention, tuning.trim_retention_irrelevant),
    )
    retention[anchored] = tuning.anchor_retention
    return ChunkValues(
        value, covered_by_summary, shrink_tokens, shrink_action, shrink_texts, retention
    )


def _summary_covered(session: SessionView) -> npt.NDArray[np.bool_]:
    """Chunks whose content a live SUMMARY chunk carries."""
    covered = np.zeros(session.n_slots, dtype=bool)
    summaries = np.flatnonzero(
        session.columns.alive[: session.n_slots]
        & (session.columns.kind[: session.n_slots] == _SUMMARY)
    )
    for slot in summaries:
        for chunk_id in session.entry_at(int(slot)).chunk.summary_of:
            target = session.slot_of(chunk_id)
            if target is not None:
                covered[target] = True
    return covered


def _shrink_options(
    session: SessionView,
    options: OptimizeOptions,
    tuning: Tuning,
    tools: TextTools,
    root: npt.NDArray[np.bool_],
) -> tuple[FloatArray, npt.NDArray[np.int8], dict[int, tuple[str, int]], npt.NDArray[np.bool_]]:
    """Each chunk's tokens once shrunk, how (TRIM, MASK or KEEP), the shrunk
    text with its exact count (the greedy plans with the real sizes, so a plan
    lands at its target rather than near it), and which excerpts are anchored.

    A chunk holding anchor lines (text/lines.py: echo lines it is the latest to
    hold) shrinks to those lines verbatim; otherwise a long chunk is trimmed to
    its query-relevant lines and a big tool result is masked."""
    n = session.n_slots
    cols = session.columns
    tokens = cols.tokens[:n].astype(np.float64)
    action = np.full(n, _KEEP, dtype=np.int8)
    anchored = np.zeros(n, dtype=bool)
    texts: dict[int, tuple[str, int]] = {}
    if options.strategy != Strategy.HYBRID or options.aggressive:
        return tokens, action, texts, anchored
    alive = cols.alive[:n] & ~root[:n]
    multiline = alive & (cols.lines[:n] >= tuning.trim_min_lines)
    analyze = analyzer_of(session)
    links = rare_terms(session, analyze(options.query), tuning.link_df_share)
    book, count_tokens = tools.book, tools.count_tokens
    if book is not None and tuning.anchored_excerpts:
        excerpt = book.excerpts(
            multiline,
            (links, tuning.anchor_context),
            lambda slot: _anchored_excerpt(
                session, book, slot, links, analyze, tuning, count_tokens
            ),
        )
        anchored = multiline & (excerpt >= 0)
        action[anchored] = _TRIM
        tokens[anchored] = excerpt[anchored]
        texts = _ShrunkTexts(book, tokens)
    trimmable = multiline & ~anchored & (cols.tokens[:n] >= tuning.trim_min_tokens)
    maskable = (
        alive
        & ~anchored
        & ~trimmable
        & (cols.kind[:n] == _TOOL_RESULT)
        & (cols.tokens[:n] >= tuning.mask_min_tokens)
    )
    action[trimmable] = _TRIM
    action[maskable] = _MASK
    for slot in np.flatnonzero(trimmable | maskable).tolist():
        entry = session.entry_at(slot)
        chunk = entry.chunk
        stash = entry.stash_id()
        if action[slot] == _TRIM:
            goal = int(entry.tokens * tuning.trim_fraction)
            text = tools.trim(chunk.id, chunk.text, stash, goal, entry.tokens)
            texts[slot] = (text, count_tokens(text))
        else:
            texts[slot] = masked(chunk.id, chunk.text, stash, entry.tokens, count_tokens)
        tokens[slot] = texts[slot][1]
    return tokens, action, texts, anchored


class _ShrunkTexts(dict[int, tuple[str, int]]):
    """Shrunk texts by slot: the fallbacks stored, anchored excerpts read from
    the line book on use (a plan reads only the few it applies)."""

    def __init__(self, book: LineBook, tokens: FloatArray) -> None:
        super().__init__()
        self._book = book
        self._tokens = tokens

    def __missing__(self, slot: int) -> tuple[str, int]:
        return self._book.excerpt_text(slot), int(self._tokens[slot])


def _anchored_excerpt(
    session: SessionView,
    book: LineBook,
    slot: int,
    links: frozenset[str],
    analyze: Callable[[str], list[str]],
    tuning: Tuning,
    count_tokens: TokenCount,
) -> tuple[str, int] | None:
    """The excerpt of a chunk that keeps its anchor and link lines verbatim
    (with `anchor_context` lines around each), None when it would not shrink."""
    entry = session.entry_at(slot)
    chunk = entry.chunk
    split = text_lines(chunk.text)
    anchors = book.anchors(slot)
    if links:
        anchors = tuple(sorted(set(anchors) | split.lines_with(links, analyze)))
    if not anchors:
        return None
    kept = with_context(anchors, len(split.lines), tuning.anchor_context)
    text, after = anchored_excerpt(chunk.id, split.lines, kept, entry.stash_id(), count_tokens)
    return (text, after) if after < entry.tokens * tuning.shrink_worth else None


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


def select_lines(
    line_scores: Sequence[float], line_costs: Sequence[float], budget: float
) -> list[int]:
    """Best-scoring lines with a little context around each, within `budget`.

    With no scoring line, keeps the head and (mostly) the tail: that is where
    commands print what they are and how they ended.
    """
    n = len(line_scores)
    chosen: set[int] = set()
    spent = 0.0
    ranked = sorted((i for i in range(n) if line_scores[i] > 0), key=lambda i: (-line_scores[i], i))
    for i in ranked:
        window = range(max(0, i - TRIM_CONTEXT_LINES), min(n, i + TRIM_CONTEXT_LINES + 1))
        cost = sum(line_costs[j] for j in window if j not in chosen)
        if spent + cost > budget and chosen:
            continue
        chosen.update(window)
        spent += cost
    if not chosen:
        head, tail = 0, n
        head_budget = budget * 0.3
        while head < n and spent + line_costs[head] <= head_budget:
            spent += line_costs[head]
            head += 1
        while tail > head and spent + line_costs[tail - 1] <= budget:
            tail -= 1
            spent += line_costs[tail]
        chosen.update(range(head))
        chosen.update(range(tail, n))
    return sorted(chosen)


class Trimmer:
    """TRIM excerpts, fast on the second sight of a text.

    A line's score is how many distinct query terms it holds. Each distinct
    text is analysed once into term -> line postings, so a plan only looks up
    the query's terms; and since the excerpt depends only on the query terms
    present in the text, excerpts are cached under those (most chunks hold
    none of a new query's terms and hit the cache turn after turn).
    """

    def __init__(self, terms: Callable[[str], list[str]], cache_size: int = 8192) -> None:
        self._terms = terms
        self._cache_size = cache_size
        self._lines: OrderedDict[str, _Lines] = OrderedDict()
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
        indexed = self._indexed(stash, text)
        present = tuple(sorted(t for t in query_terms if t in indexed.postings))
        key = (stash, present, target_tokens, total_tokens)
        with self._lock:
            excerpt = self._excerpts.get(key)
            if excerpt is not None:
                self._excerpts.move_to_end(key)
                return excerpt
        scores = [0.0] * len(indexed.lines)
        for term in present:
            for line in indexed.postings[term]:
                scores[line] += 1.0
        tokens_per_char = total_tokens / max(len(text), 1)
        costs = [length * tokens_per_char for length in indexed.lengths]
        excerpt = _excerpt(
            chunk_id, indexed.lines, select_lines(scores, costs, target_tokens), stash
        )
        with self._lock:
            _remember(self._excerpts, key, excerpt, self._cache_size)
        return excerpt

    def _indexed(self, stash: str, text: str) -> _Lines:
        with self._lock:
            found = self._lines.get(stash)
            if found is not None:
                self._lines.move_to_end(stash)
                return found
        lines = text.split("\n")
        postings: dict[str, list[int]] = {}
        for number, line in enumerate(lines):
            for term in set(self._terms(line)):
                postings.setdefault(term, []).append(number)
        indexed = _Lines(lines, postings, [len(line) + 1 for line in lines])
        with self._lock:
            _remember(self._lines, stash, indexed, self._cache_size)
        return indexed


@dataclass(frozen=True, slots=True)
class _Lines:
    lines: list[str]
    postings: dict[str, list[int]]  # term -> numbers of the lines holding it
    lengths: list[int]  # characters, newline included


K = TypeVar("K")
V = TypeVar("V")


def _remember(cache: OrderedDict[K, V], key: K, value: V, size: int) -> None:
    cache[key] = value
    if len(cache) > size:
        cache.popitem(last=False)


def _excerpt(chunk_id: str, lines: list[str], kept: list[int], stash: str) -> str:
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


def with_context(anchors: Sequence[int], n_lines: int, context: int) -> tuple[int, ...]:
    """The anchor lines and `context` lines either side, sorted, inside the text."""
    kept: set[int] = set()
    for line in anchors:
        kept.update(range(max(0, line - context), min(n_lines, line + context + 1)))
    return tuple(sorted(kept))


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
        _remember(_anchored, key, made, ANCHORED_CACHE_SIZE)
    return made


def mask_text(chunk_id: str, text: str, stash: str, tokens: int) -> str:
    """A short stable placeholder: the stash id plus the head and tail of the body."""
    head = text[:MASK_EDGE_CHARS].rstrip()
    tail = text[-MASK_EDGE_CHARS:].lstrip() if len(text) > 2 * MASK_EDGE_CHARS else ""
    parts = [f"[ctxopt: masked {chunk_id} ({tokens} tokens); full text in stash {stash}]", head]
    if tail:
        parts += ["[...]", tail]
    return "\n".join(parts)
