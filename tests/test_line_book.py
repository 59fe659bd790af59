"""The line book reads only the lines two or more live chunks hold: whatever a
session does (chunks added, changed, removed, by the model or not), each
slot's anchors, quoted lines and repeated share must stay what the plain
definitions over every line of every live chunk give, or plans would change."""

from __future__ import annotations

from ctxopt.model import Role
from ctxopt.session import Session
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.lines import ECHO_MIN_CHARS, text_lines
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import chunk

LONG = [f"    line_{i} = helper(argument_{i}, option={i})" for i in range(5)]
LINES = st.sampled_from([*LONG, "x = 1", "", "    " + LONG[0]])
TEXTS = st.lists(LINES, min_size=1, max_size=5).map("\n".join)
# (chunk number, its text) upserted, or (chunk number, None) removed; the
# model writes the odd numbers (the book reads a chunk again when its text
# changes, not its role)
STEPS = st.lists(st.tuples(st.integers(0, 5), st.none() | TEXTS), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_the_books_answers_are_the_plain_definitions(steps: list[tuple[int, str | None]]) -> None:
    session = Session("s", "", Analyzer())
    for turn, (number, text) in enumerate(steps):
        if text is None:
            session.remove(f"c{number}")
        else:
            role = Role.MODEL if number % 2 else Role.USER
            session.upsert(chunk(f"c{number}", text, role=role, turn=turn), 10, 0)
        book = session.line_book()
        live = {int(s): session.entry_at(int(s)).chunk for s in session.live_slots()}
        holders: dict[str, set[int]] = {}
        for slot, c in live.items():
            for key in text_lines(c.text).distinct:
                holders.setdefault(key, set()).add(slot)
        model = {s for s, c in live.items() if c.role == Role.MODEL}
        for slot, c in live.items():
            keys = text_lines(c.text).keys
            assert all(len(k) >= ECHO_MIN_CHARS for k in keys if k)
            anchors = tuple(
                n
                for n, k in enumerate(keys)
                if k and len(holders[k]) > 1 and max(holders[k]) == slot
            )
            quoted = frozenset(n for n, k in enumerate(keys) if k and (holders[k] - {slot}) & model)
            distinct = text_lines(c.text).distinct
            later = sum(len(k) for k in distinct if max(holders[k]) > slot)
            total = sum(len(k) for k in distinct)
            assert book.anchors(slot) == anchors
            assert book.quoted_lines(slot) == quoted
            assert book.repeated_share(slot) == (later / total if total else 0.0)
