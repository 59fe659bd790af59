"""The output sizes a session's last plan left (planner/kept_sizes.py) are kept
with that plan at a clean close, so a restart's first plan of another call (a
plan after an append, another query) remakes only the outputs a warm engine's
plan would: its plan must be the warm engine's and the one made with no kept
sizes; sizes that are not what a close wrote, or of an older format, are
remade, with the same plan."""

from __future__ import annotations

import marshal
import shutil
import sqlite3
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine, kept_plans
from ctxopt.model import Chunk, ChunkKind, OptimizeOptions, Plan, Role
from ctxopt.planner import kept_sizes as kept_sizes_module
from ctxopt.planner import line_levels, values
from ctxopt.planner.kept_sizes import kept_sizes, restore_sizes
from ctxopt.planner.line_levels import last_sizes
from ctxopt.store import DB_FILE
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.line_book import LineBook
from ctxopt.text.sealed import opened, seal
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import chunk
from tests.test_kept_plans import (
    _STEP,
    built,
    call,
    kept_blob,
    open_engine,
    same,
    set_kept,
    went_through,
)
from tests.test_line_blobs import S, forget_made_facts, output, session_chunks

NEW_QUERY = "Cart3 rate_3"


def more_chunks(n: int) -> list[object]:
    """An agent's next step: a model chunk citing an output's lines, and an output."""
    return [
        chunk(
            f"m{n}",
            f"THOUGHT: sed -n '{3 * 40},{3 * 40 + 5}p' app/pricing_3.py; fix total_price",
            role=Role.MODEL,
            turn=n,
        ),
        chunk(f"o{n}", output(n), role=Role.TOOL, kind=ChunkKind.TOOL_RESULT, turn=n),
    ]


def step(engine: Engine, kind: str) -> Plan:
    """The call after the first plan: a 2-chunk append then the plan, or another query."""
    if kind == "append":
        engine.append("", S, more_chunks(9))  # type: ignore[arg-type]
        return same(engine.optimize("", S, call()))
    return same(engine.optimize("", S, call(NEW_QUERY)))


