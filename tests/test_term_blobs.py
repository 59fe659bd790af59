"""Each live chunk's analysed terms are stored beside its text, so a restart
decodes them instead of analysing every text again (text/termblob.py): the
restored session must be the one a restart that analyses (or a fresh engine)
builds, and a blob that does not match its text, analyzer or checksum is
never trusted."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Chunk, ChunkKind, ChunkUpdate, Role
from ctxopt.store import DB_FILE
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.bm25 import BM25Index
from ctxopt.text.termblob import DocTerms, TermBlobs
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import chunk, options
from tests.stored import as_of_version

S = "s"
QUERIES = ["", "pricing tax refund", "Straße config", "round the amounts"]
TEXTS = [
    "Repair the pricing module: the tax is rounded twice.",
    "THOUGHT: the refund path rounds the amounts in parse_config, then again.",
    "".join(
        f"{n:6d}\t    amount_{n} = round(order.line_{n} * rate_{n % 7}, 2)\n" for n in range(80)
    )
    + "Traceback (most recent call last):\n  File 'app/pricing.py', line 2\nValueError: tax",
    "Die Straße ist gesperrt; 日本語のテキスト and the config file " + "x" * 120,
    "the the the and of: only stopwords and a refund",
]
BLOBS = TermBlobs(Analyzer())


def session_chunks() -> list[Chunk]:
    kinds = [ChunkKind.MESSAGE, ChunkKind.MESSAGE, ChunkKind.TOOL_RESULT]
    return [
        chunk(
            f"c{i}",
            f"{text} (step {i})",
            role=Role.TOOL if kinds[i % 3] == ChunkKind.TOOL_RESULT else Role.MODEL,
            kind=kinds[i % 3],
            turn=i,
        )
        for i, text in enumerate(TEXTS * 4)
    ]


def state(engine: Engine) -> list[object]:
    """Every plan of the queries and the session index's scores for each."""
    session = engine.sessions.get("", S)
    target = engine.stats("", S).tokens * 4 // 10
    out: list[object] = []
    for query in QUERIES:
        plan = engine.optimize("", S, options(target, query, dry_run=True, lean=True))
        out.append([(d.chunk_id, d.action.name, d.replacement_text) for d in plan.decisions])
        terms = engine.analyzer.terms(query)
        out.append(session.index.scores(terms, session.n_slots).tolist())
    return out


def build(engine: Engine) -> None:
    """Two appends, a committed plan that stashes most chunks, two brought back."""
    engine.append("", S, session_chunks()[:12])
    engine.append("", S, session_chunks()[12:])
    target = engine.stats("", S).tokens * 5 // 10
    engine.optimize("", S, options(target, "pricing tax", lean=True))
    engine.restore("", S, ["c1", "c2"], budget=None, force=True)


def stored(data_dir: Path) -> Engine:
    engine = Engine(Config(data_dir=str(data_dir)))
    build(engine)
    engine.close()
    return Engine(Config(data_dir=str(data_dir)))


