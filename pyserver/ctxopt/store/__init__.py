"""The durable store: `store` (the Store and its one write path, `commit`),
`originals` (the stash side of a write: originals kept, the change a plan or
a removal commits), `owners` (the one ownership rule), `caps` (stash
retention), `files` (the database file and its directory), `rows` (records,
`Change` among them, and SQLite row codecs), `schema` (tables and migrations), `search` (stash
search SQL), `export` (the JSON export format)."""

from ctxopt.store.export import Exported, read_export
from ctxopt.store.files import DB_FILE, PID_FILE
from ctxopt.store.originals import (
    entry_of,
    plan_change,
    plan_fingerprint,
    removal_change,
    restore_change,
    stored_of,
)
from ctxopt.store.owners import require_owner
from ctxopt.store.rows import (
    Change,
    Restash,
    SessionSummary,
    StashEntry,
    StoredChunk,
    StoredSession,
)
from ctxopt.store.store import Fsync, Store

__all__ = [
    "DB_FILE",
    "PID_FILE",
    "Change",
    "Exported",
    "Fsync",
    "Restash",
    "SessionSummary",
    "StashEntry",
    "Store",
    "StoredChunk",
    "StoredSession",
    "entry_of",
    "plan_change",
    "plan_fingerprint",
    "read_export",
    "removal_change",
    "require_owner",
    "restore_change",
    "stored_of",
]
