"""A session's BM25 index and its texts' line facts are kept whole as the
process closes, so a restart reads them back instead of decoding every text's
term and line blobs (text/indexblob.py, `LineBlobs.encode_kept`): the index
read must score as one rebuilt from the rows, the facts must be those made
from the texts, the plans those of a rebuild and of a fresh engine, and a kept
blob that is stale, damaged, cut, foreign or of another type is never trusted."""

from __future__ import annotations

import marshal
import sqlite3
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Role
from ctxopt.scoring.lineblob import (
    CITED,
    NAMES,
    PROFILE,
    LineBlobs,
    TextFacts,
    read_kept,
    remembered,
)
from ctxopt.session import Session
from ctxopt.session.columns import Entry
from ctxopt.store import DB_FILE, Store
from ctxopt.text.bm25 import BM25Index
from ctxopt.text.indexblob import IndexBlobs, chunks_digest, read_state
from ctxopt.text.termblob import TermBlobs
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import test_line_blobs as line_blobs
from tests.factory import chunk
from tests.stored import as_of_version
from tests.test_line_blobs import MEMOS, S, forget_made_facts, made, output, plans, session_chunks

QUERIES = ("pricing tax", "total_price ValueError rate_3", "cart base order line_7", "")


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    forget_made_facts()
    yield
    forget_made_facts()


@dataclass
class Decoded:
    """The texts whose term blobs (the index rebuilt) and line blobs (the facts
    read a text at a time) are decoded from now on."""

    terms: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def clear(self) -> None:
        self.terms.clear()
        self.lines.clear()


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> Decoded:
    seen = Decoded()
    terms, lines = TermBlobs.decode, LineBlobs.decode

    def spied_terms(self: TermBlobs, text: str, blob: bytes | None) -> object:
        seen.terms.append(text)
        return terms(self, text, blob)

    def spied_lines(self: LineBlobs, text: str, blob: bytes | None) -> object:
        seen.lines.append(text)
        return lines(self, text, blob)

    monkeypatch.setattr(TermBlobs, "decode", spied_terms)
    monkeypatch.setattr(LineBlobs, "decode", spied_lines)
    return seen


def changed(engine: Engine, tag: str) -> None:
    """Append a session, then change it: two outputs replaced by other texts and
    one more step (the index holds stale postings and a history)."""
    engine.append("", S, session_chunks(tag))
    engine.append(
        "",
        S,
        [
            chunk("o2", f"pytest output ({tag}): 3 passed, cart rounding fixed", role=Role.TOOL),
            chunk("o5", f"ls app ({tag}): pricing_5.py cart.py base.py", role=Role.TOOL),
            chunk("m9", f"THOUGHT ({tag}): the tax is rounded once now", role=Role.MODEL, turn=9),
        ],
    )


def kept(data_dir: Path, column: str = "index_blob") -> bytes | None:
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        sql = f"SELECT {column} FROM kept_sessions WHERE session_id = ?"
        row = conn.execute(sql, (S,)).fetchone()
    return None if row is None else bytes(row[0])


def set_kept(data_dir: Path, column: str, blob: object) -> None:
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        conn.execute(f"UPDATE kept_sessions SET {column} = ? WHERE session_id = ?", (blob, S))


def stored(data_dir: Path, tag: str) -> list[object]:
    """A changed session planned, then closed (kept whole); its plans."""
    return line_blobs.stored(data_dir, tag, changed)


def fresh(tag: str) -> list[object]:
    return line_blobs.fresh(tag, changed)


def scored(engine: Engine) -> tuple[list[object], list[int]]:
    """Every query's scores over the session's slots, and each vocabulary term's
    document frequency."""
    session = engine.sessions.get("", S)
    index, n = session.index, session.n_slots
    terms = [engine.analyzer.terms(q) for q in QUERIES]
    vocabulary = sorted(
        {t for e in session.entries.values() for t in engine.analyzer.terms(e.chunk.text)}
    )
    return [index.scores(t, n).tolist() for t in terms], [
        index.document_frequency(t) for t in vocabulary
    ]


def restarted(data_dir: Path) -> tuple[list[object], tuple[list[object], list[int]]]:
    """A restart's plans and its index's scores."""
    forget_made_facts()
    engine = Engine(Config(data_dir=str(data_dir)))
    try:
        return plans(engine), scored(engine)
    finally:
        engine.close()


