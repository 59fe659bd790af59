"""Pruner: from scores and GC marks to a plan that fits the budget.

The removal order, in one place (the hybrid strategy's; `RULES` holds each
strategy's: budget goes by tier, then what the model has quoted last, then
age; truncate by age alone):

    1. policy tier: EPHEMERAL, then PARTIAL, then PRESERVABLE (the last only
       while usage is above the pressure level); LOCKED, pinned and root
       chunks are never candidates;
    2. inside a tier: unreachable from the roots before reachable;
    3. then by value per token, lowest first (a greedy knapsack), where a long
       chunk is first shrunk (TRIM to its query-relevant lines, or MASK a tool
       result) and removed only later, if still needed.

Candidates are *units*: a chunk, or all chunks of one `group_id` (a call and
its response are kept, shrunk or removed as one). A parent is never removed
before a child that is kept, so its priority is raised to its children's.
After the greedy cut, removed units that still fit are put back (backfill),
coherence repairs run, and removal resumes if a repair pushed the plan over
the target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from ctxopt import coherence
from ctxopt.coherence import UnitState
from ctxopt.model import (
    Action,
    ChunkKind,
    Decisions,
    GcPolicy,
    OptimizeOptions,
    Plan,
    Repair,
    Strategy,
)
from ctxopt.registry import SessionView
from ctxopt.roots import Marks
from ctxopt.scoring.hybrid import Scores
from ctxopt.scoring.lines import LineBook, analyzer_of, rare_terms, text_lines
from ctxopt.shrink import anchored_excerpt, masked, with_context

IntArray = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]
_Value = TypeVar("_Value", bound=np.generic)

# Removal tiers: lower goes first. LOCKED chunks are mandatory, never candidates.
TIER = {GcPolicy.EPHEMERAL: 0, GcPolicy.PARTIAL: 1, GcPolicy.PRESERVABLE: 2, GcPolicy.LOCKED: 3}
PRESERVABLE_TIER = TIER[GcPolicy.PRESERVABLE]
# the same table indexed by GcPolicy value (UNSPECIFIED never reaches the planner)
_TIER_BY_POLICY = np.array(
    [TIER.get(policy, TIER[GcPolicy.PARTIAL]) for policy in sorted(GcPolicy)], dtype=np.int64
)

FULL, SHRUNK, OUT = UnitState.FULL, UnitState.SHRUNK, UnitState.OUT
_ACTION_BY_CODE = {int(a): a for a in Action}
# plain ints for numpy: comparing an array with an IntEnum member costs ~5x more
_KEEP, _DELETE = int(Action.KEEP), int(Action.DELETE)
_TRIM, _MASK = int(Action.TRIM), int(Action.MASK)
_EPHEMERAL = int(GcPolicy.EPHEMERAL)
_SUMMARY, _TOOL_RESULT = int(ChunkKind.SUMMARY), int(ChunkKind.TOOL_RESULT)
_ENRICHMENT = int(ChunkKind.ENRICHMENT)
MAX_REPAIR_ROUNDS = 8


@dataclass(frozen=True, slots=True)
class Tuning:
    """Knobs of the hybrid strategy (tuned on ../shared/datasets)."""

    density_exponent: float = 0.0  # value / tokens**exponent; chosen by cross-validation
    trim_min_tokens: int = 2000  # shorter ones are kept whole or stashed (excerpts lost hunks)
    trim_min_lines: int = 6
    trim_fraction: float = 0.5  # an excerpt of a quarter lost the code a fix needed (SWE)
    trim_retention: float = 0.8  # share of a relevant chunk's value its excerpt keeps
    trim_retention_irrelevant: float = 0.3
    mask_min_tokens: int = 330  # a placeholder is ~110 tokens: mask only what it shrinks well
    mask_retention: float = 0.15
    summary_discount: float = 0.3  # value left to chunks a kept summary covers
    aggressive_target: float = 0.9
    shrink_worth: float = 0.8  # a shrink that keeps more than this share of the tokens is not one
    reachability_first: bool = True  # inside a tier, unreachable chunks go first
    anchored_excerpts: bool = True  # shrink a chunk to the lines other chunks repeat (lines.py)
    discount_repeated: bool = False  # what a later chunk prints again loses that share of value
    anchor_context: int = 0  # lines kept either side of an anchor line in its excerpt
    anchor_retention: float = 0.5  # share of a chunk's value its anchored excerpt keeps
    anchors_last: bool = True  # anchored excerpts go only after everything else of their tier
    link_df_share: float = 0.0  # a query term at most this share of chunks hold is a link


# (chunk id, text, stash id, target tokens, tokens) -> the TRIM excerpt
Trim = Callable[[str, str, str, int, int], str]
TokenCount = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class TextTools:
    """What a plan makes shrunk texts with: the query-aware trimmer, the token
    counter, and the session's line book (None for the truncate strategy)."""

    trim: Trim
    count_tokens: TokenCount
    book: LineBook | None


