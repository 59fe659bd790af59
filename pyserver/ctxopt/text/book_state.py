"""What a closing session's line book reads of its own to keep it (`LineBook.state`)
and to tell whether it is the book a restart would fill (`LineBook.quoted_as_fresh`).

Both run on `Engine.close`, over every line of the session; at 10,000 chunks
each was ~150-170 ms of a ~660 ms close, done line by line in Python (a
key's first holder by `min`, then `str.find` from a long text's start for
each of its lines; a second book filled from the live chunks to compare its
quoted marks). Here each is a pass in C over a text's lines or a line's
holders.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from itertools import accumulate, count
from operator import add

from ctxopt.text.lines import text_lines

# a text holding more new lines than this is read line by line (its lines'
# places from their lengths), not searched once for each of them
FIND_AT_MOST = 16


def first_places(texts: Mapping[int, str]) -> dict[str, tuple[int, int]]:
    """Each keyed line of `texts` (slot -> text) at a place its first holder's
    text has it: (slot, offset). A text with a few lines no lower slot holds
    is searched for each of them (~1.5 us a line at 10,000 chunks); one with
    many (a long file read: `find` from the start for each of its lines grew
    with its length times their number) is read once: a key is its line
    stripped, so its `find` in its own line is where it starts in it, and a
    line starts after the lines before it and their newlines. At 10,000
    chunks ~60 ms against ~80 finding each line in its first holder's text
    (`min` of its holders first)."""
    place: dict[str, tuple[int, int]] = {}
    for slot in sorted(texts):
        text = texts[slot]
        made = text_lines(text)
        new = made.distinct.difference(place)
        if len(new) <= FIND_AT_MOST:
            for key in new:
                place[key] = (slot, text.find(key))
            continue
        lines = made.lines
        starts = map(add, accumulate(map(len, lines), initial=0), count())
        at = dict(zip(made.keys, map(add, starts, map(str.find, lines, made.keys)), strict=True))
        for key in new:
            place[key] = (slot, at[key])
    return place


def fresh_quoted(
    holders: Mapping[str, Set[int]], shared: Iterable[str], by_model: Set[int]
) -> set[int]:
    """The slots a book filled from these holders would mark quoted: those the
    model did not write holding a line a later slot the model wrote holds too
    (only lines two or more slots hold can be quoted: `shared`)."""
    quoted: set[int] = set()
    for key in shared:
        held = holders[key]
        models = held & by_model
        if not models:
            continue
        top = max(models)
        if top == max(held):
            quoted |= held
        else:
            quoted.update(slot for slot in held if slot < top)
    return quoted - by_model
