"""Warm sessions for stateless calls (`Engine.optimize_context`): a
conversation sent again, known by its first chunk, reuses its in-memory
indexes, so each call only pays for the chunks that changed. Nothing here
is stored."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

from ctxopt.model import Chunk
from ctxopt.session import Session
from ctxopt.text.analyzer import Analyzer

STATELESS_SESSIONS = 8  # warm OptimizeContext conversations kept in memory


class WarmSessions:
    """The latest `STATELESS_SESSIONS` conversations, least recent first."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def session_for(self, chunks: Sequence[Chunk]) -> Session:
        """The warm session of this conversation, or a new empty one."""
        first = f"{chunks[0].id}\0{chunks[0].text}" if chunks else ""
        key = hashlib.blake2b(first.encode(), digest_size=16).hexdigest()
        with self._lock:
            session = self._sessions.pop(key, None) or Session(key, "", self.analyzer)
            self._sessions[key] = session
            while len(self._sessions) > STATELESS_SESSIONS:
                self._sessions.popitem(last=False)
            return session

    def synced(self, session: Session, chunks: Sequence[Chunk], tokens: list[int]) -> Session:
        """A session holding exactly `chunks` in their order: the warm one
        brought up to date, or a fresh one when the order changed (callers
        hold the warm one's lock)."""
        wanted = [c.id for c in chunks]
        present = set(wanted)
        for stale in [i for i in session.entries if i not in present]:
            session.remove(stale)
        for chunk, count in zip(chunks, tokens, strict=True):
            session.upsert(chunk, count, 0)
        if [session.slot_ids[s] for s in session.live_slots()] == wanted:
            return session
        fresh = Session(session.id, "", self.analyzer)
        for chunk, count in zip(chunks, tokens, strict=True):
            fresh.upsert(chunk, count, 0)
        with self._lock:
            self._sessions[session.id] = fresh
        return fresh
