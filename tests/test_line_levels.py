"""An output's excerpt sizes are remembered from one plan to the next: a
session that grows plan after plan must get exactly the plan a fresh engine
makes of the same chunks, whatever the model names, cites or quotes between
plans and whatever the query."""

from __future__ import annotations

import sys
from array import array
from dataclasses import replace
from typing import Any

import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Chunk, ChunkKind, Plan, Role
from ctxopt.planner import line_levels, line_memo, values
from ctxopt.planner.knobs import Tuning
from ctxopt.planner.slot_facts import slot_facts
from ctxopt.scoring import line_value
from ctxopt.scoring.line_facts import SessionFacts, relevance_of, session_facts, sole_term
from ctxopt.scoring.line_value import LineWeights
from ctxopt.session import Session
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.lines import TextLines
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.factory import chunk, filler, options

S = "s"
FUNCTIONS = [f"compute_{name}" for name in ("rate", "total", "margin", "refund", "tax", "fee")]


def listing(step: int) -> str:
    """A numbered source listing, each function a header and a few lines; no
    line repeats another step's (a repeat would move the echo lines, and the
    outputs would be made again anyway)."""
    lines = []
    for k, name in enumerate(FUNCTIONS):
        lines.append(f"{10 * k + 1:6d}\tdef {name}(order, pass_{step}):")
        body = (f"    value_{step}_{k}_{j} = order.part({j})" for j in range(6))
        lines += [f"{10 * k + j + 2:6d}\t{line}" for j, line in enumerate(body)]
        lines.append(f"{10 * k + 8:6d}\t    return {name}_helper(order, pass_{step})")
        lines.append(f"{10 * k + 9:6d}\t    # amounts round after the tax in pass {step} part {k}")
    return "\n".join(lines)


# What the model may write between plans: a name an output holds, a cited line, a
# quoted line of an output, or nothing of the kind.
SAYINGS = st.one_of(
    st.sampled_from(FUNCTIONS).map(lambda name: f"THOUGHT: the bug is in {name}"),
    st.integers(1, 60).map(lambda line: f"THOUGHT: see line {line}"),
    # a quoted line that names nothing: only the output's echo lines change
    st.integers(0, 2).map(
        lambda step: (
            f"THOUGHT: wrong:\n{19:6d}\t    # amounts round after the tax in pass {step} part 1"
        )
    ),
    st.just("THOUGHT: " + filler(20, "t")),
)
QUERIES = st.sampled_from(["", "refund", "margin tax", "fee order"])


def plan_of(engine: Engine, query: str) -> Plan:
    target = engine.stats("", S).tokens * 4 // 10
    return engine.optimize("", S, options(target, query, dry_run=True, lean=True))


def shown(plan: Plan) -> list[tuple[str, str, str]]:
    return [(d.chunk_id, d.action.name, d.replacement_text) for d in plan.decisions]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(SAYINGS, QUERIES), min_size=2, max_size=6))
def test_a_growing_session_plans_as_a_fresh_engine_would(
    steps: list[tuple[str, str]],
) -> None:
    plans_as_fresh(
        [
            (
                [
                    chunk(f"m{step}", saying, role=Role.MODEL, turn=2 * step + 1),
                    chunk(f"o{step}", listing(step), kind=ChunkKind.TOOL_RESULT, turn=2 * step + 2),
                ],
                query,
            )
            for step, (saying, query) in enumerate(steps)
        ]
    )


def plans_as_fresh(steps: list[tuple[list[Chunk], str]]) -> None:
    """Per step, append its chunks and plan for its query: the same plan as
    a fresh engine given all the chunks so far."""
    tuning = Tuning(line_tight_share=0.1)
    growing = Engine(Config(data_dir=":memory:"), tuning)
    chunks: list[Chunk] = [chunk("task", "repair the pricing module", turn=0)]
    growing.append("", S, chunks)
    for step, (new, query) in enumerate(steps):
        chunks += new
        growing.append("", S, new)
        fresh = Engine(Config(data_dir=":memory:"), tuning)
        fresh.append("", S, chunks)
        assert shown(plan_of(growing, query)) == shown(plan_of(fresh, query)), step
        fresh.close()
    growing.close()


