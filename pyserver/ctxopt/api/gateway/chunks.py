"""What the engine sees of a conversation: its blocks as chunks, and the query.

A tool call and its result share a group; the model's narration beside its
calls joins its first call's group (EPHEMERAL: its facts come back in the
results); a locked turn's blocks are system chunks (LOCKED).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxopt.api.gateway.formats.conversation import Turn
from ctxopt.model import Chunk, ChunkKind, GcPolicy, Role

QUERY_CHARS = 4000  # the query's tail that matters (a pasted log can be huge)


def engine_chunks(turns: Sequence[Turn], ids: list[list[str]], start: int) -> list[Chunk]:
    """The chunks of the turns from `start` on."""
    chunks: list[Chunk] = []
    for t in range(start, len(turns)):
        turn = turns[t]
        steps = any(b.call_id for b in turn.blocks)
        for block, cid, group in zip(turn.blocks, ids[t], groups_of(turn), strict=True):
            kind = ChunkKind.SYSTEM if turn.locked else block.kind
            # a step's narration: its facts come back in the results
            narration = steps and kind == ChunkKind.MESSAGE
            policy = GcPolicy.EPHEMERAL if narration else GcPolicy.UNSPECIFIED
            chunks.append(
                Chunk(
                    cid,
                    Role.SYSTEM if turn.locked else turn.role,
                    kind,
                    block.text,
                    tokens=block.tokens,
                    turn=t + 1,
                    policy=policy,
                    group_id=group,
                    pinned=block.pinned,
                    file_path=block.file_path,
                )
            )
    return chunks


def groups_of(turn: Turn) -> list[str]:
    """Each block's group: a call and its result share the call's id; a step's
    narration goes with its first call, whose result's placeholder restores it;
    "" for a block that stands alone."""
    step = next((b.call_id for b in turn.blocks if b.call_id), "")
    return [
        step if step and not turn.locked and b.kind == ChunkKind.MESSAGE else b.call_id or b.answers
        for b in turn.blocks
    ]


def query_of(turns: Sequence[Turn]) -> str:
    """The relevance query: the latest user text (tool results and system text aside)."""
    for turn in reversed(turns):
        if turn.role == Role.USER:
            text = "\n".join(b.text for b in turn.blocks if b.kind == ChunkKind.MESSAGE)
            if text.strip():
                return text[-QUERY_CHARS:]
    return ""
