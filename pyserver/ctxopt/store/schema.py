"""The database schema, its migrations, and the checks made when a store opens."""

from __future__ import annotations

import sqlite3

from ctxopt.store.rows import CHUNK_COLUMNS
from ctxopt.store.search import FTS_TOKENIZER, Terms, analyzer_identity, index_text

SCHEMA_VERSION = 3

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
  UNIQUE (session_id, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunks_by_seq ON chunks (session_id, seq);

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
"""

# The search index: each original's analysed terms (search.py), kept in step with
# `stash.terms` by triggers, and rebuilt whole by `ensure_index`.
_FTS = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS stash_fts USING fts5 (
  terms, content = 'stash', content_rowid = 'id', tokenize = "{FTS_TOKENIZER}"
);
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
    # terms (filled in by `ensure_index`, which the opening store runs next).
    2: (
        "DROP TRIGGER stash_inserted",
        "DROP TRIGGER stash_deleted",
        "DROP TRIGGER stash_updated",
        "DROP TABLE stash_fts",
        "ALTER TABLE stash ADD COLUMN terms TEXT NOT NULL DEFAULT ''",
    ),
}

REINDEX_BATCH = 1_000  # originals read and rewritten at a time by a reindex


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
    caller's transaction; `ensure_index` must follow in that transaction (a
    migrated search index starts empty)."""
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


def ensure_index(cur: sqlite3.Cursor, terms: Terms) -> int | None:
    """Rebuild the search index with `terms` unless it was built with the same
    analyzer; returns the originals reindexed (None: the index was current).

    Every original's `terms` column is analysed again from its text (written
    only where it changed), then the FTS index is dropped and built from it, so
    the index holds nothing from the previous analyzer or a previous schema."""
    identity = analyzer_identity(terms)
    if indexed_with(cur) == identity:
        return None
    for statement in _DROP_FTS:
        cur.execute(statement)
    entries = last_id = 0
    while rows := cur.execute(
        "SELECT id, text, terms FROM stash WHERE id > ? ORDER BY id LIMIT ?",
        (last_id, REINDEX_BATCH),
    ).fetchall():
        cur.executemany(
            "UPDATE stash SET terms = ? WHERE id = ?",
            [
                (new, row_id)
                for row_id, text, old in rows
                if (new := index_text(terms(text))) != old
            ],
        )
        entries += len(rows)
        last_id = rows[-1][0]
    for statement in split_statements(_FTS):
        cur.execute(statement)
    cur.execute("INSERT INTO stash_fts (stash_fts) VALUES ('rebuild')")
    cur.execute(
        "INSERT INTO meta VALUES ('analyzer', ?) ON CONFLICT (key) DO UPDATE SET value = ?1",
        (identity,),
    )
    return entries