def test_an_output_with_one_query_term_keeps_its_excerpt_as_the_session_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every append moves each query term's rarity a little; an output holding
    one of the terms scores its lines the same, so its excerpt is not made
    again (it was, when the key held the raw rarity)."""
    scored: list[int] = []
    score = line_value.line_scores

    def counted(*args: Any) -> list[float]:
        scored.append(1)
        return score(*args)

    monkeypatch.setattr(line_value, "line_scores", counted)
    engine = Engine(Config(data_dir=":memory:"))
    text = listing(0).replace("compute_refund", "compute_refundable")
    engine.append(
        "",
        S,
        [
            chunk("task", "repair the pricing module", turn=0),
            chunk("o0", text + "\n   99\trefund", kind=ChunkKind.TOOL_RESULT, turn=1),
            *(chunk(f"n{step}", filler(40, str(step)), turn=1 + step) for step in range(1, 4)),
        ],
    )
    plan_of(engine, "refund")
    made = len(scored)
    assert made >= 1
    for step in range(4, 7):
        engine.append("", S, [chunk(f"n{step}", filler(40, str(step)), turn=1 + step)])
        plan_of(engine, "refund")
    assert len(scored) == made
    engine.close()


def test_the_changed_names_are_a_small_set() -> None:
    """The names that changed between two plans are checked against every
    output: kept in a table of their own size, not the session's."""
    analyzer = Analyzer()
    weights = LineWeights(1.0, 1.0, 1.0, 1.0, 1.0)
    many = frozenset(f"name_{i}" for i in range(3000))
    before = SessionFacts({}, many, frozenset(), analyzer, weights)
    after = SessionFacts({}, many | {"name_new"}, frozenset(), analyzer, weights)
    names, _, _ = line_levels._changes(before, after)
    assert names == {"name_new"}
    assert sys.getsizeof(names) < sys.getsizeof(frozenset(range(100)))


def slots_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The slots whose sizes a plan makes from now on, in order."""
    made: list[int] = []
    levels_of = line_levels.levels_of

    def counted(*args: Any) -> tuple[tuple[line_memo.LineLevel, ...], Any]:
        made.append(args[2])
        return levels_of(*args)

    monkeypatch.setattr(line_levels, "levels_of", counted)
    return made


def test_an_output_whose_echo_lines_are_made_again_equal_keeps_its_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second model chunk quoting the line an earlier one quoted makes the
    book answer the output's quoted lines again (a new, equal set): its
    sizes are kept, not made again."""
    quote = f"THOUGHT: wrong:\n{19:6d}\t    # amounts round after the tax in pass 0 part 1"
    made = slots_made(monkeypatch)
    engine = Engine(Config(data_dir=":memory:"))
    engine.append(
        "",
        S,
        [
            chunk("task", "repair the pricing module", turn=0),
            chunk("o0", listing(0), kind=ChunkKind.TOOL_RESULT, turn=1),
            chunk("m0", quote, role=Role.MODEL, turn=2),
            *(chunk(f"n{step}", filler(40, str(step)), turn=2 + step) for step in range(1, 4)),
        ],
    )
    plan_of(engine, "")
    assert made == [1]  # the output's sizes, made by the first plan
    engine.append("", S, [chunk("m1", quote, role=Role.MODEL, turn=6)])
    plan_of(engine, "")
    assert made == [1]
    engine.close()


