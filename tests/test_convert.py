"""Proto <-> model conversion: every field carried, defaults filled from the
server's configuration, unknown enum numbers named by field."""

from __future__ import annotations

from typing import Any, cast

import pytest
from ctxopt.api.grpc import convert
from ctxopt.config import Config
from ctxopt.errors import InvalidArgument
from ctxopt.model import (
    DEFAULT_RECENT_TURNS,
    Action,
    Breakdown,
    Chunk,
    ChunkKind,
    Decision,
    Decisions,
    GcPolicy,
    Plan,
    PlanOutcome,
    Repair,
    Role,
    Weights,
)
from ctxopt.v1 import ctxopt_pb2 as pb
from hypothesis import given, settings
from hypothesis import strategies as st


def test_a_chunk_keeps_every_field() -> None:
    msg = pb.Chunk(
        id="c1",
        role=pb.ROLE_TOOL,
        kind=pb.CHUNK_KIND_TOOL_RESULT,
        text="out",
        tokens=3,
        created_at_ms=5,
        turn=2,
        pinned=True,
        policy=pb.GC_POLICY_PARTIAL,
        group_id="g",
        parent_id="p",
        references=["a"],
        file_path="f.py",
        line_start=1,
        line_end=9,
        tags=["t"],
        topic_id="topic",
        task_id="task",
        boost=0.5,
        embedding=[0.25, 0.5],
        summary_of=["s"],
        metadata={"k": "v"},
    )
    chunk = convert.chunk_from_pb(msg, "chunks[0]")
    assert (chunk.role, chunk.kind, chunk.policy) == (
        Role.TOOL,
        ChunkKind.TOOL_RESULT,
        GcPolicy.PARTIAL,
    )
    assert (chunk.references, chunk.tags, chunk.summary_of) == (("a",), ("t",), ("s",))
    assert (chunk.embedding, chunk.metadata, chunk.boost) == ((0.25, 0.5), {"k": "v"}, 0.5)
    assert (chunk.line_start, chunk.line_end, chunk.turn, chunk.pinned) == (1, 9, 2, True)


def test_an_unknown_enum_number_is_named_by_its_field() -> None:
    msg = pb.Chunk(id="c", role=cast(pb.Role, 42), kind=pb.CHUNK_KIND_MESSAGE, text="x")
    with pytest.raises(InvalidArgument, match=r"chunks\[3\]\.role"):
        convert.chunks_from_pb([pb.Chunk()] * 3 + [msg])


def test_unset_budget_percentages_come_from_the_configuration() -> None:
    config = Config(gc_threshold_percent=70.0, gc_target_percent=50.0, gc_pressure_percent=85.0)
    budget = convert.budget_from_pb(pb.Budget(context_limit_tokens=1000), config)
    assert (budget.threshold_percent, budget.target_percent, budget.pressure_percent) == (
        70.0,
        50.0,
        85.0,
    )
    given = convert.budget_from_pb(pb.Budget(context_limit_tokens=1000, target_percent=40), config)
    assert given.target_percent == 40.0


def test_unset_roots_and_weights_take_the_engine_defaults_but_explicit_zero_is_kept() -> None:
    assert convert.roots_from_pb(pb.Roots()).recent_turns == DEFAULT_RECENT_TURNS
    assert convert.roots_from_pb(pb.Roots(recent_turns=0)).recent_turns == 0
    weights = convert.weights_from_pb(pb.Weights(recency=0.0))
    assert weights.recency == 0.0 and weights.bm25 == Weights().bm25


def test_an_update_leaves_unset_fields_as_none() -> None:
    update = convert.update_from_pb(pb.ChunkUpdate(id="c", touch=True), "updates[0]")
    assert (update.pinned, update.references, update.boost, update.touch) == (
        None,
        None,
        None,
        True,
    )
    replaced = convert.update_from_pb(
        pb.ChunkUpdate(id="c", replace_references=True, pinned=False), "updates[0]"
    )
    assert (replaced.references, replaced.pinned) == ((), False)


