"""What a warm plan reuses from the session's last plan, and when it may.

A plan's work that depends only on the session's state and the request is
kept per session (keyed by an object that lives as long as the session:
its line book, or the session itself) with a `Stamp` of what it was made from: scalars compared with
`==` (the text index's and the line book's versions, which bump on every
change of a text, a removal or an echo line; the request's knobs) and the
columns it read, compared whole with numpy (a pin, a policy or a root change
shows there). A stamp that differs in anything makes the work again, so a
reused result is the one a fresh engine would make from the same state.
Reused arrays are read-only: a stage that wrote into one would change the
next plan's input, and numpy raises instead.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Generic, TypeVar
from weakref import WeakKeyDictionary

import numpy as np
import numpy.typing as npt

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What one result was made from: scalars and whole columns."""

    scalars: tuple[object, ...]
    columns: tuple[npt.NDArray[np.generic], ...]

    def same_as(self, other: Stamp) -> bool:
        return (
            self.scalars == other.scalars
            and len(self.columns) == len(other.columns)
            and all(np.array_equal(a, b) for a, b in zip(self.columns, other.columns, strict=True))
        )


def stamp(scalars: tuple[object, ...], *columns: npt.NDArray[np.generic]) -> Stamp:
    """A stamp over copies of `columns` (the session writes its own in place)."""
    return Stamp(scalars, tuple(c.copy() for c in columns))


def frozen(array: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
    """`array`, read-only from now on (it will be handed to later plans)."""
    array.setflags(write=False)
    return array


class LastResult(Generic[T]):
    """One stage's last result per session, with the stamp it was made from."""

    def __init__(self) -> None:
        self._by_owner: WeakKeyDictionary[object, tuple[Stamp, T]] = WeakKeyDictionary()
        self._lock = threading.Lock()  # plans of different sessions run in parallel

    def get(self, owner: object, now: Stamp) -> T | None:
        """The result made from a state that `now` stamps the same, else None."""
        with self._lock:
            found = self._by_owner.get(owner)
        if found is None or not found[0].same_as(now):
            return None
        return found[1]

    def put(self, owner: object, made_from: Stamp, result: T) -> None:
        with self._lock:
            self._by_owner[owner] = (made_from, result)