MODEL_TEXTS = [
    *(f"THOUGHT: the bug is in {name}" for name in FUNCTIONS),
    "THOUGHT: run sed -n '12,30p' pricing/tax_rules.py",
    "THOUGHT: see line 7 of a/b_c.py",
    "THOUGHT: " + filler(20, "t"),
]
_sessions = iter(range(10**9))  # each example's texts new to the process-wide pools


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(MODEL_TEXTS), max_size=12), st.data())
def test_pooled_model_facts_of_a_grown_session_are_its_texts_pooled(
    texts: list[str], data: st.DataObject
) -> None:
    """A session's model texts pooled onto an earlier pool of a prefix of them
    give what pooling them all gives, and read only the texts past it."""
    session = next(_sessions)
    held = tuple(f"{text} s{session}m{i}" for i, text in enumerate(texts))
    cut = data.draw(st.integers(0, len(held)))
    line_value.model_facts(held[:cut])
    read: list[str] = []
    names = line_value.names

    def counted(text: str) -> frozenset[str]:
        read.append(text)
        return names(text)

    line_value.names = counted
    try:
        pooled = line_value.model_facts(held)
    finally:
        line_value.names = names
    expected_names = frozenset().union(*map(line_value.names, held))
    expected_cited = frozenset().union(*map(line_value.cited_numbers, held))
    assert pooled == (expected_names, expected_cited)
    assert read == list(held[cut:])


TERMS = ("refund", "margin", "ledger")


def term_steps(most: int) -> st.SearchStrategy[tuple[str, frozenset[str], bool]]:
    """A step's query, and whether it appends an output holding up to `most`
    of the terms (else a message)."""
    return st.tuples(
        st.sampled_from(["", "refund", "margin ledger", "refund ledger", "tax"]),
        st.frozensets(st.sampled_from(TERMS), max_size=most),
        st.booleans(),
    )


def holding(step: int, terms: frozenset[str]) -> str:
    """An output of its own lines, with a line naming each of `terms`."""
    return listing(step) + "".join(f"\n{90 + k:6d}\t# {t} noted" for k, t in enumerate(terms))


@settings(max_examples=25, deadline=None)
@given(st.lists(term_steps(2), min_size=2, max_size=6))
def test_outputs_a_moved_query_term_reaches_plan_as_a_fresh_engine_would(
    steps: list[tuple[str, frozenset[str], bool]],
) -> None:
    """Outputs holding some, none or a dropped one of the query's terms, the
    query changing or not, each plan after an append: the outputs re-checked
    for moved terms (those the index says hold one, now or at the last plan)
    give the plans a fresh engine makes."""
    plans_as_fresh(
        [
            (
                [
                    chunk(f"c{step}", holding(step, terms), kind=ChunkKind.TOOL_RESULT, turn=step)
                    if output
                    else chunk(f"c{step}", filler(30, str(step)), turn=step)
                ],
                query,
            )
            for step, (query, terms, output) in enumerate(steps, start=1)
        ]
    )