def rebuilt(data_dir: Path) -> tuple[list[object], tuple[list[object], list[int]]]:
    """The same from the rows alone: no kept index."""
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        conn.execute("DELETE FROM kept_sessions")
    return restarted(data_dir)


def test_a_restart_reads_the_kept_session_and_plans_the_same(
    tmp_path: Path, decoded: Decoded, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = stored(tmp_path, "restart")
    writes: list[str] = []
    keep = Store.keep_session

    def spied(self: Store, session_id: str, index_blob: bytes, facts_blob: bytes) -> None:
        writes.append(session_id)
        keep(self, session_id, index_blob, facts_blob)

    monkeypatch.setattr(Store, "keep_session", spied)
    blobs = kept(tmp_path), kept(tmp_path, "facts_blob")
    assert None not in blobs
    forget_made_facts()
    decoded.clear()
    engine = Engine(Config(data_dir=str(tmp_path)))
    session = engine.sessions.get("", S)
    assert len(session.index)  # read on first use (engine/kept_plans.py)
    # no blob decoded a text at a time: the index and the facts were read whole
    assert decoded == Decoded()
    told = {e.chunk.id: remembered(e.chunk.text) for e in session.entries.values()}
    assert all(told[f"o{n}"].profile for n in (1, 3, 4, 6))  # the outputs a plan shrinks
    assert all(told[f"m{n}"].names is not None for n in range(1, 10))
    for chunk_id, facts in told.items():  # each as made from the text
        text = session.entries[chunk_id].chunk.text
        names, cited, profile = MEMOS
        assert facts.names is None or facts.names == names.make(text)
        assert facts.cited is None or facts.cited == cited.make(text)
        assert facts.profile is None or facts.profile == profile.make(text)
    after = plans(engine), scored(engine)
    engine.close()
    assert writes == []  # nothing changed since it was read: not written again
    assert (kept(tmp_path), kept(tmp_path, "facts_blob")) == blobs
    assert rebuilt(tmp_path) == after
    assert decoded.terms and decoded.lines  # the rebuild decoded them
    assert after[0] == before == fresh("restart")


def session_state(session: Session) -> list[object]:
    """What a plan reads of a session besides its index, as comparable data."""
    n = session.n_slots
    columns = [getattr(session.columns, name)[:n].tolist() for name in session.columns.NAMES]
    return [
        session.entries,
        session.slot_ids,
        session.slot_by_id,
        columns,
        session.hubs,
        session.out_edges,
        dict(session.in_edges),
        session.parent_of,
        session.tokens_total,
        session.revision,
        session.embedding_dim,
    ]


def test_a_session_read_whole_is_the_session_rebuilt_from_its_rows(tmp_path: Path) -> None:
    stored(tmp_path, "state")
    engine = Engine(Config(data_dir=str(tmp_path)))
    sessions = engine.sessions
    loaded = sessions.store.load_session(S)
    assert loaded is not None and loaded.index is not None
    whole = sessions._hydrate(loaded)
    forget_made_facts()
    rows = sessions._hydrate(replace(loaded, index=None, facts=None))
    engine.close()
    assert session_state(whole) == session_state(rows)
    assert repr(whole.index.state()[1:3]) != repr(rows.index.state()[1:3])  # its own history
    for query in QUERIES:
        terms = engine.analyzer.terms(query)
        assert np.array_equal(
            whole.index.scores(terms, whole.n_slots), rows.index.scores(terms, rows.n_slots)
        )


def test_a_change_after_the_restart_is_kept_at_the_next_close(
    tmp_path: Path, decoded: Decoded
) -> None:
    stored(tmp_path, "again")
    old = kept(tmp_path)
    engine = Engine(Config(data_dir=str(tmp_path)))
    engine.append("", S, [chunk("u9", "now also round the shipping rate", turn=9)])
    engine.close()
    new = kept(tmp_path)
    assert new is not None and new != old
    decoded.clear()
    after = restarted(tmp_path)
    assert decoded == Decoded()
    assert rebuilt(tmp_path) == after


def test_a_stale_kept_session_is_not_trusted(tmp_path: Path, decoded: Decoded) -> None:
    """A write after the session was kept and no close (a crash): the rows moved on."""
    stored(tmp_path, "stale")
    old = kept(tmp_path), kept(tmp_path, "facts_blob")
    engine = Engine(Config(data_dir=str(tmp_path)))
    engine.append("", S, [chunk("o3", "pytest output: 1 failed, shipping rate wrong")])
    engine.close()
    set_kept(tmp_path, "index_blob", old[0])
    set_kept(tmp_path, "facts_blob", old[1])
    decoded.clear()
    after = restarted(tmp_path)
    assert decoded.terms and decoded.lines  # both read from the rows
    assert rebuilt(tmp_path) == after


def foreign(column: str) -> tuple[bytes, bytes]:
    """Another session's kept blob of `column`, whole and sealed; and one of
    another analyzer (the index) or other line rules (the facts)."""
    engine = Engine(Config(data_dir=":memory:"))
    changed(engine, "another session")
    other = engine.sessions.get("", S)
    plans(engine)
    live = sorted(other.entries.values(), key=lambda e: e.slot)
    keys = chunks_digest([e.slot for e in live], [e.chunk.text for e in live])
    if column == "index_blob":
        blob = engine.sessions.index_blobs.encode(other.index, keys)
        ruled = IndexBlobs(b"\1" * 8).encode(other.index, keys)
    else:
        facts = [remembered(e.chunk.text) for e in live]
        blob = engine.sessions.line_blobs.encode_kept(facts, keys)
        other_rules = LineBlobs()
        other_rules._rules = b"\1" * 8
        ruled = other_rules.encode_kept(facts, keys)
    engine.close()
    return blob, ruled


@pytest.mark.parametrize("column", ["index_blob", "facts_blob"])
@pytest.mark.parametrize("damage", ["byte", "cut", "foreign", "rules", "type"])
def test_a_damaged_or_foreign_kept_blob_is_not_trusted(
    tmp_path: Path, decoded: Decoded, column: str, damage: str
) -> None:
    stored(tmp_path, f"damaged {damage}")
    blob = kept(tmp_path, column)
    assert blob is not None
    other, ruled = foreign(column)
    at = len(blob) // 2
    bad: object = {
        "byte": blob[:at] + bytes([blob[at] ^ 1]) + blob[at + 1 :],
        "cut": blob[:-9],
        "foreign": other,  # another session's
        "rules": ruled,
        "type": "x" * 200,  # a column of another type
    }[damage]
    set_kept(tmp_path, column, bad)
    decoded.clear()
    after = restarted(tmp_path)
    # that one read from the rows, the other one whole
    assert bool(decoded.terms) == (column == "index_blob")
    assert bool(decoded.lines) == (column == "facts_blob")
    assert rebuilt(tmp_path) == after


def test_a_store_from_before_the_table_opens_plans_the_same_and_keeps_the_index(
    tmp_path: Path,
) -> None:
    before = stored(tmp_path, "old")
    as_of_version(tmp_path / DB_FILE, 7)
    assert restarted(tmp_path)[0] == before
    assert kept(tmp_path) is not None  # the close kept it


def test_a_deleted_session_leaves_no_kept_index(tmp_path: Path) -> None:
    stored(tmp_path, "deleted")
    assert kept(tmp_path) is not None
    engine = Engine(Config(data_dir=str(tmp_path)))
    engine.delete_session("", S, purge_stash=True)
    engine.close()
    assert kept(tmp_path) is None


def test_a_kept_index_goes_only_into_an_empty_session_at_increasing_slots() -> None:
    session = Session(S, "", Engine(Config(data_dir=":memory:")).analyzer)
    entries = [Entry(chunk(f"c{i}"), slot, 1, 0, 0) for i, slot in enumerate((0, 3, 3))]
    with pytest.raises(ValueError, match="slots not increasing"):
        session.restore_kept(entries, BM25Index())
    session = Session(S, "", session.analyzer)
    twice = [Entry(chunk("c"), slot, 1, 0, 0) for slot in (0, 1)]
    with pytest.raises(ValueError, match="a chunk id twice"):
        session.restore_kept(twice, BM25Index())
    session = Session(S, "", session.analyzer)
    session.restore_kept(
        [Entry(chunk("a"), 2, 1, 0, 0), Entry(chunk("b"), 5, 1, 0, 0)], BM25Index()
    )
    assert session.slot_ids == ["", "", "a", "", "", "b"]
    with pytest.raises(ValueError, match="already holds"):
        session.restore_kept([], BM25Index())


DOCS = st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=6), min_size=1, max_size=12)
BLOBS = IndexBlobs(b"\0" * 8)
KEYS = b"k" * 8


