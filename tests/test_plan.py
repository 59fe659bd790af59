"""A plan's rules through `Engine.optimize`, one behaviour per test."""

from __future__ import annotations

from ctxopt.config import Config
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
    StashFilter,
    Strategy,
    Weights,
)
from ctxopt.planner.knobs import Tuning

from tests.factory import chunk, conversation, engine, filler, options

S = "s"


def removed(plan: Plan) -> set[str]:
    return {d.chunk_id for d in plan.decisions if d.action in (Action.STASH, Action.DELETE)}


def action_of(plan: Plan, chunk_id: str) -> Action:
    for d in plan.decisions:
        if d.chunk_id == chunk_id:
            return d.action
    return Action.KEEP


def test_below_threshold_nothing_happens() -> None:
    e = engine()
    e.append("", S, conversation(6))
    plan = e.optimize("", S, OptimizeOptions(budget=Budget(context_limit_tokens=100_000)))
    assert not plan.triggered
    assert len(plan.decisions) == 0
    assert len(plan.kept_ids) == 6


def test_triggered_plan_lands_under_target() -> None:
    e = engine()
    e.append("", S, conversation(20))
    plan = e.optimize("", S, options(400))
    assert plan.triggered and plan.feasible
    assert plan.tokens_after <= 400 < plan.tokens_before


def test_relevant_chunk_survives_over_irrelevant() -> None:
    e = engine()
    turns = conversation(12, words=20)
    turns[3] = chunk(
        "t3",
        "the database password rotation is scheduled for friday " + filler(20),
        role=Role.MODEL,
        turn=3,
    )
    e.append("", S, turns)
    plan = e.optimize("", S, options(300, "when is the database password rotation"))
    assert len(plan.kept_ids) < len(turns)
    assert "t3" in plan.kept_ids


def test_root_kinds_are_never_removed() -> None:
    e = engine()
    chunks = conversation(14)
    chunks += [
        chunk("task", filler(60, "a"), task_id="T1", turn=1),
        chunk("file", filler(60, "b"), file_path="src/app.py", turn=1),
        chunk("pin", filler(60, "c"), pinned=True, turn=1),
        chunk("lock", filler(60, "d"), policy=GcPolicy.LOCKED, turn=1),
        chunk("explicit", filler(60, "e"), turn=1),
        chunk("decision", filler(60, "f"), kind=ChunkKind.DECISION, created_at_ms=10, turn=1),
    ]
    e.append("", S, chunks)
    roots = Roots(
        current_task_id="T1", active_file_path="src/app.py", recent_turns=2, root_ids=("explicit",)
    )
    plan = e.optimize("", S, options(10, roots=roots))
    for chunk_id in ("task", "file", "pin", "lock", "explicit", "decision", "t13", "t12"):
        assert chunk_id in plan.kept_ids, chunk_id
        assert action_of(plan, chunk_id) == Action.KEEP
    assert not plan.feasible
    assert "mandatory" in plan.explanation


def test_pending_tool_call_is_kept() -> None:
    e = engine()
    chunks = conversation(10)
    chunks.insert(
        2, chunk("call", "run_tests()", role=Role.MODEL, kind=ChunkKind.TOOL_CALL, turn=1)
    )
    e.append("", S, chunks)
    plan = e.optimize("", S, options(10, recent_turns=1))
    assert "call" in plan.kept_ids


def test_ephemeral_goes_before_partial() -> None:
    e = engine()
    chunks = conversation(8)
    chunks.insert(1, chunk("log", filler(100, "log"), kind=ChunkKind.LOG, turn=0))
    e.append("", S, chunks)
    total = e.stats("", S).tokens
    plan = e.optimize("", S, options(total - 100))
    assert removed(plan) == {"log"}
    assert "ephemeral" in next(d for d in plan.decisions if d.chunk_id == "log").reasons


def test_preservable_is_kept_below_pressure() -> None:
    e = engine()
    chunks = conversation(8)
    chunks.insert(1, chunk("note", filler(100, "n"), kind=ChunkKind.NOTE, turn=0))
    e.append("", S, chunks)
    total = e.stats("", S).tokens
    # usage well below the pressure level: the note survives even at a tiny target
    plan = e.optimize("", S, options(10, limit=total * 10))
    assert "note" in plan.kept_ids


