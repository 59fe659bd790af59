"""A tool output's line excerpt at each size, made once and remembered.

`levels_of` makes the sizes of one output (the lines its signals point at
within `Tuning.line_budget` of its tokens, then its best lines within
`line_tight_share`). `output_levels` gives them for every output of a plan,
and keeps them per session (its line book) from one plan to the next: an
output's sizes are made again only when its text, its echoed lines, a
name or cited number its text holds, or what the query's terms add to its
lines changed since the last plan.
Gathering every output's facts on every plan had become most of a plan's
time (at 1,000 chunks, about 7 of 9 ms in-process).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from weakref import WeakKeyDictionary

from ctxopt.planner.knobs import Tuning
from ctxopt.planner.texts import ANCHORED_CACHE_SIZE, ranged_excerpt, remember
from ctxopt.scoring import line_value
from ctxopt.scoring.line_facts import SessionFacts, facts_of, relevance_of
from ctxopt.session import SessionView
from ctxopt.text.lines import LineBook

TokenCount = Callable[[str], int]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LineLevel:
    """One size of a tool output's line excerpt: its text and tokens, and the
    share of the excerpt's line weight it keeps (1 for the first size)."""

    text: str
    tokens: int
    kept: float


_line_excerpts: OrderedDict[tuple[object, ...], tuple[LineLevel, ...]] = OrderedDict()
_line_excerpts_lock = threading.Lock()


def levels_of(
    session: SessionView,
    book: LineBook,
    slot: int,
    facts: SessionFacts,
    tuning: Tuning,
    count_tokens: TokenCount,
) -> tuple[LineLevel, ...]:
    """A tool output shrunk to the lines its signals point at (line_value),
    then, when `line_tight_share` asks for it, to its best lines within that
    share of its tokens: each size while it shrinks the one before well (none
    when nothing points at any line). Cached while the facts about its own
    lines stay the same."""
    entry = session.entry_at(slot)
    chunk = entry.chunk
    stash = entry.stash_id()
    line_facts, facts_key = facts_of(facts, book, slot, chunk.text)
    knobs = (tuning.line_context, tuning.line_budget, tuning.line_tight_share, tuning.shrink_worth)
    key = (stash, entry.tokens, facts_key, knobs, count_tokens)  # engines share this cache
    found = _line_excerpts.get(key)  # one lookup: another plan may evict it
    if found is not None:
        return found
    text_profile = line_value.profile(chunk.text)
    lines = text_profile.lines
    scores = line_value.line_scores(text_profile, line_facts, facts.weights)
    per_char = entry.tokens / max(len(chunk.text), 1)
    costs = [(len(line) + 1) * per_char for line in lines]
    levels: list[LineLevel] = []
    weight = 0.0  # the excerpt's line weight, which a tighter size keeps a share of
    for share in (tuning.line_budget, tuning.line_tight_share):
        kept = line_value.excerpt_lines(
            text_profile.headers, scores, costs, share * entry.tokens, tuning.line_context
        )
        if not kept or share <= 0:
            break
        text = ranged_excerpt(chunk.id, lines, kept, stash)
        after = count_tokens(text)
        before = levels[-1].tokens if levels else entry.tokens
        if after >= before * tuning.shrink_worth:
            break  # a size that does not shrink the one before well; none under it either
        kept_weight = sum(map(scores.__getitem__, kept))  # the same sum, not a generator
        weight = weight or kept_weight
        levels.append(LineLevel(text=text, tokens=after, kept=kept_weight / weight))
    made = tuple(levels)
    with _line_excerpts_lock:
        remember(_line_excerpts, key, made, ANCHORED_CACHE_SIZE)
    return made


@dataclass(frozen=True, slots=True)
class _Remembered:
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


@dataclass(slots=True)
class _Memo:
    """One session's last plan: its facts, the knobs, each output's sizes."""

    facts: SessionFacts | None = None
    knobs: tuple[object, ...] = ()
    by_slot: dict[int, _Remembered] = field(default_factory=dict)


_memos: WeakKeyDictionary[LineBook, _Memo] = WeakKeyDictionary()
_NO_CHANGE: tuple[frozenset[str], frozenset[int], frozenset[str]] = (
    frozenset(),
    frozenset(),
    frozenset(),
)
_memos_lock = threading.Lock()
_NONE: frozenset[int] = frozenset()


