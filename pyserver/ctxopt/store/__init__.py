"""The durable store: `store` (the Store and its one write path, `Change`),
`rows` (records and SQLite row codecs), `schema` (tables and migrations),
`search` (stash search SQL), `export` (the JSON export format)."""

from ctxopt.store.export import Exported, read_export
from ctxopt.store.rows import Restash, SessionSummary, StashEntry, StoredChunk, StoredSession
from ctxopt.store.store import DB_FILE, PID_FILE, Change, Fsync, Store

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
    "read_export",
]
