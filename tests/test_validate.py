"""The stateless checks every front shares, one rule per test."""

from __future__ import annotations

import math

import pytest
from ctxopt import validate
from ctxopt.config import Config
from ctxopt.errors import InvalidArgument, ResourceExhausted
from ctxopt.model import Action, Budget, ChunkUpdate
from ctxopt.store import Exported, StashEntry, StoredChunk, StoredSession

from tests.factory import chunk

CONFIG = Config()


def exported(*seqs: int, stash: tuple[str, ...] = (), origin: str = "") -> Exported:
    chunks = [StoredChunk(chunk(f"c{i}"), seq, 0, 0) for i, seq in enumerate(seqs)]
    if origin:
        chunks[0] = StoredChunk(chunks[0].chunk, chunks[0].seq, 0, 0, origin)
    entries = [
        StashEntry(s, "s", "", chunk(s.split("@")[0]), Action.STASH, (), 0.0, 1, "") for s in stash
    ]
    return Exported(StoredSession("s", "", 2, chunks), entries)


def test_an_export_keeps_the_positions_a_server_leaves() -> None:
    checked = validate.validate_export(exported(0, 3, 7), CONFIG)
    assert [c.seq for c in checked.session.chunks] == [0, 3, 7]


@pytest.mark.parametrize("seqs", [(2_000_000_000, 5), (4, 4, 1)], ids=["huge", "duplicate"])
def test_absurd_or_repeated_positions_are_renumbered_in_their_order(seqs: tuple[int, ...]) -> None:
    checked = validate.validate_export(exported(*seqs), CONFIG)
    order = sorted(range(len(seqs)), key=lambda i: (seqs[i], i))
    assert [checked.session.chunks[i].seq for i in order] == list(range(len(seqs)))


def test_an_export_is_checked_like_an_append_and_names_the_path() -> None:
    bad = exported(0, 1)
    bad.session.chunks[1] = StoredChunk(chunk("c1", boost=math.inf), 1, 0, 0)
    with pytest.raises(InvalidArgument, match=r"json\.chunks\[1\]\.chunk\.boost"):
        validate.validate_export(bad, CONFIG)


def test_an_origin_must_name_a_stash_entry_and_stash_ids_are_unique() -> None:
    validate.validate_export(exported(0, stash=("c0@1",), origin="c0@1"), CONFIG)
    with pytest.raises(InvalidArgument, match=r"json\.chunks\[0\]\.origin"):
        validate.validate_export(exported(0, stash=("c0@1",), origin="c0@2"), CONFIG)
    with pytest.raises(InvalidArgument, match=r"json\.stash\[1\]\.stash_id"):
        validate.validate_export(exported(0, stash=("x@1", "x@1")), CONFIG)


def test_a_generation_past_the_collections_is_refused() -> None:
    bad = exported(0)
    bad.session.chunks[0] = StoredChunk(chunk("c0"), 0, 3, 0)  # collections is 2
    with pytest.raises(InvalidArgument, match=r"json\.chunks\[0\]\.born"):
        validate.validate_export(bad, CONFIG)


def test_target_tokens_overrides_the_target_percent_check() -> None:
    validate.validate_budget(Budget(1000, threshold_percent=50, target_tokens=400))
    with pytest.raises(InvalidArgument, match="target_percent"):
        validate.validate_budget(Budget(1000, threshold_percent=50, target_percent=60))


def test_a_window_beyond_any_model_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="context_limit_tokens"):
        validate.validate_budget(Budget(10**30))


def test_an_update_may_not_reference_its_own_chunk() -> None:
    with pytest.raises(InvalidArgument, match=r"updates\[0\]\.references\[1\]"):
        validate.validate_updates([ChunkUpdate("a", references=("b", "a"))])


def test_a_query_embedding_must_be_finite_and_not_too_long() -> None:
    with pytest.raises(InvalidArgument, match=r"query_embedding\[1\]"):
        validate.validate_query_embedding((0.5, math.nan), CONFIG)
    with pytest.raises(ResourceExhausted, match="query_embedding"):
        validate.validate_query_embedding((0.5,) * (CONFIG.max_embedding_dim + 1), CONFIG)


@pytest.mark.parametrize("limit", [-1, 0, validate.MAX_SEARCH_LIMIT + 1])
def test_a_search_limit_outside_1_to_100_is_refused(limit: int) -> None:
    with pytest.raises(InvalidArgument, match="limit"):
        validate.validate_search(limit, 0)
