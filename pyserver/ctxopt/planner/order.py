"""Order: which removal steps a plan offers, and in what order.

The removal order, in one place (the hybrid strategy's; `RULES` holds each
strategy's: budget goes by tier, then what the model has quoted last, then
age; truncate by age alone):

    1. policy tier: EPHEMERAL, then PARTIAL, then PRESERVABLE (the last only
       while usage is above the pressure level); LOCKED, pinned and root
       chunks are never candidates;
    2. inside a tier: what holds the latest copy of an echo line last, then
       what the model quoted (`Tuning.quoted_last`), then unreachable from
       the roots before reachable;
    3. then by value per token, lowest first (a greedy knapsack: value /
       tokens^exponent, with its own exponent for an agent's step: a unit
       holding a tool call or output), where a long
       chunk is first shrunk (a tool output to the lines its signals point at,
       another chunk TRIMmed to its query-relevant lines, or a tool result
       MASKed), a tool output's excerpt then tightened to its best lines, and
       the chunk removed only later, if still needed.

Units take their most valuable (highest-tier, reachable) member's priority,
and a parent is never removed before a child that is kept, so its priority is
raised to its children's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctxopt.model import ChunkKind, GcPolicy, Strategy
from ctxopt.planner.knobs import Tuning
from ctxopt.planner.selection import OUT, SHRUNK, TIGHT, Selection
from ctxopt.text.line_book import LineBook

IntArray = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]

# Removal tiers: lower goes first. LOCKED chunks are mandatory, never candidates.
TIER = {GcPolicy.EPHEMERAL: 0, GcPolicy.PARTIAL: 1, GcPolicy.PRESERVABLE: 2, GcPolicy.LOCKED: 3}
PRESERVABLE_TIER = TIER[GcPolicy.PRESERVABLE]
# the same table indexed by GcPolicy value (UNSPECIFIED never reaches the planner)
_TIER_BY_POLICY = np.array(
    [TIER.get(policy, TIER[GcPolicy.PARTIAL]) for policy in sorted(GcPolicy)], dtype=np.int64
)
# module constants: an enum member read through its class costs a lookup each
_TOOL_RESULT, _TOOL_CALL = int(ChunkKind.TOOL_RESULT), int(ChunkKind.TOOL_CALL)
_HYBRID, _BUDGET = Strategy.HYBRID, Strategy.BUDGET


@dataclass(slots=True)
class Steps:
    """The ordered removal steps of one plan: step i moves unit `unit[i]` to
    `kind[i]` (SHRUNK, TIGHT or OUT), saving `saves[i]` tokens, in tier `tier[i]`;
    `applied[i]` once it is taken."""

    unit: IntArray
    kind: npt.NDArray[np.int8]
    saves: FloatArray
    tier: npt.NDArray[np.int64]
    applied: npt.NDArray[np.bool_]


def _tier(policy: npt.NDArray[np.int8]) -> npt.NDArray[np.int64]:
    return _TIER_BY_POLICY[policy.astype(np.intp)]


@dataclass(slots=True)
class Priorities:
    """Per unit leader: the keys removal is ordered by, and what each step saves."""

    tier: npt.NDArray[np.int64]
    reachable: npt.NDArray[np.bool_]
    last: npt.NDArray[np.bool_]  # holds the latest copy of an echo line
    quoted: npt.NDArray[np.bool_]  # a later model chunk quoted one of its lines
    shrinkable: npt.NDArray[np.bool_]
    tightenable: npt.NDArray[np.bool_]  # its excerpt has a tighter size that shrinks it well
    density_out: FloatArray  # value per token lost by removing the unit
    density_shrink: FloatArray  # value per token lost by shrinking it
    density_tight: FloatArray  # value per token lost by tightening its excerpt
    out_cost: FloatArray  # tokens removal saves, after any shrink


def unit_priorities(sel: Selection, book: LineBook | None, *, tuning: Tuning) -> Priorities:
    """Units take their most valuable (highest-tier, reachable) member's
    priority, and a parent goes no earlier than its kept children."""
    session, scores, values, n = sel.session, sel.scores, sel.values, sel.session.n_slots
    unit_tokens, unit_shrunk, unit_tight = sel.unit_tokens, sel.unit_shrunk, sel.unit_tight
    unit_value = sel.unit_max(values.value)
    unit_shrunk_value = sel.unit_max(values.value * values.retention)
    unit_tight_value = sel.unit_max(values.value * values.tight_retention)
    tier = sel.unit_max(_tier(session.columns.policy))
    reachable = sel.unit_max(scores.marks.reachable[:n])
    if not tuning.reachability_first:
        reachable = np.ones_like(reachable)
    shrinkable = unit_shrunk < unit_tokens * tuning.shrink_worth
    tightenable = shrinkable & (unit_tight < unit_shrunk * tuning.shrink_worth)

    kinds = session.columns.kind[:n]
    agent_step = sel.unit_max((kinds == _TOOL_RESULT) | (kinds == _TOOL_CALL))
    exponent = np.where(agent_step, tuning.step_density_exponent, tuning.density_exponent)
    out_cost = np.where(tightenable, unit_tight, np.where(shrinkable, unit_shrunk, unit_tokens))
    out_value = np.where(
        tightenable, unit_tight_value, np.where(shrinkable, unit_shrunk_value, unit_value)
    )
    density_out = out_value / np.maximum(out_cost, 1.0) ** exponent
    density_shrink = (unit_value - unit_shrunk_value) / np.maximum(
        unit_tokens - unit_shrunk, 1.0
    ) ** exponent
    density_tight = (unit_shrunk_value - unit_tight_value) / np.maximum(
        unit_shrunk - unit_tight, 1.0
    ) ** exponent
    # each step of a unit goes no earlier than the one before it
    density_tight = np.maximum(density_tight, density_shrink)
    density_out = np.where(shrinkable, np.maximum(density_out, density_shrink), density_out)
    density_out = np.where(tightenable, np.maximum(density_out, density_tight), density_out)
    last = np.zeros(n, dtype=bool)
    quoted = np.zeros(n, dtype=bool)
    reads_quoted = sel.options.strategy == _BUDGET or (
        sel.options.strategy == _HYBRID and tuning.quoted_last
    )
    if book is not None and reads_quoted:
        quoted = sel.unit_max(book.quoted_mask(n) & ~scores.marks.root[:n])
    if tuning.anchors_last and book is not None:
        # a unit holding the latest copy of an echo line: its excerpt, or all
        # of it when it is too small for one, goes after the rest of its tier
        last = sel.unit_max(book.owns_anchors(n) & ~scores.marks.root[:n])
    child_units = sel.unit_of[sel.child_slots]
    parent_units = sel.unit_of[sel.parent_slots]
    cross = child_units != parent_units
    child_units, parent_units = child_units[cross], parent_units[cross]
    for _ in range(64):
        before_d, before_t = density_out[parent_units].copy(), tier[parent_units].copy()
        before_l, before_q = last[parent_units].copy(), quoted[parent_units].copy()
        np.maximum.at(density_out, parent_units, density_out[child_units])
        np.maximum.at(tier, parent_units, tier[child_units])
        np.logical_or.at(last, parent_units, last[child_units])
        np.logical_or.at(quoted, parent_units, quoted[child_units])
        if (
            np.array_equal(before_d, density_out[parent_units])
            and np.array_equal(before_t, tier[parent_units])
            and np.array_equal(before_l, last[parent_units])
            and np.array_equal(before_q, quoted[parent_units])
        ):
            break
    return Priorities(
        tier,
        reachable,
        last,
        quoted,
        shrinkable,
        tightenable,
        density_out,
        density_shrink,
        density_tight,
        out_cost.astype(np.float64),
    )


@dataclass(frozen=True, slots=True)
class StepKeys:
    """What a strategy may order the steps by (one entry per step). Steps
    arrive oldest unit first, and a unit's kinds in order (a total order:
    no two steps share both), so a stable sort breaks its ties that way."""

    unit: IntArray
    kind: npt.NDArray[np.int8]  # SHRUNK, then TIGHT, then OUT for the same unit
    density: FloatArray
    tier: npt.NDArray[np.int64]
    reachable: npt.NDArray[np.bool_]
    last: npt.NDArray[np.bool_]
    quoted: npt.NDArray[np.bool_]


Allowed = Callable[[FloatArray, npt.NDArray[np.int64], float, float], npt.NDArray[np.bool_]]


@dataclass(frozen=True, slots=True)
class Rules:
    """One strategy: whether it shrinks before it removes, the order of its
    steps, and which steps may run given the tokens left before each."""

    shrinks: bool
    order: Callable[[StepKeys], IntArray]
    allowed: Allowed


def _oldest_first(keys: StepKeys) -> IntArray:
    return np.arange(len(keys.unit))  # the order steps arrive in


def _tier_quoted_then_oldest(keys: StepKeys) -> IntArray:
    """Tier, then what the model has quoted last (text/lines.py), then oldest."""
    return np.lexsort((keys.quoted, keys.tier))


def _least_value_first(keys: StepKeys) -> IntArray:
    """Tier, then echo-line holders last, then what the model quoted last
    (when `quoted_last`), then unreachable first, then value per token, then
    oldest (np.lexsort: the last key is the primary one; it is stable)."""
    # the boolean keys packed below the tier into one small int (numpy sorts
    # it stably by radix), and the two sorts chained: np.lexsort over the same
    # keys takes several times as long
    ranks = ((keys.tier * 2 + keys.last) * 2 + keys.quoted) * 2 + keys.reachable
    by_density = np.argsort(keys.density, kind="stable")
    return by_density[np.argsort(ranks[by_density].astype(np.uint8), kind="stable")]


def _above_target(
    running: FloatArray, tier: npt.NDArray[np.int64], target: float, pressure: float
) -> npt.NDArray[np.bool_]:
    return running > target


def _above_target_and_pressure(
    running: FloatArray, tier: npt.NDArray[np.int64], target: float, pressure: float
) -> npt.NDArray[np.bool_]:
    """PRESERVABLE chunks go only while usage is above the pressure level."""
    return (running > target) & ((tier < PRESERVABLE_TIER) | (running > pressure))


RULES = {
    Strategy.HYBRID: Rules(True, _least_value_first, _above_target_and_pressure),
    Strategy.BUDGET: Rules(False, _tier_quoted_then_oldest, _above_target_and_pressure),
    Strategy.TRUNCATE: Rules(False, _oldest_first, _above_target),
}


def removal_steps(
    sel: Selection, priorities: Priorities, rules: Rules, *, old_generation_after: int
) -> Steps:
    """Every step the strategy offers, in its order: removing each candidate
    unit, and before that shrinking it, then tightening its excerpt, when the
    strategy shrinks and the unit shrinks well."""
    p = priorities
    candidates = sel.units[~sel.unit_mandatory[sel.units]]
    unit = candidates
    kind = np.full(len(candidates), OUT, dtype=np.int8)
    density = p.density_out[candidates]
    saves = sel.unit_tokens[candidates]
    if rules.shrinks:
        shrinking = candidates[p.shrinkable[candidates]]
        tightening = candidates[p.tightenable[candidates]]
        unit = np.concatenate([shrinking, tightening, candidates])
        kind = np.concatenate(
            [
                np.full(len(shrinking), SHRUNK, dtype=np.int8),
                np.full(len(tightening), TIGHT, dtype=np.int8),
                kind,
            ]
        )
        density = np.concatenate(
            [p.density_shrink[shrinking], p.density_tight[tightening], density]
        )
        saves = np.concatenate(
            [
                (sel.unit_tokens - sel.unit_shrunk)[shrinking],
                (sel.unit_shrunk - sel.unit_tight)[tightening],
                p.out_cost[candidates],
            ]
        )
    # oldest unit first, its kinds in order: what the strategies' stable
    # sorts leave ties in (cheaper than a sort key for it)
    by_age = np.argsort(unit * 4 + kind)
    unit, kind, density, saves = unit[by_age], kind[by_age], density[by_age], saves[by_age]
    last = (kind == OUT) & p.last[unit]
    order = rules.order(
        StepKeys(unit, kind, density, p.tier[unit], p.reachable[unit], last, p.quoted[unit])
    )
    unit, kind, saves = unit[order], kind[order], saves[order]
    if sel.options.incremental:
        young = sel.session.survived()[unit] < old_generation_after
        unit, kind, saves = unit[young], kind[young], saves[young]
    return Steps(unit, kind, saves, p.tier[unit], np.zeros(len(unit), bool))