def test_an_append_searches_only_outputs_holding_two_query_terms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An append moves the query terms' rarity; only the output holding two of
    them is searched for them again: not an output holding none (the index
    says so), nor one holding a single term (its lines are remembered, and
    the term's weight over itself is what it adds)."""
    searched: list[str] = []
    term_lines = TextLines.term_lines

    def counted(self: TextLines, terms: frozenset[str], analyzer: Analyzer) -> Any:
        searched.append("\n".join(self.lines))
        return term_lines(self, terms, analyzer)

    monkeypatch.setattr(TextLines, "term_lines", counted)
    engine = Engine(Config(data_dir=":memory:"))
    outputs = [
        holding(0, frozenset({"refund", "ledger"})),
        holding(1, frozenset({"refund"})),
        *(listing(step) for step in range(2, 4)),
    ]
    engine.append(
        "",
        S,
        [
            chunk("task", "repair the pricing module", turn=0),
            *(
                chunk(f"o{k}", text, kind=ChunkKind.TOOL_RESULT, turn=1 + k)
                for k, text in enumerate(outputs)
            ),
        ],
    )
    plan_of(engine, "refund ledger")
    searched.clear()
    engine.append("", S, [chunk("n", filler(40, "n"), turn=9)])
    plan_of(engine, "refund ledger")
    assert outputs[0] in searched
    assert not set(outputs[1:]) & set(searched)
    engine.close()


def test_an_output_whose_query_term_moved_keeps_its_sizes_unmade(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An append moves the rarity of the one query term an output holds: what
    the term adds to its lines is the same, so its sizes are kept without
    being made again (nor their facts gathered)."""
    made = slots_made(monkeypatch)
    engine = Engine(Config(data_dir=":memory:"))
    engine.append(
        "",
        S,
        [
            chunk("task", "repair the pricing module", turn=0),
            chunk("o0", holding(0, frozenset({"refund"})), kind=ChunkKind.TOOL_RESULT, turn=1),
            *(chunk(f"n{step}", filler(40, str(step)), turn=1 + step) for step in range(1, 4)),
        ],
    )
    plan_of(engine, "refund")
    assert made == [1]
    for step in range(4, 7):
        engine.append("", S, [chunk(f"n{step}", filler(40, str(step)), turn=1 + step)])
        plan_of(engine, "refund")
    assert made == [1]
    engine.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(SAYINGS, term_steps(3)), min_size=2, max_size=7))
def test_the_outputs_left_unvisited_hold_what_the_plain_definition_gives(
    steps: list[tuple[str, tuple[str, frozenset[str], bool]]],
) -> None:
    """`output_levels` visits only the outputs something moved for (the book's
    log, names, the terms' reach) and takes a one-term output's relevance from
    its remembered lines: after every plan, each output's remembered state
    and sizes are what the plain definition gives from scratch (no cache),
    and the plans are a fresh engine's."""
    real = line_levels.output_levels

    def checked(
        session: Any, book: Any, slots: list[int], facts: SessionFacts, *rest: Any
    ) -> line_levels.OutputSizes:
        made = real(session, book, slots, facts, *rest)
        memo = line_levels._memos[book]
        assert set(slots) == memo.by_slot.keys()
        line_levels._line_excerpts.clear()
        for slot in slots:
            text = session.entry_at(slot).chunk.text
            was = memo.by_slot[slot]
            assert (was.anchors, was.quoted) == (book.anchors(slot), book.quoted_lines(slot))
            assert was.relevance == relevance_of(facts, slot, text)[1]
            assert was.sole == sole_term(facts, slot, text)
            levels = line_levels.levels_of(session, book, slot, facts, *rest[:2])[0]
            assert was.levels == levels
            # what a plan reads of them
            assert made.first.get(slot) == ((levels[0].text, levels[0].tokens) if levels else None)
            assert made.tight.get(slot) == (
                (levels[1].text, levels[1].tokens) if len(levels) > 1 else None
            )
            assert made.tight_kept.get(slot) == (levels[1].kept if len(levels) > 1 else None)
        assert made.first.keys() <= set(slots)
        assert made.tight.keys() == made.tight_kept.keys() <= made.first.keys()
        return made

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(values, "output_levels", checked)
        plans_as_fresh(
            [
                (
                    [
                        chunk(f"m{step}", saying, role=Role.MODEL, turn=2 * step + 1),
                        chunk(
                            f"c{step}",
                            holding(step, terms),
                            kind=ChunkKind.TOOL_RESULT,
                            turn=2 * step + 2,
                        )
                        if output
                        else chunk(f"c{step}", filler(30, str(step)), turn=2 * step + 2),
                    ],
                    query,
                )
                for step, (saying, (query, terms, output)) in enumerate(steps, start=1)
            ]
        )


# (model chunk number, its text or None to remove it, the query then: some name
# what a model text names, some nothing)
FACT_STEPS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.none() | st.sampled_from(MODEL_TEXTS),
        st.sampled_from(["", "refund", "compute_tax", "compute_fee in pricing/tax_rules.py"]),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=100, deadline=None)
@given(FACT_STEPS)
def test_the_changed_names_are_the_plain_difference_of_two_plans_facts(
    steps: list[tuple[int, str | None, str]],
) -> None:
    """The names and cited numbers `_changes` finds between one plan's facts
    and the next are the symmetric differences of the two, whether the model
    texts grew (found from the added texts alone), were replaced or removed,
    or the query's names changed."""
    session = Session(S, "", Analyzer())
    weights = LineWeights(1.0, 1.0, 1.0, 1.0, 1.0)
    before: SessionFacts | None = None
    for turn, (number, text, query) in enumerate(steps):
        if text is None:
            session.remove(f"m{number}")
        else:
            session.upsert(chunk(f"m{number}", text, role=Role.MODEL, turn=turn), 10, 0)
        view = session.view()
        texts = slot_facts(view, session.line_book()).texts
        now = session_facts(
            view, query, view.analyzer, rare_share=0.5, weights=weights, texts=texts
        )
        assert now.identifiers == frozenset().union(
            line_value.names(query), *map(line_value.names, now.model_texts or ())
        )
        if before is not None:
            names, cited, _ = line_levels._changes(before, now)
            assert names == before.identifiers ^ now.identifiers
            assert cited == before.cited ^ now.cited
        before = now


def test_an_output_gone_leaves_no_size_a_plan_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sizes kept per session lose an output that went: a later plan reads
    sizes of the outputs it has, no more."""
    seen: list[tuple[set[int], line_levels.OutputSizes]] = []
    real = line_levels.output_levels

    def kept(session: Any, book: Any, slots: list[int], *rest: Any) -> line_levels.OutputSizes:
        sizes = real(session, book, slots, *rest)
        seen.append((set(slots), sizes))
        return sizes

    monkeypatch.setattr(values, "output_levels", kept)
    engine = Engine(Config(data_dir=":memory:"))
    engine.append(
        "",
        S,
        [
            chunk(f"c{n}", holding(n, frozenset({"refund"})), kind=ChunkKind.TOOL_RESULT, turn=n)
            for n in range(1, 4)
        ]
        + [chunk("m", "THOUGHT: the bug is in compute_refund", role=Role.MODEL, turn=4)],
    )
    plan_of(engine, "refund")
    engine.remove("", S, ["c2"], stash_originals=False)
    plan_of(engine, "refund")
    (before, _), (slots, sizes) = seen[0], seen[-1]
    assert 1 in before and 1 not in slots  # c2's slot: an output, then gone
    for held in (sizes.first, sizes.tight, sizes.tight_kept):
        assert held.keys() <= slots
    assert sizes.first  # the outputs left have sizes
    engine.close()


def _holding_two_terms() -> tuple[str, Session, SessionFacts]:
    """A session of one output holding both of the query's terms, its text,
    and the facts of a plan asking for them."""
    text = holding(1, frozenset({"refund", "margin"}))
    session = Session(S, "", Analyzer())
    session.upsert(chunk("c1", text, kind=ChunkKind.TOOL_RESULT), len(text) // 4, 0)
    view = session.view()
    facts = session_facts(
        view,
        "refund margin",
        view.analyzer,
        rare_share=1.0,
        weights=LineWeights(1.0, 1.0, 1.0, 1.0, 1.0),
        texts=slot_facts(view, session.line_book()).texts,
    )
    return text, session, facts


def test_a_size_keeping_the_same_lines_of_the_same_text_takes_its_last_bytes() -> None:
    """An output made again (its query terms' weights moved) takes the text
    and tokens of a size of its last sizes that keeps the same lines, when
    its stash and text are the same; another text, or other lines, make
    their own bytes."""
    text, session, facts = _holding_two_terms()
    view, book, tuning = session.view(), session.line_book(), Tuning()

    def count(excerpt: str) -> int:
        return len(excerpt) // 4

    line_levels._line_excerpts.clear()
    levels, kept = line_levels.levels_of(view, book, 0, facts, tuning, count)
    assert levels and kept is not None and len(kept.sizes) >= len(levels)
    assert [(made_text, tokens) for _, made_text, tokens in kept.sizes[: len(levels)]] == [
        (level.text, level.tokens) for level in levels
    ]
    marked_kept = replace(
        kept,
        sizes=tuple(
            (lines, f"last {n}", tokens) for n, (lines, _, tokens) in enumerate(kept.sizes)
        ),
    )
    marked = tuple(line_memo.LineLevel(f"last {n}", lv.tokens, 1.0) for n, lv in enumerate(levels))
    stash = view.entry_at(0).stash_id()
    # other lines of the same text, ranked otherwise
    other = replace(
        marked_kept,
        order=array("H"),
        sizes=tuple((lines[1:], made, tokens) for lines, made, tokens in marked_kept.sizes),
    )
    for last_text, last_kept, expected in (
        (text, marked_kept, marked),
        (text + "\n", marked_kept, levels),
        (text, other, levels),
    ):
        last = line_memo.Remembered(
            stash,
            0,
            (),
            frozenset(),
            (),
            marked,
            frozenset(),
            frozenset(),
            last_text,
            None,
            last_kept,
        )
        line_levels._line_excerpts.clear()
        made, _ = line_levels.levels_of(view, book, 0, facts, tuning, count, last)
        assert [(m.text, m.tokens) for m in made] == [(e.text, e.tokens) for e in expected]
        assert [m.kept for m in made] == [level.kept for level in levels]


def test_a_dropped_size_keeping_the_same_lines_is_not_joined_and_counted_again() -> None:
    """An output made again whose tight size was dropped (it did not shrink
    the first size well) takes that size's last bytes too: the kept lines
    hold every size made, and one made again asks for no excerpt's count."""
    text, session, facts = _holding_two_terms()
    view, book = session.view(), session.line_book()
    # the tight size keeps the first size's lines: it never shrinks it well
    tuning = replace(Tuning(), line_tight_share=Tuning().line_budget)
    counted: list[str] = []

    def count(excerpt: str) -> int:
        counted.append(excerpt)
        return len(excerpt) // 4

    line_levels._line_excerpts.clear()
    levels, kept = line_levels.levels_of(view, book, 0, facts, tuning, count)
    assert len(levels) == 1 and kept is not None  # the tight size was made and dropped
    assert [text is None for _, text, _ in kept.sizes] == [False, True]  # its bytes not held
    last = line_memo.Remembered(
        view.entry_at(0).stash_id(),
        0,
        (),
        frozenset(),
        (),
        levels,
        frozenset(),
        frozenset(),
        text,
        None,
        kept,
    )
    counted.clear()
    line_levels._line_excerpts.clear()
    made, made_kept = line_levels.levels_of(view, book, 0, facts, tuning, count, last)
    assert counted == []
    assert made == levels and made_kept == kept


def _output_facts(
    term_lines: list[frozenset[str]], naming: tuple[int, ...], tokens: int, relevance: float = 1.0
) -> tuple[Session, SessionFacts]:
    """A session of one output (its listing, then a line naming each set of
    `term_lines`, `tokens` long) and `naming[k]` messages naming `TERMS[k]`
    (which moves the query terms' weights), with the facts of a plan asking
    for all of `TERMS`."""
    others = [term for term, times in zip(TERMS, naming, strict=True) for _ in range(times)]
    # four lines apart: each term line's window of context is its own
    text = listing(1) + "".join(
        f"\n{90 + 5 * k:6d}\t# {' '.join(sorted(terms))} noted"
        + "".join(f"\n{91 + 5 * k + j:6d}\tstep({j})" for j in range(4))
        for k, terms in enumerate(term_lines)
    )
    session = Session(S, "", Analyzer())
    session.upsert(chunk("c1", text, kind=ChunkKind.TOOL_RESULT), tokens, 0)
    for k, term in enumerate(others):
        session.upsert(chunk(f"m{k}", f"{filler(5)} {term}"), 20, 0)
    view = session.view()
    facts = session_facts(
        view,
        " ".join(TERMS),
        view.analyzer,
        rare_share=1.0,
        weights=LineWeights(relevance, 1.0, 1.0, 1.0, 1.0),
        texts=slot_facts(view, session.line_book()).texts,
    )
    return session, facts


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(TERMS).map(lambda term: frozenset({term}))
        | st.frozensets(st.sampled_from(TERMS), min_size=2),
        min_size=2,
        max_size=8,
    ),
    # per term, how many messages name it (its weight falls with each)
    st.tuples(*[st.integers(0, 4)] * len(TERMS)),
    st.tuples(*[st.integers(0, 4)] * len(TERMS)),
    st.sampled_from([120, 240]),
    # a tight size of one line's window, or of all of them
    st.sampled_from([0.05, 0.3]),
    st.sampled_from([0.05, 0.3]),
)
# the best line's window alone, and a weight move that ranks another line first
@example([frozenset({"refund"}), frozenset({"margin"})], (4, 0, 0), (0, 4, 0), 120, 0.05, 0.05)
def test_an_output_made_again_keeps_the_lines_the_plain_definition_keeps(
    term_lines: list[frozenset[str]],
    before: tuple[int, ...],
    after: tuple[int, ...],
    tokens_after: int,
    share_was: float,
    share_now: float,
) -> None:
    """An output holding several query terms, made again after their weights
    moved (and maybe its tokens or the tight size's share), given its last
    sizes and what they were picked from: the same sizes and kept lines as
    made from scratch (a size takes its last lines only when its lines rank
    as before, within the same tokens and knobs)."""

    def count(excerpt: str) -> int:
        return len(excerpt) // 4

    # one object per share, as an engine holds its knobs
    tunings = {share: replace(Tuning(), line_tight_share=share) for share in (0.05, 0.3)}
    was, facts_was = _output_facts(term_lines, before, 120)
    line_levels._line_excerpts.clear()
    tuning = tunings[share_was]
    _, kept = line_levels.levels_of(was.view(), was.line_book(), 0, facts_was, tuning, count)
    tuning = tunings[share_now]
    now, facts_now = _output_facts(term_lines, after, tokens_after)
    view, book = now.view(), now.line_book()
    line_levels._line_excerpts.clear()
    plain = line_levels.levels_of(view, book, 0, facts_now, tuning, count)
    entry = view.entry_at(0)
    last = line_memo.Remembered(
        entry.stash_id(),
        120,
        (),
        frozenset(),
        (),
        (),
        frozenset(),
        frozenset(),
        entry.chunk.text,
        None,
        kept,
    )
    line_levels._line_excerpts.clear()
    assert line_levels.levels_of(view, book, 0, facts_now, tuning, count, last) == plain


TERM_LINES = st.lists(
    st.sampled_from(TERMS).map(lambda term: frozenset({term}))
    | st.frozensets(st.sampled_from(TERMS), min_size=2),
    max_size=4,
)


@settings(max_examples=80, deadline=None)
@given(
    TERM_LINES,
    st.none() | TERM_LINES,
    st.tuples(*[st.integers(0, 4)] * len(TERMS)),
    st.tuples(*[st.integers(0, 4)] * len(TERMS)),
    # 1.5 * w / w is not always 1.5: a sole term's value may move by a rounding
    st.sampled_from([0.5, 1.5]),
)
# the same text, one term: its value rounds otherwise under the new weight
@example([frozenset({"refund"})], None, (0, 1, 1), (0, 3, 4), 1.5)
# another text, now holding a term the last one did not
@example([], [frozenset({"refund"})], (0, 0, 0), (0, 0, 0), 0.5)
def test_an_output_a_moved_term_reaches_is_remade_as_the_plain_definition_says(
    lines_was: list[frozenset[str]],
    lines_now: list[frozenset[str]] | None,
    before: tuple[int, ...],
    after: tuple[int, ...],
    scale: float,
) -> None:
    """An output only a moved query term reached, its text the same object
    or another (`lines_now`), is made again exactly when what the terms add
    to its lines moved; one passed over holds the relevance, sole term and
    text the plain definitions give now."""
    was_session, facts_was = _output_facts(lines_was, before, 120, scale)
    now_session, facts_now = _output_facts(lines_now or lines_was, after, 120, scale)
    view = now_session.view()
    text = view.entry_at(0).chunk.text
    text_was = text if lines_now is None else was_session.view().entry_at(0).chunk.text
    was = line_memo.Remembered(
        view.entry_at(0).stash_id(),
        120,
        (),
        frozenset(),
        relevance_of(facts_was, 0, text_was)[1],
        (),
        frozenset(),
        frozenset(),
        text_was,
        sole_term(facts_was, 0, text_was),
        None,
    )
    remembered = {0: was}
    same_query = facts_was.query_weights.keys() == facts_now.query_weights.keys()
    moved = line_levels._relevance_moved(remembered, {0}, view, facts_now, same_query)
    relevance = relevance_of(facts_now, 0, text)[1]
    assert list(moved) == ([0] if relevance != was.relevance else [])
    if not moved:
        now = remembered[0]
        assert (now.relevance, now.sole) == (relevance, sole_term(facts_now, 0, text))
        assert now.text is text
