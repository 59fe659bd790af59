"""Result: the one place a `Plan` is made, with its outcome, decision
columns, texts, reasons and totals."""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt

from ctxopt.model import (
    Action,
    ChunkKind,
    Decisions,
    GcPolicy,
    Plan,
    PlanOutcome,
    Repair,
    Strategy,
)
from ctxopt.planner.selection import OUT, SHRUNK, TIGHT, Selection
from ctxopt.planner.slot_facts import ObjectArray

IntArray = npt.NDArray[np.intp]
_ACTION_BY_CODE = {int(a): a for a in Action}
_ACTIONS: ObjectArray = np.array(  # indexed by code: a whole column at once
    [_ACTION_BY_CODE.get(code) for code in range(max(_ACTION_BY_CODE) + 1)], dtype=object
)
# plain ints for numpy: comparing an array with an IntEnum member costs ~5x more
_KEEP, _DELETE, _STASH = int(Action.KEEP), int(Action.DELETE), int(Action.STASH)
_TRIM, _MASK = int(Action.TRIM), int(Action.MASK)
_EPHEMERAL = int(GcPolicy.EPHEMERAL)
_ENRICHMENT = int(ChunkKind.ENRICHMENT)


def idle_result(
    *, kept_ids: list[str], tokens: int, target_tokens: int, mandatory_tokens: int
) -> Plan:
    """The plan of an untriggered call (or of a session with nothing in it):
    everything kept as it is."""
    return Plan(
        kept_ids=kept_ids,
        decisions=Decisions(),
        tokens_before=tokens,
        tokens_after=tokens,
        target_tokens=target_tokens,
        outcome=PlanOutcome.IDLE,
        repairs=[],
        mandatory_tokens=mandatory_tokens,
    )


def collected_result(
    sel: Selection,
    *,
    tokens_before: int,
    target: int,
    mandatory_tokens: int,
    repairs: list[Repair],
) -> Plan:
    """Turn unit states into the plan's decision columns, texts and totals.

    Only chunks that change get a decision, and every per-slot fact is read
    column-wise; the loop left does per decision only what needs its text."""
    session, options, scores, values = sel.session, sel.options, sel.scores, sel.values
    shrink_action = values.shrink_action
    state = sel.slot_state()
    live = sel.live
    live_state = state[live]
    kept = live_state != OUT
    shrunk_state = (live_state == SHRUNK) | (live_state == TIGHT)
    changed = ~kept | (shrunk_state & (shrink_action[live] != _KEEP))
    names = sel.facts
    kept_ids = names.chunk_ids[live[kept]].tolist()
    tokens_after = int(session.columns.tokens[live[kept & ~changed]].sum())
    changed_slots = live[changed]
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
        np.where(requested | dead, _DELETE, _STASH),
        shrink_action[changed_slots],
    )
    # a deleted chunk keeps no original
    stash_ids = np.where(codes == _DELETE, "", names.stash_ids[changed_slots]).tolist()
    shrunk = (codes == _TRIM) | (codes == _MASK)
    texts = [""] * len(changed_slots)
    afters = [0] * len(changed_slots)
    decisions = Decisions(
        chunk_ids=names.chunk_ids[changed_slots].tolist(),
        actions=_ACTIONS[codes].tolist(),
        tokens=cols.tokens[changed_slots].tolist(),
        tokens_after=afters,
        scores=scores.total[changed_slots].tolist(),
        breakdowns=None,  # set below unless the plan is lean
        reasons=_decision_reasons(
            sel, codes, changed_slots, values.covered_by_summary, requested, names.chunk_ids
        ),
        replacement_texts=texts,
        stash_ids=stash_ids,
    )
    shrunk_rows = np.flatnonzero(shrunk).tolist()
    shrunk_slots = changed_slots[shrunk]
    tight = set(shrunk_slots[state[shrunk_slots] == TIGHT].tolist())
    made = values.texts.of(shrunk_slots.tolist(), tight)
    for i, (text, after) in zip(shrunk_rows, made, strict=True):
        texts[i], afters[i] = text, after
    if not options.lean:
        decisions.breakdowns = scores.breakdowns(changed_slots)
    tokens_after += sum(afters)

    explanation = ""
    if tokens_after > target:
        explanation = _explain_infeasible(target, mandatory_tokens, tokens_after)
    max_chunks = options.max_chunks
    above_max_chunks = bool(max_chunks) and len(kept_ids) > max_chunks
    if above_max_chunks:
        explanation = " ".join(
            filter(
                None,
                (
                    explanation,
                    f"kept {len(kept_ids)} chunks, above max_chunks={max_chunks}: the rest are "
                    "LOCKED, pinned, roots, or kept whole with their group for coherence",
                ),
            )
        )
    return Plan(
        kept_ids=kept_ids,
        decisions=decisions,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        target_tokens=target,
        outcome=(
            PlanOutcome.OVER_TARGET
            if tokens_after > target or above_max_chunks
            else PlanOutcome.LANDED
        ),
        repairs=repairs,
        explanation=explanation,
        mandatory_tokens=mandatory_tokens,
    )


def _decision_reasons(
    sel: Selection,
    codes: npt.NDArray[np.int64],
    slots: IntArray,
    covered_by_summary: npt.NDArray[np.bool_],
    requested: npt.NDArray[np.bool_],
    chunk_ids: ObjectArray,
) -> list[tuple[str, ...]]:
    """Each decision's reason codes. They depend on the action, delete
    requested, policy, reachable, summarised and the group's leader, so
    they are made once per distinct combination, not once per decision."""
    policy = sel.session.columns.policy[slots]
    reachable = sel.scores.marks.reachable[slots]
    summarized = covered_by_summary[slots]
    # one int per combination (action and policy codes are below 8)
    key = (((codes * 2 + requested) * 8 + policy) * 2 + reachable) * 2 + summarized
    strategy = sel.options.strategy
    made = {k: _reasons_of_key(strategy, k) for k in np.flatnonzero(np.bincount(key)).tolist()}
    reasons = list(map(made.__getitem__, key.tolist()))
    units = sel.unit_of[slots]
    grouped = np.flatnonzero(sel.unit_size[units] > 1)
    for i, leader in zip(grouped.tolist(), chunk_ids[units[grouped]].tolist(), strict=True):
        reasons[i] = (*reasons[i], "group_with:" + leader)
    return reasons


@cache  # a few hundred combinations per strategy at most
def _reasons_of_key(strategy: Strategy, key: int) -> tuple[str, ...]:
    """`_reasons` of a combination as `_decision_reasons` packs it."""
    rest, summarized = divmod(key, 2)
    rest, reachable = divmod(rest, 2)
    rest, policy = divmod(rest, 8)
    code, requested = divmod(rest, 2)
    action = _ACTION_BY_CODE[code]
    return _reasons(strategy, action, bool(requested), policy, bool(reachable), bool(summarized))


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
