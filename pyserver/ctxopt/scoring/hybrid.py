"""Hybrid score: BM25 + recency + embedding + boost, plus the GC term.

    total = w_bm25 * bm25 + w_recency * recency + w_embedding * embedding
            + w_boost * boost          (these four renormalised to sum to 1
                                        over the signals present)
          + w_gc * gc                  (on top: structure, see structure.py)

Every component is a numpy column over the session's slots; nothing loops over
chunks in Python.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import numpy as np
import numpy.typing as npt

from ctxopt.model import Breakdown, Weights
from ctxopt.roots import Marks
from ctxopt.scoring.embedding import cosine
from ctxopt.scoring.recency import recency
from ctxopt.scoring.structure import structure_term
from ctxopt.session import SessionView
from ctxopt.text.bm25 import TermIndex

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Scores:
    """Per-slot score columns of one session for one query."""

    bm25: FloatArray
    recency: FloatArray
    gc: FloatArray
    embedding: FloatArray
    boost: FloatArray
    total: FloatArray
    marks: Marks

    def breakdowns(self, slots: npt.NDArray[np.intp]) -> list[Breakdown]:
        """`breakdown` for many slots, column by column (one Python object each)."""
        columns = (
            self.bm25[slots].tolist(),
            self.recency[slots].tolist(),
            self.gc[slots].tolist(),
            self.embedding[slots].tolist(),
            self.boost[slots].tolist(),
            self.marks.reachable[slots].tolist(),
            self.marks.root[slots].tolist(),
            self.total[slots].tolist(),
        )
        return [Breakdown(*row) for row in zip(*columns, strict=True)]

    def breakdown(self, slot: int) -> Breakdown:
        return Breakdown(
            bm25=float(self.bm25[slot]),
            recency=float(self.recency[slot]),
            gc=float(self.gc[slot]),
            embedding=float(self.embedding[slot]),
            boost=float(self.boost[slot]),
            reachable=bool(self.marks.reachable[slot]),
            root=bool(self.marks.root[slot]),
            total=float(self.total[slot]),
        )


def relevance_weights(weights: Weights, with_embedding: bool) -> tuple[float, float, float, float]:
    """(bm25, recency, embedding, boost) renormalised over the signals present."""
    embedding = weights.embedding if with_embedding else 0.0
    total = weights.bm25 + weights.recency + embedding + weights.boost
    if total <= 0:
        return 0.0, 0.0, 0.0, 0.0
    return weights.bm25 / total, weights.recency / total, embedding / total, weights.boost / total


def normalised_bm25(session: SessionView, query_terms: list[str]) -> FloatArray:
    """BM25 scaled so the best live chunk scores 1 for this query."""
    raw = session.index.scores(query_terms, session.n_slots) if query_terms else None
    if raw is None:
        return np.zeros(session.n_slots, dtype=np.float64)
    top = float(raw.max(initial=0.0))
    return raw / top if top > 0 else np.zeros_like(raw)


def expanded_relevance(
    session: SessionView,
    query_terms: list[str],
    relevance: FloatArray,
    *,
    weight: float,
    top_docs: int,
    added_terms: int,
) -> FloatArray:
    """Pseudo-relevance feedback: `relevance` plus `weight` times the
    (normalised) BM25 of the expansion terms, the `added_terms` terms the top
    `top_docs` hits hold and the query lacks, rarest first
    (TermIndex.feedback_scores), renormalised so the best scores 1. A turn
    that answers in other words than the question still scores."""
    if weight <= 0 or not query_terms or not relevance.any():
        return relevance
    top = np.argpartition(-relevance, top_docs)[:top_docs] if len(relevance) > top_docs else None
    top = np.flatnonzero(relevance) if top is None else top
    top = np.sort(top[relevance[top] > 0])
    raw = session.index.feedback_scores(top.tolist(), query_terms, added_terms, session.n_slots)
    best = float(raw.max(initial=0.0))
    if best <= 0:
        return relevance
    grown = relevance + weight * (raw / best)
    return grown / float(grown.max())


# per index, the last query's relevance and what it was made from: a warm plan
# of an unchanged session asks again with the same terms (the index's version
# bumps on every change of a text, so a stale entry never matches)
_last_relevance: WeakKeyDictionary[TermIndex, tuple[tuple[object, ...], FloatArray]] = (
    WeakKeyDictionary()
)
_last_relevance_lock = threading.Lock()


def query_relevance(
    session: SessionView,
    query_terms: list[str],
    *,
    weight: float,
    top_docs: int,
    added_terms: int,
) -> FloatArray:
    """`expanded_relevance` of the normalised BM25, read-only, reused while
    the index and the request stay the same."""
    index = session.index
    key = (index.version, session.n_slots, tuple(query_terms), weight, top_docs, added_terms)
    with _last_relevance_lock:
        found = _last_relevance.get(index)
    if found is not None and found[0] == key:
        return found[1]
    relevance = expanded_relevance(
        session,
        query_terms,
        normalised_bm25(session, query_terms),
        weight=weight,
        top_docs=top_docs,
        added_terms=added_terms,
    )
    relevance.setflags(write=False)  # later plans read it: nobody may write into it
    with _last_relevance_lock:
        _last_relevance[index] = (key, relevance)
    return relevance


def spread_to_neighbours(
    relevance: FloatArray, live: npt.NDArray[np.intp], share: float
) -> FloatArray:
    """Each live chunk gets at least `share` of its prompt neighbours' relevance:
    the turn before or after a hit often holds the question or the answer."""
    if share <= 0 or len(live) < 2:
        return relevance
    values = relevance[live]
    spread = values.copy()
    np.maximum(spread[1:], share * values[:-1], out=spread[1:])
    np.maximum(spread[:-1], share * values[1:], out=spread[:-1])
    out = relevance.copy()
    out[live] = spread
    return out


def score_session(
    session: SessionView,
    *,
    query_terms: list[str],
    query_embedding: tuple[float, ...],
    marks: Marks,
    weights: Weights,
    half_life_turns: float,
    old_generation_after: int,
    neighbour_share: float,
    feedback_weight: float,
    feedback_docs: int,
    feedback_terms: int,
) -> Scores:
    """Every slot's components and weighted total (dead slots score 0); the
    knobs' values live in `ctxopt.planner.knobs` (the engine passes them)."""
    n = session.n_slots
    cols = session.columns
    alive = cols.alive[:n]
    relevance = query_relevance(
        session,
        query_terms,
        weight=feedback_weight,
        top_docs=feedback_docs,
        added_terms=feedback_terms,
    )
    bm25 = spread_to_neighbours(relevance, session.live, neighbour_share)
    recent = recency(cols.turn[:n], alive, half_life_turns)
    with_embedding = bool(query_embedding) and bool(session.embeddings)
    embedding = (
        cosine(np.asarray(query_embedding, dtype=np.float32), session.embeddings, n)
        if with_embedding
        else np.zeros(n, dtype=np.float64)
    )
    boost = cols.boost[:n].copy()
    gc = structure_term(
        cols.kind[:n], cols.refcount[:n], session.survived(), marks.reachable, old_generation_after
    )
    w_bm25, w_recency, w_embedding, w_boost = relevance_weights(weights, with_embedding)
    total = (
        w_bm25 * bm25
        + w_recency * recent
        + w_embedding * embedding
        + w_boost * boost
        + weights.gc * gc
    )
    total[~alive] = 0.0
    return Scores(bm25, recent, gc, embedding, boost, total, marks)
