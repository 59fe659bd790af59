"""A session's last plan is kept as the process closes (engine/kept_plans.py),
so a restart answers the same call on the unchanged session with it, making
no plan: the plan read back must be the one the first process made and the one
a fresh engine makes; any other call, any change, and a kept plan that is
stale, damaged, cut, foreign, of another engine or of another type, is
planned again, as before."""

from __future__ import annotations

import marshal
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.engine.collector import Collector
from ctxopt.engine.kept_plans import plain_plan, plan_of
from ctxopt.model import ChunkUpdate, OptimizeOptions, Plan, Role
from ctxopt.planner.knobs import Tuning
from ctxopt.scoring.lineblob import remembered
from ctxopt.store import DB_FILE, Store
from ctxopt.text import indexblob
from ctxopt.text.bm25 import BM25Index
from ctxopt.text.sealed import seal
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import chunk, options
from tests.stored import as_of_version
from tests.test_line_blobs import S, forget_made_facts, output, session_chunks


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The session ids of the plans made (not read back) from now on."""
    seen: list[str] = []
    plan = Collector._plan

    def spied(self: Collector, session: object, opts: OptimizeOptions) -> Plan:
        seen.append(getattr(session, "id", ""))
        return plan(self, session, opts)  # type: ignore[arg-type]

    monkeypatch.setattr(Collector, "_plan", spied)
    return seen


def call(query: str = "pricing tax", *, lean: bool = True) -> OptimizeOptions:
    """A dry run to 40% of the test session (~2,300 tokens)."""
    return options(900, query, dry_run=True, lean=lean)


def same(plan: Plan) -> Plan:
    return replace(plan, server_ms=0.0)


def open_engine(data_dir: Path, tuning: Tuning | None = None) -> Engine:
    return Engine(Config(data_dir=str(data_dir)), tuning)


def built(data_dir: Path, opts: OptimizeOptions, sessions: tuple[str, ...] = (S,)) -> Plan:
    """Sessions appended and planned with `opts`, then closed cleanly; the last one's plan."""
    forget_made_facts()
    engine = open_engine(data_dir)
    for session_id in sessions:
        engine.append("", session_id, session_chunks(session_id))
        plan = engine.optimize("", session_id, opts)
    engine.close()
    return same(plan)


def planned_again(data_dir: Path, opts: OptimizeOptions, made: list[str]) -> None:
    """A restart plans `opts` again (`made`: the spy's list), as with no kept plan."""
    made.clear()
    again = planned(data_dir, opts)
    assert made == [S]
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        conn.execute("DELETE FROM kept_plans")
    assert again == planned(data_dir, opts)


def planned(data_dir: Path, opts: OptimizeOptions, tuning: Tuning | None = None) -> Plan:
    """A restart's first plan of `opts`."""
    forget_made_facts()
    engine = open_engine(data_dir, tuning)
    try:
        return same(engine.optimize("", S, opts))
    finally:
        engine.close()


def fresh(opts: OptimizeOptions) -> Plan:
    """The same session's plan in a fresh engine that never stored it."""
    forget_made_facts()
    engine = Engine(Config(data_dir=":memory:"))
    try:
        engine.append("", S, session_chunks(S))
        return same(engine.optimize("", S, opts))
    finally:
        engine.close()


def kept_blob(data_dir: Path, session_id: str = S) -> bytes | None:
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        row = conn.execute(
            "SELECT blob FROM kept_plans WHERE session_id = ?", (session_id,)
        ).fetchone()
    return None if row is None else bytes(row[0])


def set_kept(data_dir: Path, blob: object) -> None:
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        conn.execute("UPDATE kept_plans SET blob = ? WHERE session_id = ?", (blob, S))


@pytest.mark.parametrize("lean", [True, False])
def test_a_restart_answers_the_last_call_with_the_kept_plan(
    tmp_path: Path, made: list[str], lean: bool
) -> None:
    opts = call(lean=lean)
    first = built(tmp_path, opts)
    assert kept_blob(tmp_path) is not None
    made.clear()
    assert planned(tmp_path, opts) == first == fresh(opts)
    assert made == [S]  # only the fresh engine planned
    assert planned(tmp_path, opts) == first  # and again: it is still kept


