"""The gateway's last resort when no plan fits: drop whole exchanges, oldest
first, keeping the format's rules (a pure function of the mapped request, its
edits and the decisions behind them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxopt.api.gateway.formats.conversation import (
    Edit,
    JsonObject,
    Rewrite,
    Turn,
    WireFormat,
    droppable_units,
)
from ctxopt.api.gateway.projection import (
    BLOCK_FRAMING_TOKENS,
    EMPTIED_CALL_TOKENS,
    Call,
    Ref,
    tokens_as_sent,
)
from ctxopt.model import Action, Decision


@dataclass(frozen=True)
class Truncation:
    """What a truncation sends: the rendered body, or the original when the cut
    would break a rule of the format (`broken`)."""

    body: JsonObject
    tokens_before: int
    tokens_after: int
    dropped_turns: int
    broken: list[str]
    over_ceiling: bool

    def note(self, reason: str) -> str:
        """The log's note: why it truncated, and what came of it."""
        if self.broken:
            return f"{reason}; truncation would break: {'; '.join(self.broken)}"[:300]
        over = "; still over the ceiling" if self.over_ceiling else ""
        return f"{reason}; truncated {self.dropped_turns} turns{over}"


def truncate(
    call: Call, edits: Mapping[Ref, Edit], decisions: Mapping[str, Decision], target: float
) -> Truncation:
    """Drop whole exchanges, oldest first: first those the plan already emptied
    (their placeholders only point at the stash, which keeps the originals),
    down to `target`; then, only while the prompt is over the ceiling,
    exchanges that still hold content. Never the protected turns; the result
    is checked against the format's rules."""
    turns = call.conversation.turns
    sizes = [_turn_tokens(call, t, edits) for t in range(len(turns))]
    total = call.frame_tokens + sum(sizes)
    before = tokens_as_sent(call)
    units = droppable_units(turns, set(call.protected))
    emptied = [u for u in units if not any(_holds_content(call, t, edits, decisions) for t in u)]
    held = [u for u in units if u not in emptied]
    dropped: set[int] = set()
    for group, limit in ((emptied, target), (held, call.ceiling)):
        for unit in group:
            if total <= limit:
                break
            dropped.update(unit)
            total -= sum(sizes[t] for t in unit)
    raw_dropped = _raw_indices(turns, dropped)
    kept_edits = {ref: e for ref, e in edits.items() if ref[0] not in raw_dropped}
    rendered = call.fmt.render(call.body, call.conversation, kept_edits, frozenset(raw_dropped))
    broken = _new_violations(call.fmt, call.body, rendered)
    if broken:
        return Truncation(call.body, before, before, 0, broken, before > call.ceiling)
    return Truncation(rendered, before, total, len(dropped), [], total > call.ceiling)


def _turn_tokens(call: Call, t: int, edits: Mapping[Ref, Edit]) -> int:
    total = 0
    for block, cid in zip(call.conversation.turns[t].blocks, call.ids[t], strict=True):
        edit = edits.get(block.ref)
        if edit is None:
            total += call.sizes.get(cid, 0) + BLOCK_FRAMING_TOKENS
        elif block.rewrite == Rewrite.CALL:
            total += EMPTIED_CALL_TOKENS
        elif edit.text is not None:
            total += len(edit.text) // 3 + 1 + BLOCK_FRAMING_TOKENS
    return total


def _holds_content(
    call: Call, t: int, edits: Mapping[Ref, Edit], decisions: Mapping[str, Decision]
) -> bool:
    """Whether turn `t` still carries something of its own: a block sent as
    the host wrote it, or an excerpt or masked placeholder of one."""
    for block, cid in zip(call.conversation.turns[t].blocks, call.ids[t], strict=True):
        edit = edits.get(block.ref)
        if edit is None:
            return True
        decision = decisions.get(cid)
        if edit.text and decision is not None and decision.action in (Action.TRIM, Action.MASK):
            return True
    return False


def _raw_indices(turns: Sequence[Turn], dropped: set[int]) -> set[int]:
    """The raw messages (or items) the dropped turns are made of."""
    return {item for t in dropped for item in turns[t].items}


def _new_violations(fmt: WireFormat, original: JsonObject, rendered: JsonObject) -> list[str]:
    found = fmt.violations(rendered)
    if not found:
        return []
    known = set(fmt.violations(original))
    return [v for v in found if v not in known]
