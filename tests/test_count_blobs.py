"""The token counts a session's plans made are stored with the session, so a
restart's first plan reads them instead of counting its excerpts again
(text/countblob.py): the counts told must be the counter's, the plans those
of a restart that counts and of a fresh engine, and a blob that does not
match its counter or checksum is never trusted."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.store import DB_FILE
from ctxopt.text.countblob import CountBlobs
from ctxopt.tokens import KEY_BYTES, TokenCounter, count_key
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.stored import as_of_version
from tests.test_line_blobs import S, forget_made_facts, fresh, plans, session_chunks, stored

COUNTER = TokenCounter()
BLOBS = CountBlobs(COUNTER)


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    forget_made_facts()
    yield
    forget_made_facts()


@pytest.fixture
def tokenised(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts any counter tokenises from now on (its cache's misses)."""
    seen: list[str] = []
    measure = TokenCounter._cl100k

    def spied(self: TokenCounter, text: str) -> int:
        seen.append(text)
        return measure(self, text)

    monkeypatch.setattr(TokenCounter, "_cl100k", spied)
    return seen


def kept_blob(data_dir: Path) -> bytes | None:
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        row = conn.execute("SELECT blob FROM plan_counts WHERE session_id = ?", (S,)).fetchone()
    return None if row is None else bytes(row[0])


def test_a_restart_reads_the_counts_a_plan_made_and_plans_the_same(
    tmp_path: Path, tokenised: list[str]
) -> None:
    before = stored(tmp_path, "restart")
    counts = BLOBS.decode(kept_blob(tmp_path))
    assert counts  # the plans' excerpts
    made = list(tokenised)
    assert {count_key(t): COUNTER.count(t) for t in made if count_key(t) in counts} == counts
    forget_made_facts()
    engine = Engine(Config(data_dir=str(tmp_path)))
    tokenised.clear()  # the counter's probes
    engine.sessions.get("", S)
    assert tokenised == []  # the load tokenises nothing
    after = plans(engine)
    engine.close()
    # every excerpt was counted before the restart: the restart counts none
    assert tokenised == []
    assert after == before == fresh("restart")


def test_a_store_from_before_the_table_opens_plans_the_same_and_keeps_counts(
    tmp_path: Path, tokenised: list[str]
) -> None:
    before = stored(tmp_path, "old")
    as_of_version(tmp_path / DB_FILE, 6)
    forget_made_facts()
    engine = Engine(Config(data_dir=str(tmp_path)))
    tokenised.clear()  # the counter's probes
    assert plans(engine) == before
    engine.close()
    assert tokenised  # nothing stored: the excerpts were counted again
    assert BLOBS.decode(kept_blob(tmp_path))  # and their counts kept by the plan


@pytest.mark.parametrize("damage", ["byte", "cut", "foreign", "type"])
def test_a_damaged_or_foreign_blob_is_counted_again_not_trusted(
    tmp_path: Path, tokenised: list[str], damage: str
) -> None:
    before = stored(tmp_path, f"damaged {damage}")
    blob = kept_blob(tmp_path)
    assert blob is not None
    counts = BLOBS.decode(blob)
    assert counts
    bad: object = {
        "byte": blob[:20] + bytes([blob[20] ^ 1]) + blob[21:],
        "cut": blob[:-9],
        # the same texts' counts by another counter
        "foreign": CountBlobs(TokenCounter("gemini")).encode(counts),
        "type": "x" * 200,  # a column of another type
    }[damage]
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        conn.execute("UPDATE plan_counts SET blob = ?", (bad,))
    forget_made_facts()
    engine = Engine(Config(data_dir=str(tmp_path)))
    tokenised.clear()  # the counter's probes
    assert plans(engine) == before
    engine.close()
    assert tokenised  # counted again
    assert BLOBS.decode(kept_blob(tmp_path)) == counts  # and stored again, whole


def test_a_session_keeps_the_latest_counts_only(tmp_path: Path) -> None:
    """At most `KEPT_COUNTS_PER_CHUNK` per live chunk (at least `MIN_KEPT_COUNTS`):
    the least recently noted go first."""
    from ctxopt.engine import sessions

    engine = Engine(Config(data_dir=str(tmp_path)))
    engine.append("", S, session_chunks("few"))
    session = engine.sessions.get("", S)
    keep = sessions.MIN_KEPT_COUNTS
    engine.sessions.keep_counts(session, {f"text {i}": i for i in range(keep)})
    engine.sessions.keep_counts(session, {"text 0": 0, "newest": 5})
    engine.close()
    counts = BLOBS.decode(kept_blob(tmp_path))
    assert counts is not None and len(counts) == keep
    assert count_key("text 1") not in counts  # the oldest went
    assert list(counts)[-2:] == [count_key("text 0"), count_key("newest")]


KEYS = st.binary(min_size=KEY_BYTES, max_size=KEY_BYTES)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, st.integers(0, 2**32 - 1), max_size=20))
def test_the_codec_gives_back_what_it_was_given(counts: dict[bytes, int]) -> None:
    assert BLOBS.decode(BLOBS.encode(counts)) == counts


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, st.integers(0, 2**32 - 1), min_size=1, max_size=5), st.data())
def test_any_changed_or_missing_byte_is_refused(
    counts: dict[bytes, int], data: st.DataObject
) -> None:
    blob = BLOBS.encode(counts)
    at = data.draw(st.integers(0, len(blob) - 1))
    flipped = blob[:at] + bytes([blob[at] ^ data.draw(st.integers(1, 255))]) + blob[at + 1 :]
    assert BLOBS.decode(flipped) is None
    assert BLOBS.decode(blob[:at]) is None


def test_a_deleted_session_leaves_no_counts(tmp_path: Path) -> None:
    stored(tmp_path, "deleted")
    assert kept_blob(tmp_path) is not None
    engine = Engine(Config(data_dir=str(tmp_path)))
    engine.delete_session("", S, purge_stash=True)
    engine.close()
    assert kept_blob(tmp_path) is None
