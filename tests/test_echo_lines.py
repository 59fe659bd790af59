"""Signals from the structure of agent work (text/lines.py, the planner's
anchored excerpts, pseudo-relevance feedback), each on a small hand-made
session."""

from __future__ import annotations

from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Action, Chunk, ChunkKind, Plan, Role, Strategy
from ctxopt.planner.knobs import Tuning
from ctxopt.scoring.hybrid import expanded_relevance, normalised_bm25
from ctxopt.session import Session
from ctxopt.text.analyzer import Analyzer

from tests.factory import chunk, filler, options

S = "s"
QUOTED = "total = compute_total(items, discount=0.25)"  # the line the agent works on


def session_of(*texts: str) -> Session:
    session = Session(S, "", Analyzer())
    for i, text in enumerate(texts):
        session.upsert(chunk(f"c{i}", text, turn=i), len(text) // 4 + 1, 0)
    return session


def code(lines: int, seed: str, quoted_at: int = -1) -> str:
    """A file view: distinct long lines, QUOTED at `quoted_at` if given."""
    body = [f"    value_{seed}_{i} = helper_{seed}(argument_{i}, option={i})" for i in range(lines)]
    if quoted_at >= 0:
        body[quoted_at] = f"    {QUOTED}"
    return "\n".join(body)


def decision(plan: Plan, chunk_id: str) -> Action:
    return next((d.action for d in plan.decisions if d.chunk_id == chunk_id), Action.KEEP)


# ---- the line book ---------------------------------------------------------


def test_a_line_two_chunks_hold_is_an_anchor_of_the_latest_holder_only() -> None:
    session = session_of(code(10, "a", quoted_at=3), f"I will change\n{QUOTED}", "done")
    book = session.line_book()
    assert book.anchors(0) == ()
    assert book.anchors(1) == (1,)
    assert book.anchors(2) == ()


def quoting_session(*chunks: tuple[Role, str]) -> Session:
    session = Session(S, "", Analyzer())
    for i, (role, text) in enumerate(chunks):
        session.upsert(chunk(f"c{i}", text, role=role, turn=i), len(text) // 4 + 1, 0)
    return session


def test_an_output_a_later_model_chunk_quotes_is_quoted_and_stays_so() -> None:
    view = code(10, "a", quoted_at=3)
    session = quoting_session(
        (Role.MODEL, f"I will write\n{QUOTED}"),  # before the output: no quote of it
        (Role.USER, view),
        (Role.USER, view),  # a tool printing it again is no quote
        (Role.MODEL, f"edit:\n    {QUOTED}"),
        (Role.MODEL, f"again:\n{QUOTED}"),  # quotes the model's own lines: not marked
    )
    assert session.line_book().quoted_mask(5).tolist() == [False, True, True, False, False]
    session.remove("c3")
    session.remove("c4")
    assert session.line_book().quoted_mask(5).tolist() == [False, True, True, False, False]
    session.remove("c1")
    assert session.line_book().quoted_mask(5).tolist() == [False, False, True, False, False]


def test_short_lines_and_lines_held_once_are_never_anchors() -> None:
    session = session_of("x = 1\n" + code(4, "a"), "x = 1\n" + code(4, "b"))
    book = session.line_book()
    assert book.anchors(0) == () and book.anchors(1) == ()


def test_removing_the_latest_holder_hands_its_lines_back() -> None:
    session = session_of(QUOTED, f"see\n{QUOTED}", f"again\n{QUOTED}")
    assert session.line_book().anchors(1) == ()
    session.remove("c2")
    assert session.line_book().anchors(1) == (1,)


def test_a_changed_text_is_read_again() -> None:
    session = session_of(QUOTED, f"see\n{QUOTED}")
    assert session.line_book().anchors(1) == (1,)
    session.upsert(chunk("c1", "see\nsomething else entirely, long enough", turn=1), 9, 0)
    assert session.line_book().anchors(1) == ()


def test_an_output_printed_again_later_is_all_repeated() -> None:
    view = code(6, "a")
    session = session_of(view, "sed -n 1,6p module.py", view)
    book = session.line_book()
    assert book.repeated_share(0) == 1.0
    assert book.repeated_share(2) == 0.0
    assert book.repeated(session.n_slots).tolist() == [1.0, 0.0, 0.0]


def test_a_partly_reprinted_output_is_partly_repeated() -> None:
    first = code(4, "a") + "\n" + code(4, "b")
    session = session_of(first, code(4, "b"))
    assert session.line_book().repeated_share(0) == 0.5


# ---- the pruner ------------------------------------------------------------


def agent_session(view: str) -> list[Chunk]:
    """Task, a model turn quoting QUOTED, a long output that prints it again,
    more work, and two recent turns (roots)."""
    return [
        chunk("task", "fix the discount rounding bug", turn=0),
        chunk("m1", f"THOUGHT: the bug is in\n{QUOTED}", role=Role.MODEL, turn=1),
        chunk("out", view, kind=ChunkKind.TOOL_RESULT, turn=2),
        chunk("m2", filler(300, "m"), role=Role.MODEL, turn=3),
        chunk("r1", filler(30, "r"), turn=4),
        chunk("r2", filler(30, "s"), role=Role.MODEL, turn=5),
    ]


def test_an_output_shrinks_to_the_lines_the_work_points_at_verbatim() -> None:
    engine = Engine(Config(data_dir=":memory:"), Tuning(line_excerpts=True))  # off by default
    engine.append("", S, agent_session(code(60, "a", quoted_at=40)))
    plan = engine.optimize("", S, options(engine.stats("", S).tokens // 3, "discount"))
    excerpt = next(d for d in plan.decisions if d.chunk_id == "out")
    assert excerpt.action == Action.TRIM
    assert "trimmed_to_relevant_lines" in excerpt.reasons
    assert f"    {QUOTED}" in excerpt.replacement_text.split("\n")
    assert excerpt.stash_id in excerpt.replacement_text
    assert "[... lines 1-39 dropped ...]" in excerpt.replacement_text.split("\n")
    assert excerpt.tokens_after < excerpt.tokens // 10


def test_an_output_printed_again_later_goes_before_an_irrelevant_one() -> None:
    view = code(30, "a").replace("helper_a", "parse_config")  # what the query asks about
    engine = Engine(Config(data_dir=":memory:"), Tuning(discount_repeated=True))
    engine.append(
        "",
        S,
        [
            chunk("task", "fix parse_config", turn=0),
            chunk("x", code(30, "x"), kind=ChunkKind.TOOL_RESULT, turn=1),
            chunk("o1", view, kind=ChunkKind.TOOL_RESULT, turn=2),
            chunk("m", "THOUGHT: run it again", role=Role.MODEL, turn=3),
            chunk("o2", view, kind=ChunkKind.TOOL_RESULT, turn=4),
            chunk("r1", filler(20, "r"), turn=5),
            chunk("r2", filler(20, "s"), role=Role.MODEL, turn=6),
        ],
    )
    total = engine.stats("", S).tokens
    plan = engine.optimize("", S, options(total - total // 5, "parse_config"))
    assert decision(plan, "o1") != Action.KEEP
    assert decision(plan, "x") == Action.KEEP
    assert decision(plan, "o2") == Action.KEEP


def test_link_lines_keep_the_rare_terms_of_the_current_step() -> None:
    view = code(60, "a").split("\n")
    view[17] = "    raise FrobnicationError(widget_id)  # the failing line"
    chunks = agent_session("\n".join(view))
    for share, kept in ((0.0, False), (0.2, True)):
        tuning = Tuning(link_df_share=share, line_excerpts=False)  # the anchored path
        engine = Engine(Config(data_dir=":memory:"), tuning)
        engine.append("", S, chunks)
        plan = engine.optimize("", S, options(engine.stats("", S).tokens // 3, "FrobnicationError"))
        texts = [d.replacement_text for d in plan.decisions if d.chunk_id == "out"]
        assert any("FrobnicationError" in t for t in texts) == kept


# ---- pseudo-relevance feedback ----------------------------------------------


def test_expansion_reaches_a_turn_that_answers_in_other_words() -> None:
    session = session_of(
        "Caroline: I went to the support group at the community centre yesterday",
        "Melanie: the community centre hosts painting classes on tuesdays",
        "Melanie: my kids love the beach in summer",
        "Caroline: the support group was great",
        *(filler(12, str(i)) for i in range(6)),
    )
    terms = Analyzer().terms("When did Caroline go to the support group?")
    view = session.view()
    plain = normalised_bm25(view, terms)
    grown = expanded_relevance(view, terms, plain, weight=0.3, top_docs=3, added_terms=8)
    assert plain[1] == 0.0 < grown[1]
    assert grown[2] == 0.0
    assert expanded_relevance(view, terms, plain, weight=0.0, top_docs=3, added_terms=8) is plain


def test_a_chunk_removed_and_sent_again_is_read_afresh() -> None:
    session = session_of(QUOTED, f"see\n{QUOTED}")
    assert session.line_book().owns_anchors(2).tolist() == [False, True]
    removed = session.remove("c1")
    assert removed is not None
    assert session.line_book().owns_anchors(2).tolist() == [False, False]
    session.upsert(removed.chunk, removed.tokens, 0)
    assert session.line_book().owns_anchors(2).tolist() == [False, True]
    assert session.line_book().anchors(1) == (1,)


def test_budget_removes_what_the_model_has_not_quoted_before_older_outputs_it_has() -> None:
    def plan_for(edit: str) -> Plan:
        engine = Engine(Config(data_dir=":memory:"))
        chunks = [
            chunk("task", "fix the total", turn=0),
            chunk("old", code(30, "a", quoted_at=5), kind=ChunkKind.TOOL_RESULT, turn=1),
            chunk("newer", code(30, "b"), kind=ChunkKind.TOOL_RESULT, turn=2),
            chunk("edit", edit, role=Role.MODEL, turn=3),
            chunk("now", "run the tests", turn=4),
        ]
        engine.append("", S, chunks)
        size = engine.stats("", S).tokens
        return engine.optimize("", S, options(size - 50, strategy=Strategy.BUDGET))

    quoted = plan_for(f"replace\n{QUOTED}")
    assert decision(quoted, "newer") == Action.STASH and decision(quoted, "old") == Action.KEEP
    unquoted = plan_for("replace the total computation")
    assert decision(unquoted, "old") == Action.STASH and decision(unquoted, "newer") == Action.KEEP
