"""Bad input to the engine: a clear error naming the field and the value, and
the session exactly as it was, case by case."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from ctxopt.errors import CtxoptError, InvalidArgument, NotFound, ResourceExhausted
from ctxopt.model import Chunk, ChunkUpdate, GcPolicy, Role

from tests.factory import chunk, conversation, engine

S = "s"
GOOD = chunk("new", "a new turn", turn=99)


def embedded(chunk_id: str, dim: int) -> Chunk:
    return chunk(chunk_id, f"text of {chunk_id}", embedding=tuple(0.5 for _ in range(dim)))


CASES: list[tuple[str, list[Chunk], type[CtxoptError], str, str]] = [
    ("empty text", [replace(GOOD, text="")], InvalidArgument, "chunks[0].text", "''"),
    (
        "oversized text",
        [replace(GOOD, text="x" * 2001)],
        ResourceExhausted,
        "chunks[0].text",
        "2,001 characters",
    ),
    ("duplicate ids", [GOOD, replace(GOOD, text="again")], InvalidArgument, "chunks[1].id", "new"),
    ("no role", [replace(GOOD, role=Role.UNSPECIFIED)], InvalidArgument, "chunks[0].role", "0"),
    (
        "invalid kind",
        [replace(GOOD, kind=99)],  # type: ignore[arg-type]
        InvalidArgument,
        "chunks[0].kind",
        "99",
    ),
    (
        "invalid policy",
        [replace(GOOD, policy=42)],  # type: ignore[arg-type]
        InvalidArgument,
        "chunks[0].policy",
        "42",
    ),
    ("NaN boost", [replace(GOOD, boost=math.nan)], InvalidArgument, "chunks[0].boost", "nan"),
    ("infinite boost", [replace(GOOD, boost=math.inf)], InvalidArgument, "chunks[0].boost", "inf"),
    ("embedding dimension", [embedded("e2", 4)], InvalidArgument, "chunks[0].embedding", "4"),
    (
        "good then bad",
        [GOOD, replace(GOOD, id="b", text="")],
        InvalidArgument,
        "chunks[1].text",
        "''",
    ),
]


@pytest.mark.parametrize(
    ("chunks", "error", "field", "value"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_append_names_field_and_value_and_changes_nothing(
    chunks: list[Chunk], error: type[CtxoptError], field: str, value: str
) -> None:
    e = engine(max_text_chars=2000)
    e.append("", S, [*conversation(4), embedded("e1", 3)])
    before = e.export_session("", S)
    with pytest.raises(error) as raised:
        e.append("", S, chunks)
    assert raised.value.field == field
    assert value in str(raised.value)
    assert e.export_session("", S) == before


def test_unknown_session_is_not_found_and_not_created() -> None:
    e = engine()
    with pytest.raises(NotFound) as raised:
        e.update("", "ghost", [ChunkUpdate("x", pinned=True)])
    assert raised.value.field == "session_id" and "ghost" in str(raised.value)
    with pytest.raises(NotFound):
        e.stats("", "ghost")


def test_bad_update_changes_nothing() -> None:
    e = engine()
    e.append("", S, conversation(4))
    before = e.export_session("", S)
    updates = [ChunkUpdate("t0", pinned=True), ChunkUpdate("t1", boost=math.nan)]
    with pytest.raises(InvalidArgument) as raised:
        e.update("", S, updates)
    assert raised.value.field == "updates[1].boost"
    updates = [ChunkUpdate("t0", pinned=True), ChunkUpdate("missing", policy=GcPolicy.LOCKED)]
    with pytest.raises(NotFound):
        e.update("", S, updates)
    assert e.export_session("", S) == before
