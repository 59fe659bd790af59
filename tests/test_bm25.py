"""The incremental BM25 index scores exactly as rank_bm25.BM25Okapi does on
the live documents in slot order, through any sequence of edits."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import numpy.typing as npt
import pytest
from ctxopt.session import Session
from ctxopt.text import bm25
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.bm25 import BM25Index
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from tests.factory import chunk

TOLERANCE = 1e-9
SLOTS = 12
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta"]


def expected_scores(
    docs: dict[int, list[str]], query: list[str], n_slots: int
) -> npt.NDArray[np.float64]:
    """BM25Okapi over the live documents in slot order, spread back to slots."""
    order = sorted(docs)
    reference = BM25Okapi([docs[slot] for slot in order]).get_scores(query)
    spread = np.zeros(n_slots)
    spread[order] = reference
    return spread


def index_of(docs: dict[int, list[str]]) -> BM25Index:
    index = BM25Index()
    for slot, terms in docs.items():
        index.set_doc(slot, terms)
    return index


def assert_matches(index: BM25Index, docs: dict[int, list[str]], query: list[str]) -> None:
    scores = index.scores(query, SLOTS)
    assert scores.dtype == np.float64
    assert scores.shape == (SLOTS,)
    np.testing.assert_allclose(scores, expected_scores(docs, query, SLOTS), rtol=0, atol=TOLERANCE)


# ---- plain cases -------------------------------------------------------------


def test_scores_equal_bm25okapi_on_a_small_corpus() -> None:
    docs = {0: ["alpha", "beta"], 1: ["beta", "gamma", "gamma"], 2: ["delta"], 3: ["alpha"]}
    assert_matches(index_of(docs), docs, ["gamma", "alpha"])


def test_empty_and_removed_slots_score_zero() -> None:
    docs = {1: ["alpha", "beta"], 4: ["beta", "gamma"], 7: ["gamma"]}
    index = index_of(docs)
    index.remove_doc(4)
    del docs[4]
    scores = index.scores(["beta", "gamma"], SLOTS)
    assert scores[[0, 2, 3, 4, 5, 6, 8]].tolist() == [0.0] * 7
    assert_matches(index, docs, ["beta", "gamma"])


def test_a_term_in_more_than_half_the_documents_gets_epsilon_times_mean_idf() -> None:
    docs = {0: ["alpha"], 1: ["alpha"], 2: ["alpha", "beta"], 3: ["gamma"]}
    index = index_of(docs)
    assert_matches(index, docs, ["alpha"])
    assert index.scores(["alpha"], SLOTS)[0] > 0  # the floor keeps it positive here


def test_a_repeated_query_term_counts_each_time() -> None:
    docs = {0: ["alpha", "beta"], 1: ["beta"], 2: ["gamma"]}
    index = index_of(docs)
    once = index.scores(["alpha"], SLOTS)
    twice = index.scores(["alpha", "alpha"], SLOTS)
    np.testing.assert_allclose(twice, 2 * once, rtol=0, atol=TOLERANCE)
    assert_matches(index, docs, ["alpha", "alpha"])


def test_an_unknown_query_term_adds_nothing() -> None:
    docs = {0: ["alpha"], 1: ["beta"], 2: ["gamma"]}
    index = index_of(docs)
    np.testing.assert_array_equal(
        index.scores(["alpha", "nowhere"], SLOTS), index.scores(["alpha"], SLOTS)
    )


def test_an_empty_document_counts_in_the_corpus_size_and_average_length() -> None:
    docs: dict[int, list[str]] = {0: ["alpha", "beta"], 1: [], 2: ["gamma"], 3: ["beta"]}
    index = index_of(docs)
    assert len(index) == 4
    assert_matches(index, docs, ["alpha", "beta"])


def test_set_doc_on_an_occupied_slot_replaces_the_document() -> None:
    index = index_of({0: ["alpha"], 1: ["beta"], 2: ["gamma"]})
    index.set_doc(1, ["delta", "delta"])
    docs = {0: ["alpha"], 1: ["delta", "delta"], 2: ["gamma"]}
    assert len(index) == 3
    assert index.scores(["beta"], SLOTS).tolist() == [0.0] * SLOTS
    assert_matches(index, docs, ["delta", "alpha"])


def test_a_removed_slot_can_be_filled_again() -> None:
    index = index_of({0: ["alpha"], 1: ["beta"], 2: ["gamma"]})
    index.remove_doc(1)
    index.set_doc(1, ["beta", "alpha"])
    docs = {0: ["alpha"], 1: ["beta", "alpha"], 2: ["gamma"]}
    assert_matches(index, docs, ["alpha", "beta"])


def test_len_counts_live_documents() -> None:
    index = index_of({0: ["alpha"], 3: ["beta"], 5: []})
    index.remove_doc(3)
    assert len(index) == 2


def test_an_empty_index_scores_zero() -> None:
    index = BM25Index()
    assert index.scores(["alpha"], 3).tolist() == [0.0, 0.0, 0.0]


def test_removing_the_last_document_leaves_an_empty_index() -> None:
    index = index_of({2: ["alpha"]})
    index.remove_doc(2)
    assert len(index) == 0
    assert index.scores(["alpha"], 3).tolist() == [0.0, 0.0, 0.0]


def test_removing_an_empty_slot_is_an_error_naming_the_slot() -> None:
    index = index_of({0: ["alpha"]})
    with pytest.raises(KeyError, match="slot 5"):
        index.remove_doc(5)


def test_a_negative_slot_is_rejected() -> None:
    with pytest.raises(ValueError, match="slot"):
        BM25Index().set_doc(-1, ["alpha"])


def test_n_slots_below_a_live_slot_is_rejected() -> None:
    index = index_of({0: ["alpha"], 9: ["beta"]})
    with pytest.raises(ValueError, match="n_slots"):
        index.scores(["alpha"], 5)


def replace_all(index: BM25Index, docs: dict[int, list[str]], round_: int) -> None:
    """Give every slot a new document of 3,000 distinct terms plus a shared one."""
    for slot in range(SLOTS):
        docs[slot] = ["shared", *(f"r{round_}s{slot}t{i}" for i in range(3000))]
        index.set_doc(slot, docs[slot])


def test_replaced_documents_do_not_accumulate_memory() -> None:
    index, docs = BM25Index(), dict[int, list[str]]()
    replace_all(index, docs, 0)
    first = index.memory_bytes()
    for round_ in range(1, 6):
        replace_all(index, docs, round_)
    assert index.memory_bytes() < 3 * first
    assert_matches(index, docs, ["shared", "r5s3t7", "r0s3t7"])


def test_all_empty_documents_score_zero() -> None:
    index = index_of({0: [], 1: []})
    assert index.scores(["alpha"], 2).tolist() == [0.0, 0.0]


def test_memory_grows_with_the_postings() -> None:
    small, large = index_of({0: WORDS}), index_of({i: WORDS for i in range(SLOTS)})
    assert 0 < small.memory_bytes() < large.memory_bytes()


# ---- property: random corpora and random edit sequences ---------------------

terms_st = st.lists(st.sampled_from(WORDS), max_size=8)
edit_st: st.SearchStrategy[tuple[str, int, list[str]]] = st.one_of(
    st.tuples(st.just("set"), st.integers(0, SLOTS - 1), terms_st),
    st.tuples(st.just("remove"), st.integers(0, SLOTS - 1), st.just([])),
)
query_st = st.lists(st.sampled_from([*WORDS, "unseen"]), max_size=6)


@settings(max_examples=200, deadline=None)
@given(edits=st.lists(edit_st, min_size=1, max_size=30), query=query_st)
def test_any_edit_sequence_scores_like_bm25okapi_rebuilt_from_scratch(
    edits: list[tuple[str, int, list[str]]], query: list[str]
) -> None:
    index = BM25Index()
    docs: dict[int, list[str]] = {}
    for action, slot, terms in edits:
        if action == "set":
            index.set_doc(slot, terms)
            docs[slot] = terms
        elif slot in docs:
            index.remove_doc(slot)
            del docs[slot]
        # score between edits too: cached postings must follow every change
        if docs and any(docs.values()):
            assert_matches(index, docs, query)
    assert len(index) == len(docs)


# ---- the session's index through relinks ------------------------------------


def test_a_relink_with_the_same_text_keeps_the_indexed_document() -> None:
    session = Session("s", "", Analyzer())
    session.upsert(chunk("a", "the parser raised KeyError"), 5, 0)
    session.upsert(chunk("b", "unrelated words here"), 3, 0)
    version = session.index.version
    before = session.index.scores(["keyerror"], session.n_slots)
    entry = session.entries["a"]
    session.restore_entry(replace(entry, chunk=replace(entry.chunk, pinned=True)))
    assert session.entries["a"].chunk.pinned
    assert session.index.version == version  # not analysed or indexed again
    assert np.array_equal(session.index.scores(["keyerror"], session.n_slots), before)


def test_a_relink_with_new_text_indexes_the_new_text() -> None:
    session = Session("s", "", Analyzer())
    session.upsert(chunk("a", "the parser raised KeyError"), 5, 0)
    session.upsert(chunk("b", "unrelated words here"), 3, 0)
    entry = session.entries["a"]
    session.restore_entry(replace(entry, chunk=replace(entry.chunk, text="timeout in the loop")))
    assert session.index.document_frequency("keyerror") == 0
    assert session.index.document_frequency("timeout") == 1


# ---- bulk indexing equals indexing one document at a time --------------------


def index_state(index: BM25Index) -> tuple[object, ...]:
    """Everything a reader of the index can observe, and the postings behind it."""
    terms = len(index._postings)
    return (
        index.version,
        len(index),
        dict(index._term_ids),
        [p.tobytes() for p in index._postings],
        index._df[:terms].tolist(),
        index._term_changed[:terms].tolist(),
        index._doc_terms[: index._end],
        index._slot_uid[: index._end].tolist(),
        index._doc_len[: index._end].tolist(),
        index._total_len,
        index._end,
    )


counted_st = st.dictionaries(st.sampled_from([*WORDS, "unseen"]), st.integers(1, 3), max_size=6)
batch_st = st.lists(st.tuples(st.integers(0, SLOTS - 1), counted_st), max_size=6)


@settings(max_examples=300, deadline=None)
@given(before=batch_st, batches=st.lists(batch_st, max_size=3), query=query_st)
def test_bulk_indexing_equals_indexing_one_document_at_a_time(
    before: list[tuple[int, dict[str, int]]],
    batches: list[list[tuple[int, dict[str, int]]]],
    query: list[str],
) -> None:
    """Any batch (empty, repeated or occupied slots fall back to one at a time)
    leaves the index as `set_doc_counts` in order does, postings and versions
    included; so do the scores read between batches. The batches here are
    small: the bulk path is taken from one document on."""
    with mock.patch.object(bm25, "BULK_MIN_DOCS", 1):
        _check_bulk_against_one_at_a_time(before, batches, query)


def _check_bulk_against_one_at_a_time(
    before: list[tuple[int, dict[str, int]]],
    batches: list[list[tuple[int, dict[str, int]]]],
    query: list[str],
    n_slots: int = SLOTS,
) -> None:
    one, bulk = BM25Index(), BM25Index()
    for slot, counted in before:
        one.set_doc_counts(slot, list(counted), list(counted.values()))
        bulk.set_doc_counts(slot, list(counted), list(counted.values()))
    for batch in batches:
        for slot, counted in batch:
            one.set_doc_counts(slot, list(counted), list(counted.values()))
        bulk.set_docs_counts(
            [slot for slot, _ in batch],
            [list(counted) for _, counted in batch],
            [list(counted.values()) for _, counted in batch],
        )
        assert index_state(bulk) == index_state(one)
        assert np.array_equal(bulk.scores(query, n_slots), one.scores(query, n_slots))


def test_a_batch_at_the_bulk_size_is_indexed_as_one_document_at_a_time() -> None:
    """At the default threshold (no patch), the smallest batch indexed in bulk."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    batch = [
        (slot, {w: 1 + (slot + i) % 3 for i, w in enumerate(words[: 1 + slot % 5])})
        for slot in range(1, bm25.BULK_MIN_DOCS + 1)
    ]
    _check_bulk_against_one_at_a_time(
        [(0, {"alpha": 2})], [batch], ["alpha", "gamma"], len(batch) + 1
    )


def test_a_bulk_batch_whose_terms_and_counts_differ_in_length_is_refused() -> None:
    with pytest.raises(ValueError, match="terms, counts"):
        BM25Index().set_docs_counts([0, 1], [["alpha"], ["beta"]], [[1], [1, 2]])


def test_a_bulk_batch_of_empty_documents_counts_them_in_the_corpus() -> None:
    bulk, one = BM25Index(), index_of({0: ["alpha"]})
    bulk.set_doc(0, ["alpha"])
    bulk.set_docs_counts([1, 2], [[], []], [[], []])
    one.set_doc(1, [])
    one.set_doc(2, [])
    assert index_state(bulk) == index_state(one)
