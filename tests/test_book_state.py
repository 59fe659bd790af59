"""A closing book's state and its quoted check (`text/book_state.py`) against the
plain definitions they stand for: a line's first holder found by `find`, and a
second book filled from the live chunks."""

from __future__ import annotations

import pytest
from ctxopt.session import Session
from ctxopt.text import book_state
from ctxopt.text.book_state import fresh_quoted
from ctxopt.text.line_book import LineBook
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import books_through

LONG = [f"line_{i} = helper(argument_{i}, option={i})" for i in range(4)]
# a line indented, the same line inside a longer one, and one that only
# another line holds as its part: a place found by `find` in the whole text
# would be the other line's
LINES = st.sampled_from(
    [*LONG, "  " + LONG[0], "\t" + LONG[1] + "  ", "x = " + LONG[2], "x = 1", ""]
)
TEXTS = st.lists(LINES, min_size=1, max_size=6).map("\n".join)
# (chunk number, its text or None to remove it); the model writes the odd numbers
STEPS = st.lists(st.tuples(st.integers(0, 6), st.none() | TEXTS), min_size=1, max_size=14)


def _session(steps: list[tuple[int, str | None]]) -> Session:
    *_, session = books_through(steps)
    return session


@pytest.mark.parametrize("find_at_most", [0, book_state.FIND_AT_MOST])
@settings(max_examples=200, deadline=None)
@given(steps=STEPS)
def test_each_line_is_placed_in_its_first_holders_text(
    find_at_most: int, steps: list[tuple[int, str | None]]
) -> None:
    """Searched for (the few new lines of a text) or read line by line (0:
    every text's), each line is where its first holder's text has it."""
    book = _session(steps).line_book()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(book_state, "FIND_AT_MOST", find_at_most)
        place = book_state.first_places(book.text)
    assert set(place) == {key for key, held in book.holders.items() if held}
    for key, (slot, at) in place.items():
        assert slot == min(book.holders[key])
        assert book.text[slot][at : at + len(key)] == key
        if not find_at_most:  # read line by line: at the start of its own line
            line_start = book.text[slot].rfind("\n", 0, at) + 1
            assert book.text[slot][line_start:at].strip() == ""


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_the_quoted_check_is_a_fresh_books(steps: list[tuple[int, str | None]]) -> None:
    session = _session(steps)
    fresh = LineBook()
    fresh.sync(0, session.entries.values())
    kept = session.line_book()
    assert fresh_quoted(kept.holders, kept._shared, kept._by_model) == fresh.quoted
    assert session.line_book().quoted_as_fresh() == (fresh.quoted == session.line_book().quoted)
    assert session.book_as_fresh() == (fresh.quoted == session.line_book().quoted)
