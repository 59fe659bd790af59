"""Plan: from scores and GC marks to a plan that fits the budget.

The pipeline, one module per stage: `values` (what each chunk is worth, and
how it shrinks; `texts` writes the shrunk texts), `selection` (units and
their states), `order` (unit priorities and the strategy's removal steps),
`cut` (greedy cut, backfill, max chunks, coherence with resumed removal),
`result` (the `Plan`).
"""

from __future__ import annotations

from ctxopt.model import OptimizeOptions, Plan
from ctxopt.planner.cut import backfill, enforce_max_chunks, greedy_cut, make_coherent
from ctxopt.planner.knobs import Tuning
from ctxopt.planner.order import RULES, removal_steps, unit_priorities
from ctxopt.planner.result import collected_result, idle_result
from ctxopt.planner.selection import Selection
from ctxopt.planner.slot_facts import slot_facts
from ctxopt.planner.values import TextTools, chunk_values
from ctxopt.roots import Marks
from ctxopt.scoring.hybrid import Scores
from ctxopt.session import SessionView


def plan_target(options: OptimizeOptions, tuning: Tuning) -> int:
    """The token count a triggered plan aims for (the budget's target, lower
    when aggressive)."""
    target = options.budget.target
    return int(target * tuning.aggressive_target) if options.aggressive else target


def is_triggered(session: SessionView, options: OptimizeOptions) -> bool:
    """A collection runs when forced, at the threshold, on an explicit delete,
    or above `max_chunks`; otherwise the prompt is the session as it is."""
    if options.force or options.delete_ids:
        return True
    if options.max_chunks > 0 and len(session) > options.max_chunks:
        return True
    return session.tokens_total >= options.budget.threshold


def idle_plan(session: SessionView, options: OptimizeOptions, marks: Marks, tuning: Tuning) -> Plan:
    """The plan of an untriggered call: everything kept, nothing scored."""
    live = session.live
    tokens = session.columns.tokens
    return idle_result(
        kept_ids=[session.slot_ids[s] for s in live.tolist()],
        tokens=int(tokens[live].sum()),
        target_tokens=plan_target(options, tuning),
        mandatory_tokens=int(tokens[live][marks.root[live]].sum()),
    )


def plan_session(
    session: SessionView,
    options: OptimizeOptions,
    scores: Scores,
    tools: TextTools,
    *,
    tuning: Tuning,
    incremental_batch: int,
    old_generation_after: int,
) -> Plan:
    """Decide what to keep, trim, mask, stash or delete in a triggered
    collection (see `order` for the removal order; `is_triggered` says when
    one runs). `Engine.optimize` is the usual way in: it marks, scores and
    applies; this is the pure decision over one snapshot.

    Invariants: LOCKED, pinned and root chunks are always kept
    as is; the plan lands at or under the target when the mandatory
    set allows it (else `PlanOutcome.OVER_TARGET` with an explanation);
    removal follows the tier order; groups move as one and the result passes
    the coherence rules; the same state and request give the same plan.

    >>> from ctxopt.model import Budget, Chunk, ChunkKind, Role, Roots, Weights
    >>> from ctxopt.roots import mark
    >>> from ctxopt.scoring.hybrid import score_session
    >>> from ctxopt.session import Session
    >>> from ctxopt.text.analyzer import Analyzer
    >>> session = Session("s", "", Analyzer())
    >>> def turn(i: int) -> Chunk:
    ...     return Chunk(f"c{i}", Role.USER, ChunkKind.MESSAGE, f"turn {i}", turn=i)
    >>> for i, tokens in enumerate((500, 300, 200)):
    ...     _ = session.upsert(turn(i), tokens, 0)
    >>> view = session.view()
    >>> options = OptimizeOptions(budget=Budget(1000), roots=Roots(recent_turns=1))
    >>> marks = mark(view, options.roots)
    >>> knobs = Tuning()
    >>> scores = score_session(
    ...     view, query_terms=[], query_embedding=(), marks=marks, weights=Weights(),
    ...     half_life_turns=8.0, old_generation_after=3, neighbour_share=0.5,
    ...     feedback_weight=knobs.feedback_weight, feedback_docs=knobs.feedback_docs,
    ...     feedback_terms=knobs.feedback_terms,
    ... )
    >>> tools = TextTools(trim=lambda *_: "", count_tokens=len, book=session.line_book())
    >>> plan = plan_session(
    ...     view, options, scores, tools, tuning=knobs, incremental_batch=0, old_generation_after=3
    ... )
    >>> plan.outcome, plan.kept_ids, plan.tokens_after, plan.target_tokens
    (<PlanOutcome.LANDED: 'landed'>, ['c1', 'c2'], 500, 600)
    >>> [(d.chunk_id, d.action.name, d.reasons) for d in plan.decisions]
    [('c0', 'STASH', ('unreachable', 'low_value_per_token'))]
    """
    rules = RULES[options.strategy]
    live = session.live
    tokens = session.columns.tokens
    target = plan_target(options, tuning)
    values = chunk_values(session, options, scores, tools, tuning=tuning)
    sel = Selection(session, options, scores, values, slot_facts(session, tools.book))
    priorities = unit_priorities(sel, tools.book, tuning=tuning)
    steps = removal_steps(sel, priorities, rules, old_generation_after=old_generation_after)
    forced_out = sel.forced_out()
    batch = incremental_batch if options.incremental else 0
    pressure = float(options.budget.pressure)
    total = greedy_cut(
        sel, steps, rules, forced_out, target=float(target), pressure=pressure, batch=batch
    )
    backfill(sel, steps, slack=target - total, forced_out=forced_out)
    if options.max_chunks > 0:
        enforce_max_chunks(sel, steps, options.max_chunks)
    repairs = make_coherent(sel, steps, target=float(target), pressure=pressure)
    return collected_result(
        sel,
        tokens_before=int(tokens[live].sum()),
        target=target,
        mandatory_tokens=int(tokens[live][scores.marks.root[live]].sum()),
        repairs=repairs,
    )
