"""Values: what keeping each chunk is worth, and how it would shrink (which
lines a line excerpt of a tool output keeps, which chunks are trimmed,
anchored or masked; `texts` writes the shrunk texts).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ctxopt.model import Action, ChunkKind, OptimizeOptions, Strategy
from ctxopt.planner.knobs import Tuning
from ctxopt.planner.line_levels import output_levels
from ctxopt.planner.reuse import LastResult, frozen, stamp
from ctxopt.planner.slot_facts import slot_facts
from ctxopt.planner.texts import (
    anchored_excerpt,
    masked,
)
from ctxopt.scoring import line_value
from ctxopt.scoring.hybrid import Scores
from ctxopt.scoring.line_facts import session_facts
from ctxopt.scoring.terms import rare_terms
from ctxopt.session import SessionView
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.line_book import LineBook
from ctxopt.text.lines import text_lines

FloatArray = npt.NDArray[np.float64]
# plain ints for numpy: comparing an array with an IntEnum member costs ~5x more
_KEEP, _TRIM, _MASK = int(Action.KEEP), int(Action.TRIM), int(Action.MASK)
_SUMMARY, _TOOL_RESULT = int(ChunkKind.SUMMARY), int(ChunkKind.TOOL_RESULT)


class Trim(Protocol):
    """The query-aware TRIM excerpt of a chunk's text (`texts.Trimmer`)."""

    def __call__(self, chunk_id: str, text: str, stash: str, goal: int, tokens: int, /) -> str:
        """`text` (`tokens` long, its original in stash entry `stash`) cut to
        about `goal` tokens."""
        ...


TokenCount = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class TextTools:
    """What a plan makes shrunk texts with: the query-aware trimmer, the token
    counter, and the session's line book (None for the truncate strategy).
    `reuse_key` names what `trim` is a function of besides its arguments;
    with one, a plan of an unchanged session reuses the last plan's shrunk
    texts (`reuse`) when the keys are equal; None never reuses."""

    trim: Trim
    count_tokens: TokenCount
    book: LineBook | None
    reuse_key: object = None


@dataclass(slots=True, kw_only=True)
class ChunkValues:
    """Per slot: what keeping the chunk is worth, and how it would shrink."""

    value: FloatArray
    covered_by_summary: npt.NDArray[np.bool_]
    shrink_tokens: FloatArray
    shrink_action: npt.NDArray[np.int8]  # TRIM, MASK or KEEP (does not shrink)
    texts: ShrunkTexts  # the shrunk (and tight) texts themselves
    retention: FloatArray  # share of the value a shrunk chunk keeps
    # A tool output's tighter line excerpt, the step between its excerpt and
    # removal (`Tuning.line_tight_share`); where there is none, the same as shrunk
    # (a call grouped with a tightened output keeps its shrunk text).
    tight_tokens: FloatArray
    tight_retention: FloatArray


