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


class WarmConversation:
    """One stateless conversation's session. `lock` guards `session` for a
    whole call: syncing it (which may replace it with a fresh one) and the plan
    over it. Concurrent calls that share an opening wait on this lock, so no
    call plans over a session another call is changing."""

    def __init__(self, key: str, analyzer: Analyzer) -> None:
        self.lock = threading.Lock()
        self.session = Session(key, "", analyzer)
        self._analyzer = analyzer

    def synced(self, chunks: Sequence[Chunk], tokens: list[int]) -> Session:
        """The session holding exactly `chunks` in their order: the warm one
        brought up to date, or a fresh one when the order changed. Callers
        hold `lock`."""
        session = self.session
        wanted = [c.id for c in chunks]
        present = set(wanted)
        for stale in [i for i in session.entries if i not in present]:
            session.remove(stale)
        session.restore_entries(session.staged(chunks, tokens, 0))
        if [session.slot_ids[s] for s in session.live_slots()] == wanted:
            return session
        self.session = Session(session.id, "", self._analyzer)
        self.session.restore_entries(self.session.staged(chunks, tokens, 0))
        return self.session


class WarmSessions:
    """The latest `STATELESS_SESSIONS` conversations, least recent first;
    `_lock` guards the cache only (a leaf lock)."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer
        self._conversations: OrderedDict[str, WarmConversation] = OrderedDict()
        self._lock = threading.Lock()

    def conversation_of(self, chunks: Sequence[Chunk]) -> WarmConversation:
        """The warm conversation these chunks continue, or a new empty one."""
        first = f"{chunks[0].id}\0{chunks[0].text}" if chunks else ""
        key = hashlib.blake2b(first.encode(), digest_size=16).hexdigest()
        with self._lock:
            conversation = self._conversations.pop(key, None) or WarmConversation(
                key, self.analyzer
            )
            self._conversations[key] = conversation
            while len(self._conversations) > STATELESS_SESSIONS:
                self._conversations.popitem(last=False)
            return conversation
