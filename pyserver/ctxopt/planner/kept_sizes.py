"""A session's output sizes as its last plan left them, kept with that plan at
a clean close (engine/kept_plans.py), so that a restart's first plan after an
append, or for another query, remakes only the outputs a warm engine's plan
would (`line_levels.output_levels`), not every one (at 1,000 chunks ~65 ms of
a restart's plan after an append, profiled: ~25 ms of ~100 unprofiled).

Plain data for `marshal`: the knobs and facts the sizes were made with, and
per output what `output_levels` remembers of it but its text (a restart binds
each to the text it loads at the slot: the kept plan's digests say it is the
same) and the names and numbers its text holds (its profile's, which the
restart reads with the kept line facts: they were ~half the bytes). The
analyzer and the token counter are this process's. The next plan checks the
sizes as it checks a warm engine's: the knobs, then per output its tokens and
stash id, its echo lines (against the restart's own line book), the names
and numbers the model wrote and the query's terms.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ctxopt.planner.line_levels import LastLevels, TokenCount, last_sizes, remember_sizes
from ctxopt.planner.line_memo import Kept, LineLevel, Remembered
from ctxopt.scoring import line_value
from ctxopt.scoring.line_facts import SessionFacts
from ctxopt.scoring.line_value import LineWeights
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.line_book import LineBook
from ctxopt.text.lines import text_lines

PlainSizes = tuple[Any, ...]  # marshal's plain data


def kept_sizes(book: LineBook, text_at: Callable[[int], str | None]) -> PlainSizes | None:
    """The sizes `book`'s last plan remembers, each output's only while it is
    of the text the session holds at its slot (`text_at`: None when none is
    live there); None when no plan made any."""
    memo = last_sizes(book)
    if memo is None or memo.facts is None:
        return None
    f, w = memo.facts, memo.facts.weights
    facts = (f.query_weights, f.identifiers, f.cited, f.term_holders, f.query_names)
    outputs = []
    terms = f.query_weights.keys()
    for slot, was in memo.by_slot.items():
        if text_at(slot) != was.text:
            continue  # remade by the next plan, as a new output is
        levels = tuple((level.text, level.tokens, level.kept) for level in was.levels)
        outputs.append(
            (
                *(slot, was.stash, was.tokens, was.anchors, was.quoted, was.relevance, levels),
                *(was.sole, _plain_kept(was.kept), _postings(was, terms, f.analyzer)),
            )
        )
    weights = (w.relevance, w.identifier, w.cited, w.error, w.echoed)
    return memo.knobs[:4], weights, facts, tuple(outputs)


def _plain_kept(kept: Kept | None) -> tuple[str, bytes, Any] | None:
    """`Kept` as plain data: its order's type code and bytes, and its sizes
    (the knobs are this process's object: not kept)."""
    return None if kept is None else (kept.order.typecode, kept.order.tobytes(), kept.sizes)


def _kept_of(plain: Any) -> Kept | None:
    """`_plain_kept`'s `Kept`, with no knobs: a restart's first remake of the
    output picks its lines again (the same lines still take their last
    bytes), and keeps this process's knobs from then on."""
    if plain is None:
        return None
    typecode, order, sizes = plain
    if not (isinstance(typecode, str) and isinstance(order, bytes) and isinstance(sizes, tuple)):
        raise TypeError("kept sizes: not an output's kept lines")
    return Kept(array(typecode, order), None, sizes)


def _postings(
    was: Remembered, terms: Iterable[str], analyzer: Analyzer
) -> dict[str, tuple[int, ...]] | None:
    """The lines of an output holding two or more of the query's terms that
    hold each (`TextLines.term_lines`, as the plan searched them): the next
    plan after an append searches them again (`relevance_of`), with the
    analyzer's word cache cold after a restart (~80 ms profiled at 10,000)."""
    if was.sole is not None:
        return None  # none or one term: the next plan of the query reads its remembered lines
    lines = text_lines(was.text)
    found = lines.postings
    if lines.analyzer is not analyzer:
        return None
    return {term: found[term] for term in terms if term in found}


def restore_sizes(
    book: LineBook,
    plain: PlainSizes,
    text_at: Callable[[int], str],
    n_slots: int,
    analyzer: Analyzer,
    count_tokens: TokenCount,
) -> None:
    """Remember `kept_sizes`' sizes as `book`'s last plan's (`text_at`: the
    text loaded at a slot). ValueError, TypeError, KeyError, IndexError when
    `plain` is not what `kept_sizes` made."""
    knobs, weights, facts, outputs = plain
    if not (isinstance(knobs, tuple) and isinstance(weights, tuple) and isinstance(facts, tuple)):
        raise TypeError("kept sizes: not the knobs, weights and facts")
    query_weights, identifiers, cited, holders, query_names = facts
    session_facts = SessionFacts(
        dict(query_weights),
        frozenset(identifiers),
        frozenset(cited),
        analyzer,
        LineWeights(*weights),
        frozenset(holders),
        None,  # not the texts a later plan pools: it compares the names instead
        frozenset(query_names),
    )
    memo = LastLevels(session_facts, (*knobs, session_facts.weights, analyzer, count_tokens))
    memo.tokens = np.zeros(n_slots, dtype=np.int64)
    memo.stash = np.full(n_slots, "", dtype=object)
    searched: list[tuple[str, dict[str, tuple[int, ...]]]] = []
    if not isinstance(outputs, tuple):
        raise TypeError("kept sizes: not a tuple of outputs")
    for output in outputs:
        slot, stash, tokens, anchors, quoted, relevance, levels, sole, kept, postings = output
        made = tuple(LineLevel(text, count, share) for text, count, share in levels)
        text = text_at(slot)
        if postings:
            searched.append((text, postings))
        profiled = line_value.profile(text)  # told at the load, as the plan reads it
        memo.by_slot[slot] = Remembered(
            *(stash, tokens, anchors, quoted, relevance, made),
            *(profiled.all_names, profiled.all_numbers, text, sole, _kept_of(kept)),
        )
        memo.sizes.put(slot, made)
        memo.tokens[slot], memo.stash[slot] = tokens, stash
    remember_sizes(book, memo)
    for text, postings in searched:
        text_lines(text).searched(postings, analyzer)