class ShrunkTexts:
    """Each shrinking chunk's text and exact tokens, by slot: the one place a
    plan finds them (`result` reads those of the decisions it applies).

    Where each comes from:
    - a tool output's line excerpt (`line_levels`: made once per output and
      remembered per session between plans), at its first size, and at its
      tight size when it has one;
    - a TRIM excerpt (`texts.Trimmer`) or a MASK placeholder (`texts.masked`),
      made while the plan prices its options;
    - an anchored excerpt, made and counted by the session's line book
      (`LineBook.excerpts`) and read from it only on use (a plan applies few
      of the many it prices).
    """

    def __init__(self) -> None:
        self._made: dict[int, tuple[str, int]] = {}
        self._tight: dict[int, tuple[str, int]] = {}
        self._book: LineBook | None = None
        self._anchored_tokens: FloatArray | None = None

    def made(self, slot: int, text: str, tokens: int) -> None:
        self._made[slot] = (text, tokens)

    def made_many(
        self, made: dict[int, tuple[str, int]], tight: dict[int, tuple[str, int]]
    ) -> None:
        """Each slot's text of `made` and tight text of `tight` (copied whole)."""
        self._made.update(made)
        self._tight.update(tight)

    def anchored_in(self, book: LineBook, tokens: FloatArray) -> None:
        """Slots not made here are anchored excerpts of `book`, `tokens` long."""
        self._book, self._anchored_tokens = book, tokens

    def shrunk(self, slot: int) -> tuple[str, int]:
        made = self._made.get(slot)
        if made is not None:
            return made
        if self._book is None or self._anchored_tokens is None:
            raise KeyError(slot)
        # remembered: a warm plan that reuses these texts reads the same ones
        made = self._made[slot] = self._book.excerpt_text(slot), int(self._anchored_tokens[slot])
        return made

    def of(self, slots: list[int], tight: AbstractSet[int]) -> list[tuple[str, int]]:
        """Each slot's shrunk text, or for the slots in `tight` its tighter
        excerpt where it has one (a tool output's), in one pass."""
        made, tight_made = self._made, self._tight
        return [
            (slot in tight and tight_made.get(slot)) or made.get(slot) or self.shrunk(slot)
            for slot in slots
        ]

    def tight_sizes(self) -> list[tuple[int, int]]:
        """(slot, tokens) of every tight excerpt."""
        return [(slot, tokens) for slot, (_, tokens) in self._tight.items()]


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
    shrinks = _shrink_options(session, options, tuning, tools, scores.marks.root)
    retention = np.where(
        shrinks.action == _MASK,
        tuning.mask_retention,
        np.where(scores.bm25 > 0, tuning.trim_retention, tuning.trim_retention_irrelevant),
    )
    retention[shrinks.anchored] = tuning.anchor_retention
    retention[shrinks.lined] = tuning.line_retention
    return ChunkValues(
        value=value,
        covered_by_summary=covered_by_summary,
        shrink_tokens=shrinks.tokens,
        shrink_action=shrinks.action,
        texts=shrinks.texts,
        retention=retention,
        tight_tokens=shrinks.tight_tokens,
        # a line's score counts its signals, not the chance it is needed, and the
        # lines a tight excerpt drops hold needed lines too: it keeps the square of
        # its share of the excerpt's line weight (picked in sample beside the share,
        # its cube and constant values)
        tight_retention=retention * shrinks.tight_kept**2,
    )


@dataclass(slots=True)
class _Shrinks:
    """Per slot: tokens once shrunk, how (TRIM, MASK or KEEP), the shrunk
    texts, and which excerpts keep anchor lines or a tool output's scored lines."""

    tokens: FloatArray
    action: npt.NDArray[np.int8]
    texts: ShrunkTexts
    anchored: npt.NDArray[np.bool_]
    lined: npt.NDArray[np.bool_]
    tight_tokens: FloatArray
    tight_kept: FloatArray  # share of the excerpt's line weight the tight one keeps


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


_last_shrinks: LastResult[_Shrinks] = LastResult()


def _shrink_options(
    session: SessionView,
    options: OptimizeOptions,
    tuning: Tuning,
    tools: TextTools,
    root: npt.NDArray[np.bool_],
) -> _Shrinks:
    """`_made_shrinks`, or the session's last plan's when nothing it reads
    changed: the texts (their versions), the entries (a chunk upserted with
    the same text keeps the index's version but may name another stash), the
    columns it reads, the query and the knobs. A warm plan of an unchanged
    session then skips every output's line work and every TRIM and MASK text
    (most of its time otherwise)."""
    book = tools.book
    if book is None or tools.reuse_key is None:
        return _made_shrinks(session, options, tuning, tools, root)
    n = session.n_slots
    cols = session.columns
    now = stamp(
        (
            session.index.version,
            book.version,
            n,
            tuple(session.entries.values()),  # equal when each is the same object
            options.query,
            options.strategy,
            options.aggressive,
            tuning,
            tools.reuse_key,
            tools.count_tokens,
        ),
        cols.tokens[:n],
        cols.alive[:n],
        cols.lines[:n],
        cols.kind[:n],
        cols.role[:n],
        root[:n],
    )
    found = _last_shrinks.get(book, now)
    if found is not None:
        return found
    made = _made_shrinks(session, options, tuning, tools, root)
    for array in (made.tokens, made.action, made.anchored, made.lined, made.tight_tokens):
        frozen(array)
    frozen(made.tight_kept)
    _last_shrinks.put(book, now, made)
    return made


