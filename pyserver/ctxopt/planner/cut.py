"""Cut: take the removal steps in order until the plan fits.

The greedy cut removes what the client asked for, then takes steps while the
strategy allows; removed units that still fit are put back (backfill); above
`max_chunks` further units go; coherence repairs run, and removal resumes
when a repair pushed the plan over the target.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctxopt.model import Repair
from ctxopt.planner.coherence import repair
from ctxopt.planner.knobs import MAX_REPAIR_ROUNDS
from ctxopt.planner.order import PRESERVABLE_TIER, Rules, Steps
from ctxopt.planner.selection import FULL, OUT, Selection


def greedy_cut(
    sel: Selection,
    steps: Steps,
    rules: Rules,
    forced_out: list[int],
    *,
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


def make_coherent(sel: Selection, steps: Steps, *, target: float, pressure: float) -> list[Repair]:
    """Coherence repairs, resuming removal when a repair overshoots the target
    (a minor, incremental, collection never goes past its batch)."""
    resume = not sel.options.incremental and len(steps.unit) > 0
    repairs: list[Repair] = []
    for _ in range(MAX_REPAIR_ROUNDS):
        new_repairs = repair(sel)
        repairs += new_repairs
        total = sel.current_tokens(sel.units)
        resumed = resume and total > target and _resume(sel, steps, total, target, pressure)
        if not new_repairs and not resumed:
            break  # a round that changed nothing leaves nothing to repair
    return repairs


def enforce_max_chunks(sel: Selection, steps: Steps, max_chunks: int) -> None:
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


def backfill(sel: Selection, steps: Steps, *, slack: float, forced_out: list[int]) -> None:
    """Undo applied steps, most valuable first, while they still fit; a step
    stays applied when a step of a higher tier does (the tier order holds);
    `slack` is what the plan may still add before it reaches the target."""
    order = np.flatnonzero(steps.applied)[::-1]
    # slack only shrinks, so a step costing more than it now is never undone:
    # those steps matter only as kept cuts, whose tiers later steps must respect
    never = steps.saves[order] > slack
    if never.all():
        return  # a plan that lands just under its target undoes nothing
    forced = set(forced_out)
    levels = _AppliedKinds(steps, order)
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
            and sel.state[unit] == steps.kind[i]  # a shrink under a kept removal stays
        )
        if not undoable:
            highest_kept_cut = max(highest_kept_cut, int(steps.tier[i]))
            continue
        kinds = levels.of(unit)
        kinds.discard(int(steps.kind[i]))
        sel.state[unit] = max(kinds, default=FULL)
        steps.applied[i] = False
        slack -= cost


class _AppliedKinds:
    """Per unit, the kinds of its applied steps (undoing one goes back to the
    next below), found for a unit when backfill first undoes one of its
    steps: a plan undoes a few of ~700 applied steps, and a set per unit
    for all of them was ~1 ms of a plan after an append at 1,000 chunks."""

    def __init__(self, steps: Steps, applied: npt.NDArray[np.intp]) -> None:
        self._steps = steps
        self._by_unit = applied[np.argsort(steps.unit[applied], kind="stable")]
        self._units = steps.unit[self._by_unit]
        self._found: dict[int, set[int]] = {}

    def of(self, unit: int) -> set[int]:
        """The unit's kinds, as applied when backfill began less those undone
        since (backfill changes only the units it undoes a step of)."""
        found = self._found.get(unit)
        if found is None:
            first, last = (
                int(np.searchsorted(self._units, unit, side="left")),
                int(np.searchsorted(self._units, unit, side="right")),
            )
            kinds = self._steps.kind[self._by_unit[first:last]]
            found = self._found[unit] = set(kinds.tolist())
        return found


def _resume(sel: Selection, steps: Steps, total: float, target: float, pressure: float) -> bool:
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
        after = sel.cost_at(unit, int(steps.kind[i]))
        sel.state[unit] = steps.kind[i]
        steps.applied[i] = True
        total -= before - after
        removed = True
    return removed
