"""The line facts a plan made of each text are stored beside it, so a
restart's first plan reads them instead of making them again
(scoring/lineblob.py): the restored facts must be the ones made from the
text, the plans those of a restart that makes them and of a fresh engine, and
a blob that does not match its text, rules or checksum is never trusted."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Chunk, ChunkKind, Role
from ctxopt.scoring import line_value
from ctxopt.scoring.lineblob import CITED, NAMES, PROFILE, LineBlobs, TextFacts, remembered
from ctxopt.session import session as session_module
from ctxopt.store import DB_FILE
from ctxopt.text.bm25 import BM25Index
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import chunk, options
from tests.stored import as_of_version

S = "s"
MEMOS = (line_value.names_memo, line_value.cited_memo, line_value.profile_memo)
BLOBS = LineBlobs()


def output(n: int) -> str:
    """A tool output with what every fact reads: numbered lines under a class
    and a def, a traceback and an error line, paths and names."""
    listing = "".join(
        f"{n * 40 + i:6d}\t        total_{i} = round(order.line_{i} * rate_{n}, 2)\n"
        for i in range(30)
    )
    return (
        f"{n * 40 - 2:6d}\tclass Cart{n}(Base):\n{n * 40 - 1:6d}\t    def total_price(self):\n"
        f"{listing}Traceback (most recent call last):\n"
        f'  File "app/pricing_{n}.py", line {n * 40 + 3}, in total_price\n'
        f"ValueError: tax of step {n} in app/pricing_{n}.py"
    )


def session_chunks(tag: str) -> list[Chunk]:
    """Model steps citing lines of the outputs before them, user turns between."""
    out: list[Chunk] = [chunk("task", f"Repair the pricing module ({tag}): tax rounded twice.")]
    for n in range(1, 9):
        out.append(
            chunk(
                f"m{n}",
                f"THOUGHT ({tag}): view app/pricing_{n}.py; sed -n '{n * 40},{n * 40 + 5}p' "
                f"then fix total_price near line {n * 40 + 3}",
                role=Role.MODEL,
                turn=n,
            )
        )
        out.append(
            chunk(
                f"o{n}",
                f"{output(n)}\n[{tag}]",
                role=Role.TOOL,
                kind=ChunkKind.TOOL_RESULT,
                turn=n,
            )
        )
    return out


def plans(engine: Engine) -> list[object]:
    """The session's plans for a few queries (dry runs: the texts stay)."""
    target = engine.stats("", S).tokens * 4 // 10
    out: list[object] = []
    for query in ("pricing tax", "total_price ValueError", ""):
        plan = engine.optimize("", S, options(target, query, dry_run=True, lean=True))
        out.append([(d.chunk_id, d.action.name, d.replacement_text) for d in plan.decisions])
    return out


def forget_made_facts() -> None:
    """The process-wide caches as a fresh process has them."""
    for memo in MEMOS:
        memo.cache_clear()
    line_value._pooled.clear()  # the model texts' pooled facts, made of the memos'


def made(text: str) -> TextFacts:
    """The facts made from the text, no cache involved."""
    return TextFacts(
        line_value.names_memo.make(text),
        line_value.cited_memo.make(text),
        line_value.profile_memo.make(text),
    )


def appended(engine: Engine, tag: str) -> None:
    engine.append("", S, session_chunks(tag))


def stored(
    data_dir: Path, tag: str, fill: Callable[[Engine, str], None] = appended
) -> list[object]:
    """A session filled (`appended`) and planned (its facts and counts stored),
    then closed; its plans."""
    engine = Engine(Config(data_dir=str(data_dir)))
    fill(engine, tag)
    planned = plans(engine)
    engine.close()
    return planned


def fresh(tag: str, fill: Callable[[Engine, str], None] = appended) -> list[object]:
    forget_made_facts()
    engine = Engine(Config(data_dir=":memory:"))
    fill(engine, tag)
    try:
        return plans(engine)
    finally:
        engine.close()


def blobs(data_dir: Path) -> dict[str, bytes | None]:
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        return dict(conn.execute("SELECT chunk_id, line_blob FROM chunks").fetchall())


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    forget_made_facts()
    yield
    forget_made_facts()