def _made_shrinks(
    session: SessionView,
    options: OptimizeOptions,
    tuning: Tuning,
    tools: TextTools,
    root: npt.NDArray[np.bool_],
) -> _Shrinks:
    """Each chunk's tokens once shrunk, how (TRIM, MASK or KEEP), the shrunk
    text with its exact count (the greedy plans with the real sizes, so a plan
    lands at its target rather than near it), and which excerpts are anchored.

    A multi-line tool output shrinks to the lines its signals point at
    (`line_excerpts`); another chunk holding anchor lines (text/lines.py: echo
    lines it is the latest to hold) shrinks to those lines verbatim; otherwise
    a long chunk is trimmed to its query-relevant lines and a big tool result
    is masked."""
    n = session.n_slots
    cols = session.columns
    tokens = cols.tokens[:n].astype(np.float64)
    action = np.full(n, _KEEP, dtype=np.int8)
    anchored = np.zeros(n, dtype=bool)
    lined = np.zeros(n, dtype=bool)
    texts = ShrunkTexts()
    tight_kept = np.ones(n)
    if options.strategy != Strategy.HYBRID or options.aggressive:
        return _Shrinks(tokens, action, texts, anchored, lined, tokens, tight_kept)
    alive = cols.alive[:n] & ~root[:n]
    multiline = alive & (cols.lines[:n] >= tuning.trim_min_lines)
    analyzer = session.analyzer
    links = rare_terms(session, analyzer.terms(options.query), tuning.link_df_share)
    book, count_tokens = tools.book, tools.count_tokens
    outputs = np.zeros(n, dtype=bool)
    if book is not None and tuning.line_excerpts:
        outputs = multiline & (cols.kind[:n] == _TOOL_RESULT)
    if book is not None and tuning.anchored_excerpts:
        excerpt = book.excerpts(
            multiline & ~outputs,
            (links, tuning.anchor_context),
            lambda slot: _anchored_excerpt(
                session, book, slot, links, analyzer, tuning, count_tokens
            ),
        )
        anchored = multiline & ~outputs & (excerpt >= 0)
        action[anchored] = _TRIM
        tokens[anchored] = excerpt[anchored]
        texts.anchored_in(book, tokens)
    if book is not None and outputs.any():
        slots_now = slot_facts(session, book)
        facts = session_facts(
            session,
            options.query,
            analyzer,
            rare_share=tuning.line_rare_share,
            weights=line_value.LineWeights(
                tuning.line_relevance,
                tuning.line_identifier,
                tuning.line_cited,
                tuning.line_error,
                tuning.line_echoed,
            ),
            texts=slots_now.texts,
        )
        sizes = output_levels(
            session,
            book,
            np.flatnonzero(outputs).tolist(),
            facts,
            tuning,
            count_tokens,
            slots_now.stash_ids,
        )
        texts.made_many(sizes.first, sizes.tight)
        at = _keys(sizes.first)
        tokens[at] = np.fromiter(map(_TOKENS, sizes.first.values()), np.float64, len(at))
        lined[at] = True
        at = _keys(sizes.tight_kept)
        tight_kept[at] = np.fromiter(sizes.tight_kept.values(), dtype=np.float64, count=len(at))
        action[lined] = _TRIM
    shrunk = anchored | lined
    trimmable = multiline & ~shrunk & (cols.tokens[:n] >= tuning.trim_min_tokens)
    maskable = (
        alive
        & ~shrunk
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
            after = count_tokens(text)
        else:
            text, after = masked(chunk.id, chunk.text, stash, entry.tokens, count_tokens)
        texts.made(slot, text, after)
        tokens[slot] = after
    tight_tokens = tokens.copy()
    for slot, after in texts.tight_sizes():
        tight_tokens[slot] = after
    return _Shrinks(tokens, action, texts, anchored, lined, tight_tokens, tight_kept)


_TOKENS = itemgetter(1)  # of a (text, tokens) pair


def _keys(by_slot: dict[int, Any]) -> npt.NDArray[np.intp]:
    return np.fromiter(by_slot, dtype=np.intp, count=len(by_slot))


def _anchored_excerpt(
    session: SessionView,
    book: LineBook,
    slot: int,
    links: frozenset[str],
    analyzer: Analyzer,
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
        anchors = tuple(sorted(set(anchors) | split.lines_with(links, analyzer)))
    if not anchors:
        return None
    kept = line_value.with_context(anchors, len(split.lines), tuning.anchor_context)
    text, after = anchored_excerpt(chunk.id, split.lines, kept, entry.stash_id(), count_tokens)
    return (text, after) if after < entry.tokens * tuning.shrink_worth else None
