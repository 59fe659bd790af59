"""What a session says about the lines of its tool outputs, for one plan.

Gathers, once per plan, the facts `line_value` scores lines with: the rarity
of the query's terms, the names and line numbers the model has written (and
the names the query holds), and, per output, which of its lines other chunks
echo or the model quoted. `facts_of` also returns the key that says when an
output's excerpt must be made again: the facts restricted to what the text
holds, so an output keeps its excerpt while the session grows around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import is_

import numpy as np
import numpy.typing as npt

from ctxopt.model import Role
from ctxopt.scoring.line_value import (
    LineFacts,
    LineWeights,
    cited_numbers,
    model_facts,
    names,
    profile,
)
from ctxopt.scoring.terms import rare_terms
from ctxopt.session import SessionView
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.line_book import LineBook
from ctxopt.text.lines import text_lines

_MODEL = int(Role.MODEL)


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """Facts of one plan shared by every output: query term -> weight (its
    idf, for the rare ones), and the names and numbers the model wrote.
    `term_holders` are the slots whose text holds one of those terms (the
    session index knows): only their lines are searched for them."""

    query_weights: dict[str, float]
    identifiers: frozenset[str]
    cited: frozenset[int]
    analyzer: Analyzer
    weights: LineWeights
    term_holders: frozenset[int] = frozenset()
    # what `identifiers` and `cited` were pooled from (None: not known): the
    # model's texts, the query's names (`grown_facts` finds what a later plan
    # added from them)
    model_texts: tuple[str, ...] | None = None
    query_names: frozenset[str] = frozenset()


def session_facts(
    session: SessionView,
    query: str,
    analyzer: Analyzer,
    *,
    rare_share: float,
    weights: LineWeights,
    texts: npt.NDArray[np.object_],
) -> SessionFacts:
    """The plan's `SessionFacts`; `texts` is each slot's text (`slot_facts`)."""
    n = session.n_slots
    cols = session.columns
    model_texts = tuple(texts[np.flatnonzero(cols.alive[:n] & (cols.role[:n] == _MODEL))].tolist())
    written, cited = model_facts(model_texts)
    query_weights: dict[str, float] = {}
    if weights.relevance > 0:
        docs = len(session)
        for term in rare_terms(session, analyzer.terms(query), rare_share):
            df = session.index.document_frequency(term)
            query_weights[term] = math.log(1.0 + (docs - df + 0.5) / (df + 0.5))
    holders = session.index.holders(query_weights)
    query_names = names(query)
    return SessionFacts(
        query_weights,
        _with_query_names(written, query_names),
        cited,
        analyzer,
        weights,
        holders,
        model_texts,
        query_names,
    )


def _with_query_names(written: frozenset[str], query_names: frozenset[str]) -> frozenset[str]:
    """`written | query_names`: `written` itself when it holds the query's
    names (no copy of a pool of thousands of names, and the same object for
    `grown_facts` while no model text came). Not cached: a cache of unions
    would hold one pool-sized set per entry."""
    return written if query_names <= written else written | query_names


def grown_facts(
    before: SessionFacts, now: SessionFacts
) -> tuple[frozenset[str], frozenset[int]] | None:
    """The names and cited numbers `now` holds and `before` does not, when
    `now` pooled `before`'s model texts (the same objects, first) and more,
    with the same query names: then `before`'s are a subset of `now`'s, and
    the difference is what the added texts hold beyond `before`'s (no pass
    over thousands of names). None otherwise."""
    if before.identifiers is now.identifiers and before.cited is now.cited:
        return frozenset(), frozenset()
    held, texts = before.model_texts, now.model_texts
    if held is None or texts is None:
        return None
    size = len(held)
    if (
        before.query_names != now.query_names
        or size > len(texts)
        or (size and texts[size - 1] is not held[-1])
        or not all(map(is_, held, texts))
    ):
        return None
    added = texts[size:]
    return (
        frozenset().union(*map(names, added)) - before.identifiers,
        frozenset().union(*map(cited_numbers, added)) - before.cited,
    )


def facts_of(
    facts: SessionFacts,
    book: LineBook,
    slot: int,
    text: str,
    found: tuple[dict[int, float], tuple[tuple[int, float], ...]] | None = None,
) -> tuple[LineFacts, tuple[object, ...]]:
    """The facts about one output's lines, and the key they depend on;
    `found`: `relevance_of`'s answer for it, when the caller has it."""
    lines = profile(text)
    identifiers = facts.identifiers & lines.all_names
    cited = facts.cited & lines.all_numbers
    echoed = frozenset(book.anchors(slot)) | book.quoted_lines(slot)
    relevance, added = found if found is not None else relevance_of(facts, slot, text)
    key = (identifiers, cited, echoed, added, facts.weights)
    return LineFacts(relevance, identifiers, cited, echoed), key


def relevance_of(
    facts: SessionFacts, slot: int, text: str
) -> tuple[dict[int, float], tuple[tuple[int, float], ...]]:
    """Per line of the output, the summed weight of the query terms it holds,
    and what `line_scores` adds per line for them (the part of `facts_of`'s
    key the query makes)."""
    relevance: dict[int, float] = {}
    if facts.query_weights and slot in facts.term_holders:
        postings = text_lines(text).term_lines(frozenset(facts.query_weights), facts.analyzer)
        for term, weight in facts.query_weights.items():
            for number in postings[term]:
                relevance[number] = relevance.get(number, 0.0) + weight
    # what `line_scores` adds per line, not the raw weights: as a session
    # grows every query term's rarity moves a little, and a text with one of
    # the terms (or the same mix) still scores its lines the same
    top = max(relevance.values(), default=0.0)
    scale = facts.weights.relevance
    added = sorted((n, scale * weight / top) for n, weight in relevance.items()) if top > 0 else []
    return relevance, tuple(added)


def sole_term(facts: SessionFacts, slot: int, text: str) -> str | None:
    """The one query term on the output's lines ("" when none is, None when
    two or more are): with one, what `relevance_of` adds per line does not
    move with the term's weight (`planner.line_levels`)."""
    if not facts.query_weights or slot not in facts.term_holders:
        return ""
    postings = text_lines(text).term_lines(frozenset(facts.query_weights), facts.analyzer)
    held = [term for term in facts.query_weights if postings[term]]
    return "" if not held else held[0] if len(held) == 1 else None
