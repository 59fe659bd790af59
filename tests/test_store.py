"""The durable store: live sessions, stash, search, caps, export/import, restart."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from ctxopt.engine import stash_id_of
from ctxopt.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from ctxopt.model import Action, Chunk, ChunkKind, GcPolicy, Role, StashFilter
from ctxopt.store import (
    BROWSE_SNIPPET_CHARS,
    DB_FILE,
    StashEntry,
    Store,
    StoredChunk,
    StoredSession,
    fts_query,
)

OWNER = "alice"
NO_FILTER = StashFilter()


def make_chunk(chunk_id: str, text: str = "", **fields: object) -> Chunk:
    base = Chunk(
        id=chunk_id, role=Role.USER, kind=ChunkKind.MESSAGE, text=text or f"text {chunk_id}"
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def live(chunk: Chunk, seq: int, born: int = 0) -> StoredChunk:
    return StoredChunk(chunk=chunk, seq=seq, born=born, last_touched_ms=1000 + seq)


def entry(
    chunk: Chunk,
    session_id: str = "s1",
    at_ms: int = 1_000,
    owner: str = OWNER,
    action: Action = Action.STASH,
) -> StashEntry:
    return StashEntry(
        stash_id=stash_id_of(chunk),
        session_id=session_id,
        owner=owner,
        chunk=chunk,
        action=action,
        reasons=("low_score", "over_budget"),
        score=0.25,
        stashed_at_ms=at_ms,
        plan_id="plan-1",
    )


RICH_CHUNK = Chunk(
    id="rich",
    role=Role.TOOL,
    kind=ChunkKind.TOOL_RESULT,
    text="héllo wörld ✓ 🚀 日本語\r\n\ttabs\x00nul and \"quotes\" 'single'",
    tokens=42,
    created_at_ms=1_700_000_000_123,
    turn=7,
    pinned=True,
    policy=GcPolicy.PRESERVABLE,
    group_id="g1",
    parent_id="p0",
    references=("a", "b"),
    file_path="src/ünï.py",
    line_start=3,
    line_end=99,
    tags=("x", "ÿ"),
    topic_id="topic",
    task_id="task-9",
    boost=0.125,
    embedding=(0.1, -2.5, 1e-30, 3.0),
    summary_of=("c1", "c2"),
    metadata={"tool": "grep", "ключ": "значение"},
)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: Path) -> Iterator[Store]:
    s = Store(str(data_dir))
    yield s
    s.close()


def fresh_session(*chunks: Chunk) -> StoredSession:
    """Session s1 as `save_chunks` of these chunks at seq 1, 2, ... leaves it."""
    return StoredSession("s1", OWNER, 0, [live(c, i + 1) for i, c in enumerate(chunks)])


def stash_texts(store: Store, texts: dict[str, str], **fields: object) -> None:
    store.stash([entry(make_chunk(cid, text, **fields)) for cid, text in texts.items()])


def hit_ids(store: Store, query: str, filters: StashFilter = NO_FILTER) -> list[str]:
    hits, _ = store.search(OWNER, "s1", query, filters, 100, 0)
    return [h.chunk_id for h in hits]


# Live sessions


def test_saved_chunk_loads_back_with_every_field(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(RICH_CHUNK, seq=5, born=2)])
    session = store.load_session("s1")
    assert session is not None
    assert session.chunks == [StoredChunk(RICH_CHUNK, 5, 2, 1005)]
    assert session.chunks[0].chunk.text.encode() == RICH_CHUNK.text.encode()


def test_embedding_not_representable_as_float32_is_kept_exactly(store: Store) -> None:
    chunk = make_chunk("e", embedding=(0.1 + 1e-12, 1 / 3))
    store.save_chunks("s1", OWNER, [live(chunk, 1)])
    session = store.load_session("s1")
    assert session is not None
    assert session.chunks[0].chunk.embedding == (0.1 + 1e-12, 1 / 3)


def test_unknown_session_loads_as_none(store: Store) -> None:
    assert store.load_session("nope") is None
    assert store.session_owner("nope") is None


def test_session_owner_is_the_creator(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    assert store.session_owner("s1") == OWNER


def test_chunks_load_in_seq_order(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk(c), seq) for c, seq in [("b", 2), ("c", 3)]])
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    session = store.load_session("s1")
    assert session is not None
    assert [c.chunk.id for c in session.chunks] == ["a", "b", "c"]


def test_save_chunks_upserts_by_id(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a", "old"), 1)])
    store.save_chunks("s1", OWNER, [live(make_chunk("a", "new"), 1, born=4)])
    session = store.load_session("s1")
    assert session is not None
    assert [(c.chunk.text, c.born) for c in session.chunks] == [("new", 4)]


def test_delete_chunks_removes_only_those_ids(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk(c), i) for i, c in enumerate("abc")])
    store.delete_chunks("s1", ["a", "c", "unknown"])
    session = store.load_session("s1")
    assert session is not None
    assert [c.chunk.id for c in session.chunks] == ["b"]


def test_update_session_sets_collections(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    store.update_session("s1", 3)
    session = store.load_session("s1")
    assert session is not None
    assert session.collections == 3


def test_update_of_unknown_session_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="session_id"):
        store.update_session("nope", 1)


def test_list_sessions_is_scoped_by_owner(store: Store) -> None:
    for sid, owner in [("s2", OWNER), ("s1", OWNER), ("t1", "bob")]:
        store.save_chunks(sid, owner, [live(make_chunk("a"), 1)])
    assert store.list_sessions(OWNER) == ["s1", "s2"]
    assert store.list_sessions("bob") == ["t1"]


def test_delete_session_keeps_its_stash_unless_purged(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    store.stash([entry(make_chunk("b", "kept original"))])
    assert store.delete_session("s1", purge_stash=False) is True
    assert store.load_session("s1") is None
    assert store.get_stashed("s1", ["b"])["b"].chunk.text == "kept original"


def test_delete_session_with_purge_drops_its_stash(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    store.stash([entry(make_chunk("b", "gone"))])
    assert store.delete_session("s1", purge_stash=True) is True
    assert store.get_stashed("s1", ["b"]) == {}
    assert store.stash_stats("s1") == (0, 0)
    assert hit_ids(store, "gone") == []


def test_delete_of_unknown_session_reports_false(store: Store) -> None:
    assert store.delete_session("nope", purge_stash=True) is False


# Restart and durability


def test_restart_keeps_sessions_pins_generations_and_stash(data_dir: Path) -> None:
    first = Store(str(data_dir))
    pinned = make_chunk("a", pinned=True, policy=GcPolicy.LOCKED)
    first.save_chunks("s1", OWNER, [live(pinned, 1, born=3)])
    first.update_session("s1", 5)
    first.stash([entry(make_chunk("b", "stashed before restart"))])
    first.close()

    second = Store(str(data_dir))
    try:
        assert second.load_session("s1") == StoredSession("s1", OWNER, 5, [live(pinned, 1, 3)])
        assert second.get_stashed("s1", ["b"])["b"].chunk.text == "stashed before restart"
        assert hit_ids(second, "restart") == ["b"]
        assert second.integrity_check() == "ok"
    finally:
        second.close()


def test_database_lives_in_the_data_directory_in_wal_mode(store: Store, data_dir: Path) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# Writes plans without pause, printing each one's number once it returned.
_WRITE_FOREVER = """
import sys
from ctxopt.model import Action, Chunk, ChunkKind, Role
from ctxopt.engine import stash_id_of
from ctxopt.store import StashEntry, Store, StoredChunk
store = Store(sys.argv[1], fsync=sys.argv[2])
for n in range(1_000_000):
    kept = Chunk(id=f"k{n}", role=Role.USER, kind=ChunkKind.MESSAGE, text=f"kept {n} ✓")
    gone = Chunk(id=f"g{n}", role=Role.MODEL, kind=ChunkKind.MESSAGE, text=f"stashed {n} 🚀" * 50)
    stashed = StashEntry(stash_id_of(gone), "s1", "alice", gone, Action.STASH, (), 0.0, n, "p")
    store.commit_plan("s1", "alice", [stashed], [], [StoredChunk(kept, n, 0, n)], n)
    print(n, flush=True)