def test_an_unchanged_plan_is_not_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built(tmp_path, call())
    writes: list[str] = []
    keep = Store.keep_plan

    def spied(self: Store, session_id: str, blob: bytes | None) -> None:
        writes.append(session_id)
        keep(self, session_id, blob)

    monkeypatch.setattr(Store, "keep_plan", spied)
    planned(tmp_path, call())
    assert writes == []
    planned(tmp_path, call("total_price ValueError"))  # another call: its plan is kept
    assert writes == [S]


def test_another_call_is_planned_and_then_kept(tmp_path: Path, made: list[str]) -> None:
    built(tmp_path, call())
    other = call("total_price ValueError")
    made.clear()
    assert planned(tmp_path, other) == fresh(other)
    assert made == [S, S]
    made.clear()
    assert planned(tmp_path, other) == fresh(other)
    assert made == [S]  # the restart's came from the one kept at the last close


def test_a_session_changed_after_the_restart_is_planned_again(
    tmp_path: Path, made: list[str]
) -> None:
    opts = call()
    built(tmp_path, opts)
    engine = open_engine(tmp_path)
    try:
        engine.update("", S, [ChunkUpdate("o3", pinned=True)])
        made.clear()
        engine.optimize("", S, opts)
        assert made == [S]
    finally:
        engine.close()


def test_a_change_without_a_clean_close_is_not_trusted(tmp_path: Path, made: list[str]) -> None:
    opts = call()
    built(tmp_path, opts)
    crashed = open_engine(tmp_path)
    crashed.update("", S, [ChunkUpdate("o3", pinned=True)])
    crashed.store.close()  # no `close`: the kept plan is of the rows before the pin
    planned_again(tmp_path, opts, made)


def test_a_text_changed_alone_is_not_trusted(tmp_path: Path, made: list[str]) -> None:
    """Every other column as it was (a write from outside the engine): the
    texts' digest tells."""
    opts = call()
    built(tmp_path, opts)
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        conn.execute("UPDATE chunks SET text = replace(text, 'ValueError', 'KeyError__')")
    planned_again(tmp_path, opts, made)


def test_an_applied_plan_is_not_kept(tmp_path: Path, made: list[str]) -> None:
    """A plan that changed the session was made from the state before it."""
    opts = call()
    built(tmp_path, opts)
    engine = open_engine(tmp_path)
    engine.optimize("", S, replace(opts, dry_run=False))
    before = kept_blob(tmp_path)
    engine.close()
    assert kept_blob(tmp_path) == before  # the dry run's, of rows that are gone
    made.clear()
    planned(tmp_path, opts)
    assert made == [S]


@pytest.mark.parametrize("gone", ["removed", "changed"])
def test_a_book_with_marks_a_restart_would_not_make_keeps_no_plan(
    tmp_path: Path, made: list[str], gone: str
) -> None:
    """The model quoted an output's line, then its chunk went (or its text
    changed): the live book still marks the output quoted, a restart's does not."""
    opts = call()
    quote = chunk("q", output(3).splitlines()[-1], role=Role.MODEL, turn=9)
    engine = open_engine(tmp_path)
    engine.append("", S, [*session_chunks(S), quote])
    engine.optimize("", S, opts)
    if gone == "removed":
        engine.remove("", S, ["q"], stash_originals=False)
    else:
        engine.append("", S, [replace(quote, text="THOUGHT: the tax is fine")])
    engine.optimize("", S, opts)
    engine.close()
    planned_again(tmp_path, opts, made)


def _flipped(blob: bytes) -> bytes:
    return blob[:40] + bytes([blob[40] ^ 1]) + blob[41:]


