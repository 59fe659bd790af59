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
from array import array
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import compress, count
from operator import attrgetter, not_
from typing import TypeVar
from weakref import WeakKeyDictionary

import numpy as np
import numpy.typing as npt

from ctxopt.planner.knobs import Tuning
from ctxopt.planner.line_memo import Kept, LineLevel, Remembered, Size
from ctxopt.planner.texts import ANCHORED_CACHE_SIZE, ranged_excerpt, remember
from ctxopt.scoring import line_value
from ctxopt.scoring.line_facts import (
    SessionFacts,
    facts_of,
    grown_facts,
    relevance_of,
    sole_term,
)
from ctxopt.session import SessionView
from ctxopt.text.line_book import LineBook

TokenCount = Callable[[str], int]
T = TypeVar("T")
G = TypeVar("G", bound=np.generic)
IntArray = npt.NDArray[np.int64]
ObjectArray = npt.NDArray[np.object_]


_line_excerpts: OrderedDict[tuple[object, ...], tuple[LineLevel, ...]] = OrderedDict()
_line_excerpts_lock = threading.Lock()


_ZERO = 0.0
# `relevance_of`'s answer: per line the summed weight of the query terms on
# it, and what `line_scores` adds per line for them
Relevance = tuple[dict[int, float], tuple[tuple[int, float], ...]]
# an output a moved term reached: `relevance_of`'s key part, `sole_term`, and
# `relevance_of`'s lines when its text was searched (else None)
_Reached = tuple[tuple[tuple[int, float], ...], str | None, dict[int, float] | None]
_SHORT = 65535  # the most lines whose numbers an "H" array holds


def levels_of(
    session: SessionView,
    book: LineBook,
    slot: int,
    facts: SessionFacts,
    tuning: Tuning,
    count_tokens: TokenCount,
    last: Remembered | None = None,
    searched: Relevance | None = None,
) -> tuple[tuple[LineLevel, ...], Kept | None]:
    """A tool output shrunk to the lines its signals point at (line_value),
    then, when `line_tight_share` asks for it, to its best lines within that
    share of its tokens: each size while it shrinks the one before well (none
    when nothing points at any line), and the lines each size keeps (None when
    the cache had the sizes). Cached while the facts about its own lines stay
    the same. `last`: the same text's sizes with their kept lines, whose text
    and tokens a size keeping the same lines takes as they are (a dropped
    size's too: most outputs made again have one size, and their tight one
    was joined and counted again at every append). `searched`:
    `relevance_of` of the output now, when the caller has it."""
    entry = session.entry_at(slot)
    chunk = entry.chunk
    stash = entry.stash_id()
    line_facts, facts_key = facts_of(facts, book, slot, chunk.text, searched)
    knobs = (tuning.line_context, tuning.line_budget, tuning.line_tight_share, tuning.shrink_worth)
    key = (stash, entry.tokens, facts_key, knobs, count_tokens)  # engines share this cache
    found = _line_excerpts.get(key)  # one lookup: another plan may evict it
    if found is not None:
        return found, None
    text_profile = line_value.profile(chunk.text)
    lines = text_profile.lines
    scores = line_value.line_scores(text_profile, line_facts, facts.weights)
    # `excerpt_lines`' order: the lines scoring above 0, best first, ties by line
    ranked = sorted(
        compress(count(), map(_ZERO.__lt__, scores)), key=scores.__getitem__, reverse=True
    )
    order = array("H" if len(lines) <= _SHORT else "I", ranked)
    kept_before: tuple[Size, ...] = ()
    same_lines = False  # the lines each size keeps are `kept_before`'s
    # the same stash and text: an excerpt's stash is its original's, whatever its text
    if (
        last is not None
        and last.kept is not None
        and (last.stash, last.text) == (stash, chunk.text)
    ):
        kept_before = last.kept.sizes
        # the same order within the same tokens (`last.tokens`) and knobs
        same_lines = (
            last.kept.tuning is tuning and last.tokens == entry.tokens and last.kept.order == order
        )
    costs: list[float] = []
    levels: list[LineLevel] = []
    kept_lines: list[Size] = []
    weight = 0.0  # the excerpt's line weight, which a tighter size keeps a share of
    for share in (tuning.line_budget, tuning.line_tight_share):
        at = len(levels)
        if same_lines and at < len(kept_before):
            kept = kept_before[at][0]
        else:
            if not costs:
                per_char = entry.tokens / max(len(chunk.text), 1)
                costs = [(len(line) + 1) * per_char for line in lines]
            kept = tuple(
                line_value.excerpt_lines(
                    text_profile.headers, scores, costs, share * entry.tokens, tuning.line_context
                )
            )
        if not kept or share <= 0:
            break
        if at < len(kept_before) and kept_before[at][0] == kept:
            # the same lines of the same text: the same bytes (an output holding
            # two query terms is made again at each append as their weights move,
            # and mostly keeps its lines: ~55 a plan at 10,000 chunks)
            _, was_text, after = kept_before[at]
            # a dropped size's bytes are not kept: the same lines, the same count
            text = ranged_excerpt(chunk.id, lines, kept, stash) if was_text is None else was_text
        else:
            text = ranged_excerpt(chunk.id, lines, kept, stash)
            after = count_tokens(text)
        before = levels[-1].tokens if levels else entry.tokens
        if after >= before * tuning.shrink_worth:
            kept_lines.append((kept, None, after))
            break  # a size that does not shrink the one before well; none under it either
        kept_lines.append((kept, text, after))
        kept_weight = sum(map(scores.__getitem__, kept))  # the same sum, not a generator
        weight = weight or kept_weight
        levels.append(LineLevel(text=text, tokens=after, kept=kept_weight / weight))
    made = tuple(levels)
    with _line_excerpts_lock:
        remember(_line_excerpts, key, made, ANCHORED_CACHE_SIZE)
    return made, Kept(order, tuning, tuple(kept_lines))


