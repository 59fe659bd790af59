"""What the model sees in place of a removed or shrunk piece.

A placeholder names the chunk and the call that brings the original back
(`ctxopt mcp`'s restore tool, in the gateway's session); it carries no counter
or time, so the same decision gives the same bytes and prompt caches stay warm.
"""

from __future__ import annotations

from ctxopt.model import Action, Decision

RESTORE_HINT = 'context_stash_restore(session_id="{session}", ids=["{id}"])'


def replacement(decision: Decision, session_id: str) -> str:
    """A shrunk block's text, or a removed one's placeholder: both name the chunk
    and how to get the original back (the ctxopt MCP tool)."""
    hint = RESTORE_HINT.format(session=session_id, id=decision.chunk_id)
    if decision.action in (Action.TRIM, Action.MASK) and decision.replacement_text:
        return f"{decision.replacement_text}\n[ctxopt restore: {hint}]"
    return f"[ctxopt: stashed; restore: {hint}]"


def estimate(decision: Decision, text: str) -> int:
    """A replacement's size without counting it: the engine's count of its part
    plus a generous bound on the hint (about 3 characters a token)."""
    base = decision.tokens_after if decision.action in (Action.TRIM, Action.MASK) else 0
    extra = len(text) - len(decision.replacement_text) if base else len(text)
    return base + extra // 3 + 1
