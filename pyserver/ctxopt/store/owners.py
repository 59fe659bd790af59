"""Ownership, the one rule: a session id belongs to whoever holds its live
session or its stash, also after a delete without purge, and nobody else may
read, write, import over or delete it."""

from __future__ import annotations

import sqlite3
from collections.abc import Set as AbstractSet

from ctxopt.errors import PermissionDenied


def require_owner(
    owners: AbstractSet[str], owner: str, session_id: str, field: str = "session_id"
) -> None:
    """Refuse `owner` when anyone else holds `session_id` (`owners`: every
    holder found, in the store and in memory)."""
    if owners - {owner}:
        raise PermissionDenied(field, session_id, "session belongs to another client")


def owners_of(cur: sqlite3.Cursor, session_id: str) -> set[str]:
    """The live session's owner and the least and greatest owner of its stash: more
    than one owner shows in those three, each an index seek (every write asks)."""
    row = cur.execute(
        "SELECT (SELECT owner FROM sessions WHERE session_id = ?1), "
        "(SELECT owner FROM stash WHERE session_id = ?1 ORDER BY owner LIMIT 1), "
        "(SELECT owner FROM stash WHERE session_id = ?1 ORDER BY owner DESC LIMIT 1)",
        (session_id,),
    ).fetchone()
    return {str(owner) for owner in row if owner is not None}
