"""`SessionView`: the one type that marking, scoring and planning read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctxopt.session.columns import Columns, Entry, HubsView
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.bm25 import TermIndex


@dataclass(frozen=True, slots=True)
class SessionView:
    """A session as marking, scoring and planning read it: a snapshot taken
    under the session lock, valid while it is held. Columns are read-only
    arrays, mappings are read-only proxies, `slot_ids` a tuple and `index`
    offers only its reading methods: a reader cannot change the session
    (only `Session` does, driven by the engine)."""

    id: str
    n_slots: int
    live: npt.NDArray[np.intp]  # live slots in prompt order
    columns: Columns  # read-only, `n_slots` long
    slot_ids: Sequence[str]  # slot -> id, kept after removal
    entries: Mapping[str, Entry]
    hubs: HubsView
    out_edges: Mapping[str, tuple[str, ...]]  # explicit edges by id: source -> targets
    in_edges: Mapping[str, AbstractSet[str]]
    parent_of: Mapping[str, str]  # child id -> parent id
    index: TermIndex
    embeddings: Mapping[int, npt.NDArray[np.float32]]
    analyzer: Analyzer  # the one that indexed the text
    collections: int
    tokens_total: int

    def __len__(self) -> int:
        return len(self.entries)

    def entry_at(self, slot: int) -> Entry:
        return self.entries[self.slot_ids[slot]]

    def slot_of(self, chunk_id: str) -> int | None:
        entry = self.entries.get(chunk_id)
        return None if entry is None else entry.slot

    def parent_pairs(self) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """(child slots, parent slots) of live chunks whose parent is live."""
        children: list[int] = []
        parents: list[int] = []
        for child, parent in self.parent_of.items():
            parent_entry = self.entries.get(parent)
            if parent_entry is not None:
                children.append(self.entries[child].slot)
                parents.append(parent_entry.slot)
        return np.asarray(children, dtype=np.intp), np.asarray(parents, dtype=np.intp)

    def survived(self) -> npt.NDArray[np.int64]:
        """Collections each slot's chunk has survived: every chunk present now
        survived every collection since it arrived, so nothing is written per
        survivor when a collection promotes them."""
        return np.maximum(self.collections - self.columns.born, 0)