class _Selection:
    """Unit states during one plan; the greedy, backfill and repairs act on it."""

    def __init__(
        self,
        session: SessionView,
        options: OptimizeOptions,
        scores: Scores,
        tuning: Tuning,
    ) -> None:
        n = session.n_slots
        cols = session.columns
        self.session = session
        self.live = session.live_slots()
        self.tokens = cols.tokens[:n]
        self.alive = cols.alive[:n]
        # units: singletons, merged by group
        unit_of = np.arange(n, dtype=np.intp)
        for members in session.hubs.by_group.values():
            if len(members) > 1:
                idx = np.fromiter(members, dtype=np.intp, count=len(members))
                unit_of[idx] = idx.min()
        self.unit_of = unit_of
        self.unit_size = np.bincount(unit_of[self.live], minlength=n)  # members per unit
        self.units = self.live[unit_of[self.live] == self.live]  # by leader, the lowest slot
        # live slots of units with more than one member (most units are one chunk)
        self.grouped = self.live[self.unit_size[unit_of[self.live]] > 1]
        self.state = np.full(n, FULL, dtype=np.int8)  # per unit leader slot
        self.unit_mandatory = self.unit_max(scores.marks.root)  # when any member is
        self.protected = self.unit_mandatory.copy()  # grows with coherence repairs
        self.child_slots, self.parent_slots = session.parent_pairs()
        self.tuning = tuning
        self.scores = scores
        self.options = options
        # per unit leader: tokens kept whole and as excerpts or placeholders
        self.unit_tokens: FloatArray = np.bincount(
            unit_of[self.live], weights=self.tokens[self.live], minlength=n
        ).astype(np.float64)
        self.unit_shrunk: FloatArray = self.unit_tokens.copy()

    def unit_max(self, values: npt.NDArray[_Value]) -> npt.NDArray[_Value]:
        """Per unit leader, the largest value of its live members (for
        booleans: any); other slots hold their own value."""
        out = np.zeros(len(self.unit_of), dtype=values.dtype)
        out[self.live] = values[self.live]
        if len(self.grouped):
            np.maximum.at(out, self.unit_of[self.grouped], values[self.grouped])
        return out

    def slot_state(self) -> npt.NDArray[np.int8]:
        return self.state[self.unit_of]

    def unit_cost(self, unit: int) -> float:
        """Tokens the unit holds in its current state (0 when out)."""
        state = self.state[unit]
        if state == OUT:
            return 0.0
        return float(self.unit_shrunk[unit] if state == SHRUNK else self.unit_tokens[unit])

    def current_tokens(self, units: IntArray) -> float:
        state = self.state[units]
        return float(
            self.unit_tokens[units][state == FULL].sum()
            + self.unit_shrunk[units][state == SHRUNK].sum()
        )


@dataclass(slots=True)
class _Steps:
    """The ordered removal steps of one plan: step i moves unit `unit[i]` to
    `kind[i]` (SHRUNK or OUT), saving `saves[i]` tokens, in tier `tier[i]`;
    `applied[i]` once it is taken."""

    unit: IntArray
    kind: npt.NDArray[np.int8]
    saves: FloatArray
    tier: npt.NDArray[np.int64]
    applied: npt.NDArray[np.bool_]


def _tier(policy: npt.NDArray[np.int8]) -> npt.NDArray[np.int64]:
    return _TIER_BY_POLICY[policy.astype(np.intp)]


def landing(options: OptimizeOptions, tuning: Tuning) -> int:
    """The token count a triggered plan aims for."""
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
    live = session.live_slots()
    tokens = session.columns.tokens
    total = int(tokens[live].sum())
    plan = Plan(
        [session.slot_ids[s] for s in live.tolist()],
        Decisions(),
        total,
        total,
        landing(options, tuning),
        False,
        True,
        [],
    )
    plan.mandatory_tokens = int(tokens[live][marks.root[live]].sum())
    return plan


