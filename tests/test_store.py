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
from dataclasses import replace
from pathlib import Path

import pytest
from ctxopt.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from ctxopt.model import Action, Chunk, ChunkKind, GcPolicy, Role, StashFilter
from ctxopt.session import stash_id_of
from ctxopt.store import (
    DB_FILE,
    Change,
    StashEntry,
    Store,
    StoredChunk,
    StoredSession,
    read_export,
)
from ctxopt.store.search import BROWSE_SNIPPET_CHARS, match_query

OWNER = "alice"
NO_FILTER = StashFilter()


def make_chunk(chunk_id: str, text: str = "", **fields: object) -> Chunk:
    base = Chunk(
        id=chunk_id, role=Role.USER, kind=ChunkKind.MESSAGE, text=text or f"text {chunk_id}"
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def save(store: Store, session_id: str, owner: str, chunks: list[StoredChunk]) -> None:
    store.commit(Change(session_id, owner, upserts=chunks))


def stash(store: Store, entries: list[StashEntry]) -> None:
    """Each session's entries in one commit."""
    by_session: dict[tuple[str, str], list[StashEntry]] = {}
    for e in entries:
        by_session.setdefault((e.session_id, e.owner), []).append(e)
    for (session_id, owner), group in by_session.items():
        store.commit(Change(session_id, owner, stash=group))


def stashed(store: Store, chunk_ids: list[str], session_id: str = "s1") -> dict[str, StashEntry]:
    return store.latest_stashed(OWNER, session_id, chunk_ids)


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


def fresh_session(*chunks: Chunk) -> StoredSession:
    """Session s1 as `save_chunks` of these chunks at seq 1, 2, ... leaves it."""
    return StoredSession("s1", OWNER, 0, [live(c, i + 1) for i, c in enumerate(chunks)])


def stash_texts(store: Store, texts: dict[str, str], **fields: object) -> None:
    stash(store, [entry(make_chunk(cid, text, **fields)) for cid, text in texts.items()])


def hit_ids(store: Store, query: str, filters: StashFilter = NO_FILTER) -> list[str]:
    hits, _ = store.search(OWNER, "s1", query, filters, 100, 0)
    return [h.chunk_id for h in hits]


# Live sessions


def test_saved_chunk_loads_back_with_every_field(store: Store) -> None:
    save(store, "s1", OWNER, [live(RICH_CHUNK, seq=5, born=2)])
    session = store.load_session("s1")
    assert session is not None
    assert session.chunks == [StoredChunk(RICH_CHUNK, 5, 2, 1005)]
    assert session.chunks[0].chunk.text.encode() == RICH_CHUNK.text.encode()


def test_embedding_not_representable_as_float32_is_kept_exactly(store: Store) -> None:
    chunk = make_chunk("e", embedding=(0.1 + 1e-12, 1 / 3))
    save(store, "s1", OWNER, [live(chunk, 1)])
    session = store.load_session("s1")
    assert session is not None
    assert session.chunks[0].chunk.embedding == (0.1 + 1e-12, 1 / 3)


def test_unknown_session_loads_as_none(store: Store) -> None:
    assert store.load_session("nope") is None
    assert store.owners("nope") == set()


def test_session_owner_is_the_creator(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    assert store.owners("s1") == {OWNER}


def test_chunks_load_in_seq_order(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk(c), seq) for c, seq in [("b", 2), ("c", 3)]])
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    session = store.load_session("s1")
    assert session is not None
    assert [c.chunk.id for c in session.chunks] == ["a", "b", "c"]


def test_save_chunks_upserts_by_id(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a", "old"), 1)])
    save(store, "s1", OWNER, [live(make_chunk("a", "new"), 1, born=4)])
    session = store.load_session("s1")
    assert session is not None
    assert [(c.chunk.text, c.born) for c in session.chunks] == [("new", 4)]


def test_delete_chunks_removes_only_those_ids(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk(c), i) for i, c in enumerate("abc")])
    store.commit(Change("s1", OWNER, removals=["a", "c", "unknown"]))
    session = store.load_session("s1")
    assert session is not None
    assert [c.chunk.id for c in session.chunks] == ["b"]


