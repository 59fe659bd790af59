"""The engine: the one in-process API both fronts (gRPC, MCP) call.

Every method validates its input and raises a `ctxopt.errors` error naming the
field; a failed call leaves the session unchanged. `owner` scopes sessions and
stash entries to the credential that created them ("" when auth is off).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxopt.config import Config
from ctxopt.model import (
    AppendResult,
    Budget,
    Chunk,
    ChunkScore,
    ChunkUpdate,
    OptimizeOptions,
    Plan,
    Roots,
    SessionStats,
    StashFilter,
    StashHit,
    Weights,
)


class Engine:
    def __init__(self, config: Config) -> None:
        self.config = config

    def close(self) -> None:
        """Flush and close storage."""
        raise NotImplementedError

    def append(self, owner: str, session_id: str, chunks: Sequence[Chunk]) -> AppendResult:
        """Upsert chunks by id (creates the session on first append)."""
        raise NotImplementedError

    def update(self, owner: str, session_id: str, updates: Sequence[ChunkUpdate]) -> int:
        """Apply updates all or nothing; returns how many chunks changed."""
        raise NotImplementedError

    def remove(
        self, owner: str, session_id: str, chunk_ids: Sequence[str], stash: bool
    ) -> tuple[int, int]:
        """Remove chunks; returns (removed, session_tokens)."""
        raise NotImplementedError

    def optimize(self, owner: str, session_id: str, options: OptimizeOptions) -> Plan:
        """Plan the prompt; unless dry_run, stash originals durably and apply."""
        raise NotImplementedError

    def score(
        self,
        owner: str,
        session_id: str,
        query: str,
        query_embedding: Sequence[float],
        roots: Roots,
        weights: Weights,
    ) -> list[ChunkScore]:
        """Every chunk's score breakdown, in prompt order."""
        raise NotImplementedError

    def optimize_context(self, chunks: Sequence[Chunk], options: OptimizeOptions) -> Plan:
        """Stateless plan over inline chunks; nothing is stored."""
        raise NotImplementedError

    def search_stash(
        self,
        owner: str,
        session_id: str,
        query: str,
        filters: StashFilter,
        limit: int,
        offset: int,
    ) -> tuple[list[StashHit], int | None]:
        """Ranked stash hits and the next offset (None on the last page)."""
        raise NotImplementedError

    def restore(
        self,
        owner: str,
        session_id: str,
        chunk_ids: Sequence[str],
        budget: Budget | None,
        force: bool,
    ) -> tuple[list[str], int]:
        """Restore stashed chunks and their groups; returns (ids, session_tokens)."""
        raise NotImplementedError

    def stats(self, owner: str, session_id: str) -> SessionStats:
        raise NotImplementedError

    def delete_session(self, owner: str, session_id: str, purge_stash: bool) -> bool:
        raise NotImplementedError

    def export_session(self, owner: str, session_id: str) -> str:
        """The session and its stash as JSON (round-trips through import)."""
        raise NotImplementedError

    def import_session(self, owner: str, data: str, replace: bool) -> tuple[str, int]:
        """Load an exported session; returns (session_id, chunk_count)."""
        raise NotImplementedError
