"""The stateless checks every front shares, one rule per test."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from ctxopt import validate
from ctxopt.config import Config
from ctxopt.errors import InvalidArgument, ResourceExhausted
from ctxopt.model import Action, Budget, Chunk, ChunkKind, ChunkUpdate, GcPolicy, Role
from ctxopt.store import Exported, StashEntry, StoredChunk, StoredSession
from hypothesis import given, settings
from hypothesis import strategies as st

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


# Each field's edge values: valid ones, and each way a check refuses one.
EDGES: dict[str, list[object]] = {
    "id": ["a", "c1", "x" * 256, "x" * 257, "", "tab\there", None],
    "text": ["t", "", "x" * 5, None],
    "role": [Role.MODEL, Role.UNSPECIFIED, 9],
    "kind": [ChunkKind.TOOL_RESULT, 0, 99],
    "policy": [GcPolicy.EPHEMERAL, 77],
    "tokens": [5, validate.MAX_COUNTER, validate.MAX_COUNTER + 1, -1],
    "turn": [3, -2],
    "created_at_ms": [10**12, -1],
    "line_start": [4, -1],
    "line_end": [3, 4, 9, -1],
    "boost": [-1.0, 1.0, 0.5, 1.5, -1.5, math.nan, math.inf, -math.inf],
    "parent_id": ["a", "c1"],
    "embedding": [(0.5,), (math.nan,)],
    "references": [("a",), ("",)],
    "summary_of": [("c1",), ("c0",), ("",)],
}
EDITS = st.tuples(st.integers(0, 5), st.sampled_from(list(EDGES))).flatmap(
    lambda at: st.tuples(st.just(at), st.sampled_from(EDGES[at[1]]))
)


def _verdict(check: Callable[[], None]) -> str:
    try:
        check()
    except (InvalidArgument, ResourceExhausted) as err:
        return f"{type(err).__name__}: {err}"
    return "valid"


def _agree(chunks: list[Chunk]) -> None:
    """The verdict with the whole-batch passes is that of the checks chunk
    by chunk (the error, field path and all), and the passes take every
    valid batch with no links or embeddings."""
    config = Config(max_text_chars=4)
    plain = _verdict(lambda: validate._check_each_chunk(chunks, config, "chunks[{}]".format))
    assert _verdict(lambda: validate.validate_chunks(chunks, config)) == plain
    linked = any(c.embedding or c.references or c.summary_of for c in chunks)
    assert validate._plainly_valid(chunks, config) == (plain == "valid" and not linked)


def _batch(size: int, edits: list[tuple[int, str, object]]) -> list[Chunk]:
    chunks = [Chunk(f"c{i}", Role.USER, ChunkKind.MESSAGE, "t") for i in range(size)]
    for at, name, value in edits:
        setattr(chunks[at % size], name, value)
    return chunks


def test_each_edge_value_anywhere_in_a_batch_gets_the_per_chunk_verdict() -> None:
    """Every field's edge values, one at a time, at each place of batches of
    one to three chunks; then the pairs one field cannot show: a line range
    ending before it starts, a NaN after a valid value."""
    for size in (1, 2, 3):
        for at in range(size):
            for name, values in EDGES.items():
                for value in values:
                    _agree(_batch(size, [(at, name, value)]))
    _agree(_batch(2, [(1, "line_start", 4), (1, "line_end", 3)]))
    _agree(_batch(2, [(0, "line_start", 4), (0, "line_end", 4)]))
    for name, bad in [("boost", math.nan), ("tokens", math.nan), ("turn", -1)]:
        _agree(_batch(3, [(0, name, 0.5 if name == "boost" else 1), (2, name, bad)]))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(EDITS, max_size=3))
def test_a_batch_checked_whole_gets_the_verdict_of_the_checks_chunk_by_chunk(
    size: int, edits: list[tuple[tuple[int, str], object]]
) -> None:
    """Any few edits at once: never a pass the checks refuse, the same first error."""
    _agree(_batch(size, [(at, name, value) for (at, name), value in edits]))


def test_every_rule_refuses_an_edge_value_on_both_paths() -> None:
    """Each row of the rules table refuses one of its fields' edge values
    chunk by chunk (a rule with no edge value here fails this test), and
    neither the row's own batch check nor the whole-batch passes vouch for a
    chunk that row refuses: a row's batch check is never laxer than its check
    of one chunk."""
    config = Config(max_text_chars=4)
    for rule in validate._CHUNK_RULES:
        refused = 0
        for name in rule.fields:
            for value in EDGES[name]:
                (one,) = _batch(1, [(0, name, value)])
                try:
                    rule.check(one, config, "chunks[0]")
                except (InvalidArgument, ResourceExhausted, TypeError):
                    refused += 1
                    assert not _vouched(rule, one, config), (rule.fields, value)
                    assert not validate._plainly_valid([one], config), (rule.fields, value)
        assert refused, f"no edge value for the rule on {rule.fields}"


def _vouched(rule: validate._Rule, one: Chunk, config: Config) -> bool:
    """Whether the row's own batch check passes a batch of just `one` (a
    value of another type is no verdict, as in `_plainly_valid`)."""
    columns = dict(zip(validate._FIELDS, ((v,) for v in validate._CHECKED(one)), strict=True))
    try:
        return rule.holds(columns, config)
    except TypeError:
        return False