def plan_session(
    session: SessionView,
    options: OptimizeOptions,
    scores: Scores,
    tools: TextTools,
    tuning: Tuning = Tuning(),
    incremental_batch: int = 0,
    old_generation_after: int = 3,
) -> Plan:
    """Decide what to keep, trim, mask, stash or delete in a triggered
    collection (see the module doc; `is_triggered` says when one runs).

    Invariants: LOCKED, pinned and root chunks are always kept
    as is; the plan lands at or under the target when the mandatory
    set allows it (else `feasible=False` with an explanation); removal follows
    the tier order; groups move as one and the result passes the coherence
    rules; the same state and request give the same plan.
    """
    rules = RULES[options.strategy]
    live = session.live_slots()
    tokens = session.columns.tokens
    tokens_before = int(tokens[live].sum())
    target = landing(options, tuning)
    mandatory_tokens = int(tokens[live][scores.marks.root[live]].sum())

    sel = _Selection(session, options, scores, tuning)
    values = _chunk_values(session, options, scores, tools, tuning)
    priorities = _unit_priorities(sel, values, tools.book, tuning)
    steps = _removal_steps(sel, priorities, rules, old_generation_after)
    forced_out = _forced_out(sel, options)
    batch = incremental_batch if options.incremental else 0
    pressure = float(options.budget.pressure)
    total = _greedy_cut(sel, steps, rules, forced_out, float(target), pressure, batch)
    _backfill(sel, steps, target - total, forced_out)
    if options.max_chunks > 0:
        _enforce_max_chunks(sel, steps, options.max_chunks)
    repairs = _make_coherent(sel, steps, float(target), pressure)
    return _plan_of(sel, tokens_before, target, mandatory_tokens, repairs, values)


@dataclass(slots=True)
class _ChunkValues:
    """Per slot: what keeping the chunk is worth, and how it would shrink."""

    value: FloatArray
    covered_by_summary: npt.NDArray[np.bool_]
    shrink_tokens: FloatArray
    shrink_action: npt.NDArray[np.int8]  # TRIM, MASK or KEEP (does not shrink)
    shrink_texts: dict[int, tuple[str, int]]
    retention: FloatArray  # share of the value a shrunk chunk keeps


def _chunk_values(
    session: SessionView,
    options: OptimizeOptions,
    scores: Scores,
    tools: TextTools,
    tuning: Tuning,
) -> _ChunkValues:
    value = scores.total.copy()
    covered_by_summary = _summary_covered(session)
    value[covered_by_summary] *= tuning.summary_discount
    if tools.book is not None and tuning.discount_repeated:
        # what a later chunk prints again (a rerun, a re-view, a duplicate) is stale here
        value *= 1.0 - tools.book.repeated(session)
    shrink_tokens, shrink_action, shrink_texts, anchored = _shrink_options(
        session, options, tuning, tools, scores.marks.root
    )
    retention = np.where(
        shrink_action == _MASK,
        tuning.mask_retention,
        np.where(scores.bm25 > 0, tuning.trim_retention, tuning.trim_retention_irrelevant),
    )
    retention[anchored] = tuning.anchor_retention
    return _ChunkValues(
        value, covered_by_summary, shrink_tokens, shrink_action, shrink_texts, retention
    )


@dataclass(slots=True)
class _Priorities:
    """Per unit leader: the keys removal is ordered by, and what each step saves."""

    tier: npt.NDArray[np.int64]
    reachable: npt.NDArray[np.bool_]
    last: npt.NDArray[np.bool_]  # holds the latest copy of an echo line
    quoted: npt.NDArray[np.bool_]  # a later model chunk quoted one of its lines
    shrinkable: npt.NDArray[np.bool_]
    density_out: FloatArray  # value per token lost by removing the unit
    density_shrink: FloatArray  # value per token lost by shrinking it
    out_cost: FloatArray  # tokens removal saves, after any shrink


