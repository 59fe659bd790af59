"""Stash search analyses text as live sessions do (issue 12, item 5).

The stash index holds the engine analyzer's terms, so a query finds and ranks in
the stash what it finds and ranks in a session. Each disagreement case also runs
against the FTS5 `porter unicode61` index the stash used before (schema v2), to
show what changed.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Action, Chunk, ChunkKind, Role, StashFilter
from ctxopt.session import stash_id_of
from ctxopt.store import DB_FILE, Change, StashEntry, Store
from ctxopt.store.schema import SCHEMA_VERSION, indexed_with
from ctxopt.store.search import SNIPPET_CHARS, analyzer_identity, snippet
from ctxopt.text.analyzer import Analyzer
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serverproc import ServerProcess, serving

OWNER = "alice"
TIMEOUT = 10.0
SPLITTING = Analyzer(split_identifiers=True)
Stub = pb_grpc.ContextOptimizerStub


def entry(chunk_id: str, text: str, session_id: str = "s1", owner: str = OWNER) -> StashEntry:
    chunk = Chunk(id=chunk_id, role=Role.TOOL, kind=ChunkKind.LOG, text=text)
    return StashEntry(
        stash_id_of(chunk), session_id, owner, chunk, Action.STASH, ("low_score",), 0.1, 1, "p1"
    )


def stash_texts(store: Store, texts: dict[str, str], owner: str = OWNER) -> None:
    store.commit(Change("s1", owner, stash=[entry(k, v, owner=owner) for k, v in texts.items()]))


def hit_ids(store: Store, query: str, owner: str = OWNER) -> list[str]:
    hits, _ = store.search(owner, "", query, StashFilter(), 100, 0)
    return [h.chunk_id for h in hits]


def live_matches(analyzer: Analyzer, texts: dict[str, str], query: str) -> set[str]:
    """The chunks a live session's BM25 scores above 0: those sharing a term."""
    wanted = set(analyzer.terms(query))
    return {k for k, text in texts.items() if wanted.intersection(analyzer.terms(text))}


def porter_matches(texts: dict[str, str], query: str) -> set[str]:
    """What the schema v2 index (FTS5 `porter unicode61`, every query word quoted) found."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE v2 USING fts5 "
        "(id UNINDEXED, text, tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    conn.executemany("INSERT INTO v2 VALUES (?, ?)", texts.items())
    words = " OR ".join(f'"{w}"' for w in query.split())
    return {row[0] for row in conn.execute("SELECT id FROM v2 WHERE v2 MATCH ?", (words,))}


# The index holds the analyzer's terms, one FTS token each


def indexed_tokens(data_dir: Path) -> dict[str, list[str]]:
    """Each stashed chunk's FTS tokens, in position order."""
    conn = sqlite3.connect(data_dir / DB_FILE)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, stash_fts, instance)")
        rows = conn.execute(
            "SELECT s.chunk_id, v.term FROM temp.vocab AS v JOIN stash AS s ON s.id = v.doc "
            "ORDER BY v.doc, v.offset"
        ).fetchall()
    finally:
        conn.close()
    tokens: dict[str, list[str]] = {}
    for chunk_id, term in rows:
        tokens.setdefault(chunk_id, []).append(term)
    return tokens


@pytest.mark.parametrize("analyzer", [Analyzer(), SPLITTING], ids=["default", "splitting"])
def test_every_analysed_term_is_exactly_one_fts_token(data_dir: Path, analyzer: Analyzer) -> None:
    texts = {
        "code": "def parseConfigFile(path): return os.path.join(src_dir, 'main.py')  # HTTP2",
        "words": "The connections were failing; retried 3 times at 10:42:07.",
        "unicode": "Straße İstanbul naïve café 日本語のテキスト ǅemal ٣ x²",
        "marks": "___ __init__ a_b_c 0x1F v1.2.3 src/app/main.py ../up/../path",
    }
    s = Store(str(data_dir), analyzer=analyzer)
    stash_texts(s, texts)
    s.close()
    assert indexed_tokens(data_dir) == {k: analyzer.terms(v) for k, v in texts.items()}


@pytest.fixture
def splitting_store(data_dir: Path) -> Iterator[Store]:
    s = Store(str(data_dir), analyzer=SPLITTING)
    yield s
    s.close()


