"""What the model sees in place of a removed or shrunk piece.

A placeholder names the stash entry holding the original (its stash id, as
`context_stash_search` lists it) and the call that brings it back (`ctxopt
mcp`'s restore tool, with the gateway's exact session id and the chunk id);
it carries no counter or time, so the same decision gives the same bytes and
prompt caches stay warm.
"""

from __future__ import annotations

from ctxopt.model import Action, Decision

RESTORE_HINT = 'context_stash_restore(session_id="{session}", ids=["{id}"])'


def replacement(decision: Decision, session_id: str) -> str:
    """A shrunk block's text, or a removed one's placeholder: both name the stash
    entry and how to get the original back (the ctxopt MCP tool)."""
    hint = RESTORE_HINT.format(session=session_id, id=decision.chunk_id)
    stash = f" as {decision.stash_id}" if decision.stash_id else ""
    if decision.action in (Action.TRIM, Action.MASK) and decision.replacement_text:
        return f"{decision.replacement_text}\n[ctxopt: original stashed{stash}; restore: {hint}]"
    return f"[ctxopt: stashed{stash}; restore: {hint}]"


def estimate(decision: Decision, text: str) -> int:
    """A replacement's size without counting it: the engine's count of its part
    plus a generous bound on the hint (about 3 characters a token)."""
    base = decision.tokens_after if decision.action in (Action.TRIM, Action.MASK) else 0
    extra = len(text) - len(decision.replacement_text) if base else len(text)
    return base + extra // 3 + 1
