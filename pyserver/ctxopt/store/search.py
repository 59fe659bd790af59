"""Stash search: plain user text to an FTS5 query, filters to SQL, ranked by
FTS5's `bm25()`."""

from __future__ import annotations

import re

from ctxopt.model import StashFilter

# Snippet markers: rare in code and logs, so a reader sees where the match is.
SNIPPET_OPEN = "«"
SNIPPET_CLOSE = "»"
SNIPPET_ELLIPSIS = "…"
SNIPPET_TOKENS = 24
BROWSE_SNIPPET_CHARS = 160
# A query's first distinct words; more only slows the match without changing the top hits.
MAX_QUERY_WORDS = 64

_WORD = re.compile(r"[^\W_]+")


def fts_query(text: str) -> str | None:
    """An FTS5 query for plain user text, None when it holds no words.

    Every word is quoted (so `AND`, `NEAR`, `*`, `-`, `"` are text, never syntax);
    a hit needs any word, and the whole text as a phrase adds to the bm25 score,
    so an exact phrase outranks a single word.

    >>> fts_query('retry "pool" AND')
    '"retry pool AND" OR "retry" OR "pool" OR "AND"'
    """
    words = list(dict.fromkeys(_WORD.findall(text)))[:MAX_QUERY_WORDS]
    if not words:
        return None
    terms = [f'"{w}"' for w in words]
    if len(words) > 1:
        terms.insert(0, '"' + " ".join(_WORD.findall(text)[:MAX_QUERY_WORDS]) + '"')
    return " OR ".join(terms)


def search_sql(
    owner: str, session_id: str, query: str, filters: StashFilter, limit: int, offset: int
) -> tuple[str, list[object]] | None:
    """The statement and arguments of one page of hits (one more row than `limit`,
    so the caller knows whether a next page exists); None when the query has no
    words. A blank query lists the filtered entries newest first."""
    where, params = _filter_sql(owner, session_id, filters)
    if not query.strip():
        sql = (
            "SELECT s.stash_id, s.chunk_id, s.session_id, s.kind, 0.0, "
            "CASE WHEN length(s.text) > ? THEN substr(s.text, 1, ?) || ? ELSE s.text END, "
            "s.tokens, s.action, s.stashed_at_ms "
            f"FROM stash AS s WHERE {where} "
            "ORDER BY s.stashed_at_ms DESC, s.id DESC LIMIT ? OFFSET ?"
        )
        cut: list[object] = [BROWSE_SNIPPET_CHARS, BROWSE_SNIPPET_CHARS, SNIPPET_ELLIPSIS]
        return sql, [*cut, *params, limit + 1, offset]
    match = fts_query(query)
    if match is None:
        return None
    sql = (
        "SELECT s.stash_id, s.chunk_id, s.session_id, s.kind, -bm25(stash_fts), "
        "snippet(stash_fts, 0, ?, ?, ?, ?), s.tokens, s.action, s.stashed_at_ms "
        "FROM stash_fts JOIN stash AS s ON s.id = stash_fts.rowid "
        f"WHERE stash_fts MATCH ? AND {where} "
        "ORDER BY bm25(stash_fts), s.id LIMIT ? OFFSET ?"
    )
    snippet: list[object] = [SNIPPET_OPEN, SNIPPET_CLOSE, SNIPPET_ELLIPSIS, SNIPPET_TOKENS]
    return sql, [*snippet, match, *params, limit + 1, offset]


def _filter_sql(owner: str, session_id: str, filters: StashFilter) -> tuple[str, list[object]]:
    clauses = ["s.owner = ?"]
    params: list[object] = [owner]
    if session_id:
        clauses.append("s.session_id = ?")
        params.append(session_id)
    if filters.kinds:
        clauses.append(f"s.kind IN ({', '.join('?' * len(filters.kinds))})")
        params.extend(int(k) for k in filters.kinds)
    for tag in dict.fromkeys(filters.tags):
        clauses.append("EXISTS (SELECT 1 FROM json_each(s.tags) WHERE value = ?)")
        params.append(tag)
    if filters.file_path:
        clauses.append("s.file_path = ?")
        params.append(filters.file_path)
    if filters.task_id:
        clauses.append("s.task_id = ?")
        params.append(filters.task_id)
    if filters.from_ms:
        clauses.append("s.stashed_at_ms >= ?")
        params.append(filters.from_ms)
    if filters.to_ms:
        clauses.append("s.stashed_at_ms < ?")
        params.append(filters.to_ms)
    return " AND ".join(clauses), params
