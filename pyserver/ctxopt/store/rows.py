"""Chunk and stash records, and their SQLite row codecs.

The live `chunks` table and the `stash` table share the chunk columns, so one
codec serves both; enums travel as integers, string lists as JSON, embeddings
as packed floats.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import sqlite3
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxopt.model import Action, Chunk, ChunkKind, GcPolicy, Role, StashHit, effective_policy


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """One chunk of a live session, as the registry holds it."""

    chunk: Chunk
    seq: int
    born: int  # the session's collection count when the chunk arrived (its generation)
    last_touched_ms: int
    # The stash id of the original when the live text is a TRIM excerpt or MASK
    # placeholder ("" when the text is the original): that entry is never dropped
    # while this chunk lives, and a restore brings it back.
    origin: str = ""
    # The text's analysed terms (text/termblob.py), None when not computed: a
    # write keeps the stored ones then (they name the text they were made from).
    term_blob: bytes | None = None
    # The line facts a plan made of the text (scoring/lineblob.py), as read;
    # written only by `Change.line_facts` (an upsert keeps the stored ones)
    line_blob: bytes | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """One write to a session: what changes, committed in one transaction.

    `upserts` are live chunks written whole; `removals` live chunk ids dropped;
    `stash` originals stored; `restash` stored originals given a newer decision;
    `unstash` stash ids brought back into the window; `collections` the
    session's new collection count (None: unchanged)."""

    session_id: str
    owner: str
    upserts: Sequence[StoredChunk] = ()
    removals: Sequence[str] = ()
    stash: Sequence[StashEntry] = ()
    restash: Sequence[Restash] = ()
    unstash: Sequence[str] = ()
    collections: int | None = None


@dataclass(frozen=True, slots=True)
class StoredSession:
    session_id: str
    owner: str
    collections: int
    chunks: list[StoredChunk]
    # the token counts its plans made (text/countblob.py), as stored
    counts: bytes | None = None
    # its BM25 index and its texts' line facts as the last process closed
    # (text/indexblob.py, scoring/lineblob.py), as stored
    index: bytes | None = None
    facts: bytes | None = None
    # its last plan as the last process closed (engine/kept_plans.py), as stored,
    # and the digest of its rows (`rows_digest`) when there is one
    plan: bytes | None = None
    rows: bytes = b""


