"""Query-aware line excerpts of tool outputs: each signal on a small hand-made
session, shown by the line it keeps and lost without it."""

from __future__ import annotations

from dataclasses import replace

from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Action, Chunk, ChunkKind, Decision, Role, Roots
from ctxopt.planner.knobs import Tuning
from ctxopt.scoring.line_value import (
    LineFacts,
    LineWeights,
    cited_numbers,
    enclosing_headers,
    excerpt_lines,
    line_scores,
    names,
    profile,
)

from tests.factory import chunk, filler, options

S = "s"
ALL = LineWeights(relevance=1.0, identifier=1.0, cited=1.0, error=1.0, echoed=1.0)
# Line excerpts on (off by default) with every signal off: a test turns on the one it shows.
NONE = {
    "line_excerpts": True,
    "line_relevance": 0.0,
    "line_identifier": 0.0,
    "line_cited": 0.0,
    "line_error": 0.0,
    "line_echoed": 0.0,
}


def listing(lines: int, special: dict[int, str], numbered: bool = False) -> str:
    """A code listing of `lines` plain lines, `special` replacing some (0-based)."""
    out = []
    for i in range(lines):
        text = special.get(i, f"    value_{i} = plain_helper(argument_{i}, option={i})")
        out.append(f"{i + 1:6d}\t{text}" if numbered else text)
    return "\n".join(out)


def session(model_text: str, output: str) -> list[Chunk]:
    return [
        chunk("task", "please repair the pricing module", turn=0),
        chunk("m1", model_text, role=Role.MODEL, kind=ChunkKind.TOOL_CALL, turn=1),
        chunk("out", output, kind=ChunkKind.TOOL_RESULT, turn=2, parent_id="m1"),
        chunk("m2", filler(300, "m"), role=Role.MODEL, turn=3),
        chunk("r1", filler(30, "r"), turn=4),
        chunk("r2", filler(30, "s"), role=Role.MODEL, turn=5),
    ]