def test_preservable_goes_under_pressure() -> None:
    e = engine()
    chunks = conversation(4, words=5)
    chunks.insert(1, chunk("note", filler(300, "n"), kind=ChunkKind.NOTE, turn=0))
    e.append("", S, chunks)
    total = e.stats("", S).tokens
    plan = e.optimize("", S, options(total // 3, limit=total, recent_turns=1))
    assert "note" in removed(plan)
    decision = next(d for d in plan.decisions if d.chunk_id == "note")
    assert "preservable_under_pressure" in decision.reasons


def test_long_relevant_output_is_trimmed_to_its_relevant_lines() -> None:
    e = engine()
    lines = [f"step {i}: nothing to see {filler(8, str(i))}" for i in range(120)]
    lines[81] = "ERROR: KeyError 'widget_factory' raised in build_widgets"
    chunks = [
        chunk("q", "fix the widget_factory KeyError", turn=0),
        chunk("out", "\n".join(lines), role=Role.USER, kind=ChunkKind.TOOL_RESULT, turn=1),
        *conversation(4)[2:],
    ]
    e.append("", S, chunks)
    total = e.stats("", S).tokens
    plan = e.optimize("", S, options(total // 2, "widget_factory KeyError", recent_turns=1))
    decision = next(d for d in plan.decisions if d.chunk_id == "out")
    assert decision.action == Action.TRIM
    assert "widget_factory" in decision.replacement_text
    assert decision.stash_id in decision.replacement_text
    assert decision.tokens_after < decision.tokens
    assert "out" in plan.kept_ids


def test_tool_result_in_kept_group_is_masked() -> None:
    e = engine()
    payload = " ".join(f"value{i}" for i in range(900))  # one long line: not trimmable
    chunks = [
        chunk("q", "question", turn=0),
        chunk(
            "call",
            "read_file(big.json)",
            role=Role.MODEL,
            kind=ChunkKind.TOOL_CALL,
            group_id="g1",
            turn=1,
        ),
        chunk("res", payload, role=Role.USER, kind=ChunkKind.TOOL_RESULT, group_id="g1", turn=1),
        *conversation(6)[2:],
    ]
    e.append("", S, chunks)
    total = e.stats("", S).tokens
    plan = e.optimize("", S, options(total - 400, recent_turns=1))
    decision = next(d for d in plan.decisions if d.chunk_id == "res")
    assert decision.action == Action.MASK
    assert decision.stash_id in decision.replacement_text
    assert "call" in plan.kept_ids and "res" in plan.kept_ids


def test_group_is_removed_as_one() -> None:
    e = engine()
    chunks = [
        chunk("q", "question", turn=0),
        chunk("call", "ls", role=Role.MODEL, kind=ChunkKind.TOOL_CALL, group_id="g", turn=1),
        chunk("res", filler(30, "r"), kind=ChunkKind.TOOL_RESULT, group_id="g", turn=1),
        *conversation(8)[2:],
    ]
    e.append("", S, chunks)
    plan = e.optimize("", S, options(60, recent_turns=1))
    gone = removed(plan)
    assert ("call" in gone) == ("res" in gone)
    reasons = [d.reasons for d in plan.decisions if d.chunk_id == "res"]
    assert not reasons or any(r.startswith("group_with:") for r in reasons[0])


def test_kept_reply_keeps_its_parent() -> None:
    e = engine()
    chunks = conversation(10)
    chunks[7] = chunk(
        "t7", "the answer about zebra migrations", role=Role.MODEL, turn=7, parent_id="t2"
    )
    e.append("", S, chunks)
    plan = e.optimize("", S, options(200, "zebra migrations", recent_turns=1))
    if "t7" in plan.kept_ids:
        assert "t2" in plan.kept_ids


def test_first_kept_turn_is_a_user_turn() -> None:
    e = engine()
    chunks = [
        chunk("sys", "you are helpful", role=Role.SYSTEM, kind=ChunkKind.SYSTEM),
        *conversation(12),
    ]
    e.append("", S, chunks)
    plan = e.optimize("", S, options(300, recent_turns=3))
    first = next(i for i in plan.kept_ids if i != "sys")
    assert e.score("", S, "", (), Roots(), Weights())  # session still readable
    kept_roles = {c.id: c.role for c in chunks}
    assert kept_roles[first] == Role.USER


def test_explicit_delete_is_a_delete() -> None:
    e = engine()
    e.append("", S, conversation(8))
    plan = e.optimize("", S, options(100_000, delete_ids=("t1",)))
    decision = next(d for d in plan.decisions if d.chunk_id == "t1")
    assert decision.action == Action.DELETE
    assert "explicit_delete" in decision.reasons
    assert decision.stash_id == ""


def test_summary_makes_covered_chunks_go_first() -> None:
    e = engine()
    chunks = conversation(10)
    chunks.append(
        chunk(
            "sum", "summary of t2 and t3", kind=ChunkKind.SUMMARY, summary_of=("t2", "t3"), turn=4
        )
    )
    e.append("", S, chunks)
    total = e.stats("", S).tokens
    plan = e.optimize("", S, options(total - 90, recent_turns=1))
    assert {"t2", "t3"} & removed(plan)
    assert "sum" in plan.kept_ids


def test_truncate_removes_oldest_first() -> None:
    e = engine()
    e.append("", S, conversation(10))
    plan = e.optimize("", S, options(300, "lorem5", strategy=Strategy.TRUNCATE))
    order = [f"t{i}" for i in range(10)]
    gone = removed(plan)
    assert gone
    assert order[: len(gone)] == sorted(gone, key=order.index)


def test_dry_run_changes_nothing() -> None:
    e = engine()
    e.append("", S, conversation(10))
    before = e.stats("", S)
    plan = e.optimize("", S, options(100, dry_run=True))
    assert plan.triggered and removed(plan)
    assert e.stats("", S) == before
    assert e.search_stash("", S, "lorem1", StashFilter(), 10, 0)[0] == []


def test_stashed_chunk_restores_byte_for_byte() -> None:
    e = engine()
    chunks = conversation(10)
    chunks[1] = chunk("t1", "naïve café 👩‍💻\r\n tabs\tand spaces  ", role=Role.MODEL, turn=1)
    e.append("", S, chunks)
    plan = e.optimize("", S, options(150))
    assert "t1" in removed(plan)
    assert "t1" not in e.registry.get(S).entries  # type: ignore[union-attr]
    restored, _ = e.restore("", S, ["t1"], budget=None, force=False)
    assert restored == ["t1"]
    assert e.registry.get(S).entries["t1"].chunk.text == chunks[1].text  # type: ignore[union-attr]


def test_same_state_and_request_give_the_same_plan() -> None:
    plans = []
    for _ in range(2):
        e = engine()
        e.append("", S, conversation(30))
        plan = e.optimize("", S, options(700, "lorem3 lorem7"))
        plan.server_ms = 0.0
        plans.append(plan)
    assert plans[0] == plans[1]


def test_incremental_collection_is_bounded() -> None:
    e = engine(incremental_batch=2)
    e.append("", S, conversation(20))
    plan = e.optimize("", S, options(50, incremental=True))
    assert len(removed(plan)) <= 2
    assert not plan.feasible


def test_max_chunks_caps_the_kept_count() -> None:
    e = engine()
    e.append("", S, conversation(20, words=5))
    plan = e.optimize("", S, options(100_000, max_chunks=6))
    assert len(plan.kept_ids) <= 6


def test_agent_trajectory_lands_at_the_target() -> None:
    """Big multi-line tool calls with tiny results (an SWE-agent trajectory):
    exact shrink sizes and dropping a reply with its parent (instead of
    bringing a big parent back) keep every plan at or under its target."""
    e = engine()
    chunks = [chunk("sys", "Solve the issue.", role=Role.SYSTEM, kind=ChunkKind.SYSTEM)]
    chunks.append(chunk("task", "fix the parser " + filler(200), turn=1))
    for i in range(2, 40, 2):
        code = "\n".join(f"line {k} " + filler(12, f"{i}x{k}") for k in range(30 + 3 * i))
        chunks.append(chunk(f"m{i}", code, role=Role.MODEL, kind=ChunkKind.TOOL_CALL, turn=i))
        chunks.append(
            chunk(
                f"m{i + 1}",
                f"exit code {i}",
                kind=ChunkKind.TOOL_RESULT,
                turn=i + 1,
                parent_id=f"m{i}",
            )
        )
    total = e.append("", S, chunks).session_tokens
    for share in (0.5, 0.3, 0.2):
        target = int(total * share)
        plan = e.optimize(
            "", S, options(target, query="parser", roots=Roots(recent_turns=2), dry_run=True)
        )
        assert plan.feasible and plan.tokens_after <= target, (share, plan.explanation)
        kept = set(plan.kept_ids)
        for i in range(2, 40, 2):
            assert f"m{i + 1}" not in kept or f"m{i}" in kept  # no reply without its call


def test_removal_resumes_through_call_and_result_groups_after_a_repair() -> None:
    """The first user turn goes early (oldest), coherence brings it back, and
    removal must then go on with the steps, each a call and the result that
    replies to it in one group."""
    e = engine()
    chunks = [chunk("task", filler(400, "task"), turn=0)]
    for t in range(1, 30, 2):
        chunks += [
            chunk(f"n{t}", filler(60, f"n{t}"), Role.MODEL, turn=t, policy=GcPolicy.EPHEMERAL),
            chunk(f"c{t}", "run", Role.MODEL, ChunkKind.TOOL_CALL, turn=t, group_id=f"g{t}"),
            chunk(
                f"r{t}",
                filler(150, f"r{t}"),
                kind=ChunkKind.TOOL_RESULT,
                turn=t + 1,
                group_id=f"g{t}",
                parent_id=f"c{t}",
            ),
        ]
    e.append("", S, chunks)
    tokens = {c.id: e.counter.count(c.text) for c in chunks}
    narration = sum(tokens[f"n{t}"] for t in range(1, 27, 2))  # all but the two recent turns'
    target = e.stats("", S).tokens - narration - tokens["task"] - 10  # the task, or one step
    plan = e.optimize("", S, options(target, strategy=Strategy.BUDGET))
    assert [r.rule for r in plan.repairs] == ["first_user_turn"]
    assert plan.feasible and plan.tokens_after <= target
    assert "task" in plan.kept_ids and {"c1", "r1", "c3", "r3"} <= removed(plan)


def _two_lookups(kind_call: ChunkKind, kind_output: ChunkKind) -> list[Chunk]:
    """A task, then two lookups: a long one the query names twice and a short
    one it names once, then two recent turns that are roots."""
    long_text = "rotation schedule rotation " + filler(90, "a")
    short_text = "rotation noted " + filler(8, "b")
    return [
        chunk("task", "check the password rotation", turn=0),
        chunk("c1", "look up the schedule", role=Role.MODEL, kind=kind_call, turn=1),
        chunk("o1", long_text, kind=kind_output, turn=2, parent_id="c1" if kind_call else ""),
        chunk("c2", "look up the notes", role=Role.MODEL, kind=kind_call, turn=3),
        chunk("o2", short_text, kind=kind_output, turn=4, parent_id="c2" if kind_call else ""),
        chunk("r1", filler(10, "r"), role=Role.MODEL, turn=5),
        chunk("r2", filler(10, "s"), turn=6),
    ]


def _kept_with(step_exponent: float, chunks: list[Chunk]) -> list[str]:
    e = Engine(Config(data_dir=":memory:"), Tuning(step_density_exponent=step_exponent))
    e.append("", S, chunks)
    return e.optimize("", S, options(360, "password rotation schedule")).kept_ids


def test_a_long_agent_step_is_worth_less_per_token_with_the_step_exponent() -> None:
    steps = _two_lookups(ChunkKind.TOOL_CALL, ChunkKind.TOOL_RESULT)
    assert "o1" in _kept_with(0.0, steps) and "o2" not in _kept_with(0.0, steps)
    assert "o2" in _kept_with(0.7, steps) and "o1" not in _kept_with(0.7, steps)


def test_the_step_exponent_leaves_a_conversation_alone() -> None:
    turns = _two_lookups(ChunkKind.MESSAGE, ChunkKind.MESSAGE)
    assert _kept_with(0.7, turns) == _kept_with(0.0, turns)