def test_a_restart_reads_the_facts_a_plan_made_and_plans_the_same(tmp_path: Path) -> None:
    before = stored(tmp_path, "restart")
    kept = blobs(tmp_path)
    # every output the plan may shrink, every model text; the recent turns' outputs
    # are roots, never profiled, so none is kept
    assert all(kept[f"o{n}"] for n in range(1, 7)) and all(kept[f"m{n}"] for n in range(1, 9))
    assert kept["o7"] is None is kept["o8"] is kept["task"]
    forget_made_facts()
    engine = Engine(Config(data_dir=str(tmp_path)))
    session = engine.sessions.get("", S)
    assert len(session.index)  # read on first use (engine/kept_plans.py)
    for chunk_id in [*(f"o{n}" for n in range(1, 7)), *(f"m{n}" for n in range(1, 9))]:
        text = session.entries[chunk_id].chunk.text
        facts, fact = remembered(text), made(text)
        assert facts.names == fact.names
        if chunk_id.startswith("o"):
            assert facts.profile == fact.profile
        else:
            assert facts.cited == fact.cited
    misses = [memo.misses for memo in MEMOS]
    after = plans(engine)
    assert line_value.profile_memo.misses == misses[2]  # no output's profile made again
    assert line_value.cited_memo.misses == misses[1]
    engine.close()
    assert after == before == fresh("restart")


def test_a_store_from_before_the_column_opens_plans_the_same_and_keeps_facts(
    tmp_path: Path,
) -> None:
    before = stored(tmp_path, "old")
    as_of_version(tmp_path / DB_FILE, 5)
    forget_made_facts()
    engine = Engine(Config(data_dir=str(tmp_path)))
    assert plans(engine) == before
    engine.close()
    assert all(blobs(tmp_path)[f"o{n}"] for n in range(1, 7))  # the plan stored them


def test_a_damaged_or_foreign_blob_is_made_again_not_trusted(tmp_path: Path) -> None:
    before = stored(tmp_path, "damaged")
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        # a byte of the ints changed (a line's number), one blob cut short, one
        # of another chunk's text, one of another type
        conn.execute(
            "UPDATE chunks SET line_blob = substr(line_blob, 1, 60) || "
            "char(unicode(substr(line_blob, 61, 1)) + 1) || substr(line_blob, 62) "
            "WHERE chunk_id = 'o1'"
        )
        conn.execute("UPDATE chunks SET line_blob = substr(line_blob, 1, 30) WHERE chunk_id = 'o2'")
        conn.execute(
            "UPDATE chunks SET line_blob = (SELECT line_blob FROM chunks WHERE chunk_id = 'o4') "
            "WHERE chunk_id = 'o3'"
        )
        conn.execute("UPDATE chunks SET line_blob = 'text' WHERE chunk_id = 'm1'")
        conn.execute("DELETE FROM kept_sessions")  # the blobs of each text, not the whole's
    forget_made_facts()
    engine = Engine(Config(data_dir=str(tmp_path)))
    session = engine.sessions.get("", S)
    for chunk_id in ("o1", "o2", "o3", "m1"):
        assert remembered(session.entries[chunk_id].chunk.text) == TextFacts()
    assert remembered(session.entries["o4"].chunk.text).profile is not None
    assert plans(engine) == before
    engine.close()
    kept = blobs(tmp_path)
    for chunk_id in ("o1", "o2", "o3", "m1"):  # the plan stored them again, whole
        text = next(c.text for c in session_chunks("damaged") if c.id == chunk_id)
        assert BLOBS.decode(text, kept[chunk_id]) is not None


PIECES = st.sampled_from(
    [
        "   12\tdef total(self):",
        "    class Cart:",
        'File "a/b.py", line 9',
        "ValueError: bad",
        "E   assert x",
        "see line 7 and a.py:3",
        "sed -n '5,9p' x.py",
        "snake_case_name django/db/query.py",
        "plain words",
        "",
        "99999999999999999999\tbig",
        "Straße 日本語",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECES, max_size=12), st.integers(0, 7))