def _unit_priorities(
    sel: _Selection, values: _ChunkValues, book: LineBook | None, tuning: Tuning
) -> _Priorities:
    """Units take their most valuable (highest-tier, reachable) member's
    priority, and a parent goes no earlier than its kept children."""
    session, scores, live, n = sel.session, sel.scores, sel.live, sel.session.n_slots
    sel.unit_shrunk = np.bincount(
        sel.unit_of[live], weights=values.shrink_tokens[live], minlength=n
    ).astype(np.float64)
    unit_tokens, unit_shrunk = sel.unit_tokens, sel.unit_shrunk
    unit_value = sel.unit_max(values.value)
    unit_shrunk_value = sel.unit_max(values.value * values.retention)
    tier = sel.unit_max(_tier(session.columns.policy))
    reachable = sel.unit_max(scores.marks.reachable[:n])
    if not tuning.reachability_first:
        reachable = np.ones_like(reachable)
    shrinkable = unit_shrunk < unit_tokens * tuning.shrink_worth

    exponent = tuning.density_exponent
    out_cost = np.where(shrinkable, unit_shrunk, unit_tokens)
    out_value = np.where(shrinkable, unit_shrunk_value, unit_value)
    density_out = out_value / np.maximum(out_cost, 1.0) ** exponent
    density_shrink = (unit_value - unit_shrunk_value) / np.maximum(
        unit_tokens - unit_shrunk, 1.0
    ) ** exponent
    density_out = np.where(shrinkable, np.maximum(density_out, density_shrink), density_out)
    last = np.zeros(n, dtype=bool)
    quoted = np.zeros(n, dtype=bool)
    if book is not None and sel.options.strategy == Strategy.BUDGET:  # only its order reads it
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
    return _Priorities(
        tier,
        reachable,
        last,
        quoted,
        shrinkable,
        density_out,
        density_shrink,
        out_cost.astype(np.float64),
    )


# ---- strategies: which steps, in what order, and when a step may run --------


@dataclass(frozen=True, slots=True)
class _StepKeys:
    """What a strategy may order the steps by (one entry per step)."""

    unit: IntArray
    kind: npt.NDArray[np.int8]  # SHRUNK sorts before OUT for the same unit
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
    order: Callable[[_StepKeys], IntArray]
    allowed: Allowed


def _oldest_first(keys: _StepKeys) -> IntArray:
    return np.lexsort((keys.kind, keys.unit))


def _tier_quoted_then_oldest(keys: _StepKeys) -> IntArray:
    """Tier, then what the model has quoted last (lines.py), then oldest."""
    return np.lexsort((keys.kind, keys.unit, keys.quoted, keys.tier))


def _least_value_first(keys: _StepKeys) -> IntArray:
    """Tier, then echo-line holders last, then unreachable first, then value
    per token (np.lexsort: the last key is the primary one)."""
    return np.lexsort((keys.kind, keys.unit, keys.density, keys.reachable, keys.last, keys.tier))


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


def _removal_steps(
    sel: _Selection, priorities: _Priorities, rules: Rules, old_generation_after: int
) -> _Steps:
    """Every step the strategy offers, in its order: removing each candidate
    unit, and before that shrinking it, when the strategy shrinks and the unit
    shrinks well."""
    p = priorities
    candidates = sel.units[~sel.unit_mandatory[sel.units]]
    unit = candidates
    kind = np.full(len(candidates), OUT, dtype=np.int8)
    density = p.density_out[candidates]
    saves = sel.unit_tokens[candidates]
    if rules.shrinks:
        shrinking = candidates[p.shrinkable[candidates]]
        unit = np.concatenate([shrinking, candidates])
        kind = np.concatenate([np.full(len(shrinking), SHRUNK, dtype=np.int8), kind])
        density = np.concatenate([p.density_shrink[shrinking], density])
        saved_by_shrinking = (sel.unit_tokens - sel.unit_shrunk)[shrinking]
        saves = np.concatenate([saved_by_shrinking, p.out_cost[candidates]])
    last = (kind == OUT) & p.last[unit]
    order = rules.order(
        _StepKeys(unit, kind, density, p.tier[unit], p.reachable[unit], last, p.quoted[unit])
    )
    unit, kind, saves = unit[order], kind[order], saves[order]
    if sel.options.incremental:
        young = sel.session.survived()[unit] < old_generation_after
        unit, kind, saves = unit[young], kind[young], saves[young]
    return _Steps(unit, kind, saves, p.tier[unit], np.zeros(len(unit), bool))


def _greedy_cut(
    sel: _Selection,
    steps: _Steps,
    rules: Rules,
    forced_out: list[int],
    target: float,
    pressure: float,
    batch: int,
) -> float:
    """Remove what the client asked for, then take steps in order while the
    strategy allows (at most `batch` of them when > 0); the tokens left."""
    total = float(sel.unit_tokens[sel.units].sum())
    for unit in forced_out:
        total -= float(sel.unit_tokens[unit])
        sel.state[unit] = OUT
    running = total - np.concatenate([[0.0], np.cumsum(steps.saves)[:-1]])
    allowed = rules.allowed(running, steps.tier, target, pressure)
    stop = int(np.argmin(allowed)) if not allowed.all() else len(allowed)
    if batch:
        stop = min(stop, batch)
    steps.applied[:stop] = True
    np.maximum.at(sel.state, steps.unit[:stop], steps.kind[:stop])
    return total - float(steps.saves[:stop].sum())


