"""The durable store: live sessions, restart and durability, the stash (search,
caps and export/import have their own test modules)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from ctxopt.errors import InvalidArgument, PermissionDenied
from ctxopt.model import Action, GcPolicy
from ctxopt.session import stash_id_of
from ctxopt.store import DB_FILE, Change, Store, StoredChunk, StoredSession

from tests.stored import (
    OWNER,
    RICH_CHUNK,
    entry,
    fresh_session,
    hit_ids,
    live,
    make_chunk,
    save,
    stash,
    stashed,
)

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