def output_levels(
    session: SessionView,
    book: LineBook,
    slots: list[int],
    facts: SessionFacts,
    tuning: Tuning,
    count_tokens: TokenCount,
) -> dict[int, tuple[LineLevel, ...]]:
    """The sizes of each output in `slots`, remade only where they may differ
    from the session's last plan (see the module's note)."""
    with _memos_lock:
        memo = _memos.setdefault(book, _Memo())
    knobs = (
        tuning.line_context,
        tuning.line_budget,
        tuning.line_tight_share,
        tuning.shrink_worth,
        facts.weights,
        facts.analyzer,
        count_tokens,
    )
    previous = memo.facts if memo.knobs == knobs else None
    remembered = memo.by_slot if previous is not None else {}
    names, cited, terms = _changes(previous, facts) if previous is not None else _NO_CHANGE
    # the outputs a moved query term can reach: those the session index says
    # hold one of the query's terms, at this plan or the last (`facts_of`
    # reads no other output's lines for them); every append moves every
    # term's rarity, and searching each output's lines for them was most of
    # the check's cost
    term_reach = (
        (previous.term_holders | facts.term_holders) if terms and previous is not None else _NONE
    )
    named = _named(names, cited)
    kept: dict[int, _Remembered] = {}
    # bound once: the loop visits every output of the session on every plan
    entry_at, anchors_of, quoted_of = session.entry_at, book.anchors, book.quoted_lines
    recalled = remembered.get
    for slot in slots:
        entry = entry_at(slot)
        text = entry.chunk.text
        anchors, quoted = anchors_of(slot), quoted_of(slot)
        was = recalled(slot)
        relevance: tuple[tuple[int, float], ...] | None = None
        if was is not None and (was.anchors is not anchors or was.quoted is not quoted):
            if was.anchors == anchors and was.quoted == quoted:
                # the same lines in a new object: remember this one, so the
                # next plan compares by identity again
                was = _Remembered(was.stash, was.tokens, anchors, quoted, was.relevance, was.levels)
            else:
                was = None
        if (
            was is None
            or was.tokens != entry.tokens
            or was.stash != entry.stash_id()
            or named(text)
        ):
            was = None
        elif slot in term_reach:
            # the sizes differ only if what the terms add per line does (a
            # text holding one of them, or the same mix, keeps them)
            relevance = relevance_of(facts, slot, text)[1]
            if relevance != was.relevance:
                was = None
        if was is None:
            was = _Remembered(
                entry.stash_id(),
                entry.tokens,
                anchors,
                quoted,
                relevance_of(facts, slot, text)[1] if relevance is None else relevance,
                levels_of(session, book, slot, facts, tuning, count_tokens),
            )
        kept[slot] = was
    memo.facts, memo.knobs, memo.by_slot = facts, knobs, kept
    return {slot: was.levels for slot, was in kept.items()}


def _changes(
    before: SessionFacts, now: SessionFacts
) -> tuple[frozenset[str], frozenset[int], frozenset[str]]:
    """The names, cited numbers and query terms whose facts differ."""
    weights_before, weights_now = before.query_weights, now.query_weights
    terms = frozenset(
        term
        for term in weights_before.keys() | weights_now.keys()
        if weights_before.get(term) != weights_now.get(term)
    )
    return _compact(before.identifiers ^ now.identifiers), _compact(before.cited ^ now.cited), terms


def _compact(changed: frozenset[T]) -> frozenset[T]:
    """`changed` in a table of its own size: the symmetric difference of two
    large sets keeps the first one's table (thousands of names), and walking
    it made each output's `isdisjoint` in `_touched` cost ~20 us, not ~0.3."""
    return frozenset(list(changed))


def _named(names: frozenset[str], cited: frozenset[int]) -> Callable[[str], bool]:
    """Whether a text holds one of the changed names or cited numbers (no
    text's names are read when none changed, the usual append)."""
    if not names and not cited:
        return _never

    def holds(text: str) -> bool:
        lines = line_value.profile(text)
        return not names.isdisjoint(lines.all_names) or not cited.isdisjoint(lines.all_numbers)

    return holds


def _never(text: str) -> bool:
    return False
