"""The usage ledger: one row per gateway call and per Optimize, in the store's database.

A row holds when, through which front, for which host, model and session, the
outcome, the tokens the host sent and the tokens forwarded, what the provider
reported (input, cached and output tokens, when the response carried them) and
the milliseconds ctxopt added. Never text, never a credential: `owner` is the
ctxopt identity (an owner name, "" with auth off), as on sessions.

Off the request path. `record` only appends to a list; a writer thread commits
what is pending every FLUSH_INTERVAL_S (sooner at FLUSH_ROWS rows) in one
transaction, on its own connection to `ctxopt.db` (WAL: the store's writes and
this one's interleave, each short). `close` stops the writer and commits the
rest, so a clean shutdown loses no row; a killed server loses at most the last
interval's rows. Readers `flush` first, so a report includes every call recorded.

Bounded. Rows older than the retention (days) are deleted at open and then
hourly; a database that refuses writes (a full disk) keeps at most MAX_PENDING
rows waiting and drops the oldest beyond that, with a warning.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, fields

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.5  # the most a row waits before it is durable (on a clean shutdown: none)
FLUSH_ROWS = 256  # a burst this large is written at once
MAX_PENDING = 100_000  # rows kept in memory while the database refuses writes
PRUNE_EVERY_S = 3600.0
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One call, as the ledger keeps it."""

    at_ms: int  # when it was answered, Unix milliseconds
    front: str  # "gateway", "grpc" or "mcp"
    host: str  # the agent (gateway: claude-code, codex, gemini-cli, other); "grpc" for gRPC
    provider: str  # "anthropic", "openai", "gemini"; "" when no provider was called
    model: str
    session_id: str
    owner: str
    outcome: str  # the gateway's x-ctxopt-outcome, or the plan's outcome for Optimize
    status: int  # the provider's HTTP status (0 for gRPC calls)
    tokens_sent: int  # the prompt as the host sent it (x-ctxopt-tokens-before)
    tokens_forwarded: int  # the prompt as it went on (x-ctxopt-tokens-after)
    input_tokens: int | None = None  # the provider's prompt count, cached part included
    cached_tokens: int | None = None  # of which read from the provider's cache
    output_tokens: int | None = None
    added_ms: float = 0.0  # time ctxopt added (the gateway's preparation, the plan)

    @property
    def tokens_saved(self) -> int:
        return self.tokens_sent - self.tokens_forwarded


_COLUMNS = [f.name for f in fields(UsageRow)]
_DDL = (
    """CREATE TABLE IF NOT EXISTS usage (
  id INTEGER PRIMARY KEY,
  at_ms INTEGER NOT NULL, front TEXT NOT NULL, host TEXT NOT NULL, provider TEXT NOT NULL,
  model TEXT NOT NULL, session_id TEXT NOT NULL, owner TEXT NOT NULL, outcome TEXT NOT NULL,
  status INTEGER NOT NULL, tokens_sent INTEGER NOT NULL, tokens_forwarded INTEGER NOT NULL,
  input_tokens INTEGER, cached_tokens INTEGER, output_tokens INTEGER, added_ms REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS usage_by_owner ON usage (owner, at_ms)",
    "CREATE INDEX IF NOT EXISTS usage_by_session ON usage (owner, session_id, at_ms)",
)
_INSERT = f"INSERT INTO usage ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM usage"


class Ledger:
    """The usage rows of one data directory (see the module doc)."""

    def __init__(
        self,
        db_path: str,
        *,
        retention_days: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`db_path` is the store's database file, or ":memory:" (tests only)."""
        self.retention_days = retention_days
        self._clock = clock
        self._conn = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA busy_timeout = 10000")
        self._lock = threading.Lock()  # the connection
        self._pending: list[UsageRow] = []
        self._wake = threading.Condition()  # guards _pending and _closing
        self._closing = False
        with self._lock:
            for statement in _DDL:
                self._conn.execute(statement)
        self._pruned_at = 0.0
        self._prune()
        self._writer = threading.Thread(target=self._run, name="ctxopt-ledger", daemon=True)
        self._writer.start()

    def record(self, row: UsageRow) -> None:
        """Queue one row; it is committed by the writer, never on the caller's path."""
        with self._wake:
            self._pending.append(row)
            if len(self._pending) > MAX_PENDING:
                del self._pending[: len(self._pending) - MAX_PENDING]
                logger.warning("usage ledger: database refuses writes, oldest rows dropped")
            if len(self._pending) >= FLUSH_ROWS:
                self._wake.notify()

    def flush(self) -> None:
        """Commit every row recorded so far."""
        with self._wake:
            rows, self._pending = self._pending, []
        self._write(rows)

    def rows(
        self, owner: str, *, since_ms: int = 0, session_id: str | None = None
    ) -> list[UsageRow]:
        """`owner`'s rows from `since_ms` on (one session's when given), oldest first."""
        self.flush()
        sql = f"{_SELECT} WHERE owner = ? AND at_ms >= ?"
        params: list[object] = [owner, since_ms]
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        with self._lock:
            found = self._conn.execute(f"{sql} ORDER BY at_ms, id", params).fetchall()
        return [UsageRow(*row) for row in found]

    def every_row(self) -> list[UsageRow]:
        """All rows of every owner, oldest first (the metrics' totals at start)."""
        self.flush()
        with self._lock:
            return [UsageRow(*row) for row in self._conn.execute(f"{_SELECT} ORDER BY id")]

    def close(self) -> None:
        """Stop the writer, commit what is pending, close the connection."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._writer.join()
        self.flush()
        with self._lock:
            self._conn.close()

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._closing and len(self._pending) < FLUSH_ROWS:
                    self._wake.wait(FLUSH_INTERVAL_S)
                if self._closing:
                    return
            self.flush()
            if self._clock() - self._pruned_at >= PRUNE_EVERY_S:
                self._prune()

    def _write(self, rows: Sequence[UsageRow]) -> None:
        if not rows:
            return
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.executemany(_INSERT, [astuple(r) for r in rows])
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.rollback()
                    raise
        except sqlite3.Error as err:
            logger.warning("usage ledger: %d rows not written yet: %s", len(rows), err)
            with self._wake:  # back in front, to be tried again by the next flush
                self._pending[:0] = rows

    def _prune(self) -> None:
        self._pruned_at = self._clock()
        cutoff = int(self._pruned_at * 1000) - self.retention_days * DAY_MS
        try:
            with self._lock:
                gone = self._conn.execute("DELETE FROM usage WHERE at_ms < ?", (cutoff,)).rowcount
        except sqlite3.Error as err:
            logger.warning("usage ledger: rows past the retention not deleted: %s", err)
            return
        if gone:
            logger.info(
                "usage ledger: %d rows older than %d days deleted", gone, self.retention_days
            )
