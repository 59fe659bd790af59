"""The registry's sessions: staged upserts, slots, and compaction of dead slots."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import UpsertStatus
from ctxopt.session import Session
from ctxopt.session import session as session_module
from ctxopt.session.columns import Entry
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.termblob import DocTerms
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import factory
from tests.factory import chunk


def session_of(*ids: str) -> Session:
    session = Session("s", "", Analyzer())
    for chunk_id in ids:
        session.upsert(chunk(chunk_id), 3, 0)
    return session


def test_staged_changes_nothing_and_gives_new_ids_the_slots_they_get() -> None:
    session = session_of("a", "b", "c")
    session.remove("b")
    before = dict(session.entries)
    staged = session.staged(
        [chunk("d"), chunk("b"), chunk("a"), chunk("c", "new")], [1, 2, 3, 4], 9
    )
    assert session.entries == before  # nothing applied yet
    assert [(e.chunk.id, e.slot) for e in staged] == [("d", 3), ("b", 1), ("c", 2)]  # a unchanged
    for entry in staged:
        session.restore_entry(entry)
    assert [session.slot_ids[s] for s in session.live_slots()] == ["a", "b", "c", "d"]


def test_upsert_reports_added_updated_unchanged() -> None:
    session = session_of("a")
    assert session.upsert(chunk("a"), 3, 0) == UpsertStatus.UNCHANGED
    assert session.upsert(chunk("a", "other"), 3, 0) == UpsertStatus.UPDATED
    assert session.upsert(chunk("b"), 3, 0) == UpsertStatus.ADDED


def test_compaction_waits_until_dead_slots_are_many_and_outnumber_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_module, "COMPACT_MIN_DEAD_SLOTS", 4)
    session = session_of(*"abcdefghij")
    for chunk_id in "abcd":
        session.remove(chunk_id)
    assert not session.needs_compaction()  # 4 dead: not more than the minimum
    for chunk_id in "efg":
        session.remove(chunk_id)
    assert session.needs_compaction()  # 7 dead, 3 live


def test_compaction_renumbers_in_prompt_order_and_forgets_dead_ids() -> None:
    session = session_of("a", "b", "c", "d")
    session.remove("a")
    session.remove("c")
    scores_before = session.index.scores(["text"], session.n_slots)[session.live_slots()]
    session.compact(session.compacted())
    assert session.slot_ids == ["b", "d"]
    assert session.slot_by_id == {"b": 0, "d": 1}
    assert session.tokens_total == 6
    assert list(session.index.scores(["text"], session.n_slots)) == list(scores_before)
    assert session.slots_for(["a"]) == {"a": 2}  # a forgotten id comes back at the end


def test_compaction_never_reuses_an_index_version() -> None:
    """Caches keyed by the index version (the pruner's line book) see a rebuild as a change."""
    session = session_of(*"abcdef")
    for chunk_id in "abcd":
        session.remove(chunk_id)
    before = session.index.version
    session.compact(session.compacted())
    after = session.index.version
    session.upsert(chunk("g"), 3, 0)
    assert before < after < session.index.version


def test_a_session_that_keeps_stashing_holds_bounded_slots_and_survives_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_module, "COMPACT_MIN_DEAD_SLOTS", 32)
    config = replace(Config(), data_dir=str(tmp_path / "data"))
    engine = Engine(config)
    live: list[str] = []
    for i in range(400):
        engine.append("", "s", [chunk(f"c{i}", f"turn {i} text", turn=i)])
        live.append(f"c{i}")
        if len(live) > 12:
            engine.remove("", "s", [live.pop(0)], stash_originals=True)
    session = engine.registry.get("s")
    assert session is not None
    assert session.n_slots <= 12 + 2 * 32
    order = [c["chunk"]["id"] for c in json.loads(engine.export_session("", "s"))["chunks"]]
    assert order == live
    engine.restore("", "s", ["c0"], budget=None, force=False)  # forgotten long ago: back at the end
    engine.close()

    reopened = Engine(config)
    try:
        again = json.loads(reopened.export_session("", "s"))
        assert [c["chunk"]["id"] for c in again["chunks"]] == [*live, "c0"]
        assert [c["seq"] for c in again["chunks"]] == sorted(c["seq"] for c in again["chunks"])
    finally:
        reopened.close()


