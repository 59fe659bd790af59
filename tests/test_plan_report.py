"""`ctxopt show`'s report of a plan: every chunk of the plan counted by kind,
the largest first, each with its decision; originals read from the stash."""

from __future__ import annotations

from ctxopt.engine.plan_report import LastPlans, RecordedPlan, build_report
from ctxopt.model import Action, Chunk, ChunkKind, Decision, Decisions, Plan, PlanOutcome, Role
from ctxopt.store import StashEntry


def chunk(chunk_id: str, kind: ChunkKind, text: str, tokens: int) -> Chunk:
    return Chunk(chunk_id, Role.MODEL, kind, text, tokens=tokens)


def test_report_counts_kept_trimmed_stashed_and_deleted_chunks() -> None:
    log = chunk("log", ChunkKind.LOG, "line one\n  line two " * 20, 300)
    trimmed = chunk("code", ChunkKind.CODE, "[...] kept lines", 40)
    kept = chunk("msg", ChunkKind.MESSAGE, "the task", 10)
    original_code = chunk("code", ChunkKind.CODE, "def f():\n    return 1\n" * 10, 120)
    decisions = Decisions.of([])
    decisions.chunk_ids += ["code", "log", "gone"]
    decisions.actions += [Action.TRIM, Action.STASH, Action.DELETE]
    decisions.tokens += [120, 300, 50]
    decisions.tokens_after += [40, 0, 0]
    decisions.scores += [0.5, 0.1, 0.0]
    decisions.reasons += [("trimmed_to_relevant_lines",), ("unreachable",), ("ephemeral",)]
    decisions.replacement_texts += ["[...] kept lines", "", ""]
    decisions.stash_ids += ["code@1", "log@1", ""]
    plan = Plan(
        kept_ids=["msg", "code"],
        decisions=decisions,
        tokens_before=480,
        tokens_after=50,
        target_tokens=60,
        outcome=PlanOutcome.LANDED,
        repairs=[],
    )
    stashed = {
        "code@1": StashEntry("code@1", "s", "", original_code, Action.TRIM, (), 0.5, 1, "p"),
        "log@1": StashEntry("log@1", "s", "", log, Action.STASH, (), 0.1, 1, "p"),
    }
    report = build_report(
        RecordedPlan(plan, False, 7), {"msg": kept, "code": trimmed}, stashed, top=2
    )
    assert [(k.kind, k.chunk_count, k.tokens, k.tokens_after) for k in report.kinds] == [
        (ChunkKind.LOG, 1, 300, 0),
        (ChunkKind.CODE, 1, 120, 40),
        (ChunkKind.UNSPECIFIED, 1, 50, 0),
        (ChunkKind.MESSAGE, 1, 10, 10),
    ]
    assert [(c.chunk_id, c.action, c.stash_id) for c in report.largest] == [
        ("log", Action.STASH, "log@1"),
        ("code", Action.TRIM, "code@1"),
    ]
    assert report.largest[0].preview.startswith("line one line two line one")
    assert report.largest[0].preview.endswith("...") and len(report.largest[0].preview) == 72
    assert report.largest[1].preview.startswith("def f(): return 1"), "the original, not the trim"
    assert (report.tokens_before, report.tokens_after, report.planned_ms) == (480, 50, 7)


def test_last_plans_keep_the_latest_per_session_and_forget_the_oldest() -> None:
    plans = LastPlans(capacity=2)
    first, second = (
        Plan(
            kept_ids=[],
            decisions=Decisions.of([]),
            tokens_before=n,
            tokens_after=n,
            target_tokens=n,
            outcome=PlanOutcome.LANDED,
            repairs=[],
        )
        for n in (1, 2)
    )
    plans.record("", "a", first, dry_run=True)
    plans.record("", "a", second, dry_run=False)
    recorded = plans.get("", "a")
    assert recorded is not None and recorded.plan is second and not recorded.dry_run
    assert plans.get("bob", "a") is None, "plans are per owner"
    plans.record("", "b", first, dry_run=False)
    plans.record("", "c", first, dry_run=False)
    assert plans.get("", "a") is None and plans.get("", "c") is not None
    plans.forget("", "c")
    assert plans.get("", "c") is None


def test_a_plan_that_decided_nothing_does_not_hide_the_one_that_did() -> None:
    """Issue 32: the gateway's forced or repeated passes plan again and decide nothing;
    the dashboard's last collection is still the one that stashed something."""

    def plan(decisions: list[Decision]) -> Plan:
        return Plan(
            kept_ids=[],
            decisions=Decisions.of(decisions),
            tokens_before=10,
            tokens_after=10,
            target_tokens=5,
            outcome=PlanOutcome.LANDED,
            repairs=[],
        )

    stash = Decision("old", Action.STASH, 8, 0, 0.1, None, ("budget_tier_oldest",))
    decisive, idle, later = plan([stash]), plan([]), plan([stash])
    plans = LastPlans()
    plans.record("", "s", decisive, dry_run=False)
    plans.record("", "s", idle, dry_run=False)
    recorded = plans.get("", "s")
    assert recorded is not None and recorded.plan is decisive
    plans.record("", "s", later, dry_run=False)
    recorded = plans.get("", "s")
    assert recorded is not None and recorded.plan is later
