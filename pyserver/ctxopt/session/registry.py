"""`Registry`: every live session of the process, by id."""

from __future__ import annotations

import threading

from ctxopt.session.session import Session
from ctxopt.text.analyzer import Analyzer


class Registry:
    """All live sessions; sessions lock individually so they never block each other."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def get(self, session_id: str) -> Session | None:
        with self._lock:
            return self._sessions.get(session_id)

    def create(self, session_id: str, owner: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                session = Session(session_id, owner, self.analyzer)
                self._sessions[session_id] = session
            return session

    def put(self, session: Session) -> Session:
        """Insert a loaded session unless another thread got there first."""
        with self._lock:
            return self._sessions.setdefault(session.id, session)

    def drop(self, session_id: str) -> Session | None:
        with self._lock:
            return self._sessions.pop(session_id, None)

    def sessions(self) -> list[Session]:
        """Every live session, at this moment."""
        with self._lock:
            return list(self._sessions.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
