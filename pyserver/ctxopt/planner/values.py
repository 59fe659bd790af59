"""Values: what keeping each chunk is worth, and how it would shrink (which
lines a line excerpt of a tool output keeps, which chunks are trimmed,
anchored or masked; `texts` writes the shrunk texts).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctxopt.model import Action, ChunkKind, OptimizeOptions, Strategy
from ctxopt.planner.knobs import Tuning
from ctxopt.planner.line_levels import output_levels
from ctxopt.planner.texts import (
    anchored_excerpt,
    masked,
)
from ctxopt.scoring import line_value
from ctxopt.scoring.hybrid import Scores
from ctxopt.scoring.line_facts import session_facts
from ctxopt.scoring.terms import analyzer_of, rare_terms
from ctxopt.session import SessionView
from ctxopt.text.lines import LineBook, text_lines

FloatArray = npt.NDArray[np.float64]
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
    # A tool output's tighter line excerpt, the step between its excerpt and
    # removal (`Tuning.line_tight_share`); where there is none, the same as shrunk
    # (a call grouped with a tightened output keeps its shrunk text).
    tight_tokens: FloatArray
    tight_texts: Mapping[int, tuple[str, int]]
    tight_retention: FloatArray


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
        value,
        covered_by_summary,
        shrinks.tokens,
        shrinks.action,
        shrinks.texts,
        retention,
        shrinks.tight_tokens,
        ChainMap(shrinks.tight_texts, shrinks.texts),
        # a line's score counts its signals, not the chance it is needed, and the
        # lines a tight excerpt drops hold needed lines too: it keeps the square of
        # its share of the excerpt's line weight (picked in sample beside the share,
        # its cube and constant values)
        retention * shrinks.tight_kept**2,
    )


@dataclass(slots=True)
class _Shrinks:
    """Per slot: tokens once shrunk, how (TRIM, MASK or KEEP), the shrunk
    texts, and which excerpts keep anchor lines or a tool output's scored lines."""

    tokens: FloatArray
    action: npt.NDArray[np.int8]
    texts: dict[int, tuple[str, int]]
    anchored: npt.NDArray[np.bool_]
    lined: npt.NDArray[np.bool_]
    tight_tokens: FloatArray
    tight_texts: dict[int, tuple[str, int]]
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


def _shrink_options(
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
    texts: dict[int, tuple[str, int]] = {}
    tight_texts: dict[int, tuple[str, int]] = {}
    tight_kept = np.ones(n)
    if options.strategy != Strategy.HYBRID or options.aggressive:
        return _Shrinks(tokens, action, texts, anchored, lined, tokens, tight_texts, tight_kept)
    alive = cols.alive[:n] & ~root[:n]
    multiline = alive & (cols.lines[:n] >= tuning.trim_min_lines)
    analyze = analyzer_of(session)
    links = rare_terms(session, analyze(options.query), tuning.link_df_share)
    book, count_tokens = tools.book, tools.count_tokens
    outputs = np.zeros(n, dtype=bool)
    if book is not None and tuning.line_excerpts:
        outputs = multiline & (cols.kind[:n] == _TOOL_RESULT)
    if book is not None and tuning.anchored_excerpts:
        excerpt = book.excerpts(
            multiline & ~outputs,
            (links, tuning.anchor_context),
            lambda slot: _anchored_excerpt(
                session, book, slot, links, analyze, tuning, count_tokens
            ),
        )
        anchored = multiline & ~outputs & (excerpt >= 0)
        action[anchored] = _TRIM
        tokens[anchored] = excerpt[anchored]
        texts = _ShrunkTexts(book, tokens)
    if book is not None and outputs.any():
        facts = session_facts(
            session,
            options.query,
            analyze,
            rare_share=tuning.line_rare_share,
            weights=line_value.LineWeights(
                tuning.line_relevance,
                tuning.line_identifier,
                tuning.line_cited,
                tuning.line_error,
                tuning.line_echoed,
            ),
        )
        made = output_levels(
            session, book, np.flatnonzero(outputs).tolist(), facts, tuning, count_tokens
        )
        for slot, levels in made.items():
            if levels:
                texts[slot], tokens[slot], lined[slot] = levels[0].made, levels[0].made[1], True
            if len(levels) > 1:
                tight_texts[slot], tight_kept[slot] = levels[1].made, levels[1].kept
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
            texts[slot] = (text, count_tokens(text))
        else:
            texts[slot] = masked(chunk.id, chunk.text, stash, entry.tokens, count_tokens)
        tokens[slot] = texts[slot][1]
    tight_tokens = tokens.copy()
    for slot, (_, after) in tight_texts.items():
        tight_tokens[slot] = after
    return _Shrinks(tokens, action, texts, anchored, lined, tight_tokens, tight_texts, tight_kept)


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
    kept = line_value.with_context(anchors, len(split.lines), tuning.anchor_context)
    text, after = anchored_excerpt(chunk.id, split.lines, kept, entry.stash_id(), count_tokens)
    return (text, after) if after < entry.tokens * tuning.shrink_worth else None