def index_read(blob: bytes, chunks: bytes) -> BM25Index | None:
    """The index a kept blob gives back, as a restart reads it (None: not trusted)."""
    state = BLOBS.state(blob, chunks)
    return None if state is None else read_state(state)


def index_from(docs: list[list[str]], removed: list[int]) -> BM25Index:
    index = BM25Index()
    for slot, terms in enumerate(docs):
        index.set_doc(slot, terms)
    for slot in sorted(set(removed)):
        if slot < len(docs):
            index.remove_doc(slot)
    return index


@settings(max_examples=150, deadline=None)
@given(DOCS, st.lists(st.integers(0, 11), max_size=4))
def test_the_codec_gives_back_the_index_it_was_given(
    docs: list[list[str]], removed: list[int]
) -> None:
    index = index_from(docs, removed)
    back = index_read(BLOBS.encode(index, KEYS), KEYS)
    assert back is not None
    assert repr(back.state()) == repr(index.state())
    for query in (["a"], ["b", "c", "b"], list("abcdefgh")):
        assert np.array_equal(back.scores(query, 12), index.scores(query, 12))
    back.set_doc(20, ["a", "z"])  # and it goes on as the original would
    index.set_doc(20, ["a", "z"])
    assert repr(back.state()) == repr(index.state())
    assert index_read(BLOBS.encode(index, KEYS), b"j" * 8) is None  # other chunks


