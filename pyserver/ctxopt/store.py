"""Durable store: live sessions and the stash of removed originals, in SQLite.

One database file, `ctxopt.db`, lives in the data directory, in WAL mode. It holds
the live sessions (every chunk field plus prompt position, generation and touch
time), so a restarted server loads a session lazily on first use, and the stash:
every TRIM/MASK/STASH original exactly as it was, with the action, reasons, score,
time and plan that stashed it, indexed by an FTS5 table (external content) that
`search` ranks with `bm25()`.

Durability. Every write method commits before it returns. `fsync="normal"` (the
default) runs `synchronous=NORMAL`: a commit is in the WAL, in the OS page cache,
when the call returns, so it survives the process being killed (SIGKILL, OOM, a
crash) but the last commits can be lost on power loss or a kernel panic.
`fsync="full"` (`synchronous=FULL`) also fsyncs the WAL on every commit and
survives power loss. The default is NORMAL: a killed server is the failure the
service must survive (invariant 6), and FULL adds an fsync to every write. Measured
by `benchmarks/bench_stash.py` on the 2-core dev VM (ext4): a `commit_plan` stashing
10 originals, p50 1.2 ms NORMAL vs 1.4-1.8 ms FULL; a `save_chunks` of 10 chunks,
0.2 ms vs 0.4-0.6 ms. An fsync costs what the disk makes it cost: measure yours with
`--work-dir` on the data disk before choosing FULL.

Restore. `unstash` and `restore_chunks` delete the stash entries of the restored
chunk ids (every version): once back in the durable live session the chunk is not
out of the window, so search, stats and caps count only what is. Removing it again
stashes it again.

Retention. Each session's stash is capped (`stash_max_entries`, `stash_max_bytes`;
bytes are the original's UTF-8 text plus its stored embedding). A write that would
go over a cap drops EPHEMERAL originals of that session, oldest first, never the
ones being written, and logs each drop; when that is not enough the whole write is
refused with `ResourceExhausted` and nothing of it is kept.

Threads. One connection, guarded by a lock: SQLite serialises writers anyway, and
every call here is short.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import sqlite3
import sys
import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar

from ctxopt.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from ctxopt.model import (
    Action,
    Chunk,
    ChunkKind,
    GcPolicy,
    Role,
    StashFilter,
    StashHit,
    effective_policy,
)

logger = logging.getLogger(__name__)

DB_FILE = "ctxopt.db"
LOCK_FILE = "ctxopt.lock"
SCHEMA_VERSION = 1
EXPORT_FORMAT = "ctxopt-session/1"
# Snippet markers: rare in code and logs, so a reader sees where the match is.
SNIPPET_OPEN = "«"
SNIPPET_CLOSE = "»"
SNIPPET_ELLIPSIS = "…"
SNIPPET_TOKENS = 24
BROWSE_SNIPPET_CHARS = 160
# A query's first distinct words; more only slows the match without changing the top hits.
MAX_QUERY_WORDS = 64

Fsync = Literal["full", "normal"]


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """One chunk of a live session, as the registry holds it."""

    chunk: Chunk
    seq: int
    born: int  # the session's collection count when the chunk arrived (its generation)
    last_touched_ms: int


@dataclass(frozen=True, slots=True)
class StoredSession:
    session_id: str
    owner: str
    collections: int
    chunks: list[StoredChunk]


@dataclass(frozen=True, slots=True)
class StashEntry:
    """An original moved out of the window; `stash_id` is `shrink.stash_id`
    (the chunk id and a hash of its text, so a placeholder naming it is stable)."""

    stash_id: str
    session_id: str
    owner: str
    chunk: Chunk
    action: Action
    reasons: tuple[str, ...]
    score: float
    stashed_at_ms: int
    plan_id: str


# Chunk columns, shared by the live `chunks` table and the `stash` table.
_CHUNK_COLUMNS = (
    ("chunk_id", "TEXT NOT NULL"),
    ("role", "INTEGER NOT NULL"),
    ("kind", "INTEGER NOT NULL"),
    ("text", "TEXT NOT NULL"),
    ("tokens", "INTEGER NOT NULL"),
    ("created_at_ms", "INTEGER NOT NULL"),
    ("turn", "INTEGER NOT NULL"),
    ("pinned", "INTEGER NOT NULL"),
    ("policy", "INTEGER NOT NULL"),
    ("group_id", "TEXT NOT NULL"),
    ("parent_id", "TEXT NOT NULL"),
    ("refs", "TEXT"),
    ("file_path", "TEXT NOT NULL"),
    ("line_start", "INTEGER NOT NULL"),
    ("line_end", "INTEGER NOT NULL"),
    ("tags", "TEXT"),
    ("topic_id", "TEXT NOT NULL"),
    ("task_id", "TEXT NOT NULL"),
    ("boost", "REAL NOT NULL"),
    ("embedding", "BLOB"),
    ("summary_of", "TEXT"),
    ("metadata", "TEXT"),
)
_CHUNK_NAMES = tuple(name for name, _ in _CHUNK_COLUMNS)
_CHUNK_DDL = ",\n  ".join(f"{name} {decl}" for name, decl in _CHUNK_COLUMNS)
_CHUNK_SELECT = ", ".join(_CHUNK_NAMES)
_EMBEDDING_COLUMN = _CHUNK_NAMES.index("embedding")

_LIVE_NAMES = ("session_id", "seq", "born", "last_touched_ms", *_CHUNK_NAMES)
_STASH_META = (
    "stash_id",
    "session_id",
    "owner",
    "action",
    "reasons",
    "score",
    "stashed_at_ms",
    "plan_id",
    "size_bytes",
    "ephemeral",
)
_STASH_NAMES = (*_STASH_META, *_CHUNK_NAMES)
_STASH_SELECT = "stash_id, session_id, owner, action, reasons, score, stashed_at_ms, plan_id, " + (
    _CHUNK_SELECT
)


def _upsert_sql(table: str, names: Sequence[str], keys: Sequence[str]) -> str:
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n not in keys)
    return (
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
    )


_UPSERT_LIVE = _upsert_sql("chunks", _LIVE_NAMES, ("session_id", "chunk_id"))
_UPSERT_STASH = _upsert_sql("stash", _STASH_NAMES, ("session_id", "stash_id"))

_SCHEMA = f"""
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
CREATE TRIGGER IF NOT EXISTS stash_updated AFTER UPDATE ON stash BEGIN
  INSERT INTO stash_fts (stash_fts, rowid, text) VALUES ('delete', old.id, old.text);
  INSERT INTO stash_fts (rowid, text) VALUES (new.id, new.text);
  UPDATE stash_totals SET size_bytes = size_bytes - old.size_bytes + new.size_bytes,
    tokens = tokens - old.tokens + new.tokens WHERE session_id = new.session_id;