def _make_coherent(sel: _Selection, steps: _Steps, target: float, pressure: float) -> list[Repair]:
    """Coherence repairs, resuming removal when a repair overshoots the target
    (a minor, incremental, collection never goes past its batch)."""
    resume = not sel.options.incremental and len(steps.unit) > 0
    repairs: list[Repair] = []
    for _ in range(MAX_REPAIR_ROUNDS):
        new_repairs = _repair(sel)
        repairs += new_repairs
        total = sel.current_tokens(sel.units)
        resumed = resume and total > target and _resume(sel, steps, total, target, pressure)
        if not new_repairs and not resumed:
            break  # a round that changed nothing leaves nothing to repair
    return repairs


def _summary_covered(session: SessionView) -> npt.NDArray[np.bool_]:
    """Chunks whose content a live SUMMARY chunk carries."""
    covered = np.zeros(session.n_slots, dtype=bool)
    summaries = np.flatnonzero(
        session.columns.alive[: session.n_slots]
        & (session.columns.kind[: session.n_slots] == _SUMMARY)
    )
    for slot in summaries:
        for chunk_id in session.entry_at(int(slot)).chunk.summary_of:
            target = session.slot_of(chunk_id)
            if target is not None:
                covered[target] = True
    return covered


def _shrink_options(
    session: SessionView,
    options: OptimizeOptions,
    tuning: Tuning,
    tools: TextTools,
    root: npt.NDArray[np.bool_],
) -> tuple[FloatArray, npt.NDArray[np.int8], dict[int, tuple[str, int]], npt.NDArray[np.bool_]]:
    """Each chunk's tokens once shrunk, how (TRIM, MASK or KEEP), the shrunk
    text with its exact count (the greedy plans with the real sizes, so a plan
    lands at its target rather than near it), and which excerpts are anchored.

    A chunk holding anchor lines (lines.py: echo lines it is the latest to
    hold) shrinks to those lines verbatim; otherwise a long chunk is trimmed to
    its query-relevant lines and a big tool result is masked."""
    n = session.n_slots
    cols = session.columns
    tokens = cols.tokens[:n].astype(np.float64)
    action = np.full(n, _KEEP, dtype=np.int8)
    anchored = np.zeros(n, dtype=bool)
    texts: dict[int, tuple[str, int]] = {}
    if options.strategy != Strategy.HYBRID or options.aggressive:
        return tokens, action, texts, anchored
    alive = cols.alive[:n] & ~root[:n]
    multiline = alive & (cols.lines[:n] >= tuning.trim_min_lines)
    analyze = analyzer_of(session)
    links = rare_terms(session, analyze(options.query), tuning.link_df_share)
    book, count_tokens = tools.book, tools.count_tokens
    if book is not None and tuning.anchored_excerpts:
        excerpt = book.excerpts(
            multiline,
            (links, tuning.anchor_context),
            lambda slot: _anchored_excerpt(
                session, book, slot, links, analyze, tuning, count_tokens
            ),
        )
        anchored = multiline & (excerpt >= 0)
        action[anchored] = _TRIM
        tokens[anchored] = excerpt[anchored]
        texts = _ShrunkTexts(book, tokens)
    trimmable = multiline & ~anchored & (cols.tokens[:n] >= tuning.trim_min_tokens)
    maskable = (
        alive
        & ~anchored
        & ~trimmable
        & (cols.kind[:n] == _TOOL_RESULT)
        & (cols.tokens[:n] >= tuning.mask_min_tokens)
    )
    action[trimmable] = _TRIM
    action[maskable] = _MASK
    for slot in np.flatnonzero(trimmable | maskable).tolist():
        entry = session.entry_at(slot)
        chunk = entry.chunk
        stash = entry.stash_id()
        if action[slot] == _TRIM:
            goal = int(entry.tokens * tuning.trim_fraction)
            text = tools.trim(chunk.id, chunk.text, stash, goal, entry.tokens)
            texts[slot] = (text, count_tokens(text))
        else:
            texts[slot] = masked(chunk.id, chunk.text, stash, entry.tokens, count_tokens)
        tokens[slot] = texts[slot][1]
    return tokens, action, texts, anchored


