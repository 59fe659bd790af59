"""`Session.restore_kept` links a restart's chunks in bulk (`_link_all`: the
columns as whole arrays): the session it makes must hold exactly what linking
each entry on its own makes (`restore_entries`), every column, edge, hub,
parent, embedding and count, whatever links, flags and gaps the chunks have."""

from __future__ import annotations

import numpy as np
from ctxopt.model import ChunkKind, GcPolicy, Role
from ctxopt.session import Session
from ctxopt.session.columns import Columns, Entry
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.bm25 import BM25Index
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import chunk

IDS = [f"c{i}" for i in range(8)]
NAMES = st.lists(st.sampled_from([*IDS, "gone"]), max_size=3).map(tuple)
KEYS = st.sampled_from(["", "a", "b"])


@st.composite
def entry_of(draw: st.DrawFn, chunk_id: str, slot: int) -> Entry:
    made = chunk(
        chunk_id,
        draw(st.sampled_from(["one", "two\nlines", "x\ny\nz"])),
        role=draw(st.sampled_from(list(Role))),
        kind=draw(st.sampled_from(list(ChunkKind))),
        turn=draw(st.integers(0, 9)),
        created_at_ms=draw(st.integers(0, 10**12)),
        pinned=draw(st.booleans()),
        policy=draw(st.sampled_from(list(GcPolicy))),
        boost=draw(st.floats(-2, 2)),
        parent_id=draw(st.sampled_from(["", *IDS])),
        references=draw(NAMES),
        summary_of=draw(NAMES),
        file_path=draw(KEYS),
        tags=draw(st.lists(KEYS.filter(bool), max_size=2).map(tuple)),
        topic_id=draw(KEYS),
        group_id=draw(KEYS),
        task_id=draw(KEYS),
        embedding=draw(st.sampled_from([(), (0.5, 1.0)])),
    )
    tokens, born = draw(st.integers(0, 500)), draw(st.integers(0, 5))
    return Entry(made, slot, tokens, born, draw(st.integers(0, 99)))


@st.composite
def stored_entries(draw: st.DrawFn) -> list[Entry]:
    """A stored session's entries: distinct ids at increasing slots with gaps."""
    count = draw(st.integers(0, len(IDS)))
    gaps = draw(st.lists(st.integers(0, 2), min_size=count, max_size=count))
    slots = np.cumsum(gaps) + np.arange(count)
    return [draw(entry_of(IDS[i], int(slot))) for i, slot in enumerate(slots)]


def held(session: Session) -> dict[str, object]:
    n = session.n_slots
    hubs = session.hubs
    return {
        "columns": {name: getattr(session.columns, name)[:n].tolist() for name in Columns.NAMES},
        "entries": list(session.entries.items()),
        "slot_ids": session.slot_ids,
        "slot_by_id": session.slot_by_id,
        "hubs": [dict(getattr(hubs, name)) for name in hubs.__slots__],
        "out_edges": session.out_edges,
        "in_edges": dict(session.in_edges),
        "parent_of": session.parent_of,
        "embeddings": {slot: e.tolist() for slot, e in session.embeddings.items()},
        "embedding_dim": session.embedding_dim,
        "tokens_total": session.tokens_total,
        "revision": session.revision,
    }


@settings(max_examples=150, deadline=None)
@given(stored_entries())
def test_a_bulk_restore_holds_what_linking_each_entry_holds(entries: list[Entry]) -> None:
    analyzer = Analyzer()
    bulk = Session("s", "", analyzer)
    bulk.restore_kept(entries, BM25Index())
    each = Session("s", "", analyzer)
    each.restore_entries(entries)
    assert held(bulk) == held(each)
