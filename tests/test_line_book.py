"""The line book reads only the lines two or more live chunks hold: whatever a
session does (chunks added, changed, removed, by the model or not), each
slot's anchors, quoted lines and repeated share must stay what the plain
definitions over every line of every live chunk give, or plans would change."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from ctxopt.model import Chunk, Role
from ctxopt.session import Session
from ctxopt.text import line_book
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.line_book import LineBook
from ctxopt.text.lines import ECHO_MIN_CHARS, TextLines, text_lines
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import books_through, chunk

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
    for session in books_through(steps):
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


# (chunk number, its text or None to remove it, whether the book is asked after)
KEPT_STEPS = st.lists(
    st.tuples(st.integers(0, 7), st.none() | TEXTS, st.booleans()), min_size=1, max_size=16
)


@settings(max_examples=200, deadline=None)
@given(KEPT_STEPS)
def test_a_book_kept_across_appends_answers_as_a_fresh_one(
    steps: list[tuple[int, str | None, bool]],
) -> None:
    """The answers a book keeps across syncs (asked only now and then, so some
    stay cached through several appends, removals and model quotes) and its
    whole-session arrays equal those of a book made from the live chunks."""
    session = Session("s", "", Analyzer())
    for turn, (number, text, ask) in enumerate(steps):
        if text is None:
            session.remove(f"c{number}")
        else:
            role = Role.MODEL if number % 2 else Role.USER
            session.upsert(chunk(f"c{number}", text, role=role, turn=turn), 10, 0)
        if not ask:
            continue
        kept = session.line_book()
        fresh = LineBook()
        fresh.sync(0, session.entries.values())
        n = session.n_slots
        for slot in session.live_slots().tolist():
            assert kept.anchors(slot) == fresh.anchors(slot)
            assert kept.quoted_lines(slot) == fresh.quoted_lines(slot)
        assert kept.repeated(n).tolist() == fresh.repeated(n).tolist()
        assert kept.owns_anchors(n).tolist() == fresh.owns_anchors(n).tolist()


def test_an_append_reads_again_only_the_previous_latest_holder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk repeating a line that four older chunks hold changes the
    anchors and repeat of its previous latest holder only (the others had a
    later holder already); by the model, the quoted lines of each holder
    when the model had not written the line, of the model's holder when one
    had, and of none when two had."""
    shared = LONG[0]
    session = Session("s", "", Analyzer())
    for number in range(4):
        session.upsert(chunk(f"c{number}", f"{shared}\n{LONG[1]} #{number}", turn=number), 10, 0)
    book = session.line_book()

    def ask_all() -> None:
        for slot in session.live_slots().tolist():
            book.anchors(slot)
            book.quoted_lines(slot)
        book.repeated(session.n_slots)

    ask_all()
    read: list[str] = []
    split = text_lines

    def counted(text: str) -> TextLines:
        read.append(text)
        return split(text)

    monkeypatch.setattr(line_book, "text_lines", counted)
    session.upsert(chunk("c4", f"{shared}\n{LONG[2]}", turn=4), 10, 0)
    book = session.line_book()
    read.clear()
    ask_all()
    assert set(read) == {f"{shared}\n{LONG[1]} #3", f"{shared}\n{LONG[2]}"}
    session.upsert(chunk("c5", shared, role=Role.MODEL, turn=5), 10, 0)
    book = session.line_book()
    read.clear()
    ask_all()
    # c4 loses its anchor (and gains a repeat); every holder's quoted lines
    # are read again: the model now quotes the line
    assert set(read) == {
        *(f"{shared}\n{LONG[1]} #{number}" for number in range(4)),
        f"{shared}\n{LONG[2]}",
        shared,
    }
    session.upsert(chunk("c6", shared, role=Role.MODEL, turn=6), 10, 0)
    book = session.line_book()
    read.clear()
    ask_all()
    # a second model holder changes the first one's quoted lines (another
    # model chunk now holds its line) and its own anchor; nothing else
    assert set(read) == {shared}
    session.upsert(chunk("c7", shared, role=Role.MODEL, turn=7), 10, 0)
    book = session.line_book()
    read.clear()
    ask_all()
    # a third changes no holder's quoted lines: c6's anchors and repeat are
    # read again, and c7's anchors, quoted lines and repeat (five reads)
    assert read == [shared] * 5


@dataclass(frozen=True)
class _At:
    chunk: Chunk
    slot: int


def test_a_book_whose_chunks_all_went_forgets_every_answer_it_gave() -> None:
    """A book holding nothing is filled in one pass (`LineBook._fill`); what it
    answered while empty (no anchors at any slot, no excerpt) is stale once
    the slots hold chunks again."""
    book = LineBook()
    first = [_At(chunk("a", f"{LONG[0]}\nx"), 0), _At(chunk("b", LONG[0]), 1)]
    book.sync(1, first)
    assert book.owns_anchors(2).tolist() == [False, True]
    book.sync(2, [])
    assert book.owns_anchors(2).tolist() == [False, False]
    assert book.excerpts(np.ones(2, dtype=bool), "k", lambda slot: None).tolist() == [-1.0, -1.0]
    book.sync(3, [_At(chunk("c", LONG[0]), 0), _At(chunk("d", f"{LONG[0]}\ny"), 1)])
    assert book.owns_anchors(2).tolist() == [False, True]
    made = book.excerpts(np.ones(2, dtype=bool), "k", lambda slot: (f"e{slot}", 3))
    assert made.tolist() == [3.0, 3.0]
    assert book.repeated(2).tolist() == [1.0, 0.0]


class _Read:
    """A live chunk that logs its slot each time its chunk is read."""

    def __init__(self, text: str, slot: int, reads: list[int]) -> None:
        self._chunk, self.slot, self._reads = chunk(f"c{slot}", text), slot, reads

    @property
    def chunk(self) -> Chunk:
        self._reads.append(self.slot)
        return self._chunk


def test_a_grown_session_syncs_reading_only_its_new_chunks() -> None:
    """When the chunks last synced lead the session's, the same objects, only
    the ones after them are read; a replaced one makes the sync read them all."""
    reads: list[int] = []
    live = [_Read(f"{LONG[0]}\n{n}", n, reads) for n in range(4)]
    book = LineBook()
    book.sync(1, live)
    reads.clear()
    live.append(_Read(LONG[0], 4, reads))
    book.sync(2, live)
    assert reads == [4]
    assert book.owns_anchors(5).tolist() == [False, False, False, False, True]
    reads.clear()
    live[1] = _Read(LONG[1], 1, reads)
    book.sync(3, live)
    assert sorted(set(reads)) == [0, 1, 2, 3, 4]


def test_texts_share_one_empty_postings_until_a_term_is_asked() -> None:
    """Every text's postings start as one shared empty mapping (no dict per
    text for the collector to scan); asking one text's terms swaps in its own
    mapping and leaves every other text's empty."""
    first, second = text_lines("a cat sat\nno dog"), text_lines("another text\nwith cats")
    assert first.postings is second.postings
    analyzer = Analyzer()
    assert first.term_lines(frozenset({"cat", "dog"}), analyzer) == {"cat": (0,), "dog": (1,)}
    assert not second.postings
    assert second.term_lines(frozenset({"cat"}), analyzer) == {"cat": (1,)}
    assert first.postings == {"cat": (0,), "dog": (1,)}