EXAMPLES = itertools.count()


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=80))
def test_any_text_indexes_as_its_terms(splitting_store: Store, data_dir: Path, text: str) -> None:
    chunk_id = f"t{next(EXAMPLES)}"
    stash_texts(splitting_store, {chunk_id: text})
    assert indexed_tokens(data_dir).get(chunk_id, []) == SPLITTING.terms(text)


def test_the_engine_gives_the_store_its_analyzer_with_identifier_parts(tmp_path: Path) -> None:
    """Issue 32: the stash finds the parts of names whatever the live analyzer splits."""
    engine = Engine(Config(data_dir=str(tmp_path / "data")))
    try:
        assert engine.analyzer.terms("parseConfig") == ["parseconfig"]
        assert engine.store.analyzer.terms("parseConfig") == ["parseconfig", "pars", "config"]
    finally:
        engine.close()


# Where FTS5's porter stemmer and the live analyzer disagree


@pytest.mark.parametrize(
    ("texts", "query", "found"),
    [
        # Snowball keeps "general" apart from "generated"; porter stems both to "gener"
        ({"gen": "the generated code", "cfg": "general settings"}, "general", {"cfg"}),
        # Snowball strips "-ly" ("fairly" -> "fair"); porter keeps "fairli"
        ({"fair": "it went fairly well", "other": "it went badly"}, "fair", {"fair"}),
        # Snowball maps "dying" to "die"; porter to "dy"
        ({"proc": "worker dying after OOM", "other": "worker alive"}, "die", {"proc"}),
        # stopwords are not terms: a query of stopwords finds nothing, live or stashed
        ({"a": "the build is red", "b": "it was the cache"}, "the is it", set()),
        # without identifier splitting a snake_case name is one term
        ({"py": "call parse_config first", "doc": "the config file"}, "config", {"doc"}),
    ],
    ids=["general", "fairly", "dying", "stopwords", "snake_case"],
)
def test_stash_matches_what_a_live_session_matches_where_porter_did_not(
    store: Store, texts: dict[str, str], query: str, found: set[str]
) -> None:
    assert live_matches(store.analyzer, texts, query) == found
    assert porter_matches(texts, query) != found
    stash_texts(store, texts)
    assert set(hit_ids(store, query)) == found


def test_identifier_splitting_finds_the_parts_of_a_camel_case_name(data_dir: Path) -> None:
    texts = {"code": "def parseConfigFile(path):", "prose": "nothing to see"}
    s = Store(str(data_dir), analyzer=SPLITTING)
    stash_texts(s, texts)
    assert live_matches(SPLITTING, texts, "config file") == {"code"}
    assert porter_matches(texts, "config file") == set()
    assert hit_ids(s, "config file") == ["code"]
    assert hit_ids(s, "parseConfigFile") == ["code"]
    s.close()


# Ranking: one query, one order, live and stashed


RANKED = {
    "once": "retry",
    "twice": "retry, then retry",
    "thrice": "retries: retried, retrying",
    "long": "retry the upload after the network timeout and the proxy reset",
    "middle": "retry upload later",
    "none": "the upload went through",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"CTXOPT_AUTH_TOKEN": "alice=a-secret,bob=b-secret", "CTXOPT_NEIGHBOUR_SHARE": "0"}
    with serving(tmp_path_factory.mktemp("stash-search"), env=env) as running:
        yield running


