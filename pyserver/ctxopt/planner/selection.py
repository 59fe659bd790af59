"""The selection: the state of every unit during one plan.

Candidates are *units*: a chunk, or all chunks of one `group_id` (a call and
its response are kept, shrunk or removed as one). Every array here is set once,
in the constructor, from the session, the scores and the chunk values; later
stages change only `state` (and `protected`, as coherence repairs run).
"""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from ctxopt.model import OptimizeOptions
from ctxopt.planner.slot_facts import SlotFacts
from ctxopt.planner.values import ChunkValues
from ctxopt.roots import grouped_slots
from ctxopt.scoring.hybrid import Scores
from ctxopt.session import SessionView

IntArray = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]
_Value = TypeVar("_Value", bound=np.generic)


class UnitState(IntEnum):
    """Where a unit (a chunk, or a group moving as one) stands in a plan."""

    FULL = 0  # kept as is
    SHRUNK = 1  # kept as an excerpt or placeholder
    TIGHT = 2  # kept as a tighter excerpt (a tool output's best lines alone)
    OUT = 3  # stashed or deleted


# module constants, plain ints: the planner compares these thousands of times
# per plan, and numpy compares an array with an IntEnum member ~5x slower
FULL, SHRUNK, TIGHT, OUT = (int(state) for state in UnitState)


class Selection:
    """Unit states during one plan; the greedy, backfill and repairs act on it."""

    def __init__(
        self,
        session: SessionView,
        options: OptimizeOptions,
        scores: Scores,
        values: ChunkValues,
        facts: SlotFacts,
    ) -> None:
        n = session.n_slots
        cols = session.columns
        self.session = session
        self.options = options
        self.scores = scores
        self.values = values
        self.facts = facts
        self.live = session.live
        self.tokens = cols.tokens[:n]
        # units: singletons, merged by group
        unit_of = np.arange(n, dtype=np.intp)
        slots, sizes = grouped_slots(session)  # each group's lowest slot leads it
        if len(sizes):
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            unit_of[slots] = np.repeat(np.minimum.reduceat(slots, starts), sizes)
        self.unit_of = unit_of
        live_units = unit_of[self.live]
        self.unit_size = np.bincount(live_units, minlength=n)  # members per unit
        self.units = self.live[live_units == self.live]  # by leader, the lowest slot
        # live slots of units with more than one member (most units are one chunk)
        self.grouped = self.live[self.unit_size[live_units] > 1]
        self.state = np.full(n, FULL, dtype=np.int8)  # per unit leader slot
        self.unit_mandatory = self.unit_max(scores.marks.root)  # when any member is
        self.protected = self.unit_mandatory.copy()  # grows with coherence repairs
        self.child_slots, self.parent_slots = facts.child_slots, facts.parent_slots
        # per unit leader: tokens kept whole, and kept as excerpts or placeholders
        self.unit_tokens: FloatArray = np.bincount(
            live_units, weights=self.tokens[self.live], minlength=n
        ).astype(np.float64)
        self.unit_shrunk: FloatArray = np.bincount(
            live_units, weights=values.shrink_tokens[self.live], minlength=n
        ).astype(np.float64)
        self.unit_tight: FloatArray = np.bincount(
            live_units, weights=values.tight_tokens[self.live], minlength=n
        ).astype(np.float64)

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

    def cost_at(self, unit: int, state: int) -> float:
        """Tokens the unit would hold in `state` (0 when out)."""
        if state == OUT:
            return 0.0
        by_state = (self.unit_tokens, self.unit_shrunk, self.unit_tight)[state]
        return float(by_state[unit])

    def unit_cost(self, unit: int) -> float:
        """Tokens the unit holds in its current state."""
        return self.cost_at(unit, int(self.state[unit]))

    def current_tokens(self, units: IntArray) -> float:
        state = self.state[units]
        return float(
            self.unit_tokens[units][state == FULL].sum()
            + self.unit_shrunk[units][state == SHRUNK].sum()
            + self.unit_tight[units][state == TIGHT].sum()
        )

    def forced_out(self) -> list[int]:
        """The units holding a chunk the client asked to delete."""
        units: list[int] = []
        for chunk_id in self.options.delete_ids:
            slot = self.session.slot_of(chunk_id)
            if slot is not None:
                units.append(int(self.unit_of[slot]))
        return sorted(set(units))