def test_commit_sets_collections(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    store.commit(Change("s1", OWNER, collections=3))
    session = store.load_session("s1")
    assert session is not None
    assert session.collections == 3


def test_a_session_id_held_by_one_owner_is_refused_to_another(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    stash(store, [entry(make_chunk("b"), session_id="kept")])
    assert store.delete_session(OWNER, "kept", purge_stash=False) is True
    for session_id in ("s1", "kept"):
        with pytest.raises(PermissionDenied, match="session_id"):
            save(store, session_id, "bob", [live(make_chunk("x"), 1)])
        with pytest.raises(PermissionDenied):
            store.export_session("bob", session_id)
        with pytest.raises(PermissionDenied):
            store.delete_session("bob", session_id, purge_stash=True)
    assert store.latest_stashed("bob", "kept", ["b"]) == {}
    assert list(store.latest_stashed(OWNER, "kept", ["b"])) == ["b"]


def test_delete_session_keeps_its_stash_unless_purged(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    stash(store, [entry(make_chunk("b", "kept original"))])
    assert store.delete_session(OWNER, "s1", purge_stash=False) is True
    assert store.load_session("s1") is None
    assert stashed(store, ["b"])["b"].chunk.text == "kept original"


def test_delete_session_with_purge_drops_its_stash(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    stash(store, [entry(make_chunk("b", "gone"))])
    assert store.delete_session(OWNER, "s1", purge_stash=True) is True
    assert stashed(store, ["b"]) == {}
    assert store.stash_stats("s1") == (0, 0)
    assert hit_ids(store, "gone") == []


def test_delete_of_unknown_session_reports_false(store: Store) -> None:
    assert store.delete_session(OWNER, "nope", purge_stash=True) is False


# Restart and durability


def test_restart_keeps_sessions_pins_generations_and_stash(data_dir: Path) -> None:
    first = Store(str(data_dir))
    pinned = make_chunk("a", pinned=True, policy=GcPolicy.LOCKED)
    save(first, "s1", OWNER, [live(pinned, 1, born=3)])
    first.commit(Change("s1", OWNER, collections=5))
    stash(first, [entry(make_chunk("b", "stashed before restart"))])
    first.close()

    second = Store(str(data_dir))
    try:
        assert second.load_session("s1") == StoredSession("s1", OWNER, 5, [live(pinned, 1, 3)])
        assert stashed(second, ["b"])["b"].chunk.text == "stashed before restart"
        assert hit_ids(second, "restart") == ["b"]
        assert second.integrity_check() == "ok"
    finally:
        second.close()


def test_database_lives_in_the_data_directory_in_wal_mode(store: Store, data_dir: Path) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# Writes plans without pause, printing each one's number once it returned.
_WRITE_FOREVER = """
import sys
from ctxopt.model import Action, Chunk, ChunkKind, Role
from ctxopt.session import stash_id_of
from ctxopt.store import Change, StashEntry, Store, StoredChunk
store = Store(sys.argv[1], fsync=sys.argv[2])
for n in range(1_000_000):
    kept = Chunk(id=f"k{n}", role=Role.USER, kind=ChunkKind.MESSAGE, text=f"kept {n} ✓")
    gone = Chunk(id=f"g{n}", role=Role.MODEL, kind=ChunkKind.MESSAGE, text=f"stashed {n} 🚀" * 50)
    stashed = StashEntry(stash_id_of(gone), "s1", "alice", gone, Action.STASH, (), 0.0, n, "p")
    plan = Change("s1", "alice", [StoredChunk(kept, n, 0, n)], stash=[stashed], collections=n)
    store.commit(plan)
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
        originals = stashed(reopened, [f"g{n}" for n in acked])
        for n in acked:
            assert kept[f"k{n}"] == f"kept {n} ✓"
            assert originals[f"g{n}"].chunk.text == f"stashed {n} 🚀" * 50
    finally:
        reopened.close()


def test_concurrent_writers_all_land(store: Store) -> None:
    def write(thread: int) -> None:
        for i in range(20):
            save(store, f"s{thread}", OWNER, [live(make_chunk(f"c{i}"), i)])
            stash(store, [entry(make_chunk(f"x{i}"), session_id=f"s{thread}")])

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
    stash(store, [original])
    assert stashed(store, ["rich"]) == {"rich": original}


def test_same_original_stashed_twice_is_one_entry(store: Store) -> None:
    chunk = make_chunk("a", tokens=7)
    stash(store, [entry(chunk, at_ms=1, action=Action.TRIM)])
    stash(store, [entry(chunk, at_ms=2, action=Action.STASH)])
    assert store.stash_stats("s1") == (1, 7)
    assert stashed(store, ["a"])["a"].action == Action.STASH


def test_latest_stashed_returns_the_latest_entry_per_chunk(store: Store) -> None:
    stash(
        store, [entry(make_chunk("a", "first"), at_ms=1), entry(make_chunk("a", "second"), at_ms=2)]
    )
    found = stashed(store, ["a", "missing"])
    assert list(found) == ["a"]
    assert found["a"].chunk.text == "second"


def test_stashed_group_members_are_every_member(store: Store) -> None:
    stash(
        store,
        [
            entry(make_chunk("call", group_id="g1")),
            entry(make_chunk("result", group_id="g1")),
            entry(make_chunk("other", group_id="g2")),
        ],
    )
    assert store.stashed_group_members(OWNER, "s1", ["g1"]) == ["call", "result"]


def test_unstash_drops_exactly_the_entries_named(store: Store) -> None:
    v1, v2 = entry(make_chunk("a", "v1"), at_ms=1), entry(make_chunk("a", "v2"), at_ms=2)
    stash(store, [v1, v2, entry(make_chunk("b"))])
    store.commit(Change("s1", OWNER, unstash=[v2.stash_id]))
    assert {k: v.chunk.text for k, v in stashed(store, ["a", "b"]).items()} == {
        "a": "v1",
        "b": "text b",
    }
    assert store.stash_stats("s1")[0] == 2


def test_a_restore_puts_back_and_unstashes_in_one_commit(store: Store) -> None:
    chunk = make_chunk("a", "restored text")
    stash(store, [entry(chunk)])
    store.commit(Change("s1", OWNER, [live(chunk, 4)], unstash=[stash_id_of(chunk)]))
    session = store.load_session("s1")
    assert session is not None
    assert [c.chunk for c in session.chunks] == [chunk]
    assert stashed(store, ["a"]) == {}


def test_stash_stats_count_entries_and_tokens(store: Store) -> None:
    stash(store, [entry(make_chunk("a", tokens=10)), entry(make_chunk("b", tokens=5))])
    assert store.stash_stats("s1") == (2, 15)
    assert store.stash_stats("other") == (0, 0)


def test_a_plan_stashes_removes_and_rewrites_in_one_commit(store: Store) -> None:
    a, b = make_chunk("a", "long original"), make_chunk("b", "removed")
    save(store, "s1", OWNER, [live(a, 1), live(b, 2)])
    trimmed = replace(live(replace(a, text="long…"), 1, born=1), origin=stash_id_of(a))
    store.commit(
        Change(
            "s1",
            OWNER,
            upserts=[trimmed],
            removals=["b"],
            stash=[entry(a, action=Action.TRIM), entry(b)],
            collections=1,
        )
    )
    session = store.load_session("s1")
    assert session is not None
    assert session.chunks == [trimmed]
    assert session.collections == 1
    assert {k: v.chunk for k, v in stashed(store, ["a", "b"]).items()} == {"a": a, "b": b}


def test_a_commit_that_fails_inside_writes_nothing(store: Store) -> None:
    a, b = make_chunk("a"), make_chunk("b")
    save(store, "s1", OWNER, [live(a, 1), live(b, 2)])
    unencodable = live(replace(a, text="lone surrogate \ud800"), 1)
    with pytest.raises(UnicodeEncodeError):
        store.commit(Change("s1", OWNER, [unencodable], ["b"], [entry(b)], collections=1))
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


def test_match_query_quotes_every_term() -> None:
    assert match_query(["foo", 'b"ar', "and"]) == '"foo b""ar and" OR "foo" OR "b""ar" OR "and"'
    assert match_query([]) is None


def test_blank_query_lists_newest_first(store: Store) -> None:
    stash(store, [entry(make_chunk("old"), at_ms=1), entry(make_chunk("new"), at_ms=2)])
    assert hit_ids(store, "  ") == ["new", "old"]


def test_blank_query_snippet_is_the_start_of_the_text(store: Store) -> None:
    stash_texts(store, {"long": "x" * (BROWSE_SNIPPET_CHARS + 50), "short": "tiny"})
    hits, _ = store.search(OWNER, "s1", "", NO_FILTER, 10, 0)
    assert {h.chunk_id: h.snippet for h in hits} == {
        "long": "x" * BROWSE_SNIPPET_CHARS + "…",
        "short": "tiny",
    }


def test_search_is_scoped_by_owner(store: Store) -> None:
    stash(
        store,
        [
            entry(make_chunk("mine", "secret plan")),
            entry(make_chunk("theirs", "secret plan"), session_id="b1", owner="bob"),
        ],
    )
    assert hit_ids(store, "secret") == ["mine"]
    for owner, expected in ((OWNER, ["mine"]), ("bob", ["theirs"])):
        hits, _ = store.search(owner, "", "secret", NO_FILTER, 10, 0)
        assert [h.chunk_id for h in hits] == expected


def test_empty_session_id_searches_all_sessions_of_the_owner(store: Store) -> None:
    stash(
        store,
        [
            entry(make_chunk("a", "shared word"), session_id="s1"),
            entry(make_chunk("b", "shared word"), session_id="s2"),
        ],
    )
    hits, _ = store.search(OWNER, "", "shared", StashFilter(), 10, 0)
    assert sorted(h.session_id for h in hits) == ["s1", "s2"]
    assert hit_ids(store, "shared") == ["a"]


def test_kind_filter(store: Store) -> None:
    stash(
        store,
        [
            entry(make_chunk("log", "boom", kind=ChunkKind.LOG)),
            entry(make_chunk("code", "boom", kind=ChunkKind.CODE)),
        ],
    )
    assert hit_ids(store, "boom", StashFilter(kinds=(ChunkKind.LOG, ChunkKind.NOTE))) == ["log"]


def test_tags_filter_needs_every_tag(store: Store) -> None:
    stash(
        store,
        [
            entry(make_chunk("both", "boom", tags=("ci", "flaky"))),
            entry(make_chunk("one", "boom", tags=("ci",))),
            entry(make_chunk("none", "boom")),
        ],
    )
    assert hit_ids(store, "boom", StashFilter(tags=("ci", "flaky"))) == ["both"]


def test_file_path_filter(store: Store) -> None:
    stash(
        store,
        [
            entry(make_chunk("a", "boom", file_path="a.py")),
            entry(make_chunk("b", "boom", file_path="b.py")),
        ],
    )
    assert hit_ids(store, "boom", StashFilter(file_path="b.py")) == ["b"]


def test_task_id_filter(store: Store) -> None:
    stash(
        store,
        [
            entry(make_chunk("a", "boom", task_id="t1")),
            entry(make_chunk("b", "boom", task_id="t2")),
        ],
    )
    assert hit_ids(store, "boom", StashFilter(task_id="t1")) == ["a"]


def test_time_range_filter_is_from_inclusive_to_exclusive(store: Store) -> None:
    stash(store, [entry(make_chunk(f"at{t}", "boom"), at_ms=t) for t in (10, 20, 30)])
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
        stash(store, [entry(make_chunk(f"log{t}", kind=ChunkKind.LOG), at_ms=t) for t in (3, 1, 2)])
        with caplog.at_level(logging.WARNING, logger="ctxopt.store"):
            stash(store, [entry(make_chunk("msg"), at_ms=4)])
        assert sorted(stashed(store, ["log1", "log2", "log3", "msg"])) == [
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
        stash(store, [entry(make_chunk("a")), entry(make_chunk("log", kind=ChunkKind.LOG))])
        with pytest.raises(ResourceExhausted) as refused:
            stash(store, [entry(make_chunk("b")), entry(make_chunk("c"))])
        assert (refused.value.field, refused.value.value) == ("stash_max_entries", 2)
        assert sorted(stashed(store, ["a", "log", "b", "c"])) == ["a", "log"]
    finally:
        store.close()


def test_byte_cap_refuses_a_non_ephemeral_overflow(data_dir: Path) -> None:
    store = capped(data_dir, size=10)
    try:
        with pytest.raises(ResourceExhausted) as refused:
            stash(store, [entry(make_chunk("a", "x" * 11))])
        assert (refused.value.field, refused.value.value) == ("stash_max_bytes", 10)
        assert store.stash_stats("s1") == (0, 0)
    finally:
        store.close()


def test_cap_never_drops_what_is_being_written(data_dir: Path) -> None:
    store = capped(data_dir, entries=1)
    try:
        with pytest.raises(ResourceExhausted):
            stash(store, [entry(make_chunk(f"log{i}", kind=ChunkKind.LOG)) for i in range(2)])
    finally:
        store.close()


def test_refused_commit_leaves_the_session_untouched(data_dir: Path) -> None:
    store = capped(data_dir, entries=1)
    try:
        a, b = make_chunk("a"), make_chunk("b")
        save(store, "s1", OWNER, [live(a, 1), live(b, 2)])
        with pytest.raises(ResourceExhausted):
            store.commit(
                Change("s1", OWNER, removals=["a", "b"], stash=[entry(a), entry(b)], collections=1)
            )
        assert store.load_session("s1") == fresh_session(a, b)
    finally:
        store.close()


# Export / import


def test_export_import_round_trip_is_exact(store: Store, tmp_path: Path) -> None:
    save(store, "s1", OWNER, [live(RICH_CHUNK, 1, born=2), live(make_chunk("plain"), 2)])
    store.commit(Change("s1", OWNER, collections=4))
    stash(
        store, [entry(replace(RICH_CHUNK, id="gone", embedding=(1 / 3, 0.5)), action=Action.MASK)]
    )
    exported = store.export_session(OWNER, "s1")
    text = json.dumps(exported, ensure_ascii=False)

    fresh = Store(str(tmp_path / "fresh"))
    try:
        fresh.import_session(read_export(json.loads(text), "carol"), replace=False)
        assert fresh.export_session("carol", "s1") == exported
        restored = fresh.latest_stashed("carol", "s1", ["gone"])["gone"].chunk
        assert restored.text.encode() == RICH_CHUNK.text.encode()
        assert restored.embedding == (1 / 3, 0.5)
        assert fresh.owners("s1") == {"carol"}
    finally:
        fresh.close()


def test_export_is_human_readable(store: Store) -> None:
    save(store, "s1", OWNER, [live(RICH_CHUNK, 1)])
    chunk = store.export_session(OWNER, "s1")["chunks"][0]["chunk"]  # type: ignore[index]
    assert (chunk["role"], chunk["kind"], chunk["policy"]) == ("TOOL", "TOOL_RESULT", "PRESERVABLE")
    assert chunk["text"] == RICH_CHUNK.text


def test_export_of_unknown_session_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="session_id"):
        store.export_session(OWNER, "nope")


def test_import_over_existing_session_needs_replace(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    exported = store.export_session(OWNER, "s1")
    with pytest.raises(FailedPrecondition, match="replace"):
        store.import_session(read_export(exported, OWNER), replace=False)


def test_import_with_replace_overwrites_session_and_stash(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    exported = store.export_session(OWNER, "s1")
    save(store, "s1", OWNER, [live(make_chunk("later"), 2)])
    stash(store, [entry(make_chunk("stashed later"))])
    store.import_session(read_export(exported, OWNER), replace=True)
    assert store.export_session(OWNER, "s1") == exported


def test_import_over_another_owners_session_is_denied(store: Store) -> None:
    save(store, "s1", "bob", [live(make_chunk("a"), 1)])
    exported = store.export_session("bob", "s1")
    with pytest.raises(PermissionDenied):
        store.import_session(read_export(exported, OWNER), replace=True)


def test_malformed_import_names_the_field_and_writes_nothing(store: Store) -> None:
    save(store, "s1", OWNER, [live(make_chunk("a"), 1)])
    exported = json.loads(json.dumps(store.export_session(OWNER, "s1")))
    exported["session_id"] = "s2"
    exported["chunks"][0]["chunk"]["role"] = "WIZARD"
    with pytest.raises(InvalidArgument, match=r"json\.chunks\[0\]\.chunk\.role"):
        store.import_session(read_export(exported, OWNER), replace=False)
    assert store.load_session("s2") is None
