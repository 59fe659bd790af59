"""Stash search with the live analyzer: the FTS5 index holds each original's
analysed terms, a query is analysed the same way, snippets come from the
original text.

Why terms, not text: FTS5 takes custom tokenizers only through its C API, so the
index is fed the analyzer's output (space-joined, the `terms` column of `stash`)
through a tokenizer that keeps each term whole (`FTS_TOKENIZER`). One analysed
term is one FTS token, so an entry's length and term frequencies are the ones the
live BM25 index sees for the same text, and a query matches in the stash exactly
the chunks it matches in a session.

Ranking is FTS5's `bm25()`. Its idf is the live index's, log((N - n + 0.5) /
(n + 0.5)) (both keep a non-positive idf positive), so a one-term query orders
the same texts as the live BM25 does (the order then depends on tf over length
only). Two differences remain for longer queries: FTS5 fixes k1 = 1.2 where the
live index uses 1.5, and the terms as an exact phrase add to the score (an exact
phrase outranks scattered words). The statistics are the owner's (ranking.py:
one owner's originals never move another's ranking); the live ones are the
session's, and the live score adds feedback and neighbour terms.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ctxopt.model import StashFilter

Terms = Callable[[str], list[str]]  # an analyzer: text -> its terms, in order

# A term holds word characters (any non-ASCII one, `_`, digits) and, from an
# identifier-splitting analyzer, `.` and `/`. `ascii` never folds or splits a
# non-ASCII character and stems nothing; `tokenchars` keeps the rest whole.
FTS_TOKENIZER = "ascii tokenchars '_./'"
# Bump when the indexed form of terms changes: stores reindex at open (2: an entry's
# size_bytes counts its terms too).
INDEX_FORMAT = 2
# Words whose terms change with every analyzer option: stopwords, stemming,
# identifier splitting (camelCase, snake_case, dotted, slashed), non-ASCII.
_IDENTITY_PROBE = (
    "The connections were failing in parseConfigFile, snake_case_name, os.path.join "
    "and src/app/main.py on HTTPServer2 in Straße"
)

# Snippet markers: rare in code and logs, so a reader sees where the match is.
SNIPPET_OPEN = "«"
SNIPPET_CLOSE = "»"
SNIPPET_ELLIPSIS = "…"
SNIPPET_CHARS = 160  # text shown around the matches (markers and ellipses aside)
SNIPPET_BLOCK = 64  # pieces analysed together to skip the text that does not match
# Text read for the best pieces once some match: a long original shows its first
# matches rather than paying an analysis of all of it for every hit.
SNIPPET_SCAN_CHARS = 64_000
BROWSE_SNIPPET_CHARS = 160
# A query's first terms; more only slow the match without changing the top hits.
MAX_QUERY_TERMS = 64

# A word as a reader sees it: dotted and slashed names stay one word.
_WORD = re.compile(r"\w+(?:[./]\w+)*")


def term_count(column: str) -> str:
    """SQL for the number of terms in a `terms` value (space-joined, one FTS token each)."""
    return f"(length({column}) - length(replace({column}, ' ', '')) + ({column} != ''))"


def index_text(terms: Sequence[str]) -> str:
    """The indexed form of an original's terms (the `terms` column)."""
    return " ".join(terms)


def analyzer_identity(terms: Terms) -> str:
    """What the index depends on: the index format and the analyzer's terms for a
    probe text that every analyzer option changes. A store records it and
    reindexes at open when the engine's analyzer gives another."""
    return f"v{INDEX_FORMAT}: {index_text(terms(_IDENTITY_PROBE))}"


Phrase = tuple[str, ...]


def phrases(terms: Sequence[str]) -> list[Phrase]:
    """A query's phrases: its first MAX_QUERY_TERMS terms as one phrase (with
    more than one distinct term), then each term, a repeated one again.

    >>> phrases(["retri", "pool", "retri"])
    [('retri', 'pool', 'retri'), ('retri',), ('pool',), ('retri',)]
    """
    terms = list(terms[:MAX_QUERY_TERMS])
    single: list[Phrase] = [(t,) for t in terms]
    return [tuple(terms), *single] if len(set(terms)) > 1 else single


def match_query(terms: Sequence[str]) -> str | None:
    """An FTS5 query for a query's analysed terms, None when there are none.

    Every phrase is quoted, so nothing a user types is FTS5 syntax; a hit needs
    any term; a repeated term counts again (as in the live BM25); and with more
    than one distinct term, all of them as a phrase add to the score.

    >>> match_query(["retri", "pool"])
    '"retri pool" OR "retri" OR "pool"'
    """
    found = phrases(terms)
    return " OR ".join(quoted(" ".join(p)) for p in found) if found else None


def quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def browse_sql(
    owner: str, session_id: str, filters: StashFilter, limit: int, offset: int
) -> tuple[str, list[object]]:
    """The statement and arguments of one page of the filtered entries, newest
    first, each with the start of its text (one more row than `limit`, so the
    caller knows whether a next page exists)."""
    where, params = filter_sql(owner, session_id, filters)
    sql = (
        f"SELECT {_HIT_COLUMNS.format(score='0.0', text=_BROWSE_TEXT)} "
        f"FROM stash AS s WHERE {where} "
        "ORDER BY s.stashed_at_ms DESC, s.id DESC LIMIT ? OFFSET ?"
    )
    cut: list[object] = [BROWSE_SNIPPET_CHARS, BROWSE_SNIPPET_CHARS, SNIPPET_ELLIPSIS]
    return sql, [*cut, *params, limit + 1, offset]


