"""What the store holds of a live session's line facts (scoring/lineblob.py),
per slot: which facts a close keeps with the session and which a plan's
facts still lack in the store (`LiveSessions.keep_line_facts`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ctxopt.model import ChunkKind, Role
from ctxopt.scoring.lineblob import CITED, NAMES, PROFILE, TextFacts, remembered
from ctxopt.session import Session

_MODEL, _TOOL_RESULT = int(Role.MODEL), int(ChunkKind.TOOL_RESULT)


@dataclass(slots=True)
class KeptFacts:
    """What the store holds of one session's line facts: per slot, which of
    them (`lineblob` bits) for the live text there (`commit` forgets a slot
    whose text changes or that goes, a compaction moves them with their
    chunks; a byte per slot, where a dict by chunk id took ~35 bytes per
    chunk); and how many facts the process had made at the last look (none
    made since: nothing to keep)."""

    made: tuple[int, int, int] = (-1, -1, -1)
    by_slot: bytearray = field(default_factory=bytearray)
    # the session's index version and `by_slot` as last kept whole (`close`)
    snapshot: tuple[int, bytes] | None = None

    def held(self, slot: int) -> int:
        return self.by_slot[slot] if slot < len(self.by_slot) else 0

    def hold(self, slot: int, facts: int) -> None:
        if slot >= len(self.by_slot):
            self.by_slot.extend(bytes(slot + 1 - len(self.by_slot)))
        self.by_slot[slot] = facts


def stored_facts(text: str, held: int) -> TextFacts:
    """The facts of `text` the process remembers, of those the store holds
    (`held`): what its line blob decodes to, as far as they are remembered."""
    facts = remembered(text)
    return TextFacts(
        facts.names if held & NAMES else None,
        facts.cited if held & CITED else None,
        facts.profile if held & PROFILE else None,
    )


def lacking(session: Session, kept: KeptFacts) -> tuple[list[int], list[int]]:
    """The live slots the store lacks a line fact of that a plan reads (a
    model text's names and cited numbers, a tool output's profile), and
    which facts each wants: every slot at once, not one at a time (a plan
    after an append looked at each of ~1,200 entries, ~2 ms)."""
    n = session.n_slots
    cols = session.columns
    wanted = np.where(cols.role[:n] == _MODEL, NAMES | CITED, 0) | np.where(
        cols.kind[:n] == _TOOL_RESULT, PROFILE, 0
    )
    held = np.zeros(n, dtype=np.int64)
    m = min(n, len(kept.by_slot))
    held[:m] = np.frombuffer(bytes(kept.by_slot[:m]), dtype=np.uint8)
    slots = np.flatnonzero(cols.alive[:n] & (wanted & ~held != 0))
    return slots.tolist(), wanted[slots].tolist()
