"""Stash search ranking over each owner's own statistics.

FTS5's `bm25()` takes its statistics (entries, average length, entries holding
a term) from the whole table, so one owner's originals would move another's
ranking. FTS5 still finds the matches; the score is FTS5's bm25 formula again
(its k1 and b, its idf with non-positive values kept positive, every phrase of
the query counted as `search.match_query` writes it), over the owner's
entries only: their count and total terms from `stash_owner_totals` (kept by
triggers), each phrase's entries from an FTS5 match restricted to the owner.
When the owner holds every entry, `bm25()` itself ranks (the same scores,
at FTS5's speed).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import Any

from ctxopt.model import StashFilter
from ctxopt.store.search import (
    Phrase,
    bm25_sql,
    filter_sql,
    hits_sql,
    match_query,
    phrases,
    quoted,
)

# FTS5's bm25() constants (sqlite/ext/fts5/fts5_aux.c), so scores stay the ones it gave
K1 = 1.2
B = 0.75
MIN_IDF = 1e-6  # FTS5 keeps a non-positive idf (a phrase in most entries) at this

# Every position of every indexed term (`term = ?` seeks), per connection: `Store`
# creates it once open
VOCABULARY = "temp.stash_vocab"
VOCABULARY_DDL = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {VOCABULARY} USING fts5vocab(main, stash_fts, instance)"
)
# CROSS JOIN keeps FTS5 the outer loop: the match runs once, not once per owner row
_MATCHES = "FROM stash_fts CROSS JOIN stash AS s ON s.id = stash_fts.rowid WHERE stash_fts MATCH ?"
_MATCHES_SIZED = (
    "FROM stash_fts CROSS JOIN stash AS s ON s.id = stash_fts.rowid "
    "JOIN stash_fts_docsize AS d ON d.id = s.id WHERE stash_fts MATCH ?"
)


def ranked_page(
    cur: sqlite3.Cursor,
    owner: str,
    session_id: str,
    terms: Sequence[str],
    filters: StashFilter,
    limit: int,
    offset: int,
) -> list[tuple[Any, ...]]:
    """The rows (as `search.hits_sql` reads them, less the id) of one page of
    `owner`'s entries matching `terms`, best first, their scores in column 4."""
    others = cur.execute(
        "SELECT 1 FROM stash_owner_totals WHERE owner != ? AND entries > 0 LIMIT 1", (owner,)
    ).fetchone()
    match = match_query(terms)
    if others is None and match is not None:  # the table's statistics are the owner's
        rows = cur.execute(*bm25_sql(owner, session_id, match, filters, limit, offset))
        return [row[1:] for row in rows]
    ranked = ranked_ids(cur, owner, session_id, terms, filters)[offset : offset + limit]
    found = {row[0]: row[1:] for row in cur.execute(hits_sql(len(ranked)), [i for i, _ in ranked])}
    return [(*found[i][:4], score, *found[i][5:]) for i, score in ranked]


def ranked_ids(
    cur: sqlite3.Cursor,
    owner: str,
    session_id: str,
    terms: Sequence[str],
    filters: StashFilter,
) -> list[tuple[int, float]]:
    """The row ids of `owner`'s entries matching `terms` (and the filters), best
    first, with their scores (higher is better; ties by row id)."""
    query, match = phrases(terms), match_query(terms)
    if match is None:
        return []
    where, params = filter_sql(owner, session_id, filters)
    # an entry's length from FTS5's own docsize table: reading `terms` from the row
    # would walk the overflow pages of its text first
    sql = f"SELECT s.id, d.sz {_MATCHES_SIZED} AND {where}"
    lengths = {row_id: _varint(size) for row_id, size in cur.execute(sql, [match, *params])}
    if not lengths:
        return []
    totals = cur.execute(
        "SELECT entries, terms FROM stash_owner_totals WHERE owner = ?", (owner,)
    ).fetchone()
    entries, total_terms = totals if totals else (0, 0)
    average = total_terms / entries if entries and total_terms else 1.0
    distinct = set(query)
    weight = {p: _idf(cur, owner, p, entries) for p in distinct}
    found = {p: _occurrences(cur, owner, p, lengths) for p in distinct}
    scored: list[tuple[float, int]] = []
    for row_id, length in lengths.items():
        norm = K1 * (1 - B + B * length / average)
        score = 0.0
        for phrase in query:
            n = found[phrase].get(row_id, 0)
            if n:
                score += weight[phrase] * n * (K1 + 1) / (n + norm)
        scored.append((-score, row_id))
    scored.sort()
    return [(row_id, -negated) for negated, row_id in scored]


def _idf(cur: sqlite3.Cursor, owner: str, phrase: Phrase, entries: int) -> float:
    holding = cur.execute(
        f"SELECT count(*) {_MATCHES} AND s.owner = ?", (quoted(" ".join(phrase)), owner)
    ).fetchone()[0]
    idf = math.log((entries - holding + 0.5) / (holding + 0.5))
    return idf if idf > 0 else MIN_IDF


def _occurrences(
    cur: sqlite3.Cursor, owner: str, phrase: Phrase, among: dict[int, int]
) -> dict[int, int]:
    """How often `phrase` occurs in each entry of `among` holding it: a term's
    count from the index's own positions (no original is read); a longer
    phrase's from the terms of the few entries that hold it."""
    if len(phrase) == 1:
        rows = cur.execute(
            f"SELECT doc, count(*) FROM {VOCABULARY} WHERE term = ? GROUP BY doc", phrase
        )
        return {doc: n for doc, n in rows if doc in among}
    size = len(phrase)
    holding = cur.execute(
        f"SELECT s.id, s.terms {_MATCHES} AND s.owner = ?", (quoted(" ".join(phrase)), owner)
    )
    counts: dict[int, int] = {}
    for doc, text in holding:
        if doc in among:
            words = text.split(" ")
            counts[doc] = sum(
                1
                for i in range(len(words) - size + 1)
                if words[i] == phrase[0] and tuple(words[i : i + size]) == phrase
            )
    return counts


def _varint(blob: bytes) -> int:
    """A docsize entry's token count (SQLite's varint: 7 bits a byte, the high
    bit set on every byte but the last; a ninth byte gives all 8)."""
    value = 0
    for byte in blob[:8]:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return (value << 8) | blob[8]
