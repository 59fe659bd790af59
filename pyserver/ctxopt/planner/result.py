"""Result: the one place a `Plan` is made, with its outcome, decision
columns, texts, reasons and totals."""

from __future__ import annotations

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

IntArray = npt.NDArray[np.intp]
_ACTION_BY_CODE = {int(a): a for a in Action}
# plain ints for numpy: comparing an array with an IntEnum member costs ~5x more
_KEEP, _DELETE = int(Action.KEEP), int(Action.DELETE)
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
        chunk_ids=chunk_ids,
        actions=actions,
        tokens=cols.tokens[changed_slots].tolist(),
        tokens_after=afters,
        scores=scores.total[changed_slots].tolist(),
        breakdowns=None,  # set below unless the plan is lean
        reasons=_decision_reasons(sel, codes, changed_slots, values.covered_by_summary, requested),
        replacement_texts=texts,
        stash_ids=stash_ids,
    )
    shrunk_rows = np.flatnonzero(shrunk).tolist()
    shrunk_slots = changed_slots[shrunk]
    tight = set(shrunk_slots[state[shrunk_slots] == int(TIGHT)].tolist())
    made = [
        values.texts.tight(slot) if slot in tight else values.texts.shrunk(slot)
        for slot in shrunk_slots.tolist()
    ]
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