class _ShrunkTexts(dict[int, tuple[str, int]]):
    """Shrunk texts by slot: the fallbacks stored, anchored excerpts read from
    the line book on use (a plan reads only the few it applies)."""

    def __init__(self, book: LineBook, tokens: FloatArray) -> None:
        super().__init__()
        self._book = book
        self._tokens = tokens

    def __missing__(self, slot: int) -> tuple[str, int]:
        return self._book.excerpt_text(slot), int(self._tokens[slot])


def _anchored_excerpt(
    session: SessionView,
    book: LineBook,
    slot: int,
    links: frozenset[str],
    analyze: Callable[[str], list[str]],
    tuning: Tuning,
    count_tokens: TokenCount,
) -> tuple[str, int] | None:
    """The excerpt of a chunk that keeps its anchor and link lines verbatim
    (with `anchor_context` lines around each), None when it would not shrink."""
    entry = session.entry_at(slot)
    chunk = entry.chunk
    split = text_lines(chunk.text)
    anchors = book.anchors(slot)
    if links:
        anchors = tuple(sorted(set(anchors) | split.lines_with(links, analyze)))
    if not anchors:
        return None
    kept = with_context(anchors, len(split.lines), tuning.anchor_context)
    text, after = anchored_excerpt(chunk.id, split.lines, kept, entry.stash_id(), count_tokens)
    return (text, after) if after < entry.tokens * tuning.shrink_worth else None


def _forced_out(sel: _Selection, options: OptimizeOptions) -> list[int]:
    units: list[int] = []
    for chunk_id in options.delete_ids:
        slot = sel.session.slot_of(chunk_id)
        if slot is not None:
            units.append(int(sel.unit_of[slot]))
    return sorted(set(units))


def _enforce_max_chunks(sel: _Selection, steps: _Steps, max_chunks: int) -> None:
    """Remove further units, in step order, until at most `max_chunks` stay."""
    kept = int((sel.slot_state()[sel.live] != OUT).sum())
    for i in np.flatnonzero(~steps.applied):
        if kept <= max_chunks:
            break
        if steps.kind[i] != OUT:
            continue
        unit = int(steps.unit[i])
        sel.state[unit] = OUT
        steps.applied[i] = True
        kept -= int(sel.unit_size[unit])


def _backfill(sel: _Selection, steps: _Steps, slack: float, forced_out: list[int]) -> None:
    """Undo applied steps, most valuable first, while they still fit; a step
    stays applied when a step of a higher tier does (the tier order holds);
    `slack` is what the plan may still add before it reaches the target."""
    forced = set(forced_out)
    shrunk_units = set(steps.unit[steps.applied & (steps.kind == SHRUNK)].tolist())
    order = np.flatnonzero(steps.applied)[::-1]
    # slack only shrinks, so a step costing more than it now is never undone:
    # those steps matter only as kept cuts, whose tiers later steps must respect
    never = steps.saves[order] > slack
    kept_cut_before = np.maximum.accumulate(np.where(never, steps.tier[order], -1))
    kept_cut_before = np.concatenate([[-1], kept_cut_before[:-1]])
    highest_kept_cut = -1
    fitting = np.flatnonzero(~never)
    # once slack is below the cheapest step ahead, or a kept cut above the
    # highest tier ahead, nothing more can be undone
    ahead = order[fitting][::-1]
    cheapest_ahead = np.minimum.accumulate(steps.saves[ahead])[::-1].tolist()
    highest_tier_ahead = np.maximum.accumulate(steps.tier[ahead])[::-1].tolist()
    for k, position in enumerate(fitting.tolist()):
        highest_kept_cut = max(highest_kept_cut, int(kept_cut_before[position]))
        if slack < cheapest_ahead[k] or highest_kept_cut > highest_tier_ahead[k]:
            break
        i = int(order[position])
        cost = float(steps.saves[i])
        unit = int(steps.unit[i])
        undoable = (
            cost <= slack
            and unit not in forced
            and steps.tier[i] >= highest_kept_cut
            and not (steps.kind[i] == SHRUNK and sel.state[unit] == OUT)
        )
        if not undoable:
            highest_kept_cut = max(highest_kept_cut, int(steps.tier[i]))
            continue
        if steps.kind[i] == SHRUNK:
            shrunk_units.discard(unit)
            sel.state[unit] = FULL
        else:
            sel.state[unit] = SHRUNK if unit in shrunk_units else FULL
        steps.applied[i] = False
        slack -= cost


