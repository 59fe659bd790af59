"""Sessions: `columns` (entries, per-slot columns, hubs), `session` (the
writer, owning its indexes and line book), `view` (`SessionView`, the one
read-only type readers import), `registry` (every live session)."""

from ctxopt.session.columns import Entry, stash_id, stash_id_of
from ctxopt.session.registry import Registry
from ctxopt.session.session import Session
from ctxopt.session.view import SessionView

__all__ = ["Entry", "Registry", "Session", "SessionView", "stash_id", "stash_id_of"]
