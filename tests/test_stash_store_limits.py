"""The stash's loose ends: search statistics per owner, the byte cap counting the
search terms, and a reindex at open in bounded, resumable batches."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from ctxopt.errors import ResourceExhausted
from ctxopt.model import Action, Chunk, ChunkKind, Role, StashFilter
from ctxopt.session import stash_id_of
from ctxopt.store import DB_FILE, Change, StashEntry, Store, ranking, schema
from ctxopt.text.analyzer import Analyzer

from tests.test_stash_search import hit_ids, stash_texts


def scored(store: Store, query: str, owner: str) -> list[tuple[str, float]]:
    hits, _ = store.search(owner, "", query, StashFilter(), 100, 0)
    return [(h.chunk_id, h.score) for h in hits]


def test_one_owners_originals_never_move_anothers_ranking(data_dir: Path) -> None:
    store = Store(str(data_dir))
    try:
        stash_texts(
            store,
            {"a1": "alpha alpha gamma", "a2": "beta delta epsilon", "a3": "alpha beta"},
            owner="alice",
        )
        before = scored(store, "alpha beta", "alice")
        # bob's originals are full of one of alice's query words
        bob = {f"b{i}": f"alpha filler {i}" for i in range(40)}
        store.commit(
            Change(
                "s2",
                "bob",
                stash=[entry(k, v, session_id="s2", owner="bob") for k, v in bob.items()],
            )
        )
        after = scored(store, "alpha beta", "alice")
        assert [c for c, _ in after] == [c for c, _ in before]
        assert [s for _, s in after] == pytest.approx([s for _, s in before], rel=1e-9)
        assert len(hit_ids(store, "alpha", owner="bob")) == len(bob)
    finally:
        store.close()


def entry(chunk_id: str, text: str, *, session_id: str = "s1", owner: str) -> StashEntry:
    chunk = Chunk(id=chunk_id, role=Role.USER, kind=ChunkKind.MESSAGE, text=text)
    return StashEntry(
        stash_id_of(chunk), session_id, owner, chunk, Action.STASH, ("low_score",), 0.1, 1, "p1"
    )


def test_the_byte_cap_counts_the_search_terms_beside_the_text(data_dir: Path) -> None:
    text = " ".join(f"word{i}" for i in range(100))  # its terms weigh as much as it does
    terms = " ".join(Analyzer().terms(text))
    cap = len(text.encode()) + len(terms.encode())
    fits = Store(str(data_dir / "fits"), stash_max_bytes=cap)
    over = Store(str(data_dir / "over"), stash_max_bytes=cap - 1)
    try:
        fits.commit(Change("s1", "alice", stash=[entry("c1", text, owner="alice")]))
        with pytest.raises(ResourceExhausted):
            over.commit(Change("s1", "alice", stash=[entry("c1", text, owner="alice")]))
    finally:
        fits.close()
        over.close()


class CutShort(Analyzer):
    """An analyzer that fails after `limit` texts, as a kill mid-reindex would."""

    def __init__(self, limit: int) -> None:
        super().__init__(split_identifiers=True)
        self.calls = 0
        self.limit = limit

    def terms(self, text: str) -> list[str]:
        self.calls += 1
        if self.calls > self.limit:
            raise RuntimeError("cut short")
        return super().terms(text)


def test_a_reindex_runs_in_batches_and_one_cut_short_resumes(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema, "REINDEX_BATCH", 50)
    texts = {f"c{i}": f"parseConfigFile{i} failed in loadSettings" for i in range(400)}
    store = Store(str(data_dir))
    stash_texts(store, texts)
    store.close()
    # another analyzer (identifier splitting): every original is analysed again
    with pytest.raises(RuntimeError, match="cut short"):
        Store(str(data_dir), analyzer=CutShort(limit=220))
    conn = sqlite3.connect(data_dir / DB_FILE)
    try:
        split = conn.execute(
            "SELECT count(*) FROM stash WHERE ' ' || terms || ' ' LIKE '% config %'"
        ).fetchone()
    finally:
        conn.close()
    assert split[0] == 200, "the four batches finished before the cut are kept"
    resumed = CutShort(limit=10_000)
    store = Store(str(data_dir), analyzer=resumed)
    try:
        assert resumed.calls < len(texts), "the reindex went on where it stopped"
        assert hit_ids(store, "file0") == ["c0"] and hit_ids(store, "file399") == ["c399"]
        assert store.integrity_check() == "ok"
    finally:
        store.close()
    conn = sqlite3.connect(data_dir / DB_FILE)
    try:
        indexed = conn.execute("SELECT count(*) FROM stash_fts WHERE stash_fts MATCH 'config'")
        assert indexed.fetchone()[0] == len(texts), "every original indexed once"
    finally:
        conn.close()


def test_alone_in_the_store_an_owner_is_ranked_by_fts5_with_the_same_scores(
    data_dir: Path,
) -> None:
    """The shortcut (FTS5's bm25() when the owner holds every entry) and the
    per-owner ranking give one order and one score to each hit."""
    store = Store(str(data_dir))
    try:
        texts = {
            "a1": "alpha alpha gamma retry",
            "a2": "beta delta epsilon alpha beta",
            "a3": "alpha beta gamma",
            "a4": "retry the alpha beta step twice alpha beta",
        }
        stash_texts(store, texts, owner="alice")
        shortcut = scored(store, "alpha beta", "alice")
        with store._reading() as cur:
            ids = dict(cur.execute("SELECT id, chunk_id FROM stash"))
            terms = store.analyzer.terms("alpha beta")
            ranked = ranking.ranked_ids(cur, "alice", "", terms, StashFilter())
        per_owner = [(ids[row_id], score) for row_id, score in ranked]
        assert [c for c, _ in per_owner] == [c for c, _ in shortcut]
        assert [s for _, s in per_owner] == pytest.approx([s for _, s in shortcut], rel=1e-9)
    finally:
        store.close()