def test_the_codec_gives_back_what_it_was_given_or_nothing(pieces: list[str], held: int) -> None:
    text = "\n".join(pieces)
    found = line_value.names_memo.make(text)
    cited = line_value.cited_memo.make(text)
    made_profile = line_value.profile_memo.make(text)
    facts = TextFacts(
        found if held & NAMES else None,
        cited if held & CITED else None,
        made_profile if held & PROFILE else None,
    )
    blob = BLOBS.encode(text, facts)
    kept_numbers = [
        *(made_profile.all_numbers if held & PROFILE else ()),
        *(cited if held & CITED else ()),
    ]
    if not held or any(n >= 1 << 63 for n in kept_numbers):
        assert blob is None  # nothing to keep, or a number an int64 cannot hold
        return
    assert blob is not None
    decoded = BLOBS.decode(text, blob)
    names = found if held & (NAMES | PROFILE) else None
    assert decoded == TextFacts(names, facts.cited, facts.profile)
    assert BLOBS.decode(text + "!", blob) is None
    for at in (0, 3, len(blob) // 2, len(blob) - 1):
        damaged = blob[:at] + bytes([blob[at] ^ 0x10]) + blob[at + 1 :]
        assert BLOBS.decode(text, damaged) is None


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from("abcdef"), max_size=4), max_size=8),
    st.sets(st.sampled_from("abcdefg"), max_size=3),
    st.sets(st.integers(0, 7), max_size=3),
)
def test_holders_are_the_live_documents_holding_a_term(
    docs: list[list[str]], terms: set[str], removed: set[int]
) -> None:
    index = BM25Index()
    for slot, doc in enumerate(docs):
        index.set_doc(slot, doc)
    for slot in removed & set(range(len(docs))):
        index.remove_doc(slot)
    live = [s for s in range(len(docs)) if s not in removed]
    assert index.holders(terms) == {s for s in live if terms & set(docs[s])}


def test_a_chunk_whose_text_changes_gets_the_facts_of_its_new_text_kept(tmp_path: Path) -> None:
    stored(tmp_path, "changed")
    engine = Engine(Config(data_dir=str(tmp_path)))
    plans(engine)  # a restart's plan: every fact was told, none kept again
    text = f"{output(1)}\n[changed again]"
    engine.append("", S, [chunk("o1", text, role=Role.TOOL, kind=ChunkKind.TOOL_RESULT, turn=1)])
    plans(engine)
    engine.close()
    decoded = BLOBS.decode(text, blobs(tmp_path)["o1"])
    assert decoded is not None and decoded.profile == made(text).profile


def test_a_compacted_session_keeps_the_facts_of_the_chunks_it_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction renumbers the live chunks: what the store holds of each
    moves with its chunk, so a chunk appended later at a slot another chunk
    left gets its own facts kept (a restart then makes none again)."""
    monkeypatch.setattr(session_module, "COMPACT_MIN_DEAD_SLOTS", 1)
    engine = Engine(Config(data_dir=str(tmp_path)))
    engine.append("", S, session_chunks("moved"))
    plans(engine)
    gone = ["task", *(f"{kind}{n}" for n in range(1, 5) for kind in "mo")]
    engine.remove("", S, gone, stash_originals=False)
    assert engine.sessions.get("", S).n_slots == 8  # compacted
    later = [c for c in session_chunks("later") if c.id not in ("task", "m1", "o1")]
    # a user turn first: each later text then lands on the slot a text of its
    # kind left (compacted away), with the facts that one had stored
    user = chunk("u-later", "Now the shipping module, same rounding.", turn=9)
    engine.append("", S, [user, *(replace(c, id=f"{c.id}-later", turn=c.turn + 8) for c in later)])
    plans(engine)
    engine.close()
    kept = blobs(tmp_path)
    for n in range(2, 7):  # every later model text, every later output the plans profiled
        assert kept[f"m{n}-later"] and kept[f"o{n}-later"]
    forget_made_facts()
    engine = Engine(Config(data_dir=str(tmp_path)))
    misses = [memo.misses for memo in MEMOS]
    plans(engine)
    engine.close()
    assert line_value.profile_memo.misses == misses[2]
    assert line_value.cited_memo.misses == misses[1]