def as_owner(owner: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {owner[0]}-secret"),)


def append_texts(stub: Stub, session_id: str, texts: dict[str, str], owner: str) -> None:
    chunks = [
        pb.Chunk(id=k, role=pb.ROLE_USER, kind=pb.CHUNK_KIND_MESSAGE, text=v, turn=i)
        for i, (k, v) in enumerate(texts.items())
    ]
    stub.AppendChunks(
        pb.AppendChunksRequest(session_id=session_id, chunks=chunks),
        timeout=TIMEOUT,
        metadata=as_owner(owner),
    )


def stash_all(stub: Stub, session_id: str, chunk_ids: list[str], owner: str) -> None:
    stub.RemoveChunks(
        pb.RemoveChunksRequest(session_id=session_id, chunk_ids=chunk_ids, stash=True),
        timeout=TIMEOUT,
        metadata=as_owner(owner),
    )


def search(stub: Stub, query: str, owner: str, session_id: str = "") -> list[pb.StashHit]:
    response = stub.SearchStash(
        pb.SearchStashRequest(session_id=session_id, query=query, limit=100),
        timeout=TIMEOUT,
        metadata=as_owner(owner),
    )
    return list(response.hits)


def test_a_query_ranks_the_same_chunks_in_the_same_order_live_and_stashed(stub: Stub) -> None:
    append_texts(stub, "rank", RANKED, OWNER)
    scores = stub.Score(
        pb.ScoreRequest(session_id="rank", query="Retrying?"),
        timeout=TIMEOUT,
        metadata=as_owner(OWNER),
    ).scores
    by_bm25 = sorted((s for s in scores if s.breakdown.bm25 > 0), key=lambda s: -s.breakdown.bm25)
    live_order = [s.chunk_id for s in by_bm25]
    assert live_order == ["thrice", "twice", "once", "middle", "long"]
    stash_all(stub, "rank", list(RANKED), OWNER)
    assert [h.chunk_id for h in search(stub, "Retrying?", OWNER, "rank")] == live_order


@pytest.mark.parametrize(
    "query",
    ['"', '""', "*", "retry*", "NEAR", "NEAR(retry upload, 2)", "-retry", "retry -upload",
     "text:retry", "terms:retry", "(", ")", "((retry OR", "AND OR NOT", "^retry", "'",
     "the of and", "", "   ", "\x00", "🚀", 'retry" OR "upload'],
)  # fmt: skip
def test_fts_syntax_in_a_query_never_errors(stub: Stub, query: str) -> None:
    texts = {"a": "retry the upload", "b": "nothing here"}
    append_texts(stub, "syntax", texts, OWNER)
    stash_all(stub, "syntax", list(texts), OWNER)
    expected = live_matches(Analyzer(), texts, query) if query.strip() else set(texts)
    assert {h.chunk_id for h in search(stub, query, OWNER, "syntax")} == expected


@pytest.mark.parametrize(
    ("query", "whole"),
    [("unique marker", "unique_marker_1"), ("parse config", "parseConfig"), ("utils", "")],
)
def test_a_query_finds_the_parts_of_identifiers_and_paths_and_a_whole_name_ranks_first(
    stub: Stub, query: str, whole: str
) -> None:
    """Issue 32: `unique marker` finds `unique_marker_1`, `parse config` finds
    `parseConfig`, `utils` finds `src/utils/io.py`; asked for the whole name, the
    original holding it outranks one holding only its words."""
    session = f"parts-{query.replace(' ', '-')}"
    texts = {
        "marker": "the run wrote unique_marker_1 to the log",
        "camel": "def parseConfig(path): return load(path)",
        "path": "opened src/utils/io.py for reading",
        "words": "a unique step: parse the marker of the config",
    }
    append_texts(stub, session, texts, OWNER)
    stash_all(stub, session, list(texts), OWNER)
    found = [h.chunk_id for h in search(stub, query, OWNER, session)]
    wanted = {"unique marker": "marker", "parse config": "camel", "utils": "path"}[query]
    assert wanted in found
    if whole:
        assert search(stub, whole, OWNER, session)[0].chunk_id == wanted


def test_the_stash_answers_only_to_its_owner(stub: Stub) -> None:
    secret = {"plan": "the launch codes are retry upload"}
    append_texts(stub, "alice-own", secret, "alice")
    stash_all(stub, "alice-own", list(secret), "alice")
    assert [h.chunk_id for h in search(stub, "launch codes", "alice", "alice-own")] == ["plan"]
    for query in ("launch codes", "retry", ""):
        assert [h.session_id for h in search(stub, query, "bob")] == []
    with pytest.raises(grpc.RpcError) as refused:
        search(stub, "launch", "bob", "alice-own")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


# Snippets come from the original text


def test_snippet_is_the_matching_line_with_the_match_marked(store: Store) -> None:
    lines = [f"line {i}: collected item from the worker pool" for i in range(1_000)]
    lines[731] = "line 731: ConnectionError while retrying the upload"
    stash_texts(store, {"log": "\n".join(lines)})
    hits, _ = store.search(OWNER, "s1", "retry upload", StashFilter(), 10, 0)
    assert hits[0].snippet.startswith("… line 731: ConnectionError while «retrying» the «upload»")
    assert hits[0].snippet.endswith(" …")


def test_snippet_of_a_long_line_is_bounded_and_holds_the_match(store: Store) -> None:
    text = " ".join(f"word{i}" for i in range(5_000)) + " needle " + "tail " * 100
    stash_texts(store, {"long": text})
    hits, _ = store.search(OWNER, "s1", "needle", StashFilter(), 10, 0)
    shown = hits[0].snippet.replace("«", "").replace("»", "").replace("…", "").strip()
    assert "«needle»" in hits[0].snippet
    assert len(shown) <= SNIPPET_CHARS


def test_snippet_shows_several_matching_lines_in_text_order() -> None:
    text = "alpha retry\nnothing\nbeta upload retry\ngamma"
    shown = snippet(text, frozenset(Analyzer().terms("retry upload")), Analyzer().terms)
    assert shown == "alpha «retry» … beta «upload» «retry» …"


# Schema v2 -> v3 and analyzer changes


V2_SCHEMA = """
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, owner TEXT NOT NULL,
  collections INTEGER NOT NULL);
CREATE TABLE chunks (session_id TEXT NOT NULL, seq INTEGER NOT NULL, born INTEGER NOT NULL,
  last_touched_ms INTEGER NOT NULL, chunk_id TEXT NOT NULL, role INTEGER NOT NULL,
  kind INTEGER NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL, turn INTEGER NOT NULL, pinned INTEGER NOT NULL,
  policy INTEGER NOT NULL, group_id TEXT NOT NULL, parent_id TEXT NOT NULL, refs TEXT,
  file_path TEXT NOT NULL, line_start INTEGER NOT NULL, line_end INTEGER NOT NULL, tags TEXT,
  topic_id TEXT NOT NULL, task_id TEXT NOT NULL, boost REAL NOT NULL, embedding BLOB,
  summary_of TEXT, metadata TEXT, origin TEXT NOT NULL DEFAULT '',
  UNIQUE (session_id, chunk_id));
CREATE TABLE stash (id INTEGER PRIMARY KEY, stash_id TEXT NOT NULL, session_id TEXT NOT NULL,
  owner TEXT NOT NULL, action INTEGER NOT NULL, reasons TEXT NOT NULL, score REAL NOT NULL,
  stashed_at_ms INTEGER NOT NULL, plan_id TEXT NOT NULL, size_bytes INTEGER NOT NULL,
  ephemeral INTEGER NOT NULL, chunk_id TEXT NOT NULL, role INTEGER NOT NULL,
  kind INTEGER NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL, turn INTEGER NOT NULL, pinned INTEGER NOT NULL,
  policy INTEGER NOT NULL, group_id TEXT NOT NULL, parent_id TEXT NOT NULL, refs TEXT,
  file_path TEXT NOT NULL, line_start INTEGER NOT NULL, line_end INTEGER NOT NULL, tags TEXT,
  topic_id TEXT NOT NULL, task_id TEXT NOT NULL, boost REAL NOT NULL, embedding BLOB,
  summary_of TEXT, metadata TEXT, UNIQUE (session_id, stash_id));
CREATE TABLE stash_totals (session_id TEXT PRIMARY KEY, entries INTEGER NOT NULL,
  size_bytes INTEGER NOT NULL, tokens INTEGER NOT NULL);
CREATE VIRTUAL TABLE stash_fts USING fts5 (text, content = 'stash', content_rowid = 'id',
  tokenize = 'porter unicode61 remove_diacritics 2');
CREATE TRIGGER stash_inserted AFTER INSERT ON stash BEGIN
  INSERT INTO stash_fts (rowid, text) VALUES (new.id, new.text);
  INSERT INTO stash_totals VALUES (new.session_id, 1, new.size_bytes, new.tokens)
    ON CONFLICT (session_id) DO UPDATE SET entries = entries + 1,
      size_bytes = size_bytes + excluded.size_bytes, tokens = tokens + excluded.tokens;
END;
CREATE TRIGGER stash_deleted AFTER DELETE ON stash BEGIN
  INSERT INTO stash_fts (stash_fts, rowid, text) VALUES ('delete', old.id, old.text);
  UPDATE stash_totals SET entries = entries - 1, size_bytes = size_bytes - old.size_bytes,
    tokens = tokens - old.tokens WHERE session_id = old.session_id;
END;
CREATE TRIGGER stash_updated AFTER UPDATE OF text, size_bytes, tokens ON stash BEGIN
  INSERT INTO stash_fts (stash_fts, rowid, text) VALUES ('delete', old.id, old.text);
  INSERT INTO stash_fts (rowid, text) VALUES (new.id, new.text);
  UPDATE stash_totals SET size_bytes = size_bytes - old.size_bytes + new.size_bytes,
    tokens = tokens - old.tokens + new.tokens WHERE session_id = new.session_id;
END;
PRAGMA user_version = 2;
"""

V2_ENTRIES = {  # stash id -> (session, owner, text)
    "gen": ("s1", "alice", "the generated code"),
    "cfg": ("s1", "alice", "general settings\nparse_config and parseConfigFile"),
    "bobs": ("b1", "bob", "general settings of bob"),
}


def write_v2_store(data_dir: Path) -> None:
    """A store as schema v2 left it: stash rows indexed by FTS5's porter stemmer."""
    data_dir.mkdir(parents=True)
    conn = sqlite3.connect(data_dir / DB_FILE)
    conn.executescript(V2_SCHEMA)
    conn.executemany(
        "INSERT INTO stash (stash_id, session_id, owner, action, reasons, score, stashed_at_ms,"
        " plan_id, size_bytes, ephemeral, chunk_id, role, kind, text, tokens, created_at_ms,"
        " turn, pinned, policy, group_id, parent_id, file_path, line_start, line_end,"
        " topic_id, task_id, boost)"
        " VALUES (?, ?, ?, 4, '[]', 0.5, 1, 'p', ?, 0, ?, 4, 3, ?, 3, 0, 0, 0, 0, '', '',"
        " '', 0, 0, '', '', 0.0)",
        [
            (sid, session, owner, len(text), sid, text)
            for sid, (session, owner, text) in V2_ENTRIES.items()
        ],
    )
    conn.commit()
    assert {r[0] for r in conn.execute("SELECT rowid FROM stash_fts('gener')")} == {1, 2, 3}
    conn.close()


def test_a_v2_store_migrates_to_an_index_of_analysed_terms(data_dir: Path) -> None:
    write_v2_store(data_dir)
    s = Store(str(data_dir))
    try:
        assert hit_ids(s, "general") == ["cfg"]
        assert hit_ids(s, "generated") == ["gen"]
        assert hit_ids(s, "general", owner="bob") == ["bobs"]
        assert s.stash_stats("s1") == (2, 6)
        assert s.integrity_check() == "ok"
        hits, _ = s.search(OWNER, "s1", "settings", StashFilter(), 10, 0)
        assert hits[0].snippet == "general «settings» …"
        stash_texts(s, {"new": "general purpose"})
        assert sorted(hit_ids(s, "general")) == ["cfg", "new"]
        s.commit(Change("s1", OWNER, unstash=["cfg"]))
        assert hit_ids(s, "general") == ["new"]
    finally:
        s.close()
    conn = sqlite3.connect(data_dir / DB_FILE)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
        conn.execute("INSERT INTO stash_fts (stash_fts) VALUES ('integrity-check')")
        assert indexed_with(conn.cursor()) == analyzer_identity(Analyzer().terms)
    finally:
        conn.close()
    assert indexed_tokens(data_dir)["gen"] == ["generat", "code"]


def test_reopening_with_another_analyzer_reindexes_every_original(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    texts = {"code": "def parseConfigFile(path):", "prose": "the config file"}
    first = Store(str(data_dir))
    stash_texts(first, texts)
    assert hit_ids(first, "config") == ["prose"]
    first.close()
    with caplog.at_level(logging.INFO, logger="ctxopt.store.store"):
        second = Store(str(data_dir), analyzer=SPLITTING)
    assert "2 originals analysed" in caplog.text
    assert sorted(hit_ids(second, "config")) == ["code", "prose"]
    second.close()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ctxopt.store.store"):
        third = Store(str(data_dir), analyzer=Analyzer(split_identifiers=True))
    assert "analysed" not in caplog.text
    third.close()
    back = Store(str(data_dir))
    assert hit_ids(back, "config") == ["prose"]
    back.close()
    assert indexed_tokens(data_dir)["code"] == Analyzer().terms(texts["code"])