def _resume(sel: _Selection, steps: _Steps, total: float, target: float, pressure: float) -> bool:
    """Keep removing, in order, units no repair or kept child protects;
    whether any was."""
    state = sel.slot_state()
    # a parent whose kept reply sits in another unit stays (a call and its
    # result in one group go together)
    kept = state[sel.child_slots] != OUT
    child_units = sel.unit_of[sel.child_slots[kept]]
    parent_units = sel.unit_of[sel.parent_slots[kept]]
    kept_child_parent_units = set(parent_units[child_units != parent_units].tolist())
    removed = False
    for i in np.flatnonzero(~steps.applied):
        if total <= target:
            break
        unit = int(steps.unit[i])
        if sel.protected[unit] or (steps.tier[i] >= PRESERVABLE_TIER and total <= pressure):
            continue
        if steps.kind[i] == OUT and unit in kept_child_parent_units:
            continue
        if steps.kind[i] <= sel.state[unit]:
            continue
        before = sel.unit_cost(unit)
        after = float(sel.unit_shrunk[unit]) if steps.kind[i] == SHRUNK else 0.0
        sel.state[unit] = steps.kind[i]
        steps.applied[i] = True
        total -= before - after
        removed = True
    return removed


def _repair(sel: _Selection) -> list[Repair]:
    """Apply the coherence fixes one round; a kept unit becomes protected."""
    repairs: list[Repair] = []
    for violation in coherence.violations(
        sel.session,
        sel.live,
        sel.slot_state(),
        sel.unit_of,
        sel.protected,
        sel.child_slots,
        sel.parent_slots,
    ):
        unit = int(sel.unit_of[violation.slot])
        if violation.keep:
            if sel.state[unit] == OUT:
                sel.state[unit] = FULL
            sel.protected[unit] = True
        else:
            sel.state[unit] = OUT
        repairs.append(
            Repair(violation.rule, sel.session.slot_ids[violation.slot], violation.detail)
        )
    return repairs


def _plan_of(
    sel: _Selection,
    tokens_before: int,
    target: int,
    mandatory_tokens: int,
    repairs: list[Repair],
    values: _ChunkValues,
) -> Plan:
    """Turn unit states into the plan's decision columns, texts and totals.

    Only chunks that change get a decision, and every per-slot fact is read
    column-wise; the loop left does per decision only what needs its text."""
    session, options, scores = sel.session, sel.options, sel.scores
    shrink_action, shrink_texts = values.shrink_action, values.shrink_texts
    state = sel.slot_state()
    live = sel.live
    live_state = state[live]
    kept = live_state != OUT
    changed = ~kept | ((live_state == SHRUNK) & (shrink_action[live] != _KEEP))
    slot_ids = session.slot_ids
    kept_ids = list(map(slot_ids.__getitem__, live[kept].tolist()))
    tokens_after = int(session.columns.tokens[live[kept & ~changed]].sum())
    changed_slots = live[changed]
    slot_list = changed_slots.tolist()
    cols = session.columns
    delete_requested = [s for s in map(session.slot_of, options.delete_ids) if s is not None]
    requested = np.zeros(len(changed_slots), dtype=bool)
    if delete_requested:
        requested = np.isin(changed_slots, np.asarray(delete_requested, dtype=np.intp))
    dead = (
        (cols.policy[changed_slots] == _EPHEMERAL)
        & (cols.kind[changed_slots] == _ENRICHMENT)
        & ~scores.marks.reachable[changed_slots]
    )
    codes = np.where(
        state[changed_slots] == OUT,
        np.where(requested | dead, int(Action.DELETE), int(Action.STASH)),
        shrink_action[changed_slots],
    )
    code_list = codes.tolist()
    actions = list(map(_ACTION_BY_CODE.__getitem__, code_list))
    chunk_ids = list(map(slot_ids.__getitem__, slot_list))
    entries = session.entries
    stash_ids = [entry.stash_id() for entry in map(entries.__getitem__, chunk_ids)]
    for i in np.flatnonzero(codes == _DELETE).tolist():
        stash_ids[i] = ""  # a deleted chunk keeps no original
    shrunk = (codes == _TRIM) | (codes == _MASK)
    texts = [""] * len(slot_list)
    afters = [0] * len(slot_list)
    decisions = Decisions(
        chunk_ids,
        actions,
        cols.tokens[changed_slots].tolist(),
        afters,
        scores.total[changed_slots].tolist(),
        None,
        _decision_reasons(sel, codes, changed_slots, values.covered_by_summary, requested),
        texts,
        stash_ids,
    )
    shrunk_rows = np.flatnonzero(shrunk).tolist()
    made = list(map(shrink_texts.__getitem__, changed_slots[shrunk].tolist()))
    for i, (text, after) in zip(shrunk_rows, made, strict=True):
        texts[i], afters[i] = text, after
    if not options.lean:
        decisions.breakdowns = scores.breakdowns(changed_slots)
    tokens_after += sum(afters)

    plan = Plan(kept_ids, decisions, tokens_before, 0, target, True, True, repairs)
    plan.tokens_after = tokens_after
    plan.mandatory_tokens = mandatory_tokens
    plan.feasible = tokens_after <= target
    if not plan.feasible:
        plan.explanation = _explain_infeasible(target, mandatory_tokens, tokens_after)
    max_chunks = options.max_chunks
    if max_chunks and len(kept_ids) > max_chunks:
        plan.feasible = False
        plan.explanation = " ".join(
            filter(
                None,
                (
                    plan.explanation,
                    f"kept {len(kept_ids)} chunks, above max_chunks={max_chunks}: the rest are "
                    "LOCKED, pinned, roots, or kept whole with their group for coherence",
                ),
            )
        )
    return plan