# The owner's live sessions with their stash totals, most recently used first
LIST_SESSIONS_SQL = """
SELECT s.session_id,
  (SELECT count(*) FROM chunks c WHERE c.session_id = s.session_id),
  (SELECT coalesce(sum(c.tokens), 0) FROM chunks c WHERE c.session_id = s.session_id),
  coalesce(t.entries, 0),
  coalesce(t.tokens, 0),
  max(
    coalesce((SELECT max(c.last_touched_ms) FROM chunks c WHERE c.session_id = s.session_id), 0),
    coalesce((SELECT max(st.stashed_at_ms) FROM stash st WHERE st.session_id = s.session_id), 0)
  ) AS last_used
FROM sessions s LEFT JOIN stash_totals t ON t.session_id = s.session_id
WHERE s.owner = ?
ORDER BY last_used DESC, s.session_id
LIMIT ?
"""


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One stored session as `ListSessions` shows it."""

    session_id: str
    chunk_count: int
    tokens: int
    stashed_count: int
    stashed_tokens: int
    last_used_ms: int  # the latest chunk touch or stash write


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


@dataclass(frozen=True, slots=True)
class Restash:
    """A stashed original whose excerpt or placeholder left the window too: the
    entry stays as it is and records the newer decision."""

    stash_id: str
    action: Action
    reasons: tuple[str, ...]
    score: float
    stashed_at_ms: int
    plan_id: str


RESTASH_SQL = (
    "UPDATE stash SET action = ?, reasons = ?, score = ?, stashed_at_ms = ?, "
    "plan_id = ? WHERE session_id = ? AND stash_id = ?"
)
SET_LINE_BLOB_SQL = "UPDATE chunks SET line_blob = ? WHERE session_id = ? AND chunk_id = ?"
PLAN_COUNTS_SQL = "SELECT blob FROM plan_counts WHERE session_id = ?"
# a session's owner, collections and its plans' token counts (NULL: none)
SESSION_HEAD_SQL = """SELECT owner, collections,
(SELECT blob FROM plan_counts WHERE session_id = ?1), k.index_blob, k.facts_blob,
(SELECT blob FROM kept_plans WHERE session_id = ?1)
FROM sessions LEFT JOIN kept_sessions k USING (session_id) WHERE session_id = ?1"""
# a session gone meanwhile gets no row
SET_COUNTS_SQL = """INSERT INTO plan_counts SELECT ?1, ?2
WHERE EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1)
ON CONFLICT (session_id) DO UPDATE SET blob = excluded.blob"""
SET_KEPT_SQL = """INSERT INTO kept_sessions SELECT ?1, ?2, ?3
WHERE EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1) ON CONFLICT (session_id)
DO UPDATE SET index_blob = excluded.index_blob, facts_blob = excluded.facts_blob"""
SET_PLAN_SQL = """INSERT INTO kept_plans SELECT ?1, ?2
WHERE EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1)
ON CONFLICT (session_id) DO UPDATE SET blob = excluded.blob"""
# the tables holding what a session keeps beside its chunks, by session id
SESSION_TABLES = ("chunks", "plan_counts", "kept_sessions", "kept_plans", "sessions")


def restash_values(session_id: str, r: Restash) -> tuple[object, ...]:
    reasons = json.dumps(list(r.reasons), ensure_ascii=False)
    return (int(r.action), reasons, r.score, r.stashed_at_ms, r.plan_id, session_id, r.stash_id)


# Chunk columns, shared by the live `chunks` table and the `stash` table.
CHUNK_COLUMNS = (
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
CHUNK_NAMES = tuple(name for name, _ in CHUNK_COLUMNS)
CHUNK_SELECT = ", ".join(CHUNK_NAMES)
_EMBEDDING_COLUMN = CHUNK_NAMES.index("embedding")

LIVE_NAMES = ("session_id", "seq", "born", "last_touched_ms", "origin", "term_blob", *CHUNK_NAMES)
# a damaged value of another type must not stop a session from loading: it is
# read as bytes, which the blob's checksum then refuses
LIVE_SELECT = (
    "seq, born, last_touched_ms, origin, CAST(term_blob AS BLOB), CAST(line_blob AS BLOB), "
    f"{CHUNK_SELECT}"
)
_TEXT = 6 + 3  # a `LIVE_SELECT` row's text column (`chunk_from`'s r[3])
STASH_NAMES = (
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
    *CHUNK_NAMES,
    "terms",
)
STASH_SELECT = (
    f"stash_id, session_id, owner, action, reasons, score, stashed_at_ms, plan_id, {CHUNK_SELECT}"
)


def upsert_sql(table: str, names: Sequence[str], keys: Sequence[str]) -> str:
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n not in keys)
    return (
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
    )


# A live chunk written without its terms keeps the stored ones (a compaction
# renumbers, a restore or import brings none); a changed text makes them stale,
# which their text digest tells when they are read.
LIVE_UPSERT = upsert_sql("chunks", LIVE_NAMES, ("session_id", "chunk_id")).replace(
    "term_blob = excluded.term_blob", "term_blob = coalesce(excluded.term_blob, term_blob)"
)


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


def chunk_values(c: Chunk) -> tuple[object, ...]:
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


def chunk_from(row: Sequence[Any], start: int) -> Chunk:
    # positional, in `Chunk`'s field order (= `CHUNK_COLUMNS`'): keywords made
    # the call three times slower, ~1 ms per 1,000 chunks of a restart's load
    r = row[start:]
    return Chunk(
        r[0],  # id
        _ROLES[r[1]],
        _KINDS[r[2]],
        r[3],  # text
        r[4],  # tokens
        r[5],  # created_at_ms
        r[6],  # turn
        bool(r[7]),  # pinned
        _POLICIES[r[8]],
        r[9],  # group_id
        r[10],  # parent_id
        _decode_strings(r[11]),  # references
        r[12],  # file_path
        r[13],  # line_start
        r[14],  # line_end
        _decode_strings(r[15]),  # tags
        r[16],  # topic_id
        r[17],  # task_id
        r[18],  # boost
        _decode_embedding(r[19]),
        _decode_strings(r[20]),  # summary_of
        _JSON.raw_decode(r[21])[0] if r[21] else {},  # metadata
    )


def live_values(session_id: str, c: StoredChunk) -> tuple[object, ...]:
    head = (session_id, c.seq, c.born, c.last_touched_ms, c.origin, c.term_blob)
    return (*head, *chunk_values(c.chunk))


def rows_digest(rows: Sequence[Sequence[Any]]) -> bytes:
    """A digest of `LIVE_SELECT` rows as SQLite returns them, less the term and
    line blobs (caches made from the text) and the text (which
    `text/indexblob.chunks_digest` digests): equal digests and texts, the same chunks."""
    return _digest([(*r[:4], *r[6:_TEXT], *r[_TEXT + 1 :]) for r in rows])


# `rows_digest`'s columns alone: a close digests the rows without reading
# their texts and blobs back (the whole rows' `fetchall` was ~77 ms of a close
# at 10,000 chunks)
DIGEST_SELECT = ", ".join(
    ["seq", "born", "last_touched_ms", "origin", *(n for n in CHUNK_NAMES if n != "text")]
)


def live_rows_digest(cur: sqlite3.Cursor, session_id: str) -> bytes:
    """`rows_digest` of the session's live rows, read without their texts."""
    sql = f"SELECT {DIGEST_SELECT} FROM chunks WHERE session_id = ? ORDER BY seq"
    return _digest([tuple(r) for r in cur.execute(sql, (session_id,))])


def _digest(plain: list[tuple[Any, ...]]) -> bytes:
    return hashlib.sha256(marshal.dumps(plain, 2)).digest()[:16]  # SHA-256: in hardware


def live_from(row: Sequence[Any]) -> StoredChunk:
    """A row selected with `LIVE_SELECT`."""
    return StoredChunk(chunk_from(row, 6), row[0], row[1], row[2], row[3], row[4], row[5])


def entry_values(e: StashEntry, terms: str) -> tuple[object, ...]:
    """The `STASH_NAMES` values of an entry whose text indexes as `terms`
    (`search.index_text`)."""
    values = chunk_values(e.chunk)
    embedding = values[_EMBEDDING_COLUMN]
    # the search terms are stored beside the text and weigh about as much
    size = len(e.chunk.text.encode("utf-8")) + len(terms.encode("utf-8"))
    size += len(embedding) if isinstance(embedding, bytes) else 0
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
        terms,
    )


def entry_from(row: Sequence[Any]) -> StashEntry:
    """A row selected with `STASH_SELECT`."""
    return StashEntry(
        stash_id=row[0],
        session_id=row[1],
        owner=row[2],
        action=Action(row[3]),
        reasons=tuple(json.loads(row[4])),
        score=row[5],
        stashed_at_ms=row[6],
        plan_id=row[7],
        chunk=chunk_from(row, 8),
    )


def hit_from(row: Sequence[Any], snippet: str) -> StashHit:
    """A row selected by `search.browse_sql` or `search.hits_sql` (less its id), with
    the snippet cut from its column 5."""
    return StashHit(
        stash_id=str(row[0]),
        chunk_id=str(row[1]),
        session_id=str(row[2]),
        kind=ChunkKind(row[3]),
        score=float(row[4]),
        snippet=snippet,
        tokens=int(row[6]),
        action=Action(row[7]),
        stashed_at_ms=int(row[8]),
    )


def live_rows(cur: sqlite3.Cursor, session_id: str) -> list[Any]:
    sql = f"SELECT {LIVE_SELECT} FROM chunks WHERE session_id = ? ORDER BY seq"
    return cur.execute(sql, (session_id,)).fetchall()


def load_session(cur: sqlite3.Cursor, session_id: str) -> StoredSession | None:
    """A live session with its chunks in prompt order, None when it does not exist."""
    head = cur.execute(SESSION_HEAD_SQL, (session_id,)).fetchone()
    if head is None:
        return None
    rows = live_rows(cur, session_id)
    chunks = [live_from(r) for r in rows]
    counts, index, facts, plan = head[2:]
    digest = rows_digest(rows) if plan is not None else b""  # only to trust a kept plan
    return StoredSession(
        session_id, str(head[0]), int(head[1]), chunks, counts, index, facts, plan, digest
    )
