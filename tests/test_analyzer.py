"""The analyzer turns chat and code into BM25 terms."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import Stemmer
from ctxopt.text.analyzer import MAX_TERM_CHARS, STOPWORDS, Analyzer
from hypothesis import example, given, settings
from hypothesis import strategies as st

PLAIN = Analyzer(split_identifiers=False, stopwords=False, stem=False)
FULL = Analyzer(split_identifiers=True)
DEFAULT = Analyzer()


def test_plain_mode_is_lowercase_word_splitting() -> None:
    assert PLAIN.terms("Hello, World! snake_case os.path 42") == [
        "hello",
        "world",
        "snake_case",
        "os",
        "path",
        "42",
    ]


def test_stopwords_are_dropped() -> None:
    assert Analyzer(split_identifiers=False, stem=False).terms("The cat is on the mat") == [
        "cat",
        "mat",
    ]


def test_words_are_stemmed_with_snowball_english() -> None:
    assert Analyzer(split_identifiers=False, stopwords=False).terms("running tests failed") == [
        "run",
        "test",
        "fail",
    ]


def test_the_default_drops_stopwords_and_stems_but_keeps_identifiers_whole() -> None:
    assert DEFAULT.terms("The parser_config is Running os.path") == [
        "parser_config",
        "run",
        "os",
        "path",
    ]


def test_snake_case_keeps_the_whole_and_its_parts() -> None:
    assert FULL.terms("query_terms") == ["query_terms", "queri", "term"]


def test_camel_case_splits_at_case_changes() -> None:
    assert FULL.terms("getHTTPServerError") == [
        "gethttpservererror",
        "get",
        "http",
        "server",
        "error",
    ]


def test_dotted_names_keep_the_whole_and_its_parts() -> None:
    assert FULL.terms("os.path.join") == ["os.path.join", "os", "path", "join"]


def test_paths_keep_the_whole_path_and_its_file_name() -> None:
    assert FULL.terms("src/ctxopt/tokens.py") == [
        "src/ctxopt/tokens.py",
        "tokens.py",
        "src",
        "ctxopt",
        "token",
        "py",
    ]


def test_a_mention_of_a_file_matches_its_path() -> None:
    assert "tokens.py" in FULL.terms("see tokens.py")
    assert "tokens.py" in FULL.terms("edit pyserver/ctxopt/tokens.py")


def test_trailing_punctuation_is_not_part_of_an_identifier() -> None:
    assert FULL.terms("Done.") == ["done"]
    assert FULL.terms("(see ./setup.py.)") == ["see", "setup.py", "setup", "py"]


def test_parts_of_identifiers_drop_stopwords_but_the_whole_stays() -> None:
    assert FULL.terms("is_valid") == ["is_valid", "valid"]


def test_dunder_names_reduce_to_their_word() -> None:
    assert FULL.terms("__init__") == ["init"]


def test_non_ascii_words_are_lowercased_and_split_at_unicode_punctuation() -> None:
    assert FULL.terms("Café\u2019s naïve ÄRGER") == ["café", "naïv", "ärger"]


def test_identifier_splitting_off_splits_at_dots_and_slashes_only() -> None:
    analyzer = Analyzer(split_identifiers=False, stopwords=False, stem=False)
    assert analyzer.terms("getScores a/b.py") == ["getscores", "a", "b", "py"]


def test_very_long_runs_are_cut() -> None:
    (term,) = PLAIN.terms("f" * 5000)
    assert term == "f" * MAX_TERM_CHARS


def test_repeated_words_repeat_their_terms() -> None:
    assert FULL.terms("error error") == ["error", "error"]


def test_empty_and_punctuation_only_texts_have_no_terms() -> None:
    assert FULL.terms("") == []
    assert FULL.terms(" ... --- !!! ") == []


def test_lone_surrogates_do_not_break_analysis() -> None:
    assert FULL.terms("bad\ud800text") == ["bad", "text"]


def test_concurrent_callers_get_the_same_terms() -> None:
    analyzer = Analyzer(split_identifiers=True)
    texts = [f"parse_config{i} raises KeyError in module{i % 13}.py" for i in range(300)]
    expected = [Analyzer(split_identifiers=True).terms(t) for t in texts]
    results: list[list[list[str]]] = []

    def work() -> None:
        results.append([analyzer.terms(t) for t in texts])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 4


@pytest.mark.parametrize("text", ["KeyError: 'x'", "a.b_c/dEf", "über_Straße.py"])
def test_the_same_text_always_gives_the_same_terms(text: str) -> None:
    assert FULL.terms(text) == FULL.terms(text) == Analyzer(split_identifiers=True).terms(text)


# Words, their stems and parts, and the separators around them: a term's lines
# must not depend on how its raw tokens sit in the text.
LINE_PIECES = ["cat", "cats", "Cat", "concat", "cat_x", "a/cat.py", "the", "über", "\ud800"]
LINE_PIECES += [" ", "\n", "\n\n", ".", "/", "\t", "é", "x" * 300, "cat" * 90]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(LINE_PIECES), max_size=30).map("".join))
@example("cat\ncat cat\n.cat.\nconcat")
def test_line_postings_are_what_each_lines_terms_give(text: str) -> None:
    """Found from the text's distinct tokens, not line by line: still, per
    wanted term, exactly the lines whose own terms hold it."""
    for analyzer in (PLAIN, FULL, DEFAULT):
        lines = [set(analyzer.terms(line)) for line in text.split("\n")]
        held = set().union(*lines)
        wanted = frozenset({*held, "cat", "absent"})
        expected = {t: tuple(i for i, ts in enumerate(lines) if t in ts) for t in wanted}
        assert analyzer.line_postings(text, wanted) == {t: n for t, n in expected.items() if n}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*LINE_PIECES, "Cats", "CAT", "of", "a_cat"]), max_size=40))
def test_term_counts_are_the_counted_terms_in_first_occurrence_order(pieces: list[str]) -> None:
    """Counted as the cache lookups give them: still `Counter(terms)`'s keys
    and values, in first-occurrence order (the index numbers new terms in
    that order), for every analyzer and a fresh or a warm cache."""
    text = "".join(pieces)
    for analyzer in (PLAIN, FULL, DEFAULT, Analyzer()):
        counted = Counter(analyzer.terms(text))
        assert analyzer.term_counts(text) == (list(counted), list(counted.values()))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["The", "running", "Runs", "x" * 90, "don", "BETWEEN", "42", "a_b"])
        | st.text(alphabet="aZe9_s", min_size=1, max_size=9),
        max_size=12,
    ),
    st.booleans(),
    st.booleans(),
)
def test_a_new_ascii_word_gets_the_plain_steps(
    words: list[str], stopwords: bool, stem: bool
) -> None:
    """A miss on one ASCII word takes a written-out path (no call per step):
    still lowercased, cut, stopwords dropped and stemmed as `_words` does."""
    stemmer = Stemmer.Stemmer("english")
    analyzer = Analyzer(stopwords=stopwords, stem=stem)
    for word in words:
        lowered = word.lower()[:MAX_TERM_CHARS]
        kept = [] if stopwords and lowered in STOPWORDS else [lowered]
        assert analyzer.terms(word) == (stemmer.stemWords(kept) if stem else kept)