def blob_count(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        return int(conn.execute("SELECT count(term_blob) FROM chunks").fetchone()[0])


def fresh_state() -> list[object]:
    engine = Engine(Config(data_dir=":memory:"))
    build(engine)
    try:
        return state(engine)
    finally:
        engine.close()


def test_a_restart_reads_the_stored_terms_and_builds_what_analysing_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = stored(tmp_path)
    analysed: list[str] = []
    terms = Analyzer.terms

    def counting(self: Analyzer, text: str) -> list[str]:
        analysed.append(text)
        return terms(self, text)

    monkeypatch.setattr(Analyzer, "terms", counting)
    session = engine.sessions.get("", S)
    monkeypatch.undo()
    assert analysed == []  # every text's terms came from the store
    assert {"c1", "c2"} <= session.entries.keys()  # restored chunks' terms are stored too
    assert blob_count(tmp_path) == len(session)
    decoded = state(engine)
    engine.close()
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        conn.execute("UPDATE chunks SET term_blob = NULL")
    recomputed = Engine(Config(data_dir=str(tmp_path)))
    assert state(recomputed) == decoded == fresh_state()
    recomputed.close()


def test_a_damaged_blob_is_analysed_again_not_trusted(tmp_path: Path) -> None:
    stored(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        # one byte of the counts changed (a term counted 2 more times), one blob cut
        # short, one blob of another chunk's text
        conn.execute(
            "UPDATE chunks SET term_blob = substr(term_blob, 1, 23) || "
            "char(unicode(substr(term_blob, 24, 1)) + 2) || substr(term_blob, 25) "
            "WHERE chunk_id = 'c0'"
        )
        conn.execute("UPDATE chunks SET term_blob = substr(term_blob, 1, 30) WHERE chunk_id = 'c1'")
        conn.execute(
            "UPDATE chunks SET term_blob = (SELECT term_blob FROM chunks WHERE chunk_id = 'c3') "
            "WHERE chunk_id = 'c2'"
        )
    engine = Engine(Config(data_dir=str(tmp_path)))
    assert state(engine) == fresh_state()
    engine.close()


def test_a_store_from_before_the_column_opens_and_plans_the_same(tmp_path: Path) -> None:
    stored(tmp_path).close()
    as_of_version(tmp_path / DB_FILE, 4)
    engine = Engine(Config(data_dir=str(tmp_path)))
    assert state(engine) == fresh_state()
    engine.append("", S, [chunk("late", "a refund for the late order", turn=99)])
    live = len(engine.sessions.get("", S))
    engine.close()
    assert blob_count(tmp_path) == 1  # old rows keep none until their text changes
    engine = Engine(Config(data_dir=str(tmp_path)))
    assert len(engine.sessions.get("", S)) == live
    engine.close()


def test_a_same_text_update_keeps_the_stored_terms(tmp_path: Path) -> None:
    engine = stored(tmp_path)
    c1 = engine.sessions.get("", S).entries["c1"].chunk
    engine.append("", S, [chunk("c1", c1.text, pinned=True)])
    engine.update("", S, [ChunkUpdate("c2", boost=0.5)])
    engine.close()
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        assert conn.execute("SELECT count(*) FROM chunks WHERE term_blob IS NULL").fetchone() == (
            0,
        )
    engine = Engine(Config(data_dir=str(tmp_path)))
    assert engine.sessions.get("", S).entries["c1"].chunk.pinned
    engine.close()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_a_blob_decodes_to_the_terms_of_its_own_text_only(text: str) -> None:
    doc = BLOBS.analyse(text)
    blob = BLOBS.encode(text, doc)
    assert BLOBS.decode(text, blob) == doc == DocTerms.of(Analyzer().terms(text))
    assert BLOBS.decode(text + " more", blob) is None
    assert TermBlobs(Analyzer(stem=False)).decode(text, blob) is None


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=200), st.data())
def test_any_changed_or_missing_byte_is_refused(text: str, data: st.DataObject) -> None:
    blob = BLOBS.encode(text, BLOBS.analyse(text))
    at = data.draw(st.integers(0, len(blob) - 1))
    flipped = bytearray(blob)
    flipped[at] ^= data.draw(st.integers(1, 255))
    assert BLOBS.decode(text, bytes(flipped)) is None
    assert BLOBS.decode(text, blob[:at]) is None
    assert BLOBS.decode(text, None) is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=80), min_size=1, max_size=12), st.text(max_size=40))
def test_indexing_counted_terms_equals_indexing_the_terms(docs: list[str], query: str) -> None:
    analyzer = Analyzer()
    plain, counted = BM25Index(), BM25Index()
    for slot, text in enumerate(docs):
        terms = analyzer.terms(text)
        plain.set_doc(slot, terms)
        doc = DocTerms.of(terms)
        counted.set_doc_counts(slot, doc.terms, doc.counts)
    q = analyzer.terms(query)
    np.testing.assert_array_equal(plain.scores(q, len(docs)), counted.scores(q, len(docs)))
