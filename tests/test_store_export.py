"""The store's export and import: exact round trips, and refusals that write nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from ctxopt.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from ctxopt.model import Action
from ctxopt.store import Change, Store, read_export

from tests.stored import OWNER, RICH_CHUNK, entry, live, make_chunk, save, stash


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