END;
"""


def _lock_directory(path: Path) -> TextIO:
    """One process per data directory: each keeps its sessions in memory, so a
    second writer would diverge from the first. The kernel drops the lock when
    the process dies, even by SIGKILL."""
    handle = (path / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise FailedPrecondition(
            "data_dir", str(path), f"in use by another ctxopt process (pid {holder})"
        ) from None
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


class Store:
    """Live sessions and the stash, durable in one SQLite database (see module doc)."""

    def __init__(
        self,
        path: str,
        *,
        fsync: Fsync = "normal",
        stash_max_entries: int = 100_000,
        stash_max_bytes: int = 1 << 30,
    ) -> None:
        """`path` is a data directory (created, mode 0700) or ":memory:" (tests only)."""
        if fsync not in ("full", "normal"):
            raise InvalidArgument("fsync", fsync, "must be 'full' or 'normal'")
        if stash_max_entries <= 0:
            raise InvalidArgument("stash_max_entries", stash_max_entries, "must be positive")
        if stash_max_bytes <= 0:
            raise InvalidArgument("stash_max_bytes", stash_max_bytes, "must be positive")
        self.stash_max_entries = stash_max_entries
        self.stash_max_bytes = stash_max_bytes
        self._dir_lock: TextIO | None = None
        if path == ":memory:":
            self.db_path = ":memory:"
        else:
            Path(path).mkdir(mode=0o700, parents=True, exist_ok=True)
            self._dir_lock = _lock_directory(Path(path))
            self.db_path = str(Path(path) / DB_FILE)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.db_path, check_same_thread=False, isolation_level=None)
        try:
            self._open(fsync, in_memory=path == ":memory:")
        except BaseException:
            self._conn.close()
            raise

    def _open(self, fsync: Fsync, *, in_memory: bool) -> None:
        conn = self._conn
        conn.execute("PRAGMA busy_timeout = 10000")
        if not in_memory:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal":
                raise FailedPrecondition("data_dir", self.db_path, f"WAL mode refused ({mode})")
        conn.execute(f"PRAGMA synchronous = {fsync.upper()}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise FailedPrecondition(
                "data_dir", self.db_path, f"schema version {version} is newer than this server"
            )
        with self._transaction() as cur:
            for statement in _split_statements(_SCHEMA):
                cur.execute(statement)
            cur.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Checkpoint the WAL into the database file and close."""
        with self._lock:
            if self.db_path != ":memory:":
                self._conn.execute("PRAGMA optimize")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._conn.close()
            if self._dir_lock is not None:
                self._dir_lock.close()  # releases the flock

    def integrity_check(self) -> str:
        """`PRAGMA integrity_check` ("ok" when the database is sound)."""
        with self._lock:
            rows = self._conn.execute("PRAGMA integrity_check").fetchall()
        return "\n".join(str(row[0]) for row in rows)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction, committed on exit, rolled back on any error."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Cursor]:
        """One read transaction: a consistent snapshot even with other processes writing."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN")
            try:
                yield cur
            finally:
                cur.execute("COMMIT")

    # Live sessions

    def session_owner(self, session_id: str) -> str | None:
        """Owner of a live session, None when it does not exist."""
        with self._reading() as cur:
            row = cur.execute(
                "SELECT owner FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def load_session(self, session_id: str) -> StoredSession | None:
        """A live session with its chunks in prompt order, None when it does not exist."""
        with self._reading() as cur:
            return _load_session(cur, session_id)

    def save_chunks(self, session_id: str, owner: str, chunks: Sequence[StoredChunk]) -> None:
        """Upsert chunks by id (creating the session, owned by `owner`); durable on return."""
        with self._transaction() as cur:
            _ensure_session(cur, session_id, owner)
            _upsert_live(cur, session_id, chunks)

    def delete_chunks(self, session_id: str, chunk_ids: Sequence[str]) -> None:
        """Drop chunks from a live session (ids it does not hold are ignored)."""
        with self._transaction() as cur:
            _delete_live(cur, session_id, chunk_ids)

    def update_session(self, session_id: str, collections: int) -> None:
        with self._transaction() as cur:
            cur.execute(
                "UPDATE sessions SET collections = ? WHERE session_id = ?",
                (collections, session_id),
            )
            if cur.rowcount == 0:
                raise NotFound("session_id", session_id, "no such session")

    def commit_plan(
        self,
        session_id: str,
        owner: str,
        entries: Sequence[StashEntry],
        removed_ids: Sequence[str],
        changed: Sequence[StoredChunk],
        collections: int,
    ) -> None:
        """Apply a plan in one transaction: stash the originals, drop `removed_ids` from
        the live session, write `changed` (trimmed/masked text, promoted generations)
        and the collection count. Committed on return; on any error nothing is written."""
        with self._transaction() as cur:
            cur.execute(
                "INSERT INTO sessions VALUES (?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET collections = excluded.collections",
                (session_id, owner, collections),
            )
            dropped = self._stash_in(cur, entries)
            _delete_live(cur, session_id, removed_ids)
            _upsert_live(cur, session_id, changed)
        _log_dropped(dropped)

    def restore_chunks(self, session_id: str, owner: str, chunks: Sequence[StoredChunk]) -> None:
        """Put restored chunks back in the live session and unstash them, in one transaction."""
        with self._transaction() as cur:
            _ensure_session(cur, session_id, owner)
            _upsert_live(cur, session_id, chunks)
            _unstash(cur, session_id, [c.chunk.id for c in chunks])

    def delete_session(self, session_id: str, purge_stash: bool) -> bool:
        """Delete a live session (and its stash when `purge_stash`); whether anything existed."""
        with self._transaction() as cur:
            cur.execute("DELETE FROM chunks WHERE session_id = ?", (session_id,))
            existed = cur.execute(
                "DELETE FROM sessions WHERE session_id = ?", (session_id,)
            ).rowcount
            if purge_stash:
                existed += cur.execute(
                    "DELETE FROM stash WHERE session_id = ?", (session_id,)
                ).rowcount
                cur.execute("DELETE FROM stash_totals WHERE session_id = ?", (session_id,))
        return existed > 0

    def list_sessions(self, owner: str) -> list[str]:
        """Live session ids of an owner, sorted."""
        with self._reading() as cur:
            rows = cur.execute(
                "SELECT session_id FROM sessions WHERE owner = ? ORDER BY session_id", (owner,)
            ).fetchall()
        return [str(row[0]) for row in rows]

    # Stash

    def stash(self, entries: Sequence[StashEntry]) -> None:
        """Store originals (upsert by session and stash id); durable on return."""
        with self._transaction() as cur:
            dropped = self._stash_in(cur, entries)
        _log_dropped(dropped)

    def get_stashed(self, session_id: str, chunk_ids: Sequence[str]) -> dict[str, StashEntry]:
        """The latest stash entry of each chunk id that has one."""
        found: dict[str, StashEntry] = {}
        with self._reading() as cur:
            for chunk_id in dict.fromkeys(chunk_ids):
                row = cur.execute(
                    f"SELECT {_STASH_SELECT} FROM stash WHERE session_id = ? AND chunk_id = ? "
                    "ORDER BY stashed_at_ms DESC, id DESC LIMIT 1",
                    (session_id, chunk_id),
                ).fetchone()
                if row is not None:
                    found[chunk_id] = _entry_from(row)
        return found

    def get_stashed_group(self, session_id: str, group_ids: Sequence[str]) -> dict[str, StashEntry]:
        """The latest stash entry of every chunk in these groups, by chunk id."""
        found: dict[str, StashEntry] = {}
        with self._reading() as cur:
            for group_id in dict.fromkeys(g for g in group_ids if g):
                rows = cur.execute(
                    f"SELECT {_STASH_SELECT} FROM stash WHERE session_id = ? AND group_id = ? "
                    "ORDER BY stashed_at_ms, id",
                    (session_id, group_id),
                ).fetchall()
                for row in rows:
                    entry = _entry_from(row)
                    found[entry.chunk.id] = entry
        return found

    def unstash(self, session_id: str, chunk_ids: Sequence[str]) -> None:
        """Drop every stash entry of these chunk ids (called once they are restored)."""
        with self._transaction() as cur:
            _unstash(cur, session_id, chunk_ids)

    def stash_stats(self, session_id: str) -> tuple[int, int]:
        """(entries, tokens) in a session's stash."""
        with self._reading() as cur:
            row = cur.execute(
                "SELECT entries, tokens FROM stash_totals WHERE session_id = ?", (session_id,)
            ).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def search(
        self,
        owner: str,
        session_id: str,
        query: str,
        filters: StashFilter,
        limit: int,
        offset: int,
    ) -> tuple[list[StashHit], int | None]:
        """Stash entries of `owner` (one session, or all with session_id "") matching
        `query` and every filter, best first (bm25), with a snippet around the match;
        and the offset of the next page, None on the last one.

        The query is plain words: quotes and FTS5 operators are treated as text, a
        hit needs one of the words, and the words as an exact phrase rank higher. A
        blank query lists the filtered entries newest first; a query with no words
        matches nothing."""
        if limit <= 0:
            raise InvalidArgument("limit", limit, "must be positive")
        if offset < 0:
            raise InvalidArgument("offset", offset, "must not be negative")
        where, params = _filter_sql(owner, session_id, filters)
        if query.strip():
            match = fts_query(query)
            if match is None:
                return [], None
            sql = (
                "SELECT s.stash_id, s.chunk_id, s.session_id, s.kind, -bm25(stash_fts), "
                "snippet(stash_fts, 0, ?, ?, ?, ?), s.tokens, s.action, s.stashed_at_ms "
                "FROM stash_fts JOIN stash AS s ON s.id = stash_fts.rowid "
                f"WHERE stash_fts MATCH ? AND {where} "
                "ORDER BY bm25(stash_fts), s.id LIMIT ? OFFSET ?"
            )
            snippet_args: list[object] = [SNIPPET_OPEN, SNIPPET_CLOSE, SNIPPET_ELLIPSIS]
            args = [*snippet_args, SNIPPET_TOKENS, match, *params, limit + 1, offset]
        else:
            sql = (
                "SELECT s.stash_id, s.chunk_id, s.session_id, s.kind, 0.0, "
                "CASE WHEN length(s.text) > ? THEN substr(s.text, 1, ?) || ? ELSE s.text END, "
                "s.tokens, s.action, s.stashed_at_ms "
                f"FROM stash AS s WHERE {where} "
                "ORDER BY s.stashed_at_ms DESC, s.id DESC LIMIT ? OFFSET ?"
            )
            cut: list[object] = [BROWSE_SNIPPET_CHARS, BROWSE_SNIPPET_CHARS, SNIPPET_ELLIPSIS]
            args = [*cut, *params, limit + 1, offset]
        with self._reading() as cur:
            rows = cur.execute(sql, args).fetchall()
        hits = [_hit_from(row) for row in rows[:limit]]
        return hits, (offset + limit if len(rows) > limit else None)

    # Export / import

    def export_session(self, session_id: str) -> dict[str, object]:
        """A session (live chunks and stash) as a JSON-able dict; `import_session`
        reads it back exactly. The owner is not exported: import assigns one."""
        with self._reading() as cur:
            live = _load_session(cur, session_id)
            stash_rows = cur.execute(
                f"SELECT {_STASH_SELECT} FROM stash WHERE session_id = ? ORDER BY id",
                (session_id,),
            ).fetchall()
        if live is None and not stash_rows:
            raise NotFound("session_id", session_id, "no such session")
        return {
            "format": EXPORT_FORMAT,
            "session_id": session_id,
            "collections": live.collections if live else 0,
            "chunks": [
                {
                    "seq": c.seq,
                    "born": c.born,
                    "last_touched_ms": c.last_touched_ms,
                    "chunk": chunk_to_json(c.chunk),
                }
                for c in (live.chunks if live else [])
            ],
            "stash": [_entry_to_json(_entry_from(row)) for row in stash_rows],
        }

    def import_session(self, data: Mapping[str, object], owner: str, replace: bool) -> str:
        """Load an exported session for `owner`; returns its id. An existing session of
        that id is replaced only with `replace` (and only when `owner` owns it)."""
        doc = _Fields(data, "json")
        if doc.string("format") != EXPORT_FORMAT:
            raise InvalidArgument("json.format", data.get("format"), f"expected {EXPORT_FORMAT!r}")
        session_id = doc.string("session_id")
        if not session_id:
            raise InvalidArgument("json.session_id", session_id, "must not be empty")
        collections = doc.integer("collections")
        chunks = [
            StoredChunk(
                _chunk_from_json(item.obj("chunk")),
                item.integer("seq"),
                item.integer("born"),
                item.integer("last_touched_ms"),
            )
            for item in doc.objs("chunks")
        ]
        entries = [_entry_from_json(item, session_id, owner) for item in doc.objs("stash")]
        with self._transaction() as cur:
            owners = {
                str(row[0])
                for row in cur.execute(
                    "SELECT owner FROM sessions WHERE session_id = ? "
                    "UNION SELECT owner FROM stash WHERE session_id = ?",
                    (session_id, session_id),
                )
            }
            if owners - {owner}:
                raise PermissionDenied("json.session_id", session_id, "belongs to another owner")
            if owners and not replace:
                raise FailedPrecondition(
                    "json.session_id", session_id, "session exists; set replace to overwrite it"
                )
            for table in ("chunks", "sessions", "stash", "stash_totals"):
                cur.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            cur.execute("INSERT INTO sessions VALUES (?, ?, ?)", (session_id, owner, collections))
            _upsert_live(cur, session_id, chunks)
            dropped = self._stash_in(cur, entries)
        _log_dropped(dropped)
        return session_id

    # Internals

    def _stash_in(self, cur: sqlite3.Cursor, entries: Sequence[StashEntry]) -> list[_Dropped]:
        """Upsert entries and enforce the caps of every session they touch; returns
        what the caps dropped (to log after commit) or raises ResourceExhausted."""
        if not entries:
            return []
        cur.executemany(_UPSERT_STASH, [_entry_values(e) for e in entries])
        written: dict[str, set[str]] = {}
        for e in entries:
            written.setdefault(e.session_id, set()).add(e.stash_id)
        dropped: list[_Dropped] = []
        for session_id, keep in written.items():
            dropped.extend(self._enforce_caps(cur, session_id, keep))
        return dropped

    def _enforce_caps(self, cur: sqlite3.Cursor, session_id: str, keep: set[str]) -> list[_Dropped]:
        entries, size = cur.execute(
            "SELECT entries, size_bytes FROM stash_totals WHERE session_id = ?", (session_id,)
        ).fetchone()
        if entries <= self.stash_max_entries and size <= self.stash_max_bytes:
            return []
        victims: list[_Dropped] = []
        candidates = cur.execute(
            "SELECT id, stash_id, size_bytes FROM stash "
            "WHERE session_id = ? AND ephemeral = 1 ORDER BY stashed_at_ms, id",
            (session_id,),
        )
        for row_id, stash_id, row_size in candidates:
            if entries <= self.stash_max_entries and size <= self.stash_max_bytes:
                break
            if stash_id in keep:
                continue
            victims.append(_Dropped(int(row_id), session_id, str(stash_id), int(row_size)))
            entries -= 1
            size -= row_size
        if entries > self.stash_max_entries:
            raise ResourceExhausted(
                "stash_max_entries",
                self.stash_max_entries,
                f"session {session_id!r} would stash {entries} entries and only EPHEMERAL "
                "originals may be dropped; export or delete sessions, or raise the cap",
            )
        if size > self.stash_max_bytes:
            raise ResourceExhausted(
                "stash_max_bytes",
                self.stash_max_bytes,
                f"session {session_id!r} would stash {size} bytes and only EPHEMERAL "
                "originals may be dropped; export or delete sessions, or raise the cap",
            )
        cur.executemany("DELETE FROM stash WHERE id = ?", [(v.row_id,) for v in victims])
        return victims


