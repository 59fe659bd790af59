"""GC structure: which chunks are roots, and what the roots reach.

Roots are what the next prompt cannot do without (see `Roots`). Marking
walks explicit edges (references, parent, summary_of) forward and implicit
hubs (same file, shared tag, same topic, group or task) in both directions; every
slot and every hub is visited at most once, so marking is O(V + E) and safe on
cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctxopt.model import ChunkKind, GcPolicy, Roots
from ctxopt.session import SessionView

DECISION_ROOT_WINDOW_MS = 3_600_000
# plain ints for numpy: comparing an array with an IntEnum member costs ~5x more
_TOOL_CALL, _DECISION = int(ChunkKind.TOOL_CALL), int(ChunkKind.DECISION)
_LOCKED = int(GcPolicy.LOCKED)

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Marks:
    """Per-slot GC facts for one collection."""

    root: BoolArray
    reachable: BoolArray  # roots included


def recent_turn_mask(session: SessionView, recent_turns: int) -> BoolArray:
    """The last `recent_turns` turns; by position when clients leave `turn` unset."""
    cols, n = session.columns, session.n_slots
    mask = np.zeros(n, dtype=bool)
    live = session.live
    if recent_turns <= 0 or len(live) == 0:
        return mask
    turns = cols.turn[live]
    if np.all(turns[1:] >= turns[:-1]):  # the usual prompt order: no sort needed
        distinct = np.concatenate((turns[:1], turns[1:][turns[1:] != turns[:-1]]))
    else:
        distinct = np.unique(turns)
    if len(distinct) > 1:
        cutoff = distinct[max(len(distinct) - recent_turns, 0)]
        mask[live[turns >= cutoff]] = True
    else:
        mask[live[-recent_turns:]] = True
    return mask


def latest_turn_mask(session: SessionView) -> BoolArray:
    """The newest turn (or the newest chunk when turns are unset)."""
    return recent_turn_mask(session, 1)


def pending_call_mask(session: SessionView) -> BoolArray:
    """Tool calls no result answers yet (by group or by parent link)."""
    cols, n = session.columns, session.n_slots
    mask = np.zeros(n, dtype=bool)
    calls = np.flatnonzero(cols.alive[:n] & (cols.kind[:n] == _TOOL_CALL))
    for slot in calls:
        entry = session.entry_at(int(slot))
        group = session.hubs.by_group.get(entry.chunk.group_id, ()) if entry.chunk.group_id else ()
        answered = any(cols.kind[s] == ChunkKind.TOOL_RESULT for s in group if s != slot)
        if not answered:
            answered = any(
                session.entries[child].chunk.kind == ChunkKind.TOOL_RESULT
                for child in session.in_edges.get(entry.chunk.id, ())
                if child in session.entries
            )
        mask[slot] = not answered
    return mask


def root_mask(session: SessionView, roots: Roots) -> BoolArray:
    """Every root kind `Roots` lists, plus LOCKED, pinned and the latest turn, as one
    per-slot mask."""
    cols, n = session.columns, session.n_slots
    alive = cols.alive[:n]
    mask = cols.pinned[:n] | (cols.policy[:n] == _LOCKED)
    for hub, key in (
        (session.hubs.by_task, roots.current_task_id),
        (session.hubs.by_file, roots.active_file_path),
    ):
        if key and key in hub:
            mask[list(hub[key])] = True
    for chunk_id in roots.root_ids:
        slot = session.slot_of(chunk_id)
        if slot is not None:
            mask[slot] = True
    decisions = alive & (cols.kind[:n] == _DECISION)
    if decisions.any():
        now = int(cols.created_ms[:n][alive].max())
        mask |= decisions & (cols.created_ms[:n] >= now - DECISION_ROOT_WINDOW_MS)
    mask |= recent_turn_mask(session, roots.recent_turns)
    if roots.recent_turns < 1:  # else the recent turns hold the latest
        mask |= latest_turn_mask(session)
    mask |= pending_call_mask(session)
    root: BoolArray = mask & alive
    return root


def mark_reachable(session: SessionView, roots: BoolArray) -> BoolArray:
    """Slots reachable from the roots (roots included); iterative, cycle-safe."""
    n = session.n_slots
    seen = roots.copy()
    stack = [int(s) for s in np.flatnonzero(roots)]
    seen_hubs: set[tuple[int, str]] = set()
    while stack:
        chunk = session.entry_at(stack.pop()).chunk
        neighbours: list[int] = []
        for target in session.out_edges.get(chunk.id, ()):
            slot = session.slot_of(target)
            if slot is not None:
                neighbours.append(slot)
        for hub, key in session.hubs.keys_of(chunk):
            if (id(hub), key) not in seen_hubs:
                seen_hubs.add((id(hub), key))
                neighbours.extend(hub.get(key, ()))
        for slot in neighbours:
            if slot < n and not seen[slot]:
                seen[slot] = True
                stack.append(slot)
    return seen


def mark(session: SessionView, roots: Roots) -> Marks:
    root = root_mask(session, roots)
    return Marks(root=root, reachable=mark_reachable(session, root))