@dataclass(slots=True)
class OutputSizes:
    """What a plan reads of the outputs' sizes, by slot: the first size's
    text and tokens, the tight size's text, tokens and kept share (an output
    without a size is absent). Kept per session and changed only where an
    output's sizes did, so a plan copies them whole (in C) instead of reading
    ~450 outputs' sizes one by one (~0.5 ms of a plan after an append at
    ~1,200 chunks). The plan's `ShrunkTexts` hold the same tuples. Valid
    until the session's next plan."""

    first: dict[int, tuple[str, int]] = field(default_factory=dict)
    tight: dict[int, tuple[str, int]] = field(default_factory=dict)
    tight_kept: dict[int, float] = field(default_factory=dict)

    def put(self, slot: int, levels: tuple[LineLevel, ...]) -> None:
        self.drop(slot)
        if levels:
            self.first[slot] = levels[0].text, levels[0].tokens
        if len(levels) > 1:
            self.tight[slot] = levels[1].text, levels[1].tokens
            self.tight_kept[slot] = levels[1].kept

    def drop(self, slot: int) -> None:
        for held in (self.first, self.tight, self.tight_kept):
            held.pop(slot, None)


@dataclass(slots=True)
class LastLevels:
    """One session's last plan: its facts, the knobs, each output's sizes,
    and per slot the tokens and stash id they were made for (arrays, so a
    plan finds the outputs whose entry changed without visiting each)."""

    facts: SessionFacts | None = None
    knobs: tuple[object, ...] = ()
    by_slot: dict[int, Remembered] = field(default_factory=dict)
    sizes: OutputSizes = field(default_factory=OutputSizes)
    tokens: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    stash: ObjectArray = field(default_factory=lambda: np.zeros(0, dtype=object))


_NAMES_OF = attrgetter("names")
_NUMBERS_OF = attrgetter("numbers")
_memos: WeakKeyDictionary[LineBook, LastLevels] = WeakKeyDictionary()
_memos_lock = threading.Lock()
_NONE: frozenset[int] = frozenset()


