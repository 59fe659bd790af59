"""GC structure: which chunks are roots, and what the roots reach.

Roots are what the next prompt cannot do without (see `Roots`). Marking
walks explicit edges (references, parent, summary_of) forward and implicit
hubs (same file, shared tag, same topic, group or task) in both directions; every
slot and every hub is visited at most once, so marking is O(V + E) and safe on
cycles.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np
import numpy.typing as npt

from ctxopt.model import ChunkKind, GcPolicy, Roots
from ctxopt.session import SessionView

DECISION_ROOT_WINDOW_MS = 3_600_000
# plain ints for numpy: comparing an array with an IntEnum member costs ~5x more
_TOOL_CALL, _DECISION = int(ChunkKind.TOOL_CALL), int(ChunkKind.DECISION)
_TOOL_RESULT = int(ChunkKind.TOOL_RESULT)
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


def grouped_slots(session: SessionView) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The slots of every group of more than one chunk, group after group in
    one array, and each group's size (an agent session has a group per step,
    so readers go column-wise rather than group by group)."""
    groups = [members for members in session.hubs.by_group.values() if len(members) > 1]
    sizes = np.fromiter(map(len, groups), dtype=np.intp, count=len(groups))
    slots = np.fromiter(chain.from_iterable(groups), dtype=np.intp, count=int(sizes.sum()))
    return slots, sizes


def pending_call_mask(session: SessionView) -> BoolArray:
    """Tool calls no result answers yet (by group or by parent link)."""
    cols, n = session.columns, session.n_slots
    kinds = cols.kind[:n]
    calls: BoolArray = cols.alive[:n] & (kinds == _TOOL_CALL)
    if not calls.any():
        return calls
    # answered by its group: a call is no result, so any result in the group is another member
    slots, sizes = grouped_slots(session)
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    with_result = np.bincount(group_of, weights=kinds[slots] == _TOOL_RESULT, minlength=len(sizes))
    answered = np.zeros(n, dtype=bool)
    answered[slots] = with_result[group_of] > 0
    entries, in_edges = session.entries, session.in_edges
    mask: BoolArray = calls & ~answered
    for slot in np.flatnonzero(mask).tolist():  # else by a reply's parent link
        mask[slot] = not any(
            entries[child].chunk.kind == _TOOL_RESULT
            for child in in_edges.get(session.slot_ids[slot], ())
            if child in entries
        )
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
