"""The plan's invariants over random sessions (hypothesis): protected chunks kept,
landing at the target, tier order, coherence, determinism."""

from __future__ import annotations

import numpy as np
from ctxopt.engine import Engine
from ctxopt.model import (
    Action,
    Budget,
    Chunk,
    ChunkKind,
    GcPolicy,
    OptimizeOptions,
    Plan,
    Role,
    Roots,
    Strategy,
)
from ctxopt.planner.cut import _AppliedKinds
from ctxopt.planner.order import TIER, Steps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factory import engine

WORDS = ["alpha", "beta", "gamma", "delta", "error", "widget", "parser", "cache", "lorem", "ipsum"]
KINDS = [
    ChunkKind.MESSAGE,
    ChunkKind.CODE,
    ChunkKind.LOG,
    ChunkKind.NOTE,
    ChunkKind.TOOL_RESULT,
    ChunkKind.ENRICHMENT,
    ChunkKind.DECISION,
]


@st.composite
def sessions(draw: st.DrawFn) -> list[Chunk]:
    n = draw(st.integers(2, 24))
    chunks = [Chunk("sys", Role.SYSTEM, ChunkKind.SYSTEM, "system instruction", turn=0)]
    for i in range(n):
        role = Role.USER if i == 0 else draw(st.sampled_from([Role.USER, Role.MODEL]))
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=60))
        lines = draw(st.integers(1, 40))
        # a few error lines among lines that differ: a tool output's line excerpt keeps
        # some of its lines, and its tighter size fewer
        errors = draw(st.sets(st.integers(0, lines - 1), max_size=3))
        text = "\n".join(
            " ".join(words[k % len(words) :][:12]) + (" ValueError: bad" if k in errors else "")
            for k in range(lines)
        )
        parent = f"c{draw(st.integers(0, i - 1))}" if i and draw(st.booleans()) else ""
        group = f"g{draw(st.integers(0, 3))}" if draw(st.integers(0, 4)) == 0 else ""
        chunks.append(
            Chunk(
                f"c{i}",
                role,
                draw(st.sampled_from(KINDS)),
                text,
                turn=i,
                pinned=draw(st.integers(0, 9)) == 0,
                policy=draw(st.sampled_from(list(GcPolicy))),
                group_id=group,
                parent_id=parent,
            )
        )
    return chunks


