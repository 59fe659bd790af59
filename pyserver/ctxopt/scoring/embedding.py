"""Cosine similarity to a client-supplied query embedding."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def cosine(
    query: npt.NDArray[np.float32], vectors: Mapping[int, npt.NDArray[np.float32]], n_slots: int
) -> FloatArray:
    """Similarity clipped to [0, 1] per slot; 0 where a chunk has no embedding."""
    out = np.zeros(n_slots, dtype=np.float64)
    if not vectors:
        return out
    slots = np.fromiter(vectors.keys(), dtype=np.intp, count=len(vectors))
    matrix = np.stack(list(vectors.values()))
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query))
    dots = matrix @ query
    sims = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    out[slots] = np.clip(sims, 0.0, 1.0)
    return out
