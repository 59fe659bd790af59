"""The database schema, its migrations, and the checks made when a store opens."""

from __future__ import annotations

import sqlite3

from ctxopt.store.rows import CHUNK_COLUMNS

SCHEMA_VERSION = 2

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

CREATE VIRTUAL TABLE IF NOT EXISTS stash_fts USING fts5 (
  text, content = 'stash', content_rowid = 'id',
  tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER IF NOT EXISTS stash_inserted AFTER INSERT ON stash BEGIN
  INSERT INTO stash_fts (rowid, text) VALUES (new.id, new.text);
  INSERT INTO stash_totals VALUES (new.session_id, 1, new.size_bytes, new.tokens)
    ON CONFLICT (session_id) DO UPDATE SET entries = entries + 1,
      size_bytes = size_bytes + excluded.size_bytes, tokens = tokens + excluded.tokens;
END;
CREATE TRIGGER IF NOT EXISTS stash_deleted AFTER DELETE ON stash BEGIN
  INSERT INTO stash_fts (stash_fts, rowid, text) VALUES ('delete', old.id, old.text);
  UPDATE stash_totals SET entries = entries - 1, size_bytes = size_bytes - old.size_bytes,
    tokens = tokens - old.tokens WHERE session_id = old.session_id;
END;
CREATE TRIGGER IF NOT EXISTS stash_updated AFTER UPDATE OF text, size_bytes, tokens ON stash BEGIN
  INSERT INTO stash_fts (stash_fts, rowid, text) VALUES ('delete', old.id, old.text);
  INSERT INTO stash_fts (rowid, text) VALUES (new.id, new.text);
  UPDATE stash_totals SET size_bytes = size_bytes - old.size_bytes + new.size_bytes,
    tokens = tokens - old.tokens + new.tokens WHERE session_id = new.session_id;
END;
"""

# Created after the migrations: they name columns older schemas lack.
_INDEXES = """
CREATE INDEX IF NOT EXISTS chunks_by_origin ON chunks (session_id, origin) WHERE origin != '';
CREATE INDEX IF NOT EXISTS stash_by_session_owner ON stash (session_id, owner);
"""

# version -> statements that bring a database of that version to the next one
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE chunks ADD COLUMN origin TEXT NOT NULL DEFAULT ''",),
}


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
    caller's transaction."""
    if version == 0:
        for statement in split_statements(_TABLES):
            cur.execute(statement)
    else:
        for old in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[old]:
                cur.execute(statement)
        for statement in split_statements(_TABLES):
            cur.execute(statement)
    for statement in split_statements(_INDEXES):
        cur.execute(statement)
    cur.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