@dataclass(frozen=True, slots=True)
class _Dropped:
    row_id: int
    session_id: str
    stash_id: str
    size_bytes: int


def _log_dropped(dropped: Sequence[_Dropped]) -> None:
    for d in dropped:
        logger.warning(
            "stash cap reached: dropped EPHEMERAL original %s of session %r (%d bytes)",
            d.stash_id,
            d.session_id,
            d.size_bytes,
        )


def _split_statements(script: str) -> list[str]:
    """Split the schema on top-level semicolons (trigger bodies hold their own)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return [s for s in statements if s]


def _load_session(cur: sqlite3.Cursor, session_id: str) -> StoredSession | None:
    head = cur.execute(
        "SELECT owner, collections FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    if head is None:
        return None
    rows = cur.execute(
        f"SELECT seq, born, last_touched_ms, {_CHUNK_SELECT} FROM chunks "
        "WHERE session_id = ? ORDER BY seq",
        (session_id,),
    ).fetchall()
    chunks = [StoredChunk(_chunk_from(row, 3), row[0], row[1], row[2]) for row in rows]
    return StoredSession(session_id, str(head[0]), int(head[1]), chunks)


def _ensure_session(cur: sqlite3.Cursor, session_id: str, owner: str) -> None:
    cur.execute(
        "INSERT INTO sessions VALUES (?, ?, 0) ON CONFLICT (session_id) DO NOTHING",
        (session_id, owner),
    )


def _upsert_live(cur: sqlite3.Cursor, session_id: str, chunks: Sequence[StoredChunk]) -> None:
    cur.executemany(
        _UPSERT_LIVE,
        [(session_id, c.seq, c.born, c.last_touched_ms, *_chunk_values(c.chunk)) for c in chunks],
    )


def _delete_live(cur: sqlite3.Cursor, session_id: str, chunk_ids: Sequence[str]) -> None:
    cur.executemany(
        "DELETE FROM chunks WHERE session_id = ? AND chunk_id = ?",
        [(session_id, chunk_id) for chunk_id in chunk_ids],
    )


def _unstash(cur: sqlite3.Cursor, session_id: str, chunk_ids: Sequence[str]) -> None:
    cur.executemany(
        "DELETE FROM stash WHERE session_id = ? AND chunk_id = ?",
        [(session_id, chunk_id) for chunk_id in chunk_ids],
    )


# Search


_WORD = re.compile(r"[^\W_]+")


def fts_query(text: str) -> str | None:
    """An FTS5 query for plain user text, None when it holds no words.

    Every word is quoted (so `AND`, `NEAR`, `*`, `-`, `"` are text, never syntax);
    a hit needs any word, and the whole text as a phrase adds to the bm25 score,
    so an exact phrase outranks a single word."""
    words = list(dict.fromkeys(_WORD.findall(text)))[:MAX_QUERY_WORDS]
    if not words:
        return None
    terms = [f'"{w}"' for w in words]
    if len(words) > 1:
        terms.insert(0, '"' + " ".join(_WORD.findall(text)[:MAX_QUERY_WORDS]) + '"')
    return " OR ".join(terms)


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


def _hit_from(row: Sequence[Any]) -> StashHit:
    return StashHit(
        stash_id=str(row[0]),
        chunk_id=str(row[1]),
        session_id=str(row[2]),
        kind=ChunkKind(row[3]),
        score=float(row[4]),
        snippet=str(row[5]),
        tokens=int(row[6]),
        action=Action(row[7]),
        stashed_at_ms=int(row[8]),
    )


# Chunk <-> row


def _encode_strings(values: Sequence[str]) -> str | None:
    return json.dumps(list(values), ensure_ascii=False) if values else None


# Loading a big session decodes these lists 100,000s of times: `raw_decode` skips the
# whitespace scans of `json.loads` (the text is ours, with none around it).
_JSON = json.JSONDecoder()


def _decode_strings(raw: str | None) -> tuple[str, ...]:
    return tuple(_JSON.raw_decode(raw)[0]) if raw else ()


def _encode_embedding(values: Sequence[float]) -> bytes | None:
    """float32 when that holds every value exactly (what the proto carries), else float64;
    little-endian, after a one-byte type code."""
    if not values:
        return None
    packed = array("f", values)
    if tuple(packed) != tuple(values):
        packed = array("d", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.typecode.encode("ascii") + packed.tobytes()


def _decode_embedding(raw: bytes | None) -> tuple[float, ...]:
    if not raw:
        return ()
    values = array(chr(raw[0]))
    values.frombytes(raw[1:])
    if sys.byteorder == "big":
        values.byteswap()
    return tuple(values)


def _chunk_values(c: Chunk) -> tuple[object, ...]:
    return (
        c.id,
        int(c.role),
        int(c.kind),
        c.text,
        c.tokens,
        c.created_at_ms,
        c.turn,
        int(c.pinned),
        int(c.policy),
        c.group_id,
        c.parent_id,
        _encode_strings(c.references),
        c.file_path,
        c.line_start,
        c.line_end,
        _encode_strings(c.tags),
        c.topic_id,
        c.task_id,
        c.boost,
        _encode_embedding(c.embedding),
        _encode_strings(c.summary_of),
        json.dumps(c.metadata, ensure_ascii=False) if c.metadata else None,
    )


# Plain dict lookups: an enum call per field is a third of a big session's load time.
_ROLES = {int(m): m for m in Role}
_KINDS = {int(m): m for m in ChunkKind}
_POLICIES = {int(m): m for m in GcPolicy}


def _chunk_from(row: Sequence[Any], start: int) -> Chunk:
    r = row[start:]
    return Chunk(
        id=r[0],
        role=_ROLES[r[1]],
        kind=_KINDS[r[2]],
        text=r[3],
        tokens=r[4],
        created_at_ms=r[5],
        turn=r[6],
        pinned=bool(r[7]),
        policy=_POLICIES[r[8]],
        group_id=r[9],
        parent_id=r[10],
        references=_decode_strings(r[11]),
        file_path=r[12],
        line_start=r[13],
        line_end=r[14],
        tags=_decode_strings(r[15]),
        topic_id=r[16],
        task_id=r[17],
        boost=r[18],
        embedding=_decode_embedding(r[19]),
        summary_of=_decode_strings(r[20]),
        metadata=_JSON.raw_decode(r[21])[0] if r[21] else {},
    )


def _entry_values(e: StashEntry) -> tuple[object, ...]:
    values = _chunk_values(e.chunk)
    embedding = values[_EMBEDDING_COLUMN]
    size = len(e.chunk.text.encode("utf-8")) + (
        len(embedding) if isinstance(embedding, bytes) else 0
    )
    ephemeral = effective_policy(e.chunk.policy, e.chunk.kind, e.chunk.role) == GcPolicy.EPHEMERAL
    return (
        e.stash_id,
        e.session_id,
        e.owner,
        int(e.action),
        json.dumps(list(e.reasons), ensure_ascii=False),
        e.score,
        e.stashed_at_ms,
        e.plan_id,
        size,
        int(ephemeral),
        *values,
    )


def _entry_from(row: Sequence[Any]) -> StashEntry:
    return StashEntry(
        stash_id=row[0],
        session_id=row[1],
        owner=row[2],
        action=Action(row[3]),
        reasons=tuple(json.loads(row[4])),
        score=row[5],
        stashed_at_ms=row[6],
        plan_id=row[7],
        chunk=_chunk_from(row, 8),
    )


# Chunk <-> JSON (export / import): enums by name, every field present.


def chunk_to_json(c: Chunk) -> dict[str, object]:
    return {
        "id": c.id,
        "role": c.role.name,
        "kind": c.kind.name,
        "text": c.text,
        "tokens": c.tokens,
        "created_at_ms": c.created_at_ms,
        "turn": c.turn,
        "pinned": c.pinned,
        "policy": c.policy.name,
        "group_id": c.group_id,
        "parent_id": c.parent_id,
        "references": list(c.references),
        "file_path": c.file_path,
        "line_start": c.line_start,
        "line_end": c.line_end,
        "tags": list(c.tags),
        "topic_id": c.topic_id,
        "task_id": c.task_id,
        "boost": c.boost,
        "embedding": list(c.embedding),
        "summary_of": list(c.summary_of),
        "metadata": dict(c.metadata),
    }


def _entry_to_json(e: StashEntry) -> dict[str, object]:
    return {
        "stash_id": e.stash_id,
        "action": e.action.name,
        "reasons": list(e.reasons),
        "score": e.score,
        "stashed_at_ms": e.stashed_at_ms,
        "plan_id": e.plan_id,
        "chunk": chunk_to_json(e.chunk),
    }


def _chunk_from_json(f: _Fields) -> Chunk:
    return Chunk(
        id=f.string("id"),
        role=f.enum("role", Role),
        kind=f.enum("kind", ChunkKind),
        text=f.string("text"),
        tokens=f.integer("tokens"),
        created_at_ms=f.integer("created_at_ms"),
        turn=f.integer("turn"),
        pinned=f.boolean("pinned"),
        policy=f.enum("policy", GcPolicy),
        group_id=f.string("group_id"),
        parent_id=f.string("parent_id"),
        references=f.strs("references"),
        file_path=f.string("file_path"),
        line_start=f.integer("line_start"),
        line_end=f.integer("line_end"),
        tags=f.strs("tags"),
        topic_id=f.string("topic_id"),
        task_id=f.string("task_id"),
        boost=f.number("boost"),
        embedding=f.floats("embedding"),
        summary_of=f.strs("summary_of"),
        metadata=f.str_map("metadata"),
    )


def _entry_from_json(f: _Fields, session_id: str, owner: str) -> StashEntry:
    return StashEntry(
        stash_id=f.string("stash_id"),
        session_id=session_id,
        owner=owner,
        chunk=_chunk_from_json(f.obj("chunk")),
        action=f.enum("action", Action),
        reasons=f.strs("reasons"),
        score=f.number("score"),
        stashed_at_ms=f.integer("stashed_at_ms"),
        plan_id=f.string("plan_id"),
    )


_E = TypeVar("_E", bound=IntEnum)


class _Fields:
    """Typed reads from a JSON object; errors name the path (`json.chunks[2].chunk.role`)."""

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, Mapping):
            raise InvalidArgument(path, data, "expected an object")
        self._data: Mapping[str, object] = data
        self._path = path

    def _get(self, key: str, kind: type | tuple[type, ...], expected: str) -> Any:
        value = self._data.get(key)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise InvalidArgument(f"{self._path}.{key}", value, f"expected {expected}")
        return value

    def string(self, key: str) -> str:
        return str(self._get(key, str, "a string"))

    def integer(self, key: str) -> int:
        return int(self._get(key, int, "an integer"))

    def boolean(self, key: str) -> bool:
        return bool(self._get(key, bool, "true or false"))

    def number(self, key: str) -> float:
        return float(self._get(key, (int, float), "a number"))

    def enum(self, key: str, enum: type[_E]) -> _E:
        name = self.string(key)
        if name not in enum.__members__:
            raise InvalidArgument(
                f"{self._path}.{key}", name, f"expected one of {', '.join(enum.__members__)}"
            )
        return enum[name]

    def strs(self, key: str) -> tuple[str, ...]:
        values = self._get(key, list, "a list of strings")
        if not all(isinstance(v, str) for v in values):
            raise InvalidArgument(f"{self._path}.{key}", values, "expected a list of strings")
        return tuple(values)

    def floats(self, key: str) -> tuple[float, ...]:
        values = self._get(key, list, "a list of numbers")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise InvalidArgument(f"{self._path}.{key}", values, "expected a list of numbers")
        return tuple(float(v) for v in values)

    def str_map(self, key: str) -> dict[str, str]:
        values = self._get(key, Mapping, "an object of strings")
        if not all(isinstance(v, str) for v in values.values()):
            raise InvalidArgument(f"{self._path}.{key}", values, "expected an object of strings")
        return dict(values)

    def obj(self, key: str) -> _Fields:
        return _Fields(self._data.get(key), f"{self._path}.{key}")

    def objs(self, key: str) -> list[_Fields]:
        items = self._get(key, list, "a list of objects")
        return [_Fields(item, f"{self._path}.{key}[{i}]") for i, item in enumerate(items)]
