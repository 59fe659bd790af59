"""Durable store: live sessions and the stash of removed originals, in SQLite.

One database file, `ctxopt.db`, lives in the data directory, in WAL mode. It holds
the live sessions (every chunk field plus prompt position, generation, touch time
and, for a shrunk chunk, the stash id of its original), so a restarted server
loads a session lazily on first use, and the stash: every TRIM/MASK/STASH original
exactly as it was, with the action, reasons, score, time and plan that stashed it,
indexed by an FTS5 table (external content) that `search` ranks with `bm25()`.

One analyzer. The index holds each original's terms from the engine's analyzer
with identifier splitting on (a user types `parse config` for `parseConfig`), and
a query is analysed by it too (`search.py`). The database
records which analyzer built the index; opened with another (identifier
splitting switched, say), the store reindexes every original before serving.

One way in. Every change to a session is one `Change` record, committed by
`commit` in one transaction; callers apply it to memory only after it returns.

Durability. Every write commits before it returns. `fsync="normal"` (the default)
runs `synchronous=NORMAL`: a commit is in the WAL, in the OS page cache, when the
call returns, so it survives the process being killed (SIGKILL, OOM, a crash) but
the last commits can be lost on power loss or a kernel panic. `fsync="full"`
(`synchronous=FULL`) also fsyncs the WAL on every commit and survives power loss.
The default is NORMAL: a killed server is the failure the service must survive,
and FULL adds an fsync to every write. Measured by `benchmarks/bench_stash.py` on
the 2-core dev VM (ext4): a plan stashing 10 originals, p50 1.2 ms NORMAL vs
1.4-1.8 ms FULL. Measure your disk with `--work-dir` before choosing FULL.

Originals are never lost. The stash holds originals only: when an excerpt or
placeholder leaves the window too, its original's entry records the newer
decision (`Restash`) instead of stashing the excerpt. An entry that a live
chunk's `origin` names is never dropped; a restore unstashes exactly the entry
it brought back.

Ownership follows the data (`owners.py`), and each session's stash is capped
(`caps.py`).

Failure. A database that is damaged, unreadable or not writable refuses to open
with one line naming the file and what to do; a full disk answers
`ResourceExhausted` and leaves the store as it was.

Threads. One connection, guarded by a lock: SQLite serialises writers anyway, and
every call here is short.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from ctxopt.errors import FailedPrecondition, InvalidArgument, NotFound
from ctxopt.model import StashFilter, StashHit
from ctxopt.store.caps import Dropped, enforce_caps, log_dropped
from ctxopt.store.export import Exported, export_document
from ctxopt.store.files import DB_FILE, Directory, classify, damaged
from ctxopt.store.owners import owners_of, require_owner
from ctxopt.store.ranking import VOCABULARY_DDL, ranked_page
from ctxopt.store.rows import (
    LIST_SESSIONS_SQL,
    LIVE_UPSERT,
    PLAN_COUNTS_SQL,
    RESTASH_SQL,
    SESSION_TABLES,
    SET_COUNTS_SQL,
    SET_KEPT_SQL,
    SET_LINE_BLOB_SQL,
    SET_PLAN_SQL,
    STASH_NAMES,
    STASH_SELECT,
    Change,
    SessionSummary,
    StashEntry,
    StoredSession,
    entry_from,
    entry_values,
    hit_from,
    live_rows_digest,
    live_values,
    load_session,
    restash_values,
    upsert_sql,
)
from ctxopt.store.schema import (
    SCHEMA_VERSION,
    create_or_migrate,
    indexed_with,
    reindex,
)
from ctxopt.store.search import (
    analyzer_identity,
    browse_sql,
    index_text,
    snippet,
)
from ctxopt.text.analyzer import Analyzer

logger = logging.getLogger(__name__)

Fsync = Literal["full", "normal"]

_UPSERT_STASH = upsert_sql("stash", STASH_NAMES, ("session_id", "stash_id"))


class Store:
    """Live sessions and the stash, durable in one SQLite database (see module doc)."""

    def __init__(
        self,
        path: str,
        *,
        fsync: Fsync = "normal",
        stash_max_entries: int = 100_000,
        stash_max_bytes: int = 1 << 30,
        analyzer: Analyzer | None = None,
    ) -> None:
        """`path` is a data directory (created, mode 0700) or ":memory:" (tests only).
        `analyzer` turns stashed originals and queries into search terms: the
        engine passes the one its sessions score with (default: `Analyzer()`)."""
        if fsync not in ("full", "normal"):
            raise InvalidArgument("fsync", fsync, "must be 'full' or 'normal'")
        if stash_max_entries <= 0:
            raise InvalidArgument("stash_max_entries", stash_max_entries, "must be positive")
        if stash_max_bytes <= 0:
            raise InvalidArgument("stash_max_bytes", stash_max_bytes, "must be positive")
        self.stash_max_entries = stash_max_entries
        self.stash_max_bytes = stash_max_bytes
        self.analyzer = analyzer or Analyzer()
        in_memory = path == ":memory:"
        self._directory = None if in_memory else Directory(Path(path))
        self.db_path = ":memory:" if in_memory else str(Path(path) / DB_FILE)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(
                self.db_path, check_same_thread=False, isolation_level=None
            )
            self._open(fsync, in_memory=in_memory)
        except BaseException as err:
            self._release()
            if isinstance(err, sqlite3.Error):
                raise classify(self.db_path, err) from None
            raise

    def _open(self, fsync: Fsync, *, in_memory: bool) -> None:
        conn = self._conn
        conn.execute("PRAGMA busy_timeout = 10000")
        check = conn.execute("PRAGMA quick_check").fetchall()
        if [tuple(row) for row in check] != [("ok",)]:
            raise damaged(self.db_path, RuntimeError("; ".join(str(r[0]) for r in check[:3])))
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
        if version < SCHEMA_VERSION:
            with self._transaction() as cur:
                create_or_migrate(cur, version)
        if indexed_with(conn.cursor()) != analyzer_identity(self.analyzer.terms):
            reindexed = reindex(self._transaction, self.analyzer.terms)
            if reindexed:  # a new store has nothing to rebuild, and CLI errors stay one line
                logger.info("stash search index rebuilt: %d originals analysed", reindexed)
        conn.execute(VOCABULARY_DDL)

    def close(self) -> None:
        """Checkpoint the WAL into the database file and close; a failing
        checkpoint (a full disk) is logged, and the store still closes."""
        with self._lock:
            if self.db_path != ":memory:":
                try:
                    self._conn.execute("PRAGMA optimize")
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error as err:
                    logger.warning("closing %s without a checkpoint: %s", self.db_path, err)
            self._release()

    def _release(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
        if self._directory is not None:
            self._directory.release()
            self._directory = None

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
            try:
                cur.execute("BEGIN IMMEDIATE")
                yield cur
                cur.execute("COMMIT")
            except BaseException as err:
                if self._conn.in_transaction:
                    self._conn.rollback()
                if isinstance(err, sqlite3.Error):
                    raise classify(self.db_path, err) from err
                raise

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Cursor]:
        """One read transaction: a consistent snapshot even with other processes writing."""
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute("BEGIN")
                try:
                    yield cur
                finally:
                    cur.execute("COMMIT")
            except sqlite3.Error as err:
                raise classify(self.db_path, err) from err

    # Sessions

    def owners(self, session_id: str) -> set[str]:
        """Every owner holding a live session or stash entries under this id."""
        with self._reading() as cur:
            return owners_of(cur, session_id)

    def load_session(self, session_id: str) -> StoredSession | None:
        """A live session with its chunks in prompt order, None when it does not exist."""
        with self._reading() as cur:
            return load_session(cur, session_id)

    def commit(self, change: Change) -> None:
        """Write one change in one transaction (creating the session, owned by
        `change.owner`); durable on return, nothing written on any error."""
        session_id, owner = change.session_id, change.owner
        stash_rows = self._stash_rows(change.stash)
        with self._transaction() as cur:
            _claim(cur, session_id, owner)
            if change.collections is not None:
                cur.execute(
                    "UPDATE sessions SET collections = ? WHERE session_id = ?",
                    (change.collections, session_id),
                )
            cur.executemany(
                "DELETE FROM chunks WHERE session_id = ? AND chunk_id = ?",
                [(session_id, chunk_id) for chunk_id in change.removals],
            )
            cur.executemany(LIVE_UPSERT, [live_values(session_id, c) for c in change.upserts])
            cur.executemany(_UPSERT_STASH, stash_rows)
            cur.executemany(RESTASH_SQL, [restash_values(session_id, r) for r in change.restash])
            cur.executemany(
                "DELETE FROM stash WHERE session_id = ? AND stash_id = ?",
                [(session_id, stash_id) for stash_id in change.unstash],
            )
            dropped = self._enforce_caps(cur, session_id, {e.stash_id for e in change.stash})
        log_dropped(session_id, dropped)

    def keep_line_facts(self, session_id: str, rows: Sequence[tuple[str, bytes]]) -> None:
        """Store (chunk id, blob) line facts of live chunks (scoring/lineblob.py).
        Not a `Change`: a cache beside the text, no state of the session; a
        chunk or session gone meanwhile updates nothing (no session is made)."""
        with self._transaction() as cur:
            cur.executemany(SET_LINE_BLOB_SQL, [(blob, session_id, i) for i, blob in rows])

    def plan_counts(self, session_id: str) -> bytes | None:
        """The stored token counts of the session's plans (text/countblob.py)."""
        with self._reading() as cur:
            row = cur.execute(PLAN_COUNTS_SQL, (session_id,)).fetchone()
        return None if row is None else row[0]

    def keep_counts(self, session_id: str, blob: bytes) -> None:
        """Replace them (as `keep_line_facts`: a session gone gets none)."""
        with self._transaction() as cur:
            cur.execute(SET_COUNTS_SQL, (session_id, blob))

    def keep_session(self, session_id: str, index_blob: bytes, facts_blob: bytes) -> None:
        """Replace the session's kept index and line facts (`kept_sessions`), as `keep_counts`."""
        with self._transaction() as cur:
            cur.execute(SET_KEPT_SQL, (session_id, index_blob, facts_blob))

    def keep_plan(self, session_id: str, blob: bytes | None) -> None:
        """Replace (None: drop) the session's kept last plan (`kept_plans`), as `keep_counts`."""
        with self._transaction() as cur:
            cur.execute("DELETE FROM kept_plans WHERE session_id = ?", (session_id,))
            if blob is not None:
                cur.execute(SET_PLAN_SQL, (session_id, blob))

    def rows_digest(self, session_id: str) -> bytes:
        """`rows.rows_digest` of the session's live rows as stored now."""
        with self._reading() as cur:
            return live_rows_digest(cur, session_id)

    def delete_session(self, owner: str, session_id: str, *, purge_stash: bool) -> bool:
        """Delete a live session (and its stash when `purge_stash`); whether anything existed."""
        with self._transaction() as cur:
            require_owner(owners_of(cur, session_id), owner, session_id)
            existed = 0
            for table in SESSION_TABLES:  # `sessions`' row last: whether it existed
                existed = cur.execute(
                    f"DELETE FROM {table} WHERE session_id = ?", (session_id,)
                ).rowcount
            if purge_stash:
                existed += cur.execute(
                    "DELETE FROM stash WHERE session_id = ? AND owner = ?", (session_id, owner)
                ).rowcount
                cur.execute("DELETE FROM stash_totals WHERE session_id = ?", (session_id,))
        return existed > 0

    # Stash

    def stash_entries(
        self, owner: str, session_id: str, stash_ids: Sequence[str]
    ) -> dict[str, StashEntry]:
        """The entries of these stash ids that exist, by stash id."""
        found: dict[str, StashEntry] = {}
        with self._reading() as cur:
            for stash_id in dict.fromkeys(stash_ids):
                row = cur.execute(
                    f"SELECT {STASH_SELECT} FROM stash "
                    "WHERE session_id = ? AND owner = ? AND stash_id = ?",
                    (session_id, owner, stash_id),
                ).fetchone()
                if row is not None:
                    found[stash_id] = entry_from(row)
        return found

    def latest_stashed(
        self, owner: str, session_id: str, chunk_ids: Sequence[str]
    ) -> dict[str, StashEntry]:
        """The newest stashed original of each chunk id that has one, by chunk id."""
        found: dict[str, StashEntry] = {}
        with self._reading() as cur:
            for chunk_id in dict.fromkeys(chunk_ids):
                row = cur.execute(
                    f"SELECT {STASH_SELECT} FROM stash "
                    "WHERE session_id = ? AND owner = ? AND chunk_id = ? "
                    "ORDER BY stashed_at_ms DESC, id DESC LIMIT 1",
                    (session_id, owner, chunk_id),
                ).fetchone()
                if row is not None:
                    found[chunk_id] = entry_from(row)
        return found

    def stashed_group_members(
        self, owner: str, session_id: str, group_ids: Sequence[str]
    ) -> list[str]:
        """Chunk ids with a stashed original in any of these groups, sorted."""
        with self._reading() as cur:
            members = {
                str(row[0])
                for group_id in dict.fromkeys(g for g in group_ids if g)
                for row in cur.execute(
                    "SELECT DISTINCT chunk_id FROM stash "
                    "WHERE session_id = ? AND owner = ? AND group_id = ?",
                    (session_id, owner, group_id),
                )
            }
        return sorted(members)

    def list_sessions(self, owner: str, limit: int) -> tuple[list[SessionSummary], int]:
        """The owner's live sessions, most recently used first, and how many it holds."""
        with self._reading() as cur:
            rows = cur.execute(LIST_SESSIONS_SQL, (owner, limit)).fetchall()
            (total,) = cur.execute(
                "SELECT count(*) FROM sessions WHERE owner = ?", (owner,)
            ).fetchone()
        return [SessionSummary(*row) for row in rows], int(total)

    def stash_stats(self, session_id: str) -> tuple[int, int]:
        """(entries, tokens) in a session's stash (one owner per session id: see `commit`)."""
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
        `query` and every filter, best first (bm25 over the owner's entries), with a
        snippet of the lines that match; and the offset of the next page, None on the
        last one.

        The query is plain words, analysed as the live sessions analyse text (the
        same stems, stopwords and identifier parts): quotes and FTS5 operators are
        treated as text, a hit needs one of the terms, and the terms as an exact
        phrase rank higher. A blank query lists the filtered entries newest first;
        a query with no terms (only stopwords or punctuation) matches nothing."""
        if limit <= 0:
            raise InvalidArgument("limit", limit, "must be positive")
        if offset < 0:
            raise InvalidArgument("offset", offset, "must not be negative")
        terms = self.analyzer.terms(query) if query.strip() else []
        with self._reading() as cur:
            if query.strip():
                rows = ranked_page(cur, owner, session_id, terms, filters, limit + 1, offset)
            else:
                page = browse_sql(owner, session_id, filters, limit, offset)
                rows = cur.execute(*page).fetchall()
        wanted = frozenset(terms)
        hits = [
            hit_from(row, snippet(row[5], wanted, self.analyzer.terms) if wanted else row[5])
            for row in rows[:limit]
        ]
        return hits, (offset + limit if len(rows) > limit else None)

    # Export / import

    def export_session(self, owner: str, session_id: str) -> dict[str, object]:
        """A session (live chunks and stash) as a JSON-able dict (`export.py`)."""
        with self._reading() as cur:
            require_owner(owners_of(cur, session_id), owner, session_id)
            live = load_session(cur, session_id)
            stash = [
                entry_from(row)
                for row in cur.execute(
                    f"SELECT {STASH_SELECT} FROM stash WHERE session_id = ? AND owner = ? "
                    "ORDER BY id",
                    (session_id, owner),
                )
            ]
        if live is None and not stash:
            raise NotFound("session_id", session_id, "no such session")
        return export_document(live, stash)

    def import_session(self, exported: Exported, *, replace: bool) -> None:
        """Write an export read by `export.read_export` (and validated by the
        engine) for its owner. An existing session of that id is replaced only
        with `replace`, and only when the same owner holds it."""
        session = exported.session
        session_id, owner = session.session_id, session.owner
        stash_rows = self._stash_rows(exported.stash)
        with self._transaction() as cur:
            owners = owners_of(cur, session_id)
            require_owner(owners, owner, session_id, "json.session_id")
            if owners and not replace:
                raise FailedPrecondition(
                    "replace", replace, f"session {session_id!r} exists; set replace to overwrite"
                )
            for table in (*SESSION_TABLES, "stash", "stash_totals"):
                cur.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            cur.execute(
                "INSERT INTO sessions VALUES (?, ?, ?)", (session_id, owner, session.collections)
            )
            cur.executemany(LIVE_UPSERT, [live_values(session_id, c) for c in session.chunks])
            cur.executemany(_UPSERT_STASH, stash_rows)
            dropped = self._enforce_caps(cur, session_id, set())
        log_dropped(session_id, dropped)

    # Internals

    def _enforce_caps(self, cur: sqlite3.Cursor, session_id: str, keep: set[str]) -> list[Dropped]:
        return enforce_caps(
            cur,
            session_id,
            keep,
            max_entries=self.stash_max_entries,
            max_bytes=self.stash_max_bytes,
        )

    def _stash_rows(self, entries: Sequence[StashEntry]) -> list[tuple[object, ...]]:
        """The rows of stashed originals, their text analysed for the search index
        (before the write lock: analysis needs none)."""
        return [entry_values(e, index_text(self.analyzer.terms(e.chunk.text))) for e in entries]


def _claim(cur: sqlite3.Cursor, session_id: str, owner: str) -> None:
    """Create the session for `owner` unless it exists; refuse an id whose live
    session or stash belongs to someone else."""
    require_owner(owners_of(cur, session_id), owner, session_id)
    cur.execute(
        "INSERT INTO sessions VALUES (?, ?, 0) ON CONFLICT (session_id) DO NOTHING",
        (session_id, owner),
    )