@pytest.mark.parametrize("token", ["x1", "-1", "1" * 13])
def test_a_page_token_this_server_did_not_issue_is_refused(token: str) -> None:
    with pytest.raises(InvalidArgument, match="page_token"):
        convert.page_offset(token)


def test_a_plan_keeps_decisions_repairs_and_totals() -> None:
    breakdown = Breakdown(0.1, 0.2, 0.3, 0.0, 0.0, True, False, 0.6)
    decision = Decision(
        "c", Action.MASK, 100, 10, 0.6, breakdown, ("masked_tool_result",), "[..]", "c@1"
    )
    plan = Plan(
        kept_ids=["a"],
        decisions=Decisions.of([decision]),
        tokens_before=200,
        tokens_after=110,
        target_tokens=120,
        outcome=PlanOutcome.LANDED,
        repairs=[Repair("first_user_turn", "u", "d")],
    )
    msg = convert.plan_to_pb(plan)
    assert list(msg.kept_ids) == ["a"]
    (out,) = msg.decisions
    assert (out.action, out.tokens_after, out.stash_id) == (pb.ACTION_MASK, 10, "c@1")
    assert out.breakdown.total == pytest.approx(0.6) and out.breakdown.reachable
    assert (msg.repairs[0].rule, msg.tokens_after, msg.target_tokens) == (
        "first_user_turn",
        110,
        120,
    )


def _plain_chunk(msg: pb.Chunk) -> Chunk:
    """The plain definition `chunk_from_pb` reaches with less work: every field read."""
    return Chunk(
        id=msg.id,
        role=Role(msg.role),
        kind=ChunkKind(msg.kind),
        text=msg.text,
        tokens=msg.tokens,
        created_at_ms=msg.created_at_ms,
        turn=msg.turn,
        pinned=msg.pinned,
        policy=GcPolicy(msg.policy),
        group_id=msg.group_id,
        parent_id=msg.parent_id,
        references=tuple(msg.references),
        file_path=msg.file_path,
        line_start=msg.line_start,
        line_end=msg.line_end,
        tags=tuple(msg.tags),
        topic_id=msg.topic_id,
        task_id=msg.task_id,
        boost=msg.boost,
        embedding=tuple(msg.embedding),
        summary_of=tuple(msg.summary_of),
        metadata=dict(msg.metadata),
    )


_texts = st.text(max_size=6)
_ids = st.lists(_texts, max_size=3)
_numbers = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_chunk_fields = st.fixed_dictionaries(
    {},
    optional={
        "id": _texts,
        "role": st.sampled_from([int(r) for r in Role]),
        "kind": st.sampled_from([int(k) for k in ChunkKind]),
        "text": _texts,
        "tokens": _numbers,
        "created_at_ms": st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "turn": _numbers,
        "pinned": st.booleans(),
        "policy": st.sampled_from([int(p) for p in GcPolicy]),
        "group_id": _texts,
        "parent_id": _texts,
        "references": _ids,
        "file_path": _texts,
        "line_start": _numbers,
        "line_end": _numbers,
        "tags": _ids,
        "topic_id": _texts,
        "task_id": _texts,
        "boost": st.floats(allow_nan=False, width=64),
        "embedding": st.lists(st.floats(allow_nan=False, width=32), max_size=3),
        "summary_of": _ids,
        "metadata": st.dictionaries(_texts, _texts, max_size=2),
    },
)


@settings(max_examples=300, deadline=None)
@given(fields=_chunk_fields)
def test_a_chunk_read_from_its_set_fields_equals_reading_every_field(
    fields: dict[str, Any],
) -> None:
    msg = pb.Chunk(**fields)
    assert convert.chunk_from_pb(msg, "chunks[0]") == _plain_chunk(msg)


@pytest.mark.parametrize("name", ["role", "kind", "policy"])
def test_each_unknown_enum_field_is_named(name: str) -> None:
    fields: dict[str, Any] = {name: 42}
    msg = pb.Chunk(id="c", text="x", **fields)
    with pytest.raises(InvalidArgument, match=rf"chunks\[0\]\.{name}"):
        convert.chunk_from_pb(msg, "chunks[0]")