def bm25_sql(
    owner: str, session_id: str, match: str, filters: StashFilter, limit: int, offset: int
) -> tuple[str, list[object]]:
    """One page of hits ranked by FTS5's own bm25(), as `hits_sql` reads them
    (id first): right when `owner` holds every entry, so the table's statistics
    are the owner's. The page is ranked on ids alone, then its originals are read."""
    where, params = filter_sql(owner, session_id, filters)
    columns = _HIT_COLUMNS.format(score="-page.rank", text="s.text")
    sql = (
        "WITH page AS ("
        "SELECT s.id AS id, bm25(stash_fts) AS rank "
        "FROM stash_fts JOIN stash AS s ON s.id = stash_fts.rowid "
        f"WHERE stash_fts MATCH ? AND {where} "
        "ORDER BY rank, s.id LIMIT ? OFFSET ?) "
        f"SELECT s.id, {columns} FROM page JOIN stash AS s ON s.id = page.id "
        "ORDER BY page.rank, s.id"
    )
    return sql, [match, *params, limit, offset]


def hits_sql(count: int) -> str:
    """The statement reading `count` ranked hits by row id, each with its whole
    original (the caller cuts the snippet and puts the rows in rank order)."""
    marks = ", ".join("?" * count)
    columns = _HIT_COLUMNS.format(score="0.0", text="s.text")
    return f"SELECT s.id, {columns} FROM stash AS s WHERE s.id IN ({marks})"


_HIT_COLUMNS = (
    "s.stash_id, s.chunk_id, s.session_id, s.kind, {score}, {text}, "
    "s.tokens, s.action, s.stashed_at_ms"
)
_BROWSE_TEXT = "CASE WHEN length(s.text) > ? THEN substr(s.text, 1, ?) || ? ELSE s.text END"


def snippet(text: str, wanted: frozenset[str], terms: Terms) -> str:
    """Where `text` matches: its pieces (lines; a long line cut at spaces into
    pieces of at most SNIPPET_CHARS) holding the most distinct `wanted` terms,
    earliest first, as many as fit in SNIPPET_CHARS together; shown in text order
    with every matching word marked and `…` where text is left out. The start of
    the text when no piece matches.

    >>> from ctxopt.text.analyzer import Analyzer
    >>> snippet("setup\\nthe retries failed\\nteardown", frozenset({"retri"}), Analyzer().terms)
    '… the «retries» failed …'
    """
    pieces = _pieces(text)
    shown = _best_pieces(pieces, wanted, terms)
    if not shown:
        return text[:SNIPPET_CHARS] + (SNIPPET_ELLIPSIS if len(text) > SNIPPET_CHARS else "")

    def mark(word: re.Match[str]) -> str:
        hit = not wanted.isdisjoint(terms(word[0]))
        return f"{SNIPPET_OPEN}{word[0]}{SNIPPET_CLOSE}" if hit else word[0]

    parts: list[str] = []
    previous = -1
    for index in shown:
        if index != previous + 1:
            parts.append(SNIPPET_ELLIPSIS)
        parts.append(_WORD.sub(mark, pieces[index]))
        previous = index
    if previous < len(pieces) - 1:
        parts.append(SNIPPET_ELLIPSIS)
    return " ".join(parts)


def _best_pieces(pieces: list[str], wanted: frozenset[str], terms: Terms) -> list[int]:
    """The indexes of the pieces a snippet shows, in text order.

    A text longer than a block is analysed SNIPPET_BLOCK pieces at a time first,
    so text without a match costs one analyzer call per block. The scan stops
    once pieces holding every wanted term fill the snippet (no later piece can
    outrank them), or once past SNIPPET_SCAN_CHARS with a match found."""
    found: list[tuple[int, int]] = []  # (-distinct wanted terms, index)
    complete_chars = scanned_chars = 0
    for start in range(0, len(pieces), SNIPPET_BLOCK):
        block = pieces[start : start + SNIPPET_BLOCK]
        joined = " ".join(block)
        scanned_chars += len(joined)
        # a text of one block: the check would cost what the pieces' analysis costs
        if len(pieces) > SNIPPET_BLOCK and wanted.isdisjoint(terms(joined)):
            continue
        for index, piece in enumerate(block, start):
            distinct = len(wanted.intersection(terms(piece)))
            if distinct:
                found.append((-distinct, index))
            if distinct == len(wanted):
                complete_chars += len(piece)
                if complete_chars >= SNIPPET_CHARS:
                    break
        if complete_chars >= SNIPPET_CHARS or (scanned_chars >= SNIPPET_SCAN_CHARS and found):
            break
    shown: list[int] = []
    room = SNIPPET_CHARS
    for _, index in sorted(found):
        if len(pieces[index]) <= room:
            shown.append(index)
            room -= len(pieces[index])
    return sorted(shown)


def _pieces(text: str) -> list[str]:
    """The non-blank lines of `text`, stripped; a line longer than SNIPPET_CHARS
    cut at its last space within the limit (hard cut when it has none)."""
    pieces: list[str] = []
    for line in text.splitlines():
        start, end = 0, len(line)
        while start < end:
            stop = end
            if end - start > SNIPPET_CHARS:
                cut = line.rfind(" ", start + 1, start + SNIPPET_CHARS + 1)
                stop = cut if cut > start else start + SNIPPET_CHARS
            piece = line[start:stop].strip()
            if piece:
                pieces.append(piece)
            start = stop
    return pieces


def filter_sql(owner: str, session_id: str, filters: StashFilter) -> tuple[str, list[object]]:
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