def test_a_compacted_session_plans_like_a_fresh_one_with_the_same_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_module, "COMPACT_MIN_DEAD_SLOTS", 8)
    texts = [
        f"step {i}: ran pytest on module_{i % 7}.py\n" + "line of output\n" * 40 for i in range(60)
    ]
    warm = factory.engine()
    for i, text in enumerate(texts):
        warm.append("", "s", [chunk(f"c{i}", text, turn=i)])
        warm.optimize("", "s", factory.options(10_000, "module_3", dry_run=True))
        if i >= 12:
            warm.remove("", "s", [f"c{i - 12}"], stash_originals=True)
    warm_session = warm.registry.get("s")
    assert warm_session is not None and warm_session.n_slots < 60  # it compacted
    fresh = factory.engine()
    fresh.append("", "s", [chunk(f"c{i}", texts[i], turn=i) for i in range(48, 60)])
    request = factory.options(2_000, "module_3 pytest", dry_run=True)
    plans = [e.optimize("", "s", request) for e in (warm, fresh)]
    assert [(d.chunk_id, d.action, d.replacement_text) for d in plans[0].decisions] == [
        (d.chunk_id, d.action, d.replacement_text) for d in plans[1].decisions
    ]
    assert plans[0].kept_ids == plans[1].kept_ids


# ---- a batch of entries equals restoring them one at a time -------------------

_WORDS = ["parser", "raised", "KeyError", "the", "timeout", "loop", "café", "x" * 90]
_texts = st.lists(st.sampled_from(_WORDS), max_size=5).map(" ".join)
_entry_st = st.tuples(
    st.sampled_from(["a", "b", "c", "d", "e"]),
    _texts,
    st.sampled_from(["", "f.py", "g.py"]),
    st.lists(st.sampled_from(["a", "b", "z"]), max_size=2),
    st.booleans(),  # its terms known (as a commit knows them) or analysed
)


def session_state(session: Session) -> tuple[object, ...]:
    n = session.n_slots
    view = session.view()
    index = session.index
    return (
        session.entries,
        session.slot_ids,
        [getattr(view.columns, name).tolist() for name in view.columns.NAMES],
        {name: dict(getattr(session.hubs, name)) for name in ("by_file", "by_group")},
        session.out_edges,
        dict(session.in_edges),
        session.tokens_total,
        index.version,
        [index.document_frequency(w) for w in ("parser", "keyerror", "timeout", "café")],
        index.scores(["parser", "keyerror", "café", "x" * 80], n).tolist(),
    )


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(_entry_st, max_size=6), max_size=3), removed=st.booleans())
def test_restoring_a_batch_equals_restoring_each_entry_in_order(
    batches: list[list[tuple[str, str, str, list[str], bool]]], removed: bool
) -> None:
    """New, known, removed and repeated ids, known and unknown terms: the
    batch leaves the session as `restore_entry` one entry at a time does."""
    analyzer = Analyzer()
    one, batched = Session("s", "", analyzer), Session("s", "", analyzer)
    for number, batch in enumerate(batches):
        entries, docs = [], []
        for chunk_id, text, path, refs, known in batch:
            made = chunk(chunk_id, text or "-", file_path=path, references=tuple(refs))
            slot = one.slots_for([chunk_id])[chunk_id]
            entries.append(Entry(made, slot, len(text) + 1, number, 0))
            docs.append(DocTerms.of(analyzer.terms(made.text)) if known else None)
        for entry, doc in zip(entries, docs, strict=True):
            one.restore_entry(entry, doc)
        batched.restore_entries(entries, docs)
        assert session_state(batched) == session_state(one)
        if removed and batch:
            one.remove(batch[0][0])
            batched.remove(batch[0][0])
