"""Checks of a request against a session's state (`validate` holds the
stateless ones): capacity, one embedding dimension, known ids, and the one
rule for removal asked for by id. Each raises a `ctxopt.errors` error naming
the field."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ctxopt import validate
from ctxopt.errors import FailedPrecondition, InvalidArgument, NotFound
from ctxopt.model import Chunk, GcPolicy, Roots
from ctxopt.roots import mark
from ctxopt.session import SessionView


def check_capacity(present: Collection[str], chunks: Sequence[Chunk], limit: int) -> None:
    """The session (holding the ids `present`) stays within `limit` chunks."""
    new = sum(1 for c in {c.id for c in chunks} if c not in present)
    if len(present) + new > limit:
        raise validate.too_many("chunks", len(present) + new, "chunks in the session", limit)


def check_embeddings(dim: int, chunks: Sequence[Chunk]) -> None:
    """One embedding dimension per session (`dim`: the session's, 0 for none yet)."""
    for i, chunk in enumerate(chunks):
        if not chunk.embedding:
            continue
        if dim and len(chunk.embedding) != dim:
            raise InvalidArgument(
                f"chunks[{i}].embedding",
                len(chunk.embedding),
                f"dimension differs from the session's {dim}",
            )
        dim = len(chunk.embedding)


def check_query_embedding(dim: int, embedding: Sequence[float]) -> None:
    if embedding and dim and len(embedding) != dim:
        raise InvalidArgument(
            "query_embedding", len(embedding), f"dimension differs from the session's {dim}"
        )


def require_known(present: Collection[str], chunk_ids: Sequence[str], field: str) -> None:
    unknown = [i for i in chunk_ids if i not in present]
    if unknown:
        raise NotFound(field, unknown, "no such chunks in the session")


def check_removable(
    session: SessionView, chunk_ids: Sequence[str], roots: Roots, field: str
) -> None:
    """The one rule for removal asked for by id (`Optimize.delete_ids`, the MCP
    prune tool): LOCKED, pinned and root chunks are refused, each named with why.
    (`Engine.remove` is the client dropping chunks from its own history: no rule.)"""
    require_known(session.entries.keys(), chunk_ids, field)
    if not chunk_ids:
        return
    is_root = mark(session, roots).root
    refused = []
    for chunk_id in chunk_ids:
        entry = session.entries[chunk_id]
        if entry.chunk.gc_policy == GcPolicy.LOCKED:
            refused.append(f"{chunk_id} (LOCKED)")
        elif entry.chunk.pinned:
            refused.append(f"{chunk_id} (pinned)")
        elif is_root[entry.slot]:
            refused.append(f"{chunk_id} (root)")
    if refused:
        raise FailedPrecondition(
            field,
            refused,
            "LOCKED, pinned and root chunks are never removed on request "
            "(unpin a pinned one first)",
        )
