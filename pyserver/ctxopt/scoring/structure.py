"""The GC term: how much the conversation's structure says a chunk matters.

Combines type importance (a table by kind), reference count (other chunks
point at it), generation (it survived collections) and reachability from the
roots, each in [0, 1], into one value in [0, 1].
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctxopt.model import ChunkKind

FloatArray = npt.NDArray[np.float64]

# How much a chunk of each kind is worth keeping, before relevance.
TYPE_IMPORTANCE: dict[ChunkKind, float] = {
    ChunkKind.SYSTEM: 1.0,
    ChunkKind.TOOL_SCHEMA: 1.0,
    ChunkKind.DECISION: 0.9,
    ChunkKind.SUMMARY: 0.8,
    ChunkKind.MEMORY: 0.8,
    ChunkKind.NOTE: 0.7,
    ChunkKind.CODE: 0.6,
    ChunkKind.MESSAGE: 0.5,
    ChunkKind.TOOL_CALL: 0.5,
    ChunkKind.TOOL_RESULT: 0.4,
    ChunkKind.LOG: 0.2,
    ChunkKind.ENRICHMENT: 0.1,
    ChunkKind.UNSPECIFIED: 0.5,
}
_IMPORTANCE_BY_CODE = np.zeros(max(ChunkKind) + 1, dtype=np.float64)
for _kind, _value in TYPE_IMPORTANCE.items():
    _IMPORTANCE_BY_CODE[_kind] = _value

# Shares of the four structure signals in the GC term.
IMPORTANCE_SHARE = 0.4
REFCOUNT_SHARE = 0.2
GENERATION_SHARE = 0.1
REACHABLE_SHARE = 0.3


def structure_term(
    kinds: npt.NDArray[np.int8],
    refcounts: npt.NDArray[np.int64],
    survived: npt.NDArray[np.int64],
    reachable: npt.NDArray[np.bool_],
    old_generation_after: int,
) -> FloatArray:
    importance = _IMPORTANCE_BY_CODE[kinds]
    referenced = 1.0 - 1.0 / (1.0 + refcounts)
    generation = np.minimum(survived / max(old_generation_after, 1), 1.0)
    return (
        IMPORTANCE_SHARE * importance
        + REFCOUNT_SHARE * referenced
        + GENERATION_SHARE * generation
        + REACHABLE_SHARE * reachable
    )
