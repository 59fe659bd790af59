"""The database schema, its migrations, and the checks made when a store opens."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager

from ctxopt.store.rows import CHUNK_COLUMNS
from ctxopt.store.search import FTS_TOKENIZER, Terms, analyzer_identity, index_text, term_count

SCHEMA_VERSION = 9

# Each owner's entries and terms: the statistics of its stash search (ranking.py)
_OWNER_TOTALS = """CREATE TABLE IF NOT EXISTS stash_owner_totals (
  owner TEXT PRIMARY KEY,
  entries INTEGER NOT NULL,
  terms INTEGER NOT NULL
)"""

_CHUNK_DDL = ",\n  ".join(f"{name} {decl}" for name, decl in CHUNK_COLUMNS)

_TABLES = f"""
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  collections INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, session_id);

CREATE TABLE IF NOT EXISTS chunks (
  session_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  born INTEGER NOT NULL,
  last_touched_ms INTEGER NOT NULL,
  {_CHUNK_DDL},
  origin TEXT NOT NULL DEFAULT '',
  term_blob BLOB,
  line_blob BLOB,
  UNIQUE (session_id, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunks_by_seq ON chunks (session_id, seq);

CREATE TABLE IF NOT EXISTS plan_counts (
  session_id TEXT PRIMARY KEY,
  blob BLOB NOT NULL
);

CREATE TABLE IF NOT EXISTS kept_sessions (
  session_id TEXT PRIMARY KEY,
  index_blob BLOB NOT NULL,
  facts_blob BLOB NOT NULL
);

CREATE TABLE IF NOT EXISTS kept_plans (
  session_id TEXT PRIMARY KEY,
  blob BLOB NOT NULL
);

CREATE TABLE IF NOT EXISTS stash (
  id INTEGER PRIMARY KEY,
  stash_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  owner TEXT NOT NULL,
  action INTEGER NOT NULL,
  reasons TEXT NOT NULL,
  score REAL NOT NULL,
  stashed_at_ms INTEGER NOT NULL,
  plan_id TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  ephemeral INTEGER NOT NULL,
  {_CHUNK_DDL},
  terms TEXT NOT NULL DEFAULT '',
  UNIQUE (session_id, stash_id)
);
CREATE INDEX IF NOT EXISTS stash_by_chunk ON stash (session_id, chunk_id, stashed_at_ms);
CREATE INDEX IF NOT EXISTS stash_by_group ON stash (session_id, group_id) WHERE group_id != '';
CREATE INDEX IF NOT EXISTS stash_by_age ON stash (session_id, ephemeral, stashed_at_ms);
CREATE INDEX IF NOT EXISTS stash_by_owner ON stash (owner, stashed_at_ms);

CREATE TABLE IF NOT EXISTS stash_totals (
  session_id TEXT PRIMARY KEY,
  entries INTEGER NOT NULL,
  size_bytes INTEGER NOT NULL,
  tokens INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TRIGGER IF NOT EXISTS stash_inserted AFTER INSERT ON stash BEGIN
  INSERT INTO stash_totals VALUES (new.session_id, 1, new.size_bytes, new.tokens)
    ON CONFLICT (session_id) DO UPDATE SET entries = entries + 1,
      size_bytes = size_bytes + excluded.size_bytes, tokens = tokens + excluded.tokens;
END;
CREATE TRIGGER IF NOT EXISTS stash_deleted AFTER DELETE ON stash BEGIN
  UPDATE stash_totals SET entries = entries - 1, size_bytes = size_bytes - old.size_bytes,
    tokens = tokens - old.tokens WHERE session_id = old.session_id;
END;
CREATE TRIGGER IF NOT EXISTS stash_updated AFTER UPDATE OF size_bytes, tokens ON stash BEGIN
  UPDATE stash_totals SET size_bytes = size_bytes - old.size_bytes + new.size_bytes,
    tokens = tokens - old.tokens + new.tokens WHERE session_id = new.session_id;
END;

{_OWNER_TOTALS};
CREATE TRIGGER IF NOT EXISTS stash_owner_inserted AFTER INSERT ON stash BEGIN
  INSERT INTO stash_owner_totals VALUES (new.owner, 1, {term_count("new.terms")})
    ON CONFLICT (owner) DO UPDATE SET entries = entries + 1, terms = terms + excluded.terms;
END;
CREATE TRIGGER IF NOT EXISTS stash_owner_deleted AFTER DELETE ON stash BEGIN
  UPDATE stash_owner_totals SET entries = entries - 1,
    terms = terms - {term_count("old.terms")} WHERE owner = old.owner;
END;
CREATE TRIGGER IF NOT EXISTS stash_owner_updated AFTER UPDATE OF owner, terms ON stash BEGIN
  UPDATE stash_owner_totals SET entries = entries - 1,
    terms = terms - {term_count("old.terms")} WHERE owner = old.owner;
  INSERT INTO stash_owner_totals VALUES (new.owner, 1, {term_count("new.terms")})
    ON CONFLICT (owner) DO UPDATE SET entries = entries + 1, terms = terms + excluded.terms;
END;
"""

# The search index: each original's analysed terms (search.py), kept in step with
# `stash.terms` by triggers, and rebuilt whole by `reindex`.
_FTS_TABLE = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS stash_fts USING fts5 (
  terms, content = 'stash', content_rowid = 'id', tokenize = "{FTS_TOKENIZER}"
);
"""
_FTS_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS stash_indexed AFTER INSERT ON stash BEGIN
  INSERT INTO stash_fts (rowid, terms) VALUES (new.id, new.terms);
END;
CREATE TRIGGER IF NOT EXISTS stash_unindexed AFTER DELETE ON stash BEGIN
  INSERT INTO stash_fts (stash_fts, rowid, terms) VALUES ('delete', old.id, old.terms);
END;
CREATE TRIGGER IF NOT EXISTS stash_reindexed AFTER UPDATE OF terms ON stash
WHEN old.terms IS NOT new.terms BEGIN
  INSERT INTO stash_fts (stash_fts, rowid, terms) VALUES ('delete', old.id, old.terms);
  INSERT INTO stash_fts (rowid, terms) VALUES (new.id, new.terms);
END;
"""
_FTS = _FTS_TABLE + _FTS_TRIGGERS

# Created after the migrations: they name columns older schemas lack.
_INDEXES = """
CREATE INDEX IF NOT EXISTS chunks_by_origin ON chunks (session_id, origin) WHERE origin != '';
CREATE INDEX IF NOT EXISTS stash_by_session_owner ON stash (session_id, owner);
"""

_DROP_FTS = (
    "DROP TRIGGER IF EXISTS stash_indexed",
    "DROP TRIGGER IF EXISTS stash_unindexed",
    "DROP TRIGGER IF EXISTS stash_reindexed",
    "DROP TABLE IF EXISTS stash_fts",
)

# version -> statements that bring a database of that version to the next one
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE chunks ADD COLUMN origin TEXT NOT NULL DEFAULT ''",),
    # v2 indexed the text with FTS5's porter stemmer; v3 indexes the analyser's
    # terms (filled in by `reindex`, which the opening store runs next).
    2: (
        "DROP TRIGGER stash_inserted",
        "DROP TRIGGER stash_deleted",
        "DROP TRIGGER stash_updated",
        "DROP TABLE stash_fts",
        "ALTER TABLE stash ADD COLUMN terms TEXT NOT NULL DEFAULT ''",
    ),
    # v4 ranks stash search over each owner's statistics
    3: (
        _OWNER_TOTALS,
        "INSERT INTO stash_owner_totals SELECT owner, count(*), "
        f"sum({term_count('terms')}) FROM stash GROUP BY owner",
    ),
    # v5 keeps each live chunk's analysed terms (text/termblob.py); older rows
    # have none, and a restart analyses their text as before
    4: ("ALTER TABLE chunks ADD COLUMN term_blob BLOB",),
    # v6 keeps the line facts a plan made of each text (scoring/lineblob.py);
    # older rows have none, and a restart's first plan makes them as before
    5: ("ALTER TABLE chunks ADD COLUMN line_blob BLOB",),
    # v7 keeps the token counts each session's plans made (text/countblob.py)
    # in `plan_counts`, which the tables' script creates; older sessions have
    # none, and a restart's first plan counts its excerpts as before
    6: (),
    # v8 keeps each session's BM25 index and its texts' line facts as the
    # process closes (text/indexblob.py, scoring/lineblob.py) in `kept_sessions`,
    # which the tables' script creates; older sessions have none, and a restart
    # indexes their stored terms and reads each text's line facts as before
    7: (),
    # v9 keeps each session's last plan as the process closes (engine/kept_plans.py)
    # in `kept_plans`, which the tables' script creates; older sessions have
    # none, and a restart's first plan is made as before
    8: (),
}

REINDEX_BATCH = 1_000  # originals analysed and indexed per transaction by a reindex
# An original's size less its terms (`rows.entry_values` counts all three)
_BASE_SIZE = (
    "length(CAST(text AS BLOB)) + CASE WHEN typeof(embedding) = 'blob' "
    "THEN length(embedding) ELSE 0 END"
)
# meta keys of a reindex under way: the analyzer it indexes with, the last row done
REINDEXING = "reindexing"
REINDEXED_TO = "reindexed_to"


def split_statements(script: str) -> list[str]:
    """Split a script on top-level semicolons (trigger bodies hold their own)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return [s for s in statements if s]


def create_or_migrate(cur: sqlite3.Cursor, version: int) -> None:
    """Bring a database at `version` (0: new) to `SCHEMA_VERSION`, inside the
    caller's transaction; `reindex` must follow (a migrated search index starts
    empty, and the analyzer it records is not this one)."""
    if version:
        for old in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[old]:
                cur.execute(statement)
    for statement in split_statements(_TABLES + _FTS + _INDEXES):
        cur.execute(statement)
    cur.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def indexed_with(cur: sqlite3.Cursor) -> str | None:
    """The `analyzer_identity` the search index was built with (None: not recorded)."""
    if cur.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone() is None:
        return None
    row = cur.execute("SELECT value FROM meta WHERE key = 'analyzer'").fetchone()
    return None if row is None else str(row[0])


def reindex(transaction: Callable[[], AbstractContextManager[sqlite3.Cursor]], terms: Terms) -> int:
    """Rebuild the search index with `terms`; returns the originals analysed.

    Every original's `terms` column (and its size) is analysed again from its
    text and indexed anew, REINDEX_BATCH originals per transaction: a large
    stash is never rewritten in one transaction, a reader or writer waits for
    one batch at most, and a reindex cut short (a kill, a full disk) keeps its
    finished batches and goes on from there at the next open with the same
    analyzer. The index's triggers come back, and the analyzer is recorded,
    once every original is in."""
    identity = analyzer_identity(terms)
    with transaction() as cur:
        last_id = _resume_point(cur, identity)
        if last_id is None:  # start over: nothing of another analyzer's index stays
            for statement in _DROP_FTS:
                cur.execute(statement)
            cur.execute(_FTS_TABLE)
            _set_meta(cur, REINDEXING, identity)
            last_id = 0
    entries = 0
    while True:
        with transaction() as cur:
            rows = cur.execute(
                f"SELECT id, text, terms, size_bytes, {_BASE_SIZE} "
                "FROM stash WHERE id > ? ORDER BY id LIMIT ?",
                (last_id, REINDEX_BATCH),
            ).fetchall()
            if not rows:
                break
            indexed = [(row_id, index_text(terms(text))) for row_id, text, *_ in rows]
            changed = [
                (new, size, row_id)
                for (row_id, _, old, old_size, base), (_, new) in zip(rows, indexed, strict=True)
                if (size := base + len(new.encode("utf-8"))) != old_size or new != old
            ]
            cur.executemany("UPDATE stash SET terms = ?, size_bytes = ? WHERE id = ?", changed)
            cur.executemany("INSERT INTO stash_fts (rowid, terms) VALUES (?, ?)", indexed)
            last_id = rows[-1][0]
            _set_meta(cur, REINDEXED_TO, str(last_id))
        entries += len(rows)
    with transaction() as cur:
        for statement in split_statements(_FTS_TRIGGERS):
            cur.execute(statement)
        _set_meta(cur, "analyzer", identity)
        cur.execute("DELETE FROM meta WHERE key IN (?, ?)", (REINDEXING, REINDEXED_TO))
    return entries


def _resume_point(cur: sqlite3.Cursor, identity: str) -> int | None:
    """The last original a reindex with this analyzer finished, None to start over."""
    rows = dict(
        cur.execute(
            "SELECT key, value FROM meta WHERE key IN (?, ?)", (REINDEXING, REINDEXED_TO)
        ).fetchall()
    )
    if rows.get(REINDEXING) != identity:
        return None
    return int(rows.get(REINDEXED_TO, 0))


def _set_meta(cur: sqlite3.Cursor, key: str, value: str) -> None:
    cur.execute(
        "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )
