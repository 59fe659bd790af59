"""Small builders shared by the store tests."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from ctxopt.model import Action, Chunk, ChunkKind, GcPolicy, Role, StashFilter
from ctxopt.session import stash_id_of
from ctxopt.store import Change, StashEntry, Store, StoredChunk, StoredSession

OWNER = "alice"
NO_FILTER = StashFilter()

# what the migration from each version added (store/schema.py), undone newest
# first to leave a store as an older release would have (the blob tests')
_ADDED_FROM = {
    8: "DROP TABLE kept_plans",
    7: "DROP TABLE kept_sessions",
    6: "DROP TABLE plan_counts",
    5: "ALTER TABLE chunks DROP COLUMN line_blob",
    4: "ALTER TABLE chunks DROP COLUMN term_blob",
}


def as_of_version(db: Path, version: int) -> None:
    """Make the store at `db` look as schema `version` (4 or later) left it."""
    with sqlite3.connect(db) as conn:
        for added_from in sorted(_ADDED_FROM, reverse=True):
            if added_from >= version:
                conn.execute(_ADDED_FROM[added_from])
        conn.execute(f"PRAGMA user_version = {version}")


def make_chunk(chunk_id: str, text: str = "", **fields: object) -> Chunk:
    base = Chunk(
        id=chunk_id, role=Role.USER, kind=ChunkKind.MESSAGE, text=text or f"text {chunk_id}"
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def save(store: Store, session_id: str, owner: str, chunks: list[StoredChunk]) -> None:
    store.commit(Change(session_id, owner, upserts=chunks))


def stash(store: Store, entries: list[StashEntry]) -> None:
    """Each session's entries in one commit."""
    by_session: dict[tuple[str, str], list[StashEntry]] = {}
    for e in entries:
        by_session.setdefault((e.session_id, e.owner), []).append(e)
    for (session_id, owner), group in by_session.items():
        store.commit(Change(session_id, owner, stash=group))


def stashed(store: Store, chunk_ids: list[str], session_id: str = "s1") -> dict[str, StashEntry]:
    return store.latest_stashed(OWNER, session_id, chunk_ids)


def live(chunk: Chunk, seq: int, born: int = 0) -> StoredChunk:
    return StoredChunk(chunk=chunk, seq=seq, born=born, last_touched_ms=1000 + seq)


def entry(
    chunk: Chunk,
    session_id: str = "s1",
    at_ms: int = 1_000,
    owner: str = OWNER,
    action: Action = Action.STASH,
) -> StashEntry:
    return StashEntry(
        stash_id=stash_id_of(chunk),
        session_id=session_id,
        owner=owner,
        chunk=chunk,
        action=action,
        reasons=("low_score", "over_budget"),
        score=0.25,
        stashed_at_ms=at_ms,
        plan_id="plan-1",
    )


RICH_CHUNK = Chunk(
    id="rich",
    role=Role.TOOL,
    kind=ChunkKind.TOOL_RESULT,
    text="héllo wörld ✓ 🚀 日本語\r\n\ttabs\x00nul and \"quotes\" 'single'",
    tokens=42,
    created_at_ms=1_700_000_000_123,
    turn=7,
    pinned=True,
    policy=GcPolicy.PRESERVABLE,
    group_id="g1",
    parent_id="p0",
    references=("a", "b"),
    file_path="src/ünï.py",
    line_start=3,
    line_end=99,
    tags=("x", "ÿ"),
    topic_id="topic",
    task_id="task-9",
    boost=0.125,
    embedding=(0.1, -2.5, 1e-30, 3.0),
    summary_of=("c1", "c2"),
    metadata={"tool": "grep", "ключ": "значение"},
)


def fresh_session(*chunks: Chunk) -> StoredSession:
    """Session s1 as `save_chunks` of these chunks at seq 1, 2, ... leaves it."""
    return StoredSession("s1", OWNER, 0, [live(c, i + 1) for i, c in enumerate(chunks)])


def stash_texts(store: Store, texts: dict[str, str], **fields: object) -> None:
    stash(store, [entry(make_chunk(cid, text, **fields)) for cid, text in texts.items()])


def hit_ids(store: Store, query: str, filters: StashFilter = NO_FILTER) -> list[str]:
    hits, _ = store.search(OWNER, "s1", query, filters, 100, 0)
    return [h.chunk_id for h in hits]
