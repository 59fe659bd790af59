"""The store's stash search (FTS5): ranking, snippets, operators, filters, paging."""

from __future__ import annotations

import pytest
from ctxopt.errors import InvalidArgument
from ctxopt.model import Action, ChunkKind, StashFilter
from ctxopt.session import stash_id_of
from ctxopt.store import Store
from ctxopt.store.search import BROWSE_SNIPPET_CHARS, match_query

from tests.stored import NO_FILTER, OWNER, entry, hit_ids, make_chunk, stash, stash_texts


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