def excerpt_of(chunks: list[Chunk], query: str = "pricing", **knobs: object) -> str:
    """The output's excerpt at a third of the session, "" when it did not get one."""
    engine = Engine(Config(data_dir=":memory:"), Tuning(**{**NONE, **knobs}))  # type: ignore[arg-type]
    engine.append("", S, chunks)
    plan = engine.optimize("", S, options(engine.stats("", S).tokens // 3, query))
    found = [d for d in plan.decisions if d.chunk_id == "out" and d.action == Action.TRIM]
    engine.close()
    return found[0].replacement_text if found else ""


def kept_lines(excerpt: str) -> list[str]:
    return excerpt.split("\n")


# ---- the signals, pure --------------------------------------------------------


def test_names_are_paths_and_compound_identifiers_not_plain_words() -> None:
    found = names("open src/shop/pricing.py and fix apply_discount in PriceTable, then run it")
    assert {"src/shop/pricing.py", "shop/pricing.py", "pricing.py"} <= found
    assert {"apply_discount", "PriceTable"} <= found
    assert not {"open", "then", "run"} & found


def test_cited_numbers_read_sed_ranges_and_line_mentions_but_not_whole_files() -> None:
    assert cited_numbers("sed -n '120,122p' a.py") == {120, 121, 122}
    assert cited_numbers("the bug is on line 57, see b.py:9") == {57, 9}
    assert cited_numbers("sed -n '1,2000p' a.py") == frozenset()


def test_a_line_naming_what_the_model_wrote_scores() -> None:
    text = profile("x = 1\nresult = apply_discount(order)\ny = 2")
    facts = LineFacts(identifiers=frozenset({"apply_discount"}))
    assert line_scores(text, facts, ALL) == [0.0, 1.0, 0.0]
    assert line_scores(text, LineFacts(), ALL) == [0.0, 0.0, 0.0]


def test_a_numbered_line_the_model_cited_scores() -> None:
    text = profile("    41\tfirst = 1\n    42\tsecond = 2")
    assert line_scores(text, LineFacts(cited=frozenset({42})), ALL) == [0.0, 1.0]


def test_error_and_traceback_lines_score() -> None:
    text = profile('ok\nTraceback (most recent call last):\n  File "a.py", line 3\nValueError: bad')
    assert line_scores(text, LineFacts(), ALL) == [0.0, 1.0, 1.0, 1.0]


def test_echoed_lines_score() -> None:
    text = profile("a\nb\nc")
    assert line_scores(text, LineFacts(echoed=frozenset({2})), ALL) == [0.0, 0.0, 1.0]


def test_relevance_is_scaled_to_the_most_relevant_line() -> None:
    text = profile("a\nb\nc")
    assert line_scores(text, LineFacts(relevance={0: 4.0, 2: 2.0}), ALL) == [1.0, 0.0, 0.5]


def test_a_kept_line_brings_its_method_and_class_headers() -> None:
    lines = ["import os", "class Cart:", "    x = 1", "    def total(self):", "        y = 2"]
    lines += ["        return sum_of(self.items)"]
    headers = enclosing_headers(lines)
    assert headers == (None, None, 1, 1, 3, 3)
    scores = [0.0] * 5 + [1.0]
    assert excerpt_lines(headers, scores, [1.0] * 6, budget=10.0, context=0) == (1, 3, 5)
    assert excerpt_lines(headers, scores, [1.0] * 6, budget=2.0, context=0) == ()


def test_headers_are_found_through_a_numbered_listing() -> None:
    lines = ["    10\tclass Cart:", "    11\t    def total(self):", "    12\t        return 1"]
    assert enclosing_headers(lines) == (None, 0, 1)


def test_a_header_closes_when_a_line_returns_to_its_indentation() -> None:
    lines = ["def first():", "    a = 1", "b = 2", "    c = 3"]
    assert enclosing_headers(lines) == (None, 0, None, None)


# ---- the signals, in a plan -----------------------------------------------------

NAMED = "    rate = lookup_rate(order.customer, order.region)"
QUOTED = "    total = compute_total(items, discount=0.25)"


def test_an_output_keeps_the_line_naming_what_the_model_acts_on() -> None:
    chunks = session(
        "THOUGHT: check lookup_rate\n```bash\ncat pricing.py\n```", listing(60, {30: NAMED})
    )
    assert NAMED in kept_lines(excerpt_of(chunks, line_identifier=1.0))
    assert NAMED not in kept_lines(excerpt_of(chunks))


def test_an_output_keeps_the_line_the_model_quoted() -> None:
    chunks = session(f"THOUGHT: this line is wrong:\n{QUOTED}", listing(60, {30: QUOTED}))
    assert QUOTED in kept_lines(excerpt_of(chunks, line_echoed=1.0))
    assert QUOTED not in kept_lines(excerpt_of(chunks))


def test_an_output_keeps_its_error_lines() -> None:
    error = "ZeroDivisionError: division by zero in the rate table"
    chunks = session("THOUGHT: run the tests", listing(60, {30: error}))
    assert error in kept_lines(excerpt_of(chunks, line_error=1.0))
    assert error not in kept_lines(excerpt_of(chunks))


def test_an_output_keeps_the_numbered_line_the_model_cited() -> None:
    output = listing(60, {40: "    rate = 0"}, numbered=True)
    chunks = session("THOUGHT: the rate is reset\n```bash\nsed -n '41,41p' pricing.py\n```", output)
    cited = f"{41:6d}\t    rate = 0"
    assert cited in kept_lines(excerpt_of(chunks, line_cited=1.0))
    assert cited not in kept_lines(excerpt_of(chunks))


def test_an_output_keeps_the_line_holding_a_rare_query_term() -> None:
    line = "    frobnicate_all = widgets  # frobnication happens here"
    chunks = session("THOUGHT: look", listing(60, {30: line}))
    assert line in kept_lines(excerpt_of(chunks, "frobnication", line_relevance=1.0))
    assert line not in kept_lines(excerpt_of(chunks, "frobnication"))


def test_the_excerpt_names_its_stash_and_the_lines_it_dropped_and_restores_whole() -> None:
    output = listing(60, {30: QUOTED})
    engine = Engine(Config(data_dir=":memory:"), Tuning(line_excerpts=True))
    engine.append("", S, session(f"THOUGHT: this line is wrong:\n{QUOTED}", output))
    plan = engine.optimize("", S, options(engine.stats("", S).tokens // 3, "pricing"))
    decision = next(d for d in plan.decisions if d.chunk_id == "out")
    assert decision.action == Action.TRIM
    text = decision.replacement_text
    assert decision.stash_id in kept_lines(text)[0]
    assert "[... lines 1-29 dropped ...]" in kept_lines(text)
    assert "[... lines 33-60 dropped ...]" in kept_lines(text)
    engine.restore("", S, ["out"], budget=None, force=False)
    assert engine.chunks("", S, ["out"])[0].text == output
    engine.close()


def test_hybrid_removes_an_output_the_model_never_quoted_before_one_it_quoted() -> None:
    quoted_output = f"{QUOTED}\n    count = len(items)"  # two lines: too short to excerpt
    other_output = (
        "    rows = fetch_rows(pricing_table)  # pricing\n    size = len(rows)"  # the query
    )
    chunks = [
        chunk("task", "please repair the pricing module", turn=0, task_id="t"),  # a root
        chunk("o1", quoted_output, kind=ChunkKind.TOOL_RESULT, turn=1),
        chunk("m1", f"THOUGHT: this line is wrong:\n{QUOTED}", role=Role.MODEL, turn=2),
        chunk("o2", other_output, kind=ChunkKind.TOOL_RESULT, turn=3),
        chunk("r1", filler(30, "r"), turn=4),
        chunk("r2", filler(30, "s"), role=Role.MODEL, turn=5),
    ]

    def removed(quoted_last: bool) -> set[str]:
        engine = Engine(Config(data_dir=":memory:"), Tuning(quoted_last=quoted_last))
        engine.append("", S, chunks)
        target = engine.stats("", S).tokens - 1
        plan = engine.optimize("", S, options(target, "pricing", roots=Roots("t", recent_turns=2)))
        engine.close()
        return {d.chunk_id for d in plan.decisions if d.action != Action.KEEP}

    assert removed(quoted_last=True) == {"o2"}  # one token over: the first in order goes
    assert removed(quoted_last=False) == {"o1"}


WRONG = QUOTED.replace("compute_total", "lookup_rate")  # named and quoted: the best line
NAMED_LINES = {i: NAMED for i in range(5, 200, 8)}  # 25 lines naming what the model acts on


def tight_session(grouped: bool) -> list[Chunk]:
    """A 200-line output whose excerpt keeps 25 named lines and the one quoted;
    `grouped`: the call, the output and a second, masked, output move as one."""
    chunks = session(
        f"THOUGHT: check lookup_rate, this line is wrong:\n{WRONG}",
        listing(200, {**NAMED_LINES, 100: WRONG}),
    )
    if not grouped:
        return chunks
    log = "\n".join(f"step {i} done" for i in range(120))  # no signal: masked, no excerpt
    second = chunk("out2", log, kind=ChunkKind.TOOL_RESULT, turn=2, parent_id="m1")
    chunks = [*chunks[:3], second, *chunks[3:]]
    return [replace(c, group_id="g") if c.id in ("m1", "out", "out2") else c for c in chunks]


def tight_plan(chunks: list[Chunk], tight: float) -> dict[str, Decision]:
    engine = Engine(Config(data_dir=":memory:"), Tuning(line_tight_share=tight))
    engine.append("", S, chunks)
    plan = engine.optimize("", S, options(int(engine.stats("", S).tokens * 0.3), "pricing"))
    engine.close()
    return {d.chunk_id: d for d in plan.decisions}


def test_an_output_whose_excerpt_does_not_fit_keeps_its_best_lines_in_a_tighter_one() -> None:
    decision = tight_plan(tight_session(grouped=False), 0.1)["out"]
    assert decision.action == Action.TRIM and WRONG in kept_lines(decision.replacement_text)
    kept_named = kept_lines(decision.replacement_text).count(NAMED)
    assert kept_named < len(NAMED_LINES)  # only the best of the named lines
    assert tight_plan(tight_session(grouped=False), 0.0)["out"].action == Action.STASH  # one size


def test_a_group_tightens_its_output_and_keeps_its_other_members_shrunk() -> None:
    decisions = tight_plan(tight_session(grouped=True), 0.1)
    assert decisions["out"].action == Action.TRIM
    assert WRONG in kept_lines(decisions["out"].replacement_text)
    assert decisions["out2"].action == Action.MASK  # it has no tighter size
