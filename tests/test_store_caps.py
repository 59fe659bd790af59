"""Stash retention caps: what goes first when the stash is full, and what is refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from ctxopt.errors import ResourceExhausted
from ctxopt.model import ChunkKind
from ctxopt.store import Change, Store

from tests.stored import OWNER, entry, fresh_session, live, make_chunk, save, stash, stashed


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