@pytest.fixture
def remade(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The slots whose sizes were made (not remembered) from now on."""
    return slots_of(monkeypatch, line_levels, "levels_of")


def slots_of(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """The slots `module.name(session, book, slot, ...)` is called for from now on."""
    seen: list[int] = []
    made = getattr(module, name)

    def spied(session: object, book: object, slot: int, *args: object) -> object:
        seen.append(slot)
        return made(session, book, slot, *args)

    monkeypatch.setattr(module, name, spied)
    return seen


def warm(kind: str, spied: list[int]) -> tuple[Plan, list[int]]:
    """A never-restarted engine's plan of the step after the first plan, and
    the slots a spy's list (`remade`, `excerpted`) saw in that step."""
    forget_made_facts()
    engine = Engine(Config(data_dir=":memory:"))
    try:
        engine.append("", S, session_chunks(S))
        engine.optimize("", S, call())
        spied.clear()
        return step(engine, kind), sorted(spied)
    finally:
        engine.close()


def restarted(data_dir: Path, kind: str, remade: list[int]) -> tuple[Plan, list[int]]:
    """A restart's plan of the step, and the slots it remade."""
    forget_made_facts()
    engine = open_engine(data_dir)
    try:
        remade.clear()
        return step(engine, kind), sorted(remade)
    finally:
        engine.close()


def without_sizes(data_dir: Path) -> None:
    """The kept plan as it is, with no sizes beside it."""
    blob = kept_blob(data_dir)
    body = opened(blob, head_size=kept_plans._HEAD.size)
    assert body is not None
    plan, sizes = marshal.loads(body[kept_plans._HEAD.size :])
    assert sizes is not None
    set_kept(data_dir, seal(body[: kept_plans._HEAD.size] + marshal.dumps((plan, None))))


@pytest.mark.parametrize("kind", ["append", "query"])
def test_a_restart_remakes_the_sizes_a_warm_engine_remakes(
    tmp_path: Path, remade: list[int], kind: str
) -> None:
    built(tmp_path, call())
    plan, slots = restarted(tmp_path, kind, remade)
    warm_plan, warm_slots = warm(kind, remade)
    assert plan == warm_plan
    assert slots == warm_slots
    built(tmp_path / "bare", call())
    without_sizes(tmp_path / "bare")
    bare_plan, bare_slots = restarted(tmp_path / "bare", kind, remade)
    assert bare_plan == plan
    assert len(slots) < len(bare_slots)  # every output, without the kept sizes


def test_the_kept_sizes_are_the_closing_engines(tmp_path: Path) -> None:
    forget_made_facts()
    engine = open_engine(tmp_path)
    engine.append("", S, session_chunks(S))
    engine.optimize("", S, call())
    closing = last_sizes(engine.registry.get(S).lines)  # type: ignore[union-attr]
    assert closing is not None
    engine.close()
    again = open_engine(tmp_path)
    try:
        session = again.sessions.get("", S)
        session.settle()  # what a change or another plan does first
        read = last_sizes(session.lines)
        assert read is not None
        assert read.by_slot == closing.by_slot
        assert (read.sizes.first, read.sizes.tight) == (closing.sizes.first, closing.sizes.tight)
        assert read.sizes.tight_kept == closing.sizes.tight_kept
        assert read.knobs[:5] == closing.knobs[:5]
        assert (read.facts, closing.facts) != (None, None)
        for name in ("query_weights", "identifiers", "cited", "term_holders", "query_names"):
            assert getattr(read.facts, name) == getattr(closing.facts, name)
        n = session.n_slots
        assert (read.tokens[:n] == closing.tokens[:n]).all()
        assert (read.stash[:n] == closing.stash[:n]).all()
    finally:
        again.close()


def _slot_text(texts: dict[int, str]) -> Callable[[int], str]:
    return texts.__getitem__


@settings(max_examples=30, deadline=None)
@given(
    picks=st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=8, unique=True),
    changed=st.sets(st.integers(min_value=1, max_value=8)),
)
def test_only_the_sizes_of_a_text_still_at_its_slot_are_kept(
    picks: list[int], changed: set[int]
) -> None:
    """By hypothesis: sizes round-trip through `marshal`, each output's only
    while the text at its slot is still the one they were made of."""
    forget_made_facts()
    engine = Engine(Config(data_dir=":memory:"))
    try:
        engine.append("", S, session_chunks(S))
        engine.optimize("", S, call())
        session = engine.registry.get(S)
        assert session is not None
        memo = last_sizes(session.lines)
        assert memo is not None
        texts = {slot: was.text for slot, was in memo.by_slot.items()}
        outputs = sorted(texts)
        picked = {outputs[(i - 1) % len(outputs)] for i in picks}
        gone = {outputs[(i - 1) % len(outputs)] for i in changed}
        now = {s: t + "\n(again)" if s in gone else t for s, t in texts.items() if s in picked}
        plain = kept_sizes(session.lines, now.get)
        assert plain is not None
        book = LineBook()
        restore_sizes(
            book,
            marshal.loads(marshal.dumps(plain)),
            _slot_text(now),
            session.n_slots,
            session.analyzer,
            engine.collector.noted.count,
        )
        read = last_sizes(book)
        assert read is not None
        assert read.by_slot.keys() == picked - gone
        for slot, was in read.by_slot.items():
            assert was == memo.by_slot[slot]
            assert was.text is now[slot]  # bound to the text loaded there
        assert read.knobs == memo.knobs
    finally:
        engine.close()