def output_levels(
    session: SessionView,
    book: LineBook,
    slots: list[int],
    facts: SessionFacts,
    tuning: Tuning,
    count_tokens: TokenCount,
    stash_ids: ObjectArray,
) -> OutputSizes:
    """The sizes of each output in `slots`, remade only where they may differ
    from the session's last plan (see the module's note); `stash_ids` per slot
    (`slot_facts`). Only the outputs something moved for are visited: those
    new to the plan, those whose anchors or quoted lines the book forgot
    (`LineBook.take_moved`), whose tokens or stash id changed, that hold a
    name or number the model wrote or stopped writing, or that a moved query
    term reaches (for those, only what the terms add is looked at); at
    ~1,200 chunks a plan after an append fully checks ~6 of ~450 outputs and
    ~50 more for the terms alone."""
    with _memos_lock:
        memo = _memos.setdefault(book, LastLevels())
    knobs = (
        tuning.line_context,
        tuning.line_budget,
        tuning.line_tight_share,
        tuning.shrink_worth,
        facts.weights,
        facts.analyzer,
        count_tokens,
    )
    moved = book.take_moved()
    previous = memo.facts if memo.knobs == knobs else None
    todo: set[int]
    reach_only: frozenset[int] = _NONE
    same_query = False
    names: frozenset[str] = frozenset()
    cited: frozenset[int] = frozenset()
    term_reach: frozenset[int] = _NONE
    if previous is None:
        memo.by_slot, memo.sizes, todo = {}, OutputSizes(), set(slots)
    else:
        names, cited, terms = _changes(previous, facts)
        if moved is None:  # the book forgot every slot's answers
            moved = set(slots)
        # the outputs a moved query term can reach: those the session index
        # says hold one of the query's terms, at this plan or the last
        # (`facts_of` reads no other output's lines for them)
        term_reach = (previous.term_holders | facts.term_holders) if terms else _NONE
        same_query = previous.query_weights.keys() == facts.query_weights.keys()
        todo = _to_check(memo, slots, moved, names, cited, session, stash_ids)
        # reached by a moved term alone: only what the terms add may differ
        reach_only = (term_reach & set(slots)) - todo
    n = session.n_slots
    if len(memo.tokens) < n:
        memo.tokens = _grown(memo.tokens, n, 0)
        memo.stash = _grown(memo.stash, n, "")
    remembered = memo.by_slot
    entry_at, anchors_of, quoted_of = session.entry_at, book.anchors, book.quoted_lines
    # the relevance and sole term of the outputs whose relevance moved, found once
    known = _relevance_moved(remembered, reach_only, session, facts, same_query)
    todo.update(known)
    for slot in sorted(todo):
        entry = entry_at(slot)
        text = entry.chunk.text
        anchors, quoted = anchors_of(slot), quoted_of(slot)
        was = last = remembered.get(slot)
        profiled = line_value.profile(text)
        relevance: tuple[tuple[int, float], ...] | None = None
        sole: str | None = None
        full: dict[int, float] | None = None  # `relevance_of`'s lines, once searched
        if was is not None and (was.anchors is not anchors or was.quoted is not quoted):
            if was.anchors == anchors and was.quoted == quoted:
                # the same lines in a new object: remember this one
                was = was.with_echoes(anchors, quoted)
            else:
                was = None
        if (
            was is None
            or was.tokens != entry.tokens
            or was.stash != entry.stash_id()
            or not names.isdisjoint(profiled.all_names)
            or not cited.isdisjoint(profiled.all_numbers)
        ):
            was = None
        elif slot in term_reach:
            # the sizes differ only if what the terms add per line does (a
            # text holding one of them, or the same mix, keeps them)
            relevance, sole, full = known.get(slot) or _relevance(
                was, facts, same_query, slot, text
            )
            if relevance != was.relevance:
                was = None
            elif was.text is not text or was.sole != sole:
                was = was.with_text(text, sole)
        if was is None:
            if relevance is None:
                sole = sole_term(facts, slot, text)
            if full is None or relevance is None:  # its text searched once a plan
                full, relevance = relevance_of(facts, slot, text)
            levels, kept = levels_of(
                session, book, slot, facts, tuning, count_tokens, last, (full, relevance)
            )
            was = Remembered(
                entry.stash_id(),
                entry.tokens,
                anchors,
                quoted,
                relevance,
                levels,
                profiled.all_names,
                profiled.all_numbers,
                text,
                sole,
                kept if sole is None else None,
            )
            memo.sizes.put(slot, was.levels)
        remembered[slot] = was
        memo.tokens[slot], memo.stash[slot] = was.tokens, was.stash
    memo.facts, memo.knobs = facts, knobs
    return memo.sizes


def _to_check(
    memo: LastLevels,
    slots: list[int],
    moved: set[int],
    names: frozenset[str],
    cited: frozenset[int],
    session: SessionView,
    stash_ids: ObjectArray,
) -> set[int]:
    """The outputs of `slots` whose sizes may differ from the last plan's
    (every other one keeps its remembered sizes as they are); forgets the
    outputs no longer in `slots`."""
    remembered = memo.by_slot
    current = set(slots)
    for gone in remembered.keys() - current:
        del remembered[gone]
        memo.sizes.drop(gone)
    todo = current - remembered.keys()
    todo |= moved & current
    held = np.fromiter(remembered, dtype=np.intp, count=len(remembered))
    if len(held):
        # `memo.tokens` and `memo.stash` cover every remembered slot
        entry_moved = (memo.tokens[held] != session.columns.tokens[held]) | (
            memo.stash[held] != stash_ids[held]
        )
        todo.update(held[entry_moved].tolist())
    # each remembered output's names against the few that changed, iterated
    # in C (a generator over ~450 outputs was ~0.4 ms of a plan after an append)
    if names:
        apart = map(names.isdisjoint, map(_NAMES_OF, remembered.values()))
        todo.update(compress(remembered, map(not_, apart)))
    if cited:
        apart = map(cited.isdisjoint, map(_NUMBERS_OF, remembered.values()))
        todo.update(compress(remembered, map(not_, apart)))
    return todo