@st.composite
def requests(draw: st.DrawFn, total: int) -> OptimizeOptions:
    limit = draw(st.integers(max(total // 2, 1), total * 2))
    return OptimizeOptions(
        budget=Budget(
            context_limit_tokens=limit,
            # a share of the session, so targets that shrink rather than empty it are common
            target_tokens=max(1, int(total * draw(st.floats(0.0, 1.0)))),
            pressure_percent=draw(st.sampled_from([50.0, 90.0, 100.0])),
        ),
        query=" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4))),
        roots=Roots(recent_turns=draw(st.integers(0, 3))),
        strategy=draw(st.sampled_from([Strategy.HYBRID, Strategy.BUDGET])),
        aggressive=draw(st.booleans()),
        force=True,
    )


def plan_for(chunks: list[Chunk], data: st.DataObject) -> tuple[Engine, Plan, OptimizeOptions]:
    e = engine()
    e.append("", "s", chunks)
    opts = data.draw(requests(e.stats("", "s").tokens))
    return e, e.optimize("", "s", opts), opts


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(sessions(), st.data())
def test_locked_pinned_and_roots_are_never_touched(
    chunks: list[Chunk], data: st.DataObject
) -> None:
    e, plan, _opts = plan_for(chunks, data)
    session = e.registry.get("s")
    assert session is not None
    touched = {d.chunk_id for d in plan.decisions}
    for c in chunks:
        if c.pinned or c.gc_policy == GcPolicy.LOCKED:
            assert c.id not in touched, c


@SETTINGS
@given(sessions(), st.data())
def test_plan_lands_under_target_when_feasible(chunks: list[Chunk], data: st.DataObject) -> None:
    _, plan, _opts = plan_for(chunks, data)
    assert plan.tokens_after <= plan.tokens_before
    if plan.feasible:
        assert plan.tokens_after <= plan.target_tokens
    else:
        assert plan.explanation


@SETTINGS
@given(sessions(), st.data())
def test_preservable_goes_only_under_pressure(chunks: list[Chunk], data: st.DataObject) -> None:
    _, plan, opts = plan_for(chunks, data)
    by_id = {c.id: c for c in chunks}
    for d in plan.decisions:
        if by_id[d.chunk_id].gc_policy == GcPolicy.PRESERVABLE and d.action != Action.KEEP:
            in_group_with_lower = any(r.startswith("group_with:") for r in d.reasons)
            assert plan.tokens_before > opts.budget.pressure or in_group_with_lower


@SETTINGS
@given(sessions(), st.data())
def test_lower_tiers_go_first(chunks: list[Chunk], data: st.DataObject) -> None:
    """No chunk stays whole while a chunk of a higher tier was cut, unless
    something protects it: a root, its group, a kept child, a repair."""
    e, plan, opts = plan_for(chunks, data)
    by_id = {c.id: c for c in chunks}
    cut = [d for d in plan.decisions if d.action != Action.KEEP]
    if not cut or opts.strategy == Strategy.TRUNCATE:
        return
    top = max(TIER[by_id[d.chunk_id].gc_policy] for d in cut)
    kept_whole = set(plan.kept_ids) - {d.chunk_id for d in cut}
    repaired = {r.chunk_id for r in plan.repairs}
    # a group has the highest tier of its members, a parent the tier of its children
    group_tier: dict[str, int] = {}
    for c in chunks:
        if c.group_id:
            group_tier[c.group_id] = max(group_tier.get(c.group_id, 0), TIER[c.gc_policy])

    def unit_tier(c: Chunk) -> int:
        return group_tier[c.group_id] if c.group_id else TIER[c.gc_policy]

    inherits_higher: set[str] = set()
    frontier = [c for c in chunks if unit_tier(c) >= top or c.id in plan.kept_ids]
    while frontier:
        parent = frontier.pop().parent_id
        if parent and parent not in inherits_higher:
            inherits_higher.add(parent)
            frontier.append(by_id[parent])
    groups_with_higher = {
        c.group_id
        for c in chunks
        if c.group_id
        and (
            TIER[c.gc_policy] >= top
            or c.pinned
            or c.id in inherits_higher
            or c.id in repaired
            or _is_root(e, c.id, opts)
        )
    }
    for chunk_id in kept_whole:
        c = by_id[chunk_id]
        if TIER[c.gc_policy] >= top or c.pinned or c.gc_policy == GcPolicy.LOCKED:
            continue
        protected = (
            chunk_id in repaired
            or chunk_id in inherits_higher
            or c.group_id in groups_with_higher
            or _is_root(e, chunk_id, opts)
        )
        assert protected, (chunk_id, c.gc_policy, top)


def _is_root(e: Engine, chunk_id: str, opts: OptimizeOptions) -> bool:
    breakdown = {
        s.chunk_id: s.breakdown for s in e.score("", "s", "", (), opts.roots, opts.weights)
    }
    return chunk_id in breakdown and breakdown[chunk_id].root  # removed chunks are no roots


@SETTINGS
@given(sessions(), st.data())
def test_result_is_a_coherent_conversation(chunks: list[Chunk], data: st.DataObject) -> None:
    _, plan, _ = plan_for(chunks, data)
    by_id = {c.id: c for c in chunks}
    kept = set(plan.kept_ids)
    # groups move as one
    for group in {c.group_id for c in chunks if c.group_id}:
        members = {c.id for c in chunks if c.group_id == group}
        assert members <= kept or not (members & kept), group
    # a kept reply keeps its parent
    for chunk_id in kept:
        parent = by_id[chunk_id].parent_id
        if parent:
            assert parent in kept, (chunk_id, parent)
    # the latest turn stays
    assert chunks[-1].id in kept
    # the first kept non-system chunk is a user turn
    first = next(i for i in plan.kept_ids if by_id[i].role != Role.SYSTEM)
    assert by_id[first].role == Role.USER


@SETTINGS
@given(sessions(), st.data())
def test_same_state_same_plan(chunks: list[Chunk], data: st.DataObject) -> None:
    _e1, plan1, opts = plan_for(chunks, data)
    e2 = engine()
    e2.append("", "s", chunks)
    plan2 = e2.optimize("", "s", opts)
    plan1.server_ms = plan2.server_ms = 0.0
    assert plan1 == plan2


@st.composite
def agent_sessions(draw: st.DrawFn) -> list[Chunk]:
    """A task, then tool calls whose outputs are long listings with a few error
    lines (so they shrink to line excerpts, and those to tighter ones); a call
    and its output sometimes move as one group."""
    chunks = [Chunk("task", Role.USER, ChunkKind.MESSAGE, "repair the parser", turn=0)]
    for step in range(draw(st.integers(1, 6))):
        lines = draw(st.integers(6, 80))
        errors = draw(st.sets(st.integers(0, lines - 1), min_size=1, max_size=4))
        text = "\n".join(
            f"step {step} line {k}: widget parser cache"
            + (" ValueError: bad input" if k in errors else "")
            for k in range(lines)
        )
        group = f"g{step}" if draw(st.booleans()) else ""
        call, out = f"call{step}", f"out{step}"
        chunks += [
            Chunk(
                call,
                Role.MODEL,
                ChunkKind.TOOL_CALL,
                f"run step {step}",
                turn=2 * step + 1,
                group_id=group,
            ),
            Chunk(
                out,
                Role.USER,
                ChunkKind.TOOL_RESULT,
                text,
                turn=2 * step + 2,
                group_id=group,
                parent_id=call,
            ),
        ]
    chunks.append(Chunk("last", Role.MODEL, ChunkKind.MESSAGE, "next", turn=len(chunks) + 1))
    return chunks


@SETTINGS
@given(agent_sessions(), st.floats(0.05, 1.0))
def test_excerpts_at_every_size_land_keep_original_lines_and_restore(
    chunks: list[Chunk], share: float
) -> None:
    e = engine()
    e.append("", "s", chunks)
    target = max(1, int(e.stats("", "s").tokens * share))
    options = OptimizeOptions(
        budget=Budget(context_limit_tokens=target * 2, target_tokens=target),
        query="ValueError parser",
        roots=Roots(recent_turns=1),
        strategy=Strategy.HYBRID,
        force=True,
    )
    plan = e.optimize("", "s", options)
    assert plan.tokens_after <= target or plan.explanation
    originals = {c.id: c.text for c in chunks}
    for d in plan.decisions:
        if d.action == Action.TRIM:
            kept = [line for line in d.replacement_text.split("\n") if not line.startswith("[")]
            assert set(kept) <= set(originals[d.chunk_id].split("\n")), d.chunk_id
    changed = [d.chunk_id for d in plan.decisions if d.action != Action.KEEP]
    if changed:
        e.restore("", "s", changed, budget=None, force=False)
    assert [c.text for c in e.chunks("", "s", list(originals))] == list(originals.values())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(1, 3), st.booleans()), min_size=1, max_size=40
    ),
    st.lists(st.integers(0, 6), max_size=10),
)
def test_backfill_finds_a_units_applied_kinds_as_a_scan_would(
    rows: list[tuple[int, int, bool]], asked: list[int]
) -> None:
    """Backfill looks a unit's applied kinds up when it first undoes one of its
    steps (a sorted index, not a set per unit made up front): each unit's,
    in any order, are the kinds of its steps applied when backfill began."""
    unit, kind, applied = (np.array(column) for column in zip(*rows, strict=True))
    steps = Steps(
        unit=unit.astype(np.intp),
        kind=kind.astype(np.int8),
        saves=np.ones(len(rows)),
        tier=np.zeros(len(rows), dtype=np.int64),
        applied=applied.astype(bool),
    )
    kinds = _AppliedKinds(steps, np.flatnonzero(steps.applied)[::-1])
    for u in asked:
        assert kinds.of(u) == {k for n, k, a in rows if n == u and a}