@pytest.fixture
def damaged_sizes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Sizes that are not what `kept_sizes` makes (its outputs cut short)."""
    kinds: list[str] = []
    made = kept_sizes_module.kept_sizes

    def cut(book: LineBook, text_at: Callable[[int], str | None]) -> object:
        plain = made(book, text_at)
        assert plain is not None
        if kinds[0] == "arity":
            return (*plain[:3], tuple(o[:-1] for o in plain[3]))
        if kinds[0] == "slot":
            return (*plain[:3], tuple((10_000, *o[1:]) for o in plain[3]))
        return (*plain[:3], ("not an output",))

    monkeypatch.setattr(kept_plans, "kept_sizes", cut)
    yield kinds


@pytest.mark.parametrize("damage", ["arity", "slot", "type"])
def test_sizes_that_are_not_a_closes_are_remade(
    tmp_path: Path, remade: list[int], damaged_sizes: list[str], damage: str
) -> None:
    damaged_sizes.append(damage)
    built(tmp_path, call())
    plan, slots = restarted(tmp_path, "append", remade)
    warm_plan, warm_slots = warm("append", remade)
    assert plan == warm_plan
    assert len(slots) > len(warm_slots)  # remade, every one


def test_an_older_format_kept_plan_is_planned_again(tmp_path: Path, remade: list[int]) -> None:
    """A format-1 blob (the plan alone, no sizes) is not read: the restart plans
    the last call again, as a fresh engine does."""
    opts: OptimizeOptions = call()
    first = built(tmp_path, opts)
    blob = kept_blob(tmp_path)
    body = opened(blob, head_size=kept_plans._HEAD.size)
    assert body is not None
    plan, _ = marshal.loads(body[kept_plans._HEAD.size :])
    head = bytearray(body[: kept_plans._HEAD.size])
    struct.pack_into("<B", head, 2, 1)  # the format byte, after the magic
    set_kept(tmp_path, seal(bytes(head) + plan))
    forget_made_facts()
    engine = open_engine(tmp_path)
    try:
        remade.clear()
        assert same(engine.optimize("", S, opts)) == first
        assert remade  # planned, not read back
    finally:
        engine.close()


@pytest.fixture
def fills(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many slots each first fill of a line book read, from now on."""
    seen: list[int] = []
    fill = LineBook._fill

    def spied(self: LineBook, live: dict[int, Chunk]) -> None:
        seen.append(len(live))
        fill(self, live)

    monkeypatch.setattr(LineBook, "_fill", spied)
    return seen


def answers(engine: Engine) -> tuple[object, ...]:
    """The session's line book's answers for every slot, and a fresh book's of
    the same chunks."""
    session = engine.sessions.get("", S)
    book = session.line_book()
    fresh = LineBook()
    fresh.sync(session.index.version, session.entries.values())

    def of(b: LineBook) -> tuple[object, ...]:
        slots = sorted(b.text)
        return (
            slots,
            b.quoted,
            [b.anchors(s) for s in slots],
            [b.quoted_lines(s) for s in slots],
            [b.repeated_share(s) for s in slots],
        )

    return of(book), of(fresh)


@pytest.fixture
def excerpted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The slots whose anchored excerpt a plan made (not the book's), from now on."""
    return slots_of(monkeypatch, values, "_anchored_excerpt")


@pytest.mark.parametrize("kind", ["append", "query"])
def test_a_restart_holds_the_kept_book(
    tmp_path: Path, fills: list[int], remade: list[int], excerpted: list[int], kind: str
) -> None:
    """The restart's other call fills no line book and makes the anchored
    excerpts a warm engine makes; the book it holds answers as a fresh one of
    the same chunks does, and the plan is the warm engine's."""
    built(tmp_path, call())
    forget_made_facts()
    engine = open_engine(tmp_path)
    try:
        fills.clear()
        excerpted.clear()
        plan = step(engine, kind)
        assert fills == []
        made = sorted(excerpted)
        kept, fresh = answers(engine)
        assert kept == fresh
    finally:
        engine.close()
    assert warm(kind, excerpted) == (plan, made)


def test_a_kept_book_not_of_the_texts_loaded_is_filled_again(
    tmp_path: Path, fills: list[int], remade: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = LineBook.state

    def short(self: LineBook) -> tuple[object, ...]:
        made = state(self)
        return (made[0][:-1], *made[1:])  # a slot fewer than the session holds

    monkeypatch.setattr(LineBook, "state", short)
    built(tmp_path, call())
    forget_made_facts()
    engine = open_engine(tmp_path)
    try:
        fills.clear()
        plan = step(engine, "append")
        assert fills == [len(session_chunks(S)) + 2]  # the plan's first sync
    finally:
        engine.close()
    assert plan == warm("append", remade)[0]


@settings(max_examples=20, deadline=None)
@given(
    steps=st.lists(_STEP, max_size=5),
    query=st.sampled_from(["pricing tax", "total_price", ""]),
    kind=st.sampled_from(["append", "query"]),
)
def test_a_restarts_other_call_plans_as_without_the_kept_book_and_sizes(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]], query: str, kind: str
) -> None:
    """Whatever the session went through (model chunks quoting an output's
    line, removed or changed; pins; applied plans; a plan after each), a
    restart's other first call plans as one without the kept book and sizes,
    and its book answers as a fresh one."""
    data_dir = tmp_path_factory.mktemp("kept")
    opts = call(query)
    went_through(data_dir, steps, opts)
    bare = tmp_path_factory.mktemp("bare")
    shutil.copytree(data_dir, bare, dirs_exist_ok=True)
    with sqlite3.connect(bare / DB_FILE) as conn:
        conn.execute("DELETE FROM kept_plans")

    def other(at: Path) -> tuple[Plan, tuple[object, ...]]:
        forget_made_facts()
        engine = open_engine(at)
        try:
            if kind == "append":
                engine.append("", S, more_chunks(30))  # type: ignore[arg-type]
                return same(engine.optimize("", S, opts)), answers(engine)
            return same(engine.optimize("", S, call(NEW_QUERY))), answers(engine)
        finally:
            engine.close()

    plan, (kept, fresh) = other(data_dir)
    assert kept == fresh
    assert plan == other(bare)[0]


