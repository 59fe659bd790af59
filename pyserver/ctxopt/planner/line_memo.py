"""What a session remembers of one tool output's line excerpt between plans
(planner/line_levels.py): its sizes, the lines each keeps and what they were
picked from, and the facts they were made under."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

# a size made: the numbers of the lines it keeps, its text (None: not kept,
# a size dropped) and tokens
Size = tuple[tuple[int, ...], str | None, int]


@dataclass(frozen=True, slots=True)
class LineLevel:
    """One size of a tool output's line excerpt: its text and tokens, and the
    share of the excerpt's line weight it keeps (1 for the first size)."""

    text: str
    tokens: int
    kept: float


@dataclass(frozen=True, slots=True)
class Kept:
    """What `levels_of` picked an output's sizes from, for the next remake of
    the same text: its lines scoring above 0, best first (the order
    `line_value.excerpt_lines` walks them in), the knobs the lines were
    picked with (the tokens are `Remembered.tokens`), and per size made the
    lines it keeps, its text and tokens (the last may be a size dropped for
    not shrinking the one before well: its text is not kept). The same order,
    tokens and knobs pick the same lines: an output holding two query terms
    is made again at each append as their weights move, and mostly ranks its
    lines as before (~55 a plan at 10,000 chunks, where picking the lines
    again was ~9 of ~30 ms). The order is an array (2 bytes a line, not a
    tuple of int objects), the knobs the engine's own object, and a dropped
    size keeps no text: ~20 KB more per session at 10,000 chunks than the
    kept lines alone."""

    order: array[int]
    # the `Tuning`, compared by identity (None: restored by a restart, which
    # has its own); not part of what a `Kept` equals
    tuning: object = field(compare=False)
    sizes: tuple[Size, ...]


@dataclass(frozen=True, slots=True)
class Remembered:
    """An output's sizes and what they were made from. The book's echo lines
    are compared by identity first, then by value: an append stales the
    cached answers of every older holder of a line it repeats, and most are
    made again unchanged (at 10,000 chunks ~1,100 outputs a plan were remade
    for new but equal tuples)."""

    stash: str
    tokens: int
    anchors: tuple[int, ...]
    quoted: frozenset[int]
    relevance: tuple[tuple[int, float], ...]  # `relevance_of`'s key part
    levels: tuple[LineLevel, ...]
    names: frozenset[str]  # the names and numbers its text holds (its profile's)
    numbers: frozenset[int]
    text: str  # the text `relevance`, `sole` and `kept` are of
    sole: str | None  # `sole_term` of the text under the query's terms then
    # the lines each size made keeps with its bytes (`Kept`), for an output
    # holding two or more of the query's terms (the ones made again as the
    # terms' weights move), else None
    kept: Kept | None

    # the constructor, not `dataclasses.replace` (which reads the fields each
    # call): ~20 outputs a plan after an append have their echoes re-checked
    def with_echoes(self, anchors: tuple[int, ...], quoted: frozenset[int]) -> Remembered:
        return Remembered(
            self.stash,
            self.tokens,
            anchors,
            quoted,
            self.relevance,
            self.levels,
            self.names,
            self.numbers,
            self.text,
            self.sole,
            self.kept,
        )

    def with_text(self, text: str, sole: str | None) -> Remembered:
        return Remembered(
            self.stash,
            self.tokens,
            self.anchors,
            self.quoted,
            self.relevance,
            self.levels,
            self.names,
            self.numbers,
            text,
            sole,
            self.kept if text == self.text else None,
        )
