"""Recency: exponential decay by turn distance from the newest chunk."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def recency(
    turns: npt.NDArray[np.int64], alive: npt.NDArray[np.bool_], half_life_turns: float
) -> FloatArray:
    """1.0 for the newest turn, halving every `half_life_turns` turns back.

    When clients leave `turn` unset (all equal), each live chunk counts as its
    own turn, so position takes the place of the turn number.
    """
    out = np.zeros(len(turns), dtype=np.float64)
    live = np.flatnonzero(alive)
    if len(live) == 0:
        return out
    live_turns = turns[live]
    if live_turns.min() == live_turns.max():
        distance = (len(live) - 1 - np.arange(len(live))).astype(np.float64)
    else:
        distance = (live_turns.max() - live_turns).astype(np.float64)
    out[live] = np.exp2(-distance / max(half_life_turns, 1e-9))
    return out