def echoed_chunks() -> list[Chunk]:
    """The session with a user turn repeating lines of an output (its anchors:
    the latest chunk holding them), long enough for an anchored excerpt."""
    lines = output(3).splitlines()[2:12]
    echo = chunk("u3", "\n".join(["Look at these lines:", *lines]), role=Role.USER, turn=3)
    chunks = session_chunks(S)
    at = [c.id for c in chunks].index("o3") + 1
    return [*chunks[:at], echo, *chunks[at:]]


def test_a_restart_makes_the_anchored_excerpts_a_warm_engine_makes(
    tmp_path: Path, excerpted: list[int]
) -> None:
    plans: list[Plan] = []
    made: list[list[int]] = []
    for data_dir in (str(tmp_path), ":memory:"):
        forget_made_facts()
        engine = Engine(Config(data_dir=data_dir))
        if data_dir != ":memory:":
            engine.append("", S, echoed_chunks())
            engine.optimize("", S, call())
            engine.close()
            forget_made_facts()
            engine = open_engine(tmp_path)  # the restart
        else:
            engine.append("", S, echoed_chunks())
            engine.optimize("", S, call())  # the warm engine
        try:
            excerpted.clear()
            plans.append(step(engine, "append"))
            made.append(sorted(excerpted))
        finally:
            engine.close()
    assert plans[0] == plans[1]
    assert made[0] == made[1]


def test_a_restart_searches_the_lines_a_warm_engine_searches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an append, an output holding two or more of the query's terms
    is searched for them only where a warm engine searches it: the kept
    sizes hold the lines each term was found on."""
    searched: list[int] = []  # how many terms each search looked for
    line_postings = Analyzer.line_postings

    def spied(self: Analyzer, text: str, terms: frozenset[str]) -> object:
        searched.append(len(terms))
        return line_postings(self, text, terms)

    monkeypatch.setattr(Analyzer, "line_postings", spied)
    opts = call(NEW_QUERY)  # two terms, on the same lines of one output
    plans, seen = [], []
    for data_dir in (tmp_path / "restart", None):
        forget_made_facts()
        engine = Engine(Config(data_dir=str(data_dir or ":memory:")))
        engine.append("", S, session_chunks(S))
        engine.optimize("", S, opts)
        if data_dir is not None:
            engine.close()
            forget_made_facts()
            engine = open_engine(data_dir)
        try:
            searched.clear()
            engine.append("", S, more_chunks(9))  # type: ignore[arg-type]
            plans.append(same(engine.optimize("", S, opts)))
            seen.append(sorted(searched))
        finally:
            engine.close()
    assert plans[0] == plans[1]
    assert seen[0] == seen[1]