def _relevance_moved(
    remembered: dict[int, Remembered],
    slots: AbstractSet[int],
    session: SessionView,
    facts: SessionFacts,
    same_query: bool,
) -> dict[int, _Reached]:
    """Of `slots` (outputs only a moved query term reached), those whose
    relevance moved (to be made again), with their relevance and sole term
    now; the others' remembered text and sole term are brought up to date.
    What a sole term adds per line is worked out once per term
    (`_sole_relevance`'s arithmetic), and an output of the same text holding
    none or one whose value stayed is passed over: most of the ~800 outputs a
    moved term reaches at 10,000 chunks."""
    moved: dict[int, _Reached] = {}
    scale = facts.weights.relevance
    sole_values = {
        term: scale * weight / weight if weight > 0 else None
        for term, weight in facts.query_weights.items()
    }
    entry_at = session.entry_at
    for slot in slots:
        was = remembered[slot]
        text = entry_at(slot).chunk.text
        if same_query and was.text is text and was.sole is not None:
            if not was.sole:
                continue  # no term on its lines: nothing added, as before
            if was.relevance and was.relevance[0][1] == sole_values[was.sole]:
                continue
        relevance, sole, full = _relevance(was, facts, same_query, slot, text)
        if relevance != was.relevance:
            moved[slot] = relevance, sole, full
        elif was.text is not text or was.sole != sole:
            remembered[slot] = was.with_text(text, sole)
    return moved


def _relevance(
    was: Remembered, facts: SessionFacts, same_query: bool, slot: int, text: str
) -> _Reached:
    """`relevance_of`'s key part and `sole_term` of a remembered output now,
    with `relevance_of`'s lines when its text was searched (else None); the
    same terms and text give the same holders of them and the same sole
    term, whose lines are remembered."""
    if same_query and was.sole is not None and was.text is text:
        return _sole_relevance(was, facts), was.sole, None
    full, relevance = relevance_of(facts, slot, text)
    return relevance, sole_term(facts, slot, text), full


def _sole_relevance(was: Remembered, facts: SessionFacts) -> tuple[tuple[int, float], ...]:
    """`relevance_of`'s key part for an output holding at most one of the
    query's terms (`was.sole`), whose text, query terms and place among the
    terms' holders are as when `was` was made: the term's lines, each at the
    scale its weight over itself gives (the same arithmetic, so the same
    floats), without searching the text's lines again."""
    if not was.sole:
        return was.relevance  # no term on its lines: nothing added
    weight = facts.query_weights[was.sole]
    if not weight > 0:
        return ()
    value = facts.weights.relevance * weight / weight
    if was.relevance and was.relevance[0][1] == value:
        return was.relevance
    return tuple((number, value) for number, _ in was.relevance)


def _grown(array: npt.NDArray[G], size: int, fill: object) -> npt.NDArray[G]:
    grown = np.full(max(size, 2 * len(array)), fill, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


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
    grown = grown_facts(before, now)
    if grown is not None:
        return _compact(grown[0]), _compact(grown[1]), terms
    return _compact(before.identifiers ^ now.identifiers), _compact(before.cited ^ now.cited), terms


def _compact(changed: frozenset[T]) -> frozenset[T]:
    """`changed` in a table of its own size: a difference keeps its first
    set's table (thousands of names for two plans' facts, hundreds for a new
    model text's), and walking it made each output's `isdisjoint` in
    `_to_check` cost ~1-20 us, not ~0.1."""
    return frozenset(list(changed))


# ---- a restart's sizes (planner/kept_sizes.py keeps them at a clean close) ----


def last_sizes(book: LineBook) -> LastLevels | None:
    """The sizes the book's last plan remembers, if any plan made them."""
    with _memos_lock:
        return _memos.get(book)


def remember_sizes(book: LineBook, memo: LastLevels) -> None:
    """Take `memo` as the book's last plan's sizes, unless it remembers its own."""
    with _memos_lock:
        _memos.setdefault(book, memo)
