"""Conversation rules a plan must satisfy, so the result is still a valid conversation.

Groups are atomic by construction (the planner moves whole units), and the
latest turn and pending calls are roots, so what is left to check is:

- parent_kept: a kept reply keeps its parent when the parent is in the session
  (this also means no tool result outlives the call it answers); an
  unprotected reply goes instead of bringing a removed parent back;
- first_user_turn: the first kept non-system chunk is a user turn.

`violations` reports each broken rule with the fix that restores it;
`repair` applies the fixes (`cut.make_coherent` re-checks until none is left).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctxopt.model import ChunkKind, Repair, Role
from ctxopt.planner.selection import FULL, OUT, Selection
from ctxopt.session import SessionView

# plain ints for numpy: comparing an array with an IntEnum member costs ~5x more
_USER, _SYSTEM = int(Role.USER), int(Role.SYSTEM)
_SYSTEM_KIND, _TOOL_SCHEMA = int(ChunkKind.SYSTEM), int(ChunkKind.TOOL_SCHEMA)


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    slot: int
    keep: bool  # True: keep this slot's unit; False: remove it
    detail: str


def violations(sel: Selection) -> list[Violation]:
    """Every rule the selection's current states break, each with its fix."""
    session, live, unit_of, protected = sel.session, sel.live, sel.unit_of, sel.protected
    child_slots, parent_slots = sel.child_slots, sel.parent_slots
    state = sel.slot_state()
    found: list[Violation] = []
    orphaned = (state[child_slots] != OUT) & (state[parent_slots] == OUT)
    for child, parent in zip(child_slots[orphaned], parent_slots[orphaned], strict=True):
        child_id, parent_id = session.slot_ids[int(child)], session.slot_ids[int(parent)]
        # the cheap fix first: a reply nothing protects goes with its parent
        if protected[unit_of[child]]:
            fix = Violation("parent_kept", int(parent), True, f"kept {child_id} replies to it")
        else:
            fix = Violation("parent_kept", int(child), False, f"its parent {parent_id} is out")
        found.append(fix)
    if found:
        return found
    first = _first_kept_conversation_slot(session, live, state)
    if first is None or session.columns.role[first] == _USER:
        return found
    # Prefer bringing back the plain user turn it answers; with none before it,
    # drop the unprotected non-user turns that lead.
    user = _previous_user_slot(session, live, first)
    if user is not None:
        found.append(
            Violation(
                "first_user_turn",
                user,
                True,
                f"kept so that {session.slot_ids[first]} follows a user turn",
            )
        )
        return found
    for slot in live[(state[live] != OUT)].tolist():
        if _is_system_slot(session, slot):
            continue
        if session.columns.role[slot] == _USER or protected[unit_of[slot]]:
            break
        found.append(Violation("first_user_turn", slot, False, "no user turn precedes it"))
    return found


def repair(sel: Selection) -> list[Repair]:
    """Apply the coherence fixes one round; a kept unit becomes protected."""
    repairs: list[Repair] = []
    for violation in violations(sel):
        unit = int(sel.unit_of[violation.slot])
        if violation.keep:
            if sel.state[unit] == OUT:
                sel.state[unit] = FULL
            sel.protected[unit] = True
        else:
            sel.state[unit] = OUT
        repairs.append(
            Repair(violation.rule, sel.session.slot_ids[violation.slot], violation.detail)
        )
    return repairs


def _is_system_slot(session: SessionView, slot: int) -> bool:
    cols = session.columns
    return bool(cols.role[slot] == _SYSTEM or cols.kind[slot] in (_SYSTEM_KIND, _TOOL_SCHEMA))


def _first_kept_conversation_slot(
    session: SessionView, live: npt.NDArray[np.intp], state: npt.NDArray[np.int8]
) -> int | None:
    kept = live[state[live] != OUT]
    role, kind = session.columns.role[kept], session.columns.kind[kept]
    conversation = kept[(role != _SYSTEM) & (kind != _SYSTEM_KIND) & (kind != _TOOL_SCHEMA)]
    return int(conversation[0]) if len(conversation) else None


def _previous_user_slot(
    session: SessionView, live: npt.NDArray[np.intp], before: int
) -> int | None:
    """The latest plain user turn before `before`: a tool result (a reply)
    would need its call back, and that call a user turn before it, and so on."""
    earlier = live[live < before]
    users = earlier[session.columns.role[earlier] == _USER]
    for slot in users[::-1].tolist():
        if not session.entry_at(slot).chunk.parent_id:
            return int(slot)
    return None
