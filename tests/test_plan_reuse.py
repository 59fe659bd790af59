"""A warm plan reuses the session's last shrunk texts, query relevance and
slot facts (planner/reuse.py, scoring/hybrid.py, planner/slot_facts.py), and
the same call on an unchanged session its last plan (engine/collector.py),
only while nothing they read changed: after any change of a chunk, a
committed plan, a removal, a pin, a policy, a reference, other roots or a new
query a session must get exactly the plan a fresh engine makes after the
same writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.engine.collector import Collector
from ctxopt.model import Chunk, ChunkKind, ChunkUpdate, GcPolicy, Plan, Role
from ctxopt.planner import slot_facts, values
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import chunk, filler, options

S = "s"
NAMES = ("compute_rate", "refund_total", "tax_margin", "order_fee")


def output(seed: int) -> str:
    """A multi-line tool output: numbered lines naming the functions, so line
    excerpts, trims and masks all occur."""
    lines = [f"{i + 1:5d}  {NAMES[(i + seed) % 4]}(order_{seed}, step_{i})" for i in range(24)]
    lines[seed % 24] = f"Traceback: KeyError in {NAMES[seed % 4]} at line {seed % 24 + 1}"
    return "\n".join(lines)


def initial() -> list[Chunk]:
    chunks = [chunk("task", "fix the refund total of an order", turn=0)]
    for i in range(1, 9):
        chunks.append(chunk(f"m{i}", f"THOUGHT: look at {NAMES[i % 4]} line {i}", role=Role.MODEL))
        chunks.append(chunk(f"o{i}", output(i), kind=ChunkKind.TOOL_RESULT))
    return [replace(c, turn=t) for t, c in enumerate(chunks)]


QUERIES = ("", "refund", "tax margin KeyError", "order fee")
# what happens between two plans: nothing (the same plan again), or one change
STEPS = st.one_of(
    st.just(("again", 0)),
    st.tuples(st.just("query"), st.integers(0, len(QUERIES) - 1)),
    st.tuples(st.just("roots"), st.integers(1, 4)),
    st.tuples(st.just("append"), st.integers(0, 99)),
    st.tuples(st.just("edit"), st.integers(0, 99)),
    st.tuples(st.just("edit and append"), st.integers(0, 99)),  # in one write
    st.tuples(st.just("remove"), st.integers(0, 99)),
    st.tuples(st.just("pin"), st.integers(0, 99)),
    st.tuples(st.just("policy"), st.integers(0, 99)),
    st.tuples(st.just("refer"), st.integers(0, 99)),
    st.tuples(st.just("commit"), st.integers(0, 99)),
)


def plan_of(engine: Engine, query: str, recent: int, *, dry_run: bool = True) -> Plan:
    target = engine.stats("", S).tokens * 3 // 10
    return engine.optimize(
        "", S, options(target, query, recent_turns=recent, dry_run=dry_run, lean=True)
    )


def shown(plan: Plan) -> tuple[object, ...]:
    d = plan.decisions
    return (
        plan.kept_ids,
        d.chunk_ids,
        d.actions,
        d.tokens_after,
        d.scores,
        d.reasons,
        d.replacement_texts,
        d.stash_ids,
        plan.tokens_after,
        plan.outcome,
    )


Op = Callable[[Engine], object]


@settings(max_examples=60, deadline=None)
@given(st.lists(STEPS, min_size=1, max_size=8))
def test_a_warm_session_plans_as_a_fresh_engine_would(steps: list[tuple[str, int]]) -> None:
    """The fresh engine replays the same writes and plans once (a removed slot
    stays empty in both: the same state, only the warm one planned before)."""
    chunks = initial()
    writes: list[Op] = [partial(Engine.append, owner="", session_id=S, chunks=list(chunks))]
    warm = Engine(Config(data_dir=":memory:"))
    writes[0](warm)
    query, recent = QUERIES[2], 2
    plan_of(warm, query, recent)  # the plan the next one may reuse
    for n, (step, k) in enumerate(steps):
        at = k % len(chunks)
        write: Op | None = None
        if step == "query":
            query = QUERIES[k]
        elif step == "roots":
            recent = k
        elif step == "append":
            new = chunk(f"n{n}", output(k), kind=ChunkKind.TOOL_RESULT, turn=len(chunks))
            chunks.append(new)
            write = partial(Engine.append, owner="", session_id=S, chunks=[new])
        elif step == "edit":
            chunks[at] = replace(chunks[at], text=chunks[at].text + f"\nKeyError {k}")
            write = partial(Engine.append, owner="", session_id=S, chunks=[chunks[at]])
        elif step == "edit and append":
            chunks[at] = replace(chunks[at], text=chunks[at].text + f"\nKeyError {k}")
            new = chunk(f"n{n}", output(k), kind=ChunkKind.TOOL_RESULT, turn=len(chunks))
            chunks.append(new)
            both = [chunks[at], new]
            write = partial(Engine.append, owner="", session_id=S, chunks=both)
        elif step == "remove" and len(chunks) > 3:
            gone = [chunks.pop(at).id]
            write = partial(
                Engine.remove, owner="", session_id=S, chunk_ids=gone, stash_originals=True
            )
        elif step == "commit":  # excerpts and placeholders replace texts, naming their stash
            write = partial(plan_of, query=query, recent=recent, dry_run=False)
        elif step == "pin":
            chunks[at] = replace(chunks[at], pinned=not chunks[at].pinned)
            pin = [ChunkUpdate(chunks[at].id, pinned=chunks[at].pinned)]
            write = partial(Engine.update, owner="", session_id=S, updates=pin)
        elif step == "policy":  # no column the stamps compare but the policy's
            locked = [ChunkUpdate(chunks[at].id, policy=GcPolicy.LOCKED)]
            chunks[at] = replace(chunks[at], policy=GcPolicy.LOCKED)
            write = partial(Engine.update, owner="", session_id=S, updates=locked)
        elif step == "refer" and len(chunks) > 1:  # only the reference graph: the latest cites one
            cited_id = chunks[k % (len(chunks) - 1)].id
            cited = [ChunkUpdate(chunks[-1].id, references=(cited_id,))]
            chunks[-1] = replace(chunks[-1], references=(cited_id,))
            write = partial(Engine.update, owner="", session_id=S, updates=cited)
        if write is not None:
            writes.append(write)
            done = write(warm)
            if isinstance(done, Plan):  # what it stashed or deleted is gone
                chunks = [c for c in chunks if c.id in set(done.kept_ids)]
        fresh = Engine(Config(data_dir=":memory:"))
        for each in writes:
            each(fresh)
        assert shown(plan_of(warm, query, recent)) == shown(plan_of(fresh, query, recent)), n
        assert_slot_facts_as_made_fresh(warm)
        fresh.close()
    warm.close()


def assert_slot_facts_as_made_fresh(engine: Engine) -> None:
    """The slot facts the session keeps (extended by an append, made again
    after any other change) are those made from its entries alone."""
    session = engine.sessions.get("", S)
    view = session.view()
    kept = slot_facts.slot_facts(view, session.line_book())
    made = slot_facts.slot_facts(view, None)
    for field in ("chunk_ids", "stash_ids", "texts", "child_slots", "parent_slots"):
        assert getattr(kept, field).tolist() == getattr(made, field).tolist(), field


def counted_calls(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """A list that grows by one each time `module.name` is called."""
    made: list[int] = []
    make = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        made.append(1)
        return make(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return made


@pytest.mark.parametrize(
    ("module", "name", "change"),
    [
        # the shrunk texts: a new chunk makes them again
        (values, "_made_shrinks", chunk("late", filler(30), turn=99)),
        # the slot facts: a changed text (its stash id with it) makes them again
        (slot_facts, "SlotFacts", replace(initial()[2], text=output(2) + "\nedited")),
    ],
)
def test_an_unchanged_session_reuses_and_a_changed_one_makes_again(
    monkeypatch: pytest.MonkeyPatch, module: object, name: str, change: Chunk
) -> None:
    made = counted_calls(monkeypatch, module, name)
    engine = Engine(Config(data_dir=":memory:"))
    engine.append("", S, initial())
    first = plan_of(engine, "refund", 2)
    assert shown(plan_of(engine, "refund", 2)) == shown(first)
    assert len(made) == 1
    engine.append("", S, [change])
    assert shown(plan_of(engine, "refund", 2)) != shown(first)
    assert len(made) == 2
    engine.close()


def test_reused_columns_are_read_only() -> None:
    """A stage writing into a reused column would change the next plan's input."""
    engine = Engine(Config(data_dir=":memory:"))
    engine.append("", S, initial())
    plan_of(engine, "refund", 2)
    book = engine.sessions.get("", S).line_book()
    reused = values._last_shrinks._by_owner[book][1]
    with pytest.raises(ValueError, match="read-only"):
        reused.tokens[0] = 0.0
    engine.close()


def test_the_same_call_on_an_unchanged_session_gets_its_last_plan_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planned once; each answer its own object (a caller sets its `server_ms`);
    any write, or other options, plans again."""
    planned = counted_calls(monkeypatch, Collector, "_plan")
    engine = Engine(Config(data_dir=":memory:"))
    engine.append("", S, initial())
    first, again = plan_of(engine, "refund", 2), plan_of(engine, "refund", 2)
    assert len(planned) == 1
    assert shown(again) == shown(first) and again is not first
    plan_of(engine, "tax margin", 2)
    assert len(planned) == 2
    engine.update("", S, [ChunkUpdate("m3", boost=0.5)])
    plan_of(engine, "tax margin", 2)
    assert len(planned) == 3
    engine.close()