@pytest.mark.parametrize(
    "damage",
    [_flipped, lambda b: b[:-1], lambda b: b[: len(b) // 2], lambda b: b.hex()],
    ids=["changed_byte", "last_byte_cut", "half_cut", "text_column"],
)
def test_a_damaged_kept_plan_is_planned_again(
    tmp_path: Path, made: list[str], damage: object
) -> None:
    opts = call()
    first = built(tmp_path, opts)
    blob = kept_blob(tmp_path)
    assert blob is not None
    set_kept(tmp_path, damage(blob))  # type: ignore[operator]
    made.clear()
    assert planned(tmp_path, opts) == first
    assert made == [S]


def test_another_sessions_kept_plan_is_not_trusted(tmp_path: Path, made: list[str]) -> None:
    opts = call()
    others = built(tmp_path, opts, sessions=(S, "other"))
    set_kept(tmp_path, kept_blob(tmp_path, "other"))
    made.clear()
    assert planned(tmp_path, opts) == fresh(opts) != others
    assert made == [S, S]


def test_another_engines_kept_plan_is_not_trusted(tmp_path: Path, made: list[str]) -> None:
    opts = call()
    built(tmp_path, opts)
    made.clear()
    planned(tmp_path, opts, Tuning(feedback_docs=Tuning().feedback_docs + 1))
    assert made == [S]


def test_a_v8_store_opens_plans_the_same_and_keeps_one(tmp_path: Path, made: list[str]) -> None:
    opts = call()
    first = built(tmp_path, opts)
    as_of_version(tmp_path / DB_FILE, 8)
    made.clear()
    assert planned(tmp_path, opts) == first
    assert made == [S] and kept_blob(tmp_path) is not None
    made.clear()
    assert planned(tmp_path, opts) == first
    assert made == []


def test_a_deleted_session_keeps_no_plan(tmp_path: Path) -> None:
    built(tmp_path, call())
    engine = open_engine(tmp_path)
    engine.delete_session("", S, purge_stash=True)
    engine.close()
    assert kept_blob(tmp_path) is None


_TEXT = st.text(max_size=12)
_FLOAT = st.floats(allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            _TEXT,
            st.sampled_from([2, 3, 4, 5]),
            st.integers(0, 10**6),
            _FLOAT,
            st.lists(_TEXT, max_size=3),
            st.tuples(*[_FLOAT] * 5, st.booleans(), st.booleans(), _FLOAT),
        ),
        max_size=8,
    ),
    lean=st.booleans(),
    repairs=st.lists(st.tuples(_TEXT, _TEXT, _TEXT), max_size=3),
    outcome=st.sampled_from(["idle", "landed", "over_target"]),
)
def test_the_plan_codec_round_trips(
    rows: list[tuple[str, int, int, float, list[str], tuple[object, ...]]],
    lean: bool,
    repairs: list[tuple[str, str, str]],
    outcome: str,
) -> None:
    plain = (
        [r[0] for r in rows],
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
        [r[2] // 2 for r in rows],
        [r[3] for r in rows],
        None if lean else [r[5] for r in rows],
        [tuple(r[4]) for r in rows],
        ["".join(r[4]) for r in rows],
        [r[0][:3] for r in rows],
        7,
        5,
        6,
        outcome,
        repairs,
        "why",
        2,
    )
    plan = plan_of(marshal.loads(marshal.dumps(plain)))
    assert plain_plan(plan) == plain
    assert plan_of(plain_plan(plan)) == plan


@pytest.fixture
def read_whole(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many kept indexes were decoded from now on."""
    seen: list[int] = []
    read = indexblob.index_of

    def spied(state: object) -> BM25Index:
        seen.append(1)
        return read(state)

    monkeypatch.setattr(indexblob, "index_of", spied)
    return seen


def test_the_call_the_kept_plan_answers_reads_no_index_nor_facts(
    tmp_path: Path, made: list[str], read_whole: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = call()
    first = built(tmp_path, opts)
    writes: list[str] = []
    monkeypatch.setattr(Store, "keep_session", lambda _, session_id, *__: writes.append(session_id))
    forget_made_facts()
    made.clear()
    engine = open_engine(tmp_path)
    try:
        assert same(engine.optimize("", S, opts)) == first
        session = engine.sessions.get("", S)
        assert not session.settled and read_whole == [] and made == []
        assert remembered(session.entries["o3"].chunk.text).profile is None  # not told yet
        other = call("total_price ValueError")
        got = same(engine.optimize("", S, other))  # reads them now
        assert session.settled and read_whole == [1] and made == [S]
        assert remembered(session.entries["o3"].chunk.text).profile is not None
    finally:
        engine.close()
    assert writes == []  # read as kept: not written again
    assert got == fresh(other)


def test_a_kept_index_that_does_not_hold_together_is_made_from_the_texts(
    tmp_path: Path, made: list[str]
) -> None:
    """Its envelope holds (format, analyzer, chunks, checksum), its state does not."""
    opts, other = call(), call("total_price ValueError")
    built(tmp_path, opts)
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        blob = conn.execute("SELECT index_blob FROM kept_sessions").fetchone()[0]
        forged = seal(blob[: indexblob._HEAD.size] + marshal.dumps(("not", "a", "state")))
        conn.execute("UPDATE kept_sessions SET index_blob = ?", (forged,))
    forget_made_facts()
    engine = open_engine(tmp_path)
    try:
        engine.optimize("", S, opts)
        got = same(engine.optimize("", S, other))
    finally:
        engine.close()
    assert got == fresh(other)


@pytest.mark.parametrize("answered", [False, True], ids=["planned", "answered"])
def test_a_change_reads_what_the_restart_kept_first(tmp_path: Path, answered: bool) -> None:
    """The store's line facts of a text that goes are forgotten as usual
    (`_forget_kept_facts`), whether the first call read them back or not."""
    opts = call()
    built(tmp_path, opts)
    forget_made_facts()
    engine = open_engine(tmp_path)
    try:
        engine.optimize("", S, opts if answered else call("total_price ValueError"))
        session = engine.sessions.get("", S)
        slot = session.slot_by_id["o3"]

        def held() -> int:
            kept = engine.sessions._kept.get(session)
            return 0 if kept is None else kept.held(slot)

        assert held() != 0 or answered
        engine.remove("", S, ["o3"], stash_originals=False)
        assert held() == 0
    finally:
        engine.close()


_STEP = st.tuples(
    st.sampled_from(["quote", "remove", "change", "pin", "commit", "plan"]), st.integers(1, 8)
)


def went_through(data_dir: Path, steps: list[tuple[str, int]], opts: OptimizeOptions) -> None:
    """The test session through `steps` (`_STEP`: model chunks quoting an
    output's line, removed or changed; pins; applied plans), planned with
    `opts` after each, as an agent's loop does, then closed cleanly."""
    forget_made_facts()
    engine = open_engine(data_dir)
    engine.append("", S, session_chunks(S))
    quotes: list[str] = []
    live = engine.sessions.get("", S).entries
    for step, n in steps:
        if step == "quote":
            quotes.append(f"q{len(quotes)}")
            line = output(n).splitlines()[n]
            engine.append("", S, [chunk(quotes[-1], line, role=Role.MODEL, turn=9 + len(quotes))])
        elif step in ("remove", "change") and quotes and quotes[-1] in live:
            if step == "remove":
                engine.remove("", S, [quotes[-1]], stash_originals=False)
            else:
                engine.append("", S, [chunk(quotes[-1], f"THOUGHT {n}", role=Role.MODEL, turn=9)])
        elif step == "pin" and f"o{n}" in live:
            engine.update("", S, [ChunkUpdate(f"o{n}", pinned=True)])
        elif step == "commit":
            engine.optimize("", S, replace(opts, dry_run=False))
        engine.optimize("", S, opts)
    engine.optimize("", S, opts)
    engine.close()


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(_STEP, max_size=5), query=st.sampled_from(["pricing tax", "total_price", ""]))
def test_a_restart_plans_as_the_rows_alone_say(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]], query: str
) -> None:
    """Whatever the session went through (model chunks quoting an output's
    line, removed or changed; pins; applied plans; a plan after each), the restart's first plan
    of the last call is the one a restart from the rows alone makes."""
    data_dir = tmp_path_factory.mktemp("kept")
    opts = call(query)
    went_through(data_dir, steps, opts)
    restarted = planned(data_dir, opts)
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        conn.execute("DELETE FROM kept_plans")
        conn.execute("DELETE FROM kept_sessions")
    assert restarted == planned(data_dir, opts)
