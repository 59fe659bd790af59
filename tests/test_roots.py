"""Roots and reachability, on small hand-made sessions."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from ctxopt.model import Chunk, ChunkKind, GcPolicy, Role, Roots
from ctxopt.roots import mark, pending_call_mask, recent_turn_mask
from ctxopt.session import Session, SessionView
from ctxopt.text.analyzer import Analyzer

from tests.factory import chunk


def session(*chunks: Chunk) -> SessionView:
    s = Session("s", "", Analyzer())
    for c in chunks:
        s.upsert(c, 5, 0)
    return s.view()


def ids(s: SessionView, mask: npt.NDArray[np.bool_]) -> list[str]:
    return [s.slot_ids[i] for i in np.flatnonzero(mask).tolist()]


def test_recent_turns_count_distinct_turn_numbers() -> None:
    s = session(*(chunk(f"c{i}", turn=i // 2) for i in range(8)))  # turns 0,0,1,1,2,2,3,3
    assert ids(s, recent_turn_mask(s, 2)) == ["c4", "c5", "c6", "c7"]


def test_recent_turns_are_the_highest_turn_numbers_in_any_order() -> None:
    # turns out of prompt order (a client numbering a late tool output early)
    s = session(*(chunk(f"c{i}", turn=t) for i, t in enumerate([0, 5, 1, 3, 3, 2, 4, 0])))
    assert ids(s, recent_turn_mask(s, 2)) == ["c1", "c6"]
    assert ids(s, recent_turn_mask(s, 3)) == ["c1", "c3", "c4", "c6"]


def test_recent_turns_fall_back_to_position_when_turns_are_unset() -> None:
    s = session(*(chunk(f"c{i}") for i in range(5)))
    assert ids(s, recent_turn_mask(s, 2)) == ["c3", "c4"]
    assert ids(s, recent_turn_mask(s, 0)) == []


def test_a_call_is_pending_until_a_result_answers_it() -> None:
    call = chunk("call", role=Role.MODEL, kind=ChunkKind.TOOL_CALL, group_id="g")
    answered = chunk("call2", role=Role.MODEL, kind=ChunkKind.TOOL_CALL, group_id="h")
    result = chunk("result", role=Role.TOOL, kind=ChunkKind.TOOL_RESULT, group_id="h")
    by_parent = chunk("call3", role=Role.MODEL, kind=ChunkKind.TOOL_CALL)
    reply = chunk("reply", role=Role.TOOL, kind=ChunkKind.TOOL_RESULT, parent_id="call3")
    s = session(call, answered, result, by_parent, reply)
    assert ids(s, pending_call_mask(s)) == ["call"]


def test_roots_are_locked_pinned_named_task_file_and_the_latest_turn() -> None:
    s = session(
        chunk("locked", turn=0, policy=GcPolicy.LOCKED),
        chunk("pinned", turn=1, pinned=True),
        chunk("named", turn=2),
        chunk("task", turn=3, task_id="T"),
        chunk("file", turn=4, file_path="a.py"),
        chunk("plain", turn=5),
        chunk("latest", turn=9),
    )
    roots = Roots(current_task_id="T", active_file_path="a.py", recent_turns=0, root_ids=("named",))
    assert ids(s, mark(s, roots).root) == ["locked", "pinned", "named", "task", "file", "latest"]


def test_reachability_follows_references_forward_and_hubs_both_ways() -> None:
    s = session(
        chunk("old-ref", turn=0),
        chunk("same-file", turn=1, file_path="b.py"),
        chunk("same-task", turn=2, task_id="T"),
        chunk("unrelated", turn=3),
        chunk("root", turn=9, references=("old-ref",), file_path="b.py", task_id="T"),
    )
    marks = mark(s, Roots(recent_turns=1))
    assert ids(s, marks.root) == ["root"]
    assert ids(s, marks.reachable) == ["old-ref", "same-file", "same-task", "root"]


def test_reachability_is_safe_on_cycles_and_never_walks_backwards_along_references() -> None:
    s = session(
        chunk("a", turn=0, references=("b",)),
        chunk("b", turn=1, references=("a",)),
        chunk("referrer", turn=2, references=("root",)),
        chunk("root", turn=9, references=("a",)),
    )
    marks = mark(s, Roots(recent_turns=1))
    assert ids(s, marks.reachable) == ["a", "b", "root"]