def test_postings_the_sizes_do_not_account_for_are_refused() -> None:
    """A kept index whose postings' sizes do not add up to its joined bytes
    (too many bytes, or too few) is not read: it was not a close's."""
    params, terms, sizes, joined, arrays, doc_terms, counters = index_from(
        [["a", "b"], ["a"]], []
    ).state()
    longer = array("Q", sizes)
    longer[-1] += 1  # the last term's postings run past the joined bytes
    for sized, postings, read in (
        (sizes, joined, True),
        (sizes, joined + bytes(8), False),
        (longer.tobytes(), joined, False),
    ):
        state = (params, terms, sized, postings, arrays, doc_terms, counters)
        assert (read_state(marshal.dumps(state)) is not None) == read


@settings(max_examples=150, deadline=None)
@given(DOCS, st.data())
def test_any_changed_or_missing_byte_is_refused(docs: list[list[str]], data: st.DataObject) -> None:
    blob = BLOBS.encode(index_from(docs, []), KEYS)
    at = data.draw(st.integers(0, len(blob) - 1))
    flipped = blob[:at] + bytes([blob[at] ^ data.draw(st.integers(1, 255))]) + blob[at + 1 :]
    assert index_read(flipped, KEYS) is None
    assert index_read(blob[:at], KEYS) is None


LINES = LineBlobs()


def facts_read(texts: list[str], blob: bytes, chunks: bytes) -> list[TextFacts | None] | None:
    """The facts a kept blob gives back of `texts`, as a restart reads them."""
    facts = LINES.kept_facts(blob, chunks)
    return None if facts is None else read_kept(texts, facts)


HELD = st.integers(0, NAMES | CITED | PROFILE)


def masked(text: str, held: int) -> TextFacts:
    facts = made(text)
    return TextFacts(
        facts.names if held & NAMES else None,
        facts.cited if held & CITED else None,
        facts.profile if held & PROFILE else None,
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), HELD), max_size=6), st.data())
def test_the_kept_facts_codec_gives_back_what_it_was_given(
    picked: list[tuple[int, int]], data: st.DataObject
) -> None:
    texts = [
        output(n) if n % 2 else f"THOUGHT: sed -n '{n},{n + 9}p' cart_{n}.py" for n, _ in picked
    ]
    facts = [masked(text, held) for text, (_, held) in zip(texts, picked, strict=True)]
    blob = LINES.encode_kept(facts, KEYS)
    back = facts_read(texts, blob, KEYS)
    # as each text's own blob decodes (a profile's names are the text's names)
    assert back == [LINES.decode(t, LINES.encode(t, f)) for t, f in zip(texts, facts, strict=True)]
    assert facts_read(texts, blob, b"j" * 8) is None  # other chunks
    at = data.draw(st.integers(0, len(blob) - 1))
    flipped = blob[:at] + bytes([blob[at] ^ data.draw(st.integers(1, 255))]) + blob[at + 1 :]
    assert facts_read(texts, flipped, KEYS) is None
    assert facts_read(texts, blob[:at], KEYS) is None