def _decision_reasons(
    sel: _Selection,
    codes: npt.NDArray[np.int64],
    slots: IntArray,
    covered_by_summary: npt.NDArray[np.bool_],
    requested: npt.NDArray[np.bool_],
) -> list[tuple[str, ...]]:
    """Each decision's reason codes. They depend on the action, delete
    requested, policy, reachable, summarised and the group's leader, so
    they are made once per distinct combination, not once per decision."""
    policy = sel.session.columns.policy[slots]
    reachable = sel.scores.marks.reachable[slots]
    summarized = covered_by_summary[slots]
    # one int per combination (action and policy codes are below 8)
    key = (((codes * 2 + requested) * 8 + policy) * 2 + reachable) * 2 + summarized
    _, first, which = np.unique(key, return_index=True, return_inverse=True)
    strategy = sel.options.strategy
    made = [
        _reasons(
            strategy,
            _ACTION_BY_CODE[int(codes[i])],
            bool(requested[i]),
            int(policy[i]),
            bool(reachable[i]),
            bool(summarized[i]),
        )
        for i in first.tolist()
    ]
    reasons = [made[k] for k in which.reshape(-1).tolist()]
    units = sel.unit_of[slots]
    ids = sel.session.slot_ids
    for i in np.flatnonzero(sel.unit_size[units] > 1).tolist():
        reasons[i] = (*reasons[i], f"group_with:{ids[int(units[i])]}")
    return reasons


def _reasons(
    strategy: Strategy,
    action: Action,
    delete_requested: bool,
    policy: int,
    reachable: bool,
    summarized: bool,
) -> tuple[str, ...]:
    reasons: list[str] = []
    if delete_requested:
        reasons.append("explicit_delete")
    if policy == GcPolicy.EPHEMERAL:
        reasons.append("ephemeral")
    elif policy == GcPolicy.PRESERVABLE:
        reasons.append("preservable_under_pressure")
    if not reachable:
        reasons.append("unreachable")
    if summarized:
        reasons.append("summarized")
    if strategy == Strategy.TRUNCATE:
        reasons.append("truncate_oldest")
    elif strategy == Strategy.BUDGET:
        reasons.append("budget_tier_oldest")
    else:
        reasons.append("low_value_per_token")
    if action == Action.TRIM:
        reasons.append("trimmed_to_relevant_lines")
    elif action == Action.MASK:
        reasons.append("masked_tool_result")
    return tuple(reasons)


def _explain_infeasible(
    target: int,
    mandatory_tokens: int,
    tokens_after: int,
) -> str:
    if mandatory_tokens > target:
        return (
            f"mandatory chunks (LOCKED, pinned, roots) hold {mandatory_tokens} tokens, "
            f"above the target of {target}: kept them and removed everything else allowed"
        )
    return (
        f"landed at {tokens_after} tokens, above the target of {target}: the rest is "
        "PRESERVABLE below the pressure level, protected by coherence, or outside "
        "an incremental collection"
    )