"""


@pytest.mark.parametrize("fsync", ["normal", "full"])
def test_sigkill_mid_write_keeps_every_acknowledged_write(data_dir: Path, fsync: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITE_FOREVER, str(data_dir), fsync],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acked = [int(child.stdout.readline()) for _ in range(200)]
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    reopened = Store(str(data_dir))
    try:
        assert reopened.integrity_check() == "ok"
        session = reopened.load_session("s1")
        assert session is not None
        kept = {c.chunk.id: c.chunk.text for c in session.chunks}
        stashed = reopened.get_stashed("s1", [f"g{n}" for n in acked])
        for n in acked:
            assert kept[f"k{n}"] == f"kept {n} ✓"
            assert stashed[f"g{n}"].chunk.text == f"stashed {n} 🚀" * 50
    finally:
        reopened.close()


def test_concurrent_writers_all_land(store: Store) -> None:
    def write(thread: int) -> None:
        for i in range(20):
            store.save_chunks(f"s{thread}", OWNER, [live(make_chunk(f"c{i}"), i)])
            store.stash([entry(make_chunk(f"x{i}"), session_id=f"s{thread}")])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n in range(4):
        session = store.load_session(f"s{n}")
        assert session is not None
        assert len(session.chunks) == 20
        assert store.stash_stats(f"s{n}")[0] == 20
    assert store.integrity_check() == "ok"


def test_bad_fsync_mode_is_refused(data_dir: Path) -> None:
    with pytest.raises(InvalidArgument, match="fsync"):
        Store(str(data_dir), fsync="sometimes")  # type: ignore[arg-type]


# Stash


def test_stash_id_is_stable_and_follows_the_text() -> None:
    """The same original stashes once; a re-stash with new metadata updates it."""
    assert stash_id_of(RICH_CHUNK) == stash_id_of(replace(RICH_CHUNK, tags=("x",)))
    assert stash_id_of(RICH_CHUNK).startswith("rich@")
    assert stash_id_of(RICH_CHUNK) != stash_id_of(replace(RICH_CHUNK, text="other"))


def test_stashed_original_comes_back_exactly(store: Store) -> None:
    original = entry(RICH_CHUNK, action=Action.TRIM)
    store.stash([original])
    assert store.get_stashed("s1", ["rich"]) == {"rich": original}


def test_same_original_stashed_twice_is_one_entry(store: Store) -> None:
    chunk = make_chunk("a", tokens=7)
    store.stash([entry(chunk, at_ms=1, action=Action.TRIM)])
    store.stash([entry(chunk, at_ms=2, action=Action.STASH)])
    assert store.stash_stats("s1") == (1, 7)
    assert store.get_stashed("s1", ["a"])["a"].action == Action.STASH


def test_get_stashed_returns_the_latest_entry_per_chunk(store: Store) -> None:
    store.stash(
        [entry(make_chunk("a", "first"), at_ms=1), entry(make_chunk("a", "second"), at_ms=2)]
    )
    found = store.get_stashed("s1", ["a", "missing"])
    assert list(found) == ["a"]
    assert found["a"].chunk.text == "second"


def test_get_stashed_group_finds_every_member(store: Store) -> None:
    store.stash(
        [
            entry(make_chunk("call", group_id="g1")),
            entry(make_chunk("result", group_id="g1")),
            entry(make_chunk("other", group_id="g2")),
        ]
    )
    assert sorted(store.get_stashed_group("s1", ["g1"])) == ["call", "result"]


def test_unstash_drops_every_version_of_the_chunk(store: Store) -> None:
    store.stash([entry(make_chunk("a", "v1"), at_ms=1), entry(make_chunk("a", "v2"), at_ms=2)])
    store.stash([entry(make_chunk("b"))])
    store.unstash("s1", ["a"])
    assert list(store.get_stashed("s1", ["a", "b"])) == ["b"]
    assert store.stash_stats("s1")[0] == 1


def test_restore_chunks_puts_back_and_unstashes(store: Store) -> None:
    chunk = make_chunk("a", "restored text")
    store.stash([entry(chunk)])
    store.restore_chunks("s1", OWNER, [live(chunk, 4)])
    session = store.load_session("s1")
    assert session is not None
    assert [c.chunk for c in session.chunks] == [chunk]
    assert store.get_stashed("s1", ["a"]) == {}


def test_stash_stats_count_entries_and_tokens(store: Store) -> None:
    store.stash([entry(make_chunk("a", tokens=10)), entry(make_chunk("b", tokens=5))])
    assert store.stash_stats("s1") == (2, 15)
    assert store.stash_stats("other") == (0, 0)


def test_commit_plan_stashes_removes_and_rewrites(store: Store) -> None:
    a, b = make_chunk("a", "long original"), make_chunk("b", "removed")
    store.save_chunks("s1", OWNER, [live(a, 1), live(b, 2)])
    trimmed = live(replace(a, text="long…"), 1, born=1)
    store.commit_plan(
        "s1",
        OWNER,
        [entry(a, action=Action.TRIM), entry(b)],
        removed_ids=["b"],
        changed=[trimmed],
        collections=1,
    )
    session = store.load_session("s1")
    assert session is not None
    assert session.chunks == [trimmed]
    assert session.collections == 1
    assert {k: v.chunk for k, v in store.get_stashed("s1", ["a", "b"]).items()} == {"a": a, "b": b}


def test_commit_plan_that_fails_inside_writes_nothing(store: Store) -> None:
    a, b = make_chunk("a"), make_chunk("b")
    store.save_chunks("s1", OWNER, [live(a, 1), live(b, 2)])
    unencodable = live(replace(a, text="lone surrogate \ud800"), 1)
    with pytest.raises(UnicodeEncodeError):
        store.commit_plan("s1", OWNER, [entry(b)], ["b"], [unencodable], collections=1)
    assert store.load_session("s1") == fresh_session(a, b)
    assert store.stash_stats("s1") == (0, 0)
    assert store.integrity_check() == "ok"


# Search


def test_exact_phrase_outranks_scattered_words_and_a_single_word(store: Store) -> None:
    stash_texts(
        store,
        {
            "word": "connection pool resized",
            "apart": "refused, then the connection came back",
            "phrase": "after the deploy the server said connection refused to every client",
            "other1": "unrelated build output from the compiler",
            "other2": "notes about the release schedule",
            "other3": "the user asked about dark mode",
        },
    )
    assert hit_ids(store, "connection refused") == ["phrase", "apart", "word"]


def test_hits_carry_snippet_marking_the_match(store: Store) -> None:
    stash_texts(store, {"a": "alpha beta gamma needle delta"})
    hits, _ = store.search(OWNER, "s1", "needle", StashFilter(), 10, 0)
    assert "«needle»" in hits[0].snippet
    assert (hits[0].chunk_id, hits[0].session_id, hits[0].action) == ("a", "s1", Action.STASH)
    assert hits[0].stash_id == stash_id_of(make_chunk("a", "alpha beta gamma needle delta"))


def test_search_matches_word_forms(store: Store) -> None:
    stash_texts(store, {"a": "the tests were failing on CI"})
    assert hit_ids(store, "failed test") == ["a"]


def test_search_with_no_match_is_empty(store: Store) -> None:
    stash_texts(store, {"a": "something else entirely"})
    assert store.search(OWNER, "s1", "zebra", StashFilter(), 10, 0) == ([], None)


@pytest.mark.parametrize(
    "query", ['"', '""', "AND", "OR NOT", "*", "NEAR(", "-", "^", "a:b", "(((", '"unclosed', "\\"]
)
def test_operator_only_queries_never_error(store: Store, query: str) -> None:
    stash_texts(store, {"a": "and or not near a b"})
    hits, _ = store.search(OWNER, "s1", query, StashFilter(), 10, 0)
    assert all(h.chunk_id == "a" for h in hits)


def test_operator_words_are_searched_as_text(store: Store) -> None:
    stash_texts(store, {"a": "read NEAR the end", "b": "nothing here"})
    assert hit_ids(store, "NEAR(") == ["a"]


def test_fts_query_quotes_every_word() -> None:
    assert fts_query('foo "bar" AND*') == '"foo bar AND" OR "foo" OR "bar" OR "AND"'
    assert fts_query('" * -') is None


def test_blank_query_lists_newest_first(store: Store) -> None:
    store.stash([entry(make_chunk("old"), at_ms=1), entry(make_chunk("new"), at_ms=2)])
    assert hit_ids(store, "  ") == ["new", "old"]


def test_blank_query_snippet_is_the_start_of_the_text(store: Store) -> None:
    stash_texts(store, {"long": "x" * (BROWSE_SNIPPET_CHARS + 50), "short": "tiny"})
    hits, _ = store.search(OWNER, "s1", "", NO_FILTER, 10, 0)
    assert {h.chunk_id: h.snippet for h in hits} == {
        "long": "x" * BROWSE_SNIPPET_CHARS + "…",
        "short": "tiny",
    }


def test_search_is_scoped_by_owner(store: Store) -> None:
    store.stash(
        [
            entry(make_chunk("mine", "secret plan")),
            entry(make_chunk("theirs", "secret plan"), owner="bob"),
        ]
    )
    assert hit_ids(store, "secret") == ["mine"]


def test_empty_session_id_searches_all_sessions_of_the_owner(store: Store) -> None:
    store.stash(
        [
            entry(make_chunk("a", "shared word"), session_id="s1"),
            entry(make_chunk("b", "shared word"), session_id="s2"),
        ]
    )
    hits, _ = store.search(OWNER, "", "shared", StashFilter(), 10, 0)
    assert sorted(h.session_id for h in hits) == ["s1", "s2"]
    assert hit_ids(store, "shared") == ["a"]


def test_kind_filter(store: Store) -> None:
    store.stash(
        [
            entry(make_chunk("log", "boom", kind=ChunkKind.LOG)),
            entry(make_chunk("code", "boom", kind=ChunkKind.CODE)),
        ]
    )
    assert hit_ids(store, "boom", StashFilter(kinds=(ChunkKind.LOG, ChunkKind.NOTE))) == ["log"]


def test_tags_filter_needs_every_tag(store: Store) -> None:
    store.stash(
        [
            entry(make_chunk("both", "boom", tags=("ci", "flaky"))),
            entry(make_chunk("one", "boom", tags=("ci",))),
            entry(make_chunk("none", "boom")),
        ]
    )
    assert hit_ids(store, "boom", StashFilter(tags=("ci", "flaky"))) == ["both"]


def test_file_path_filter(store: Store) -> None:
    store.stash(
        [
            entry(make_chunk("a", "boom", file_path="a.py")),
            entry(make_chunk("b", "boom", file_path="b.py")),
        ]
    )
    assert hit_ids(store, "boom", StashFilter(file_path="b.py")) == ["b"]


def test_task_id_filter(store: Store) -> None:
    store.stash(
        [entry(make_chunk("a", "boom", task_id="t1")), entry(make_chunk("b", "boom", task_id="t2"))]
    )
    assert hit_ids(store, "boom", StashFilter(task_id="t1")) == ["a"]


def test_time_range_filter_is_from_inclusive_to_exclusive(store: Store) -> None:
    store.stash([entry(make_chunk(f"at{t}", "boom"), at_ms=t) for t in (10, 20, 30)])
    assert sorted(hit_ids(store, "boom", StashFilter(from_ms=20, to_ms=30))) == ["at20"]
    assert sorted(hit_ids(store, "boom", StashFilter(from_ms=20))) == ["at20", "at30"]


def test_paging_covers_every_hit_once(store: Store) -> None:
    stash_texts(store, {f"c{i}": "boom " * (i + 1) for i in range(7)})
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        hits, offset = store.search(OWNER, "s1", "boom", StashFilter(), 3, offset)
        seen.extend(h.chunk_id for h in hits)
    assert sorted(seen) == sorted(f"c{i}" for i in range(7))
    assert len(seen) == 7


def test_last_page_has_no_next_offset(store: Store) -> None:
    stash_texts(store, {"a": "boom", "b": "boom"})
    assert store.search(OWNER, "s1", "boom", StashFilter(), 2, 0)[1] is None
    assert store.search(OWNER, "s1", "boom", StashFilter(), 1, 0)[1] == 1


def test_nonpositive_limit_is_refused(store: Store) -> None:
    with pytest.raises(InvalidArgument, match="limit"):
        store.search(OWNER, "s1", "x", StashFilter(), 0, 0)


# Retention caps


def capped(data_dir: Path, entries: int = 100_000, size: int = 1 << 30) -> Store:
    return Store(str(data_dir), stash_max_entries=entries, stash_max_bytes=size)


def test_entry_cap_drops_oldest_ephemeral_first_and_logs(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = capped(data_dir, entries=3)
    try:
        store.stash([entry(make_chunk(f"log{t}", kind=ChunkKind.LOG), at_ms=t) for t in (3, 1, 2)])
        with caplog.at_level(logging.WARNING, logger="ctxopt.store"):
            store.stash([entry(make_chunk("msg"), at_ms=4)])
        assert sorted(store.get_stashed("s1", ["log1", "log2", "log3", "msg"])) == [
            "log2",
            "log3",
            "msg",
        ]
        assert "log1@" in caplog.text and "EPHEMERAL" in caplog.text
    finally:
        store.close()


def test_entry_cap_without_ephemeral_refuses_the_whole_write(data_dir: Path) -> None:
    store = capped(data_dir, entries=2)
    try:
        store.stash([entry(make_chunk("a")), entry(make_chunk("log", kind=ChunkKind.LOG))])
        with pytest.raises(ResourceExhausted) as refused:
            store.stash([entry(make_chunk("b")), entry(make_chunk("c"))])
        assert (refused.value.field, refused.value.value) == ("stash_max_entries", 2)
        assert sorted(store.get_stashed("s1", ["a", "log", "b", "c"])) == ["a", "log"]
    finally:
        store.close()


def test_byte_cap_refuses_a_non_ephemeral_overflow(data_dir: Path) -> None:
    store = capped(data_dir, size=10)
    try:
        with pytest.raises(ResourceExhausted) as refused:
            store.stash([entry(make_chunk("a", "x" * 11))])
        assert (refused.value.field, refused.value.value) == ("stash_max_bytes", 10)
        assert store.stash_stats("s1") == (0, 0)
    finally:
        store.close()


def test_cap_never_drops_what_is_being_written(data_dir: Path) -> None:
    store = capped(data_dir, entries=1)
    try:
        with pytest.raises(ResourceExhausted):
            store.stash([entry(make_chunk(f"log{i}", kind=ChunkKind.LOG)) for i in range(2)])
    finally:
        store.close()


def test_refused_commit_plan_leaves_the_session_untouched(data_dir: Path) -> None:
    store = capped(data_dir, entries=1)
    try:
        a, b = make_chunk("a"), make_chunk("b")
        store.save_chunks("s1", OWNER, [live(a, 1), live(b, 2)])
        with pytest.raises(ResourceExhausted):
            store.commit_plan("s1", OWNER, [entry(a), entry(b)], ["a", "b"], [], collections=1)
        assert store.load_session("s1") == fresh_session(a, b)
    finally:
        store.close()


# Export / import


def test_export_import_round_trip_is_exact(store: Store, tmp_path: Path) -> None:
    store.save_chunks("s1", OWNER, [live(RICH_CHUNK, 1, born=2), live(make_chunk("plain"), 2)])
    store.update_session("s1", 4)
    store.stash([entry(replace(RICH_CHUNK, id="gone", embedding=(1 / 3, 0.5)), action=Action.MASK)])
    exported = store.export_session("s1")
    text = json.dumps(exported, ensure_ascii=False)

    fresh = Store(str(tmp_path / "fresh"))
    try:
        assert fresh.import_session(json.loads(text), "carol", replace=False) == "s1"
        assert fresh.export_session("s1") == exported
        restored = fresh.get_stashed("s1", ["gone"])["gone"].chunk
        assert restored.text.encode() == RICH_CHUNK.text.encode()
        assert restored.embedding == (1 / 3, 0.5)
        assert fresh.session_owner("s1") == "carol"
    finally:
        fresh.close()


def test_export_is_human_readable(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(RICH_CHUNK, 1)])
    chunk = store.export_session("s1")["chunks"][0]["chunk"]  # type: ignore[index]
    assert (chunk["role"], chunk["kind"], chunk["policy"]) == ("TOOL", "TOOL_RESULT", "PRESERVABLE")
    assert chunk["text"] == RICH_CHUNK.text


def test_export_of_unknown_session_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="session_id"):
        store.export_session("nope")


def test_import_over_existing_session_needs_replace(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    exported = store.export_session("s1")
    with pytest.raises(FailedPrecondition, match="replace"):
        store.import_session(exported, OWNER, replace=False)


def test_import_with_replace_overwrites_session_and_stash(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    exported = store.export_session("s1")
    store.save_chunks("s1", OWNER, [live(make_chunk("later"), 2)])
    store.stash([entry(make_chunk("stashed later"))])
    store.import_session(exported, OWNER, replace=True)
    assert store.export_session("s1") == exported


def test_import_over_another_owners_session_is_denied(store: Store) -> None:
    store.save_chunks("s1", "bob", [live(make_chunk("a"), 1)])
    exported = store.export_session("s1")
    with pytest.raises(PermissionDenied):
        store.import_session(exported, OWNER, replace=True)


def test_malformed_import_names_the_field_and_writes_nothing(store: Store) -> None:
    store.save_chunks("s1", OWNER, [live(make_chunk("a"), 1)])
    exported = json.loads(json.dumps(store.export_session("s1")))
    exported["session_id"] = "s2"
    exported["chunks"][0]["chunk"]["role"] = "WIZARD"
    with pytest.raises(InvalidArgument, match=r"json\.chunks\[0\]\.chunk\.role"):
        store.import_session(exported, OWNER, replace=False)
    assert store.load_session("s2") is None
