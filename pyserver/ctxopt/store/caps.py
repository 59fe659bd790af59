"""Retention: each session's stash is capped (`stash_max_entries`,
`stash_max_bytes`); a write that would go over drops EPHEMERAL originals of
that session, oldest first, never the ones being written nor those a live
chunk names, and logs each drop; when that is not enough the write is refused."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from ctxopt.errors import ResourceExhausted

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Dropped:
    row_id: int
    stash_id: str
    size_bytes: int


def log_dropped(session_id: str, dropped: Sequence[Dropped]) -> None:
    for d in dropped:
        logger.warning(
            "stash cap reached: dropped EPHEMERAL original %s of session %r (%d bytes)",
            d.stash_id,
            session_id,
            d.size_bytes,
        )


def enforce_caps(
    cur: sqlite3.Cursor, session_id: str, keep: set[str], *, max_entries: int, max_bytes: int
) -> list[Dropped]:
    """Drop EPHEMERAL originals, oldest first, until the session's stash fits its
    caps, never one in `keep` or one a live chunk names; returns what went (to
    log after commit) or raises ResourceExhausted."""
    totals = cur.execute(
        "SELECT entries, size_bytes FROM stash_totals WHERE session_id = ?", (session_id,)
    ).fetchone()
    if totals is None:
        return []
    entries, size = totals
    if entries <= max_entries and size <= max_bytes:
        return []
    victims: list[Dropped] = []
    candidates = cur.execute(
        "SELECT s.id, s.stash_id, s.size_bytes FROM stash AS s "
        "WHERE s.session_id = ? AND s.ephemeral = 1 AND NOT EXISTS ("
        "  SELECT 1 FROM chunks AS c WHERE c.session_id = s.session_id "
        "  AND c.origin = s.stash_id) "
        "ORDER BY s.stashed_at_ms, s.id",
        (session_id,),
    )
    for row_id, stash_id, row_size in candidates:
        if entries <= max_entries and size <= max_bytes:
            break
        if stash_id in keep:
            continue
        victims.append(Dropped(int(row_id), str(stash_id), int(row_size)))
        entries -= 1
        size -= row_size
    for cap, used, limit, what in (
        ("stash_max_entries", entries, max_entries, "entries"),
        ("stash_max_bytes", size, max_bytes, "bytes"),
    ):
        if used > limit:
            raise ResourceExhausted(
                cap,
                limit,
                f"session {session_id!r} would stash {used} {what} and only EPHEMERAL "
                "originals may be dropped; export or delete sessions, or raise the cap",
            )
    cur.executemany("DELETE FROM stash WHERE id = ?", [(v.row_id,) for v in victims])
    return victims
